/* reference.c — naive twins of every kernel, for tests: direct loops over the textbook formulas.
 *
 * Deliberately simple and single-threaded: no blocking, no fused passes, libm exp/tanh, double
 * accumulators. Written from the math, not from the optimised code, so a shared mistake is
 * unlikely. Same arguments and the same accumulate/overwrite contract as kernels.h says.
 */
#include "kernels.h"

#include <math.h>
#include <stdlib.h>

void zero__ref_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                              size_t BT, size_t C, size_t OC) {
    for (size_t i = 0; i < BT; i++) {
        for (size_t o = 0; o < OC; o++) {
            double acc = bias ? bias[o] : 0.0;
            for (size_t c = 0; c < C; c++) acc += (double)inp[i * C + c] * weight[o * C + c];
            out[i * OC + o] = (float)acc;
        }
    }
}

void zero__ref_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, size_t BT, size_t C,
                               size_t OC) {
    if (dinp) {
        for (size_t i = 0; i < BT; i++) {
            for (size_t c = 0; c < C; c++) {
                double acc = 0.0;
                for (size_t o = 0; o < OC; o++) acc += (double)dout[i * OC + o] * weight[o * C + c];
                dinp[i * C + c] += (float)acc;
            }
        }
    }
    if (dweight) {
        for (size_t o = 0; o < OC; o++) {
            for (size_t c = 0; c < C; c++) {
                double acc = 0.0;
                for (size_t i = 0; i < BT; i++) acc += (double)dout[i * OC + o] * inp[i * C + c];
                dweight[o * C + c] += (float)acc;
            }
        }
    }
    if (dbias) {
        for (size_t o = 0; o < OC; o++) {
            double acc = 0.0;
            for (size_t i = 0; i < BT; i++) acc += dout[i * OC + o];
            dbias[o] += (float)acc;
        }
    }
}

void zero__ref_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, size_t BT, size_t C) {
    for (size_t i = 0; i < BT; i++) {
        const float *x = inp + i * C;
        double mu = 0.0, var = 0.0;
        for (size_t c = 0; c < C; c++) mu += x[c];
        mu /= (double)C;
        for (size_t c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
        var /= (double)C;
        double rs = 1.0 / sqrt(var + 1e-5);
        for (size_t c = 0; c < C; c++)
            out[i * C + c] = (float)((x[c] - mu) * rs * weight[c] + bias[c]);
        mean[i] = (float)mu;
        rstd[i] = (float)rs;
    }
}

void zero__ref_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean,
                                  const float *rstd, size_t BT, size_t C) {
    /* y_j = w_j xhat_j + b_j, xhat_j = (x_j - mu) rstd.
     * dL/dx_k = rstd (g_k - mean_j g_j - xhat_k mean_j(g_j xhat_j)) with g_j = w_j dy_j. */
    for (size_t i = 0; i < BT; i++) {
        const float *x = inp + i * C, *dy = dout + i * C;
        double mg = 0.0, mgx = 0.0;
        for (size_t j = 0; j < C; j++) {
            double xh = (x[j] - (double)mean[i]) * rstd[i];
            mg += (double)weight[j] * dy[j];
            mgx += (double)weight[j] * dy[j] * xh;
        }
        mg /= (double)C;
        mgx /= (double)C;
        for (size_t k = 0; k < C; k++) {
            double xh = (x[k] - (double)mean[i]) * rstd[i];
            dinp[i * C + k] += (float)(rstd[i] * ((double)weight[k] * dy[k] - mg - xh * mgx));
            if (dweight) dweight[k] += (float)(xh * dy[k]);
            if (dbias) dbias[k] += dy[k];
        }
    }
}

static double gelu_d(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

void zero__ref_gelu_forward(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = (float)gelu_d(inp[i]);
}

void zero__ref_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double x = inp[i], k = sqrt(2.0 / M_PI);
        double u = k * (x + 0.044715 * x * x * x);
        double sech = 1.0 / cosh(u);
        double g = 0.5 * (1.0 + tanh(u)) + 0.5 * x * sech * sech * k * (1.0 + 3 * 0.044715 * x * x);
        dinp[i] += (float)(g * dout[i]);
    }
}

void zero__ref_attention_forward(float *out, float *att, const float *inp, size_t B, size_t T,
                                 size_t C, size_t NH) {
    size_t hs = C / NH;
    double sc = 1.0 / sqrt((double)hs);
    double *row = malloc(T * sizeof(double));
    if (!row) abort(); /* tests only */
    for (size_t b = 0; b < B; b++) {
        for (size_t h = 0; h < NH; h++) {
            for (size_t t = 0; t < T; t++) {
                const float *q = inp + (b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0.0;
                for (size_t s = 0; s <= t; s++) {
                    const float *k = inp + (b * T + s) * 3 * C + C + h * hs;
                    double d = 0.0;
                    for (size_t i = 0; i < hs; i++) d += (double)q[i] * k[i];
                    row[s] = d * sc;
                    if (row[s] > mx) mx = row[s];
                }
                for (size_t s = 0; s <= t; s++) sum += exp(row[s] - mx);
                float *a = att + ((b * NH + h) * T + t) * T;
                for (size_t s = 0; s < T; s++)
                    a[s] = s <= t ? (float)(exp(row[s] - mx) / sum) : 0.0f;
                for (size_t i = 0; i < hs; i++) {
                    double o = 0.0;
                    for (size_t s = 0; s <= t; s++)
                        o += (double)a[s] * inp[(b * T + s) * 3 * C + 2 * C + h * hs + i];
                    out[(b * T + t) * C + h * hs + i] = (float)o;
                }
            }
        }
    }
    free(row);
}

void zero__ref_attention_backward(float *dinp, const float *dout, const float *inp,
                                  const float *att, size_t B, size_t T, size_t C, size_t NH) {
    size_t hs = C / NH;
    double sc = 1.0 / sqrt((double)hs);
    double *da = malloc(T * sizeof(double));
    if (!da) abort();
    for (size_t b = 0; b < B; b++) {
        for (size_t h = 0; h < NH; h++) {
            for (size_t t = 0; t < T; t++) {
                const float *a = att + ((b * NH + h) * T + t) * T;
                const float *dy = dout + (b * T + t) * C + h * hs;
                /* out_t = sum_s a_ts v_s: da_ts = dy . v_s, dv_s += a_ts dy */
                for (size_t s = 0; s <= t; s++) {
                    const float *v = inp + (b * T + s) * 3 * C + 2 * C + h * hs;
                    float *dv = dinp + (b * T + s) * 3 * C + 2 * C + h * hs;
                    double d = 0.0;
                    for (size_t i = 0; i < hs; i++) {
                        d += (double)dy[i] * v[i];
                        dv[i] += (float)((double)a[s] * dy[i]);
                    }
                    da[s] = d;
                }
                /* softmax jacobian: dscore_ts = sum_u a_tu (delta_su - a_ts) da_tu */
                for (size_t s = 0; s <= t; s++) {
                    double ds = 0.0;
                    for (size_t u = 0; u <= t; u++)
                        ds += (double)a[u] * ((s == u ? 1.0 : 0.0) - a[s]) * da[u];
                    ds *= sc;
                    const float *q = inp + (b * T + t) * 3 * C + h * hs;
                    const float *k = inp + (b * T + s) * 3 * C + C + h * hs;
                    float *dq = dinp + (b * T + t) * 3 * C + h * hs;
                    float *dk = dinp + (b * T + s) * 3 * C + C + h * hs;
                    for (size_t i = 0; i < hs; i++) {
                        dq[i] += (float)(ds * k[i]);
                        dk[i] += (float)(ds * q[i]);
                    }
                }
            }
        }
    }
    free(da);
}

void zero__ref_residual_forward(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void zero__ref_residual_backward(float *da, float *db, const float *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

void zero__ref_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                                 const float *wpe, size_t B, size_t T, size_t C) {
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++)
            for (size_t c = 0; c < C; c++)
                out[(b * T + t) * C + c] = wte[(size_t)tokens[b * T + t] * C + c] + wpe[t * C + c];
}

void zero__ref_embedding_backward(float *dwte, float *dwpe, const float *dout,
                                  const int32_t *tokens, size_t B, size_t T, size_t C) {
    for (size_t b = 0; b < B; b++) {
        for (size_t t = 0; t < T; t++) {
            for (size_t c = 0; c < C; c++) {
                float g = dout[(b * T + t) * C + c];
                if (dwte) dwte[(size_t)tokens[b * T + t] * C + c] += g;
                if (dwpe) dwpe[t * C + c] += g;
            }
        }
    }
}

void zero__ref_softmax_ce_forward(float *losses, float *lse, const float *logits,
                                  const int32_t *targets, size_t BT, size_t V, size_t Vp) {
    for (size_t i = 0; i < BT; i++) {
        const float *x = logits + i * Vp;
        double mx = -INFINITY, s = 0.0;
        for (size_t j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        for (size_t j = 0; j < V; j++) s += exp(x[j] - mx);
        double l = mx + log(s);
        if (lse) lse[i] = (float)l;
        losses[i] = targets[i] < 0 ? 0.0f : (float)(l - x[targets[i]]);
    }
}

void zero__ref_softmax_ce_backward(float *dlogits, const float *logits, const float *lse,
                                   const float *dlosses, const int32_t *targets, size_t BT,
                                   size_t V, size_t Vp) {
    (void)lse; /* recomputed here from scratch, independently of the forward */
    for (size_t i = 0; i < BT; i++) {
        const float *x = logits + i * Vp;
        double mx = -INFINITY, s = 0.0;
        for (size_t j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        for (size_t j = 0; j < V; j++) s += exp(x[j] - mx);
        for (size_t j = 0; j < Vp; j++) {
            double g = 0.0;
            if (j < V && targets[i] >= 0)
                g = (exp(x[j] - mx) / s - ((int32_t)j == targets[i] ? 1.0 : 0.0)) * dlosses[i];
            dlogits[i * Vp + j] = (float)g;
        }
    }
}

void zero__ref_adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                            float lr, float beta1, float beta2, float eps, float weight_decay,
                            int t) {
    for (size_t i = 0; i < n; i++) {
        double g = grads[i];
        double mi = beta1 * (double)m[i] + (1.0 - beta1) * g;
        double vi = beta2 * (double)v[i] + (1.0 - beta2) * g * g;
        double mhat = mi / (1.0 - pow(beta1, t));
        double vhat = vi / (1.0 - pow(beta2, t));
        double p = params[i];
        /* PyTorch AdamW: p *= (1 - lr wd); then p -= lr mhat / (sqrt(vhat) + eps) */
        p = p * (1.0 - (double)lr * weight_decay);
        p -= lr * mhat / (sqrt(vhat) + eps);
        params[i] = (float)p;
        m[i] = (float)mi;
        v[i] = (float)vi;
    }
}

double zero__ref_sumsq(const float *x, size_t n) {
    /* serial, in long double: the oracle for the blocked float64 sum */
    long double s = 0.0L;
    for (size_t i = 0; i < n; i++) s += (long double)x[i] * (long double)x[i];
    return (double)s;
}

void zero__ref_scale(float *x, float s, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = x[i] * s;
}

void zero__ref_add_into(float *acc, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) acc[i] = acc[i] + x[i];
}
