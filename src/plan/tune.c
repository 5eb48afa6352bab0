/* tune.c — `zero tune`'s search space, priced by the planner, and the tuners' orders
 * (src/plan/tune.h). The dimensions follow DeepSpeed's autotuner (autotuning-notes: stage and
 * micro-batch in fast mode; the stage's bucket sizes and overlap_comm otherwise), plus what zero
 * can also change without changing the math: prefetch, threads per rank, ranks per process.
 */
#include "plan/tune.h"

#include "core/core_internal.h"

#include <stdlib.h>
#include <string.h>

#define TUNE_MAX_VALUES 8

/* The base's offload as the planner names it. */
static int base_offload(const zero_train_config_t *c) {
    if (!strcmp(c->offload_optimizer, "nvme"))
        return !strcmp(c->offload_param, "nvme") ? ZERO_PLAN_OFFLOAD_PARAMS
                                                 : ZERO_PLAN_OFFLOAD_OPTIM;
    return ZERO_PLAN_OFFLOAD_NONE;
}

/* Append v to a short list of distinct values. */
static void add_value(int64_t *list, int *n, int64_t v) {
    for (int i = 0; i < *n; i++)
        if (list[i] == v) return;
    if (*n < TUNE_MAX_VALUES) list[(*n)++] = v;
}

void zero__tune_apply(const zero_train_config_t *base, const zero_tune_point_t *p, int world,
                      zero_train_config_t *out) {
    *out = *base;
    out->stage = p->stage;
    out->micro_batch = p->micro;
    out->grad_accum = p->accum;
    out->train_batch_size = p->micro * p->accum * world;
    if (p->offload != base_offload(base)) {
        snprintf(out->offload_optimizer, sizeof out->offload_optimizer, "none");
        snprintf(out->offload_param, sizeof out->offload_param, "none");
    }
    out->reduce_bucket_elems = p->reduce_bucket_elems;
    out->prefetch_bucket_elems = p->prefetch_bucket_elems;
    out->overlap_comm = p->overlap_comm;
    out->threads = p->threads;
    snprintf(out->backend, sizeof out->backend, "%s",
             p->ranks_per_process == 1 && world > 1 ? "mpi" : "threads");
    out->ranks = world;
}

/* The planner's row for p: its stage, offload and micro-batch, the config's ZeRO++ and
 * checkpointing; the plan is of p's config, so its buffers and threads count. */
static zero_status_t price(const zero_train_config_t *base, const zero_tune_machine_t *m,
                           const zero_plan_calibration_t *cal, zero_tune_point_t *p) {
    zero_train_config_t c;
    zero__tune_apply(base, p, m->world, &c);
    const zero_plan_machine_t pm = {.world = m->world,
                                    .ranks_per_node = m->world,
                                    .ranks_per_process = p->ranks_per_process,
                                    .ram_bytes = m->ram_bytes,
                                    .disk_bytes = m->disk_bytes,
                                    .threads = p->threads};
    zero_plan_t plan;
    zero_status_t st = zero__plan_run(&c, &pm, cal, &plan);
    if (st) return st;
    const int zpp = c.quantized_weights && p->stage == 3 && m->world > 1;
    p->fits = 0;
    p->plan_step_s = 0;
    for (int i = 0; i < plan.count; i++) {
        const zero_plan_row_t *r = &plan.rows[i];
        if (r->stage != p->stage || r->offload != p->offload || r->micro != p->micro ||
            r->zeropp != zpp || r->checkpointing != c.checkpointing)
            continue;
        p->fits = r->fits_ram && r->fits_disk;
        p->plan_step_s = r->t_step;
        p->plan_ram = r->ram_node;
        p->plan_disk = r->disk_node;
        break;
    }
    zero__plan_free(&plan);
    return ZERO_OK;
}

zero_status_t zero__tune_space(const zero_train_config_t *base, const zero_tune_machine_t *m,
                               const zero_plan_calibration_t *cal, zero_tune_point_t **out,
                               int *count) {
    *out = NULL;
    *count = 0;
    const int W = m->world;
    const int64_t global = base->tune_max_batch > 0 ? base->tune_max_batch : base->train_batch_size;
    if (W < 1 || global < W || global % W)
        return zero__error(
            ZERO_ERR_CONFIG,
            "the global batch %lld (%s) does not split over %d ranks: set it to a "
            "multiple of the world size",
            (long long)global,
            base->tune_max_batch > 0 ? "autotuning.max_train_batch_size" : "train_batch_size", W);
    const int per_rank = (int)(global / W);
    int all[32];
    const int nall = zero__plan_micro_list(per_rank, all, 32);
    const int nm = nall < base->tune_num_micro ? nall : base->tune_num_micro;
    const int *micros = all + nall - nm; /* the largest */

    int64_t stages[TUNE_MAX_VALUES], offs[TUNE_MAX_VALUES], buckets[TUNE_MAX_VALUES],
        prefetch[TUNE_MAX_VALUES], overlaps[TUNE_MAX_VALUES], threads[TUNE_MAX_VALUES],
        rpp[TUNE_MAX_VALUES];
    int ns = 0, no = 0, nb = 0, np = 0, nv = 0, nt = 0, nr = 0;
    for (int s = 0; s <= 3; s++) add_value(stages, &ns, s);
    const int per_rank_threads = m->cores / W > 1 ? m->cores / W : 1;
    add_value(offs, &no, base_offload(base));
    add_value(buckets, &nb, base->reduce_bucket_elems);
    add_value(prefetch, &np, base->prefetch_bucket_elems);
    add_value(overlaps, &nv, base->overlap_comm);
    add_value(threads, &nt, base->threads > 0 ? base->threads : per_rank_threads);
    add_value(rpp, &nr, !strcmp(base->backend, "mpi") && m->mpi ? 1 : W);
    if (!base->tune_fast) { /* DeepSpeed's defaults beside the base's values */
        add_value(offs, &no, ZERO_PLAN_OFFLOAD_NONE);
        add_value(buckets, &nb, 500000000);
        add_value(prefetch, &np, 50000000);
        add_value(overlaps, &nv, !base->overlap_comm);
        add_value(threads, &nt, per_rank_threads);
        add_value(threads, &nt, m->cores);
        if (m->mpi && W > 1) add_value(rpp, &nr, 1);
        add_value(rpp, &nr, W);
    }
    const int cap = ns * nm * no * nb * np * nv * nt * nr;
    zero_tune_point_t *pts = calloc((size_t)cap, sizeof *pts);
    if (!pts) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "tune: out of memory");
    int n = 0;
    for (int a = 0; a < ns; a++)
        for (int o = 0; o < no; o++) {
            /* parameters on NVMe are stage 3's; a prefetch only stage 3 reads */
            if (offs[o] == ZERO_PLAN_OFFLOAD_PARAMS && stages[a] < 3) continue;
            for (int i = nm - 1; i >= 0; i--)
                for (int b = 0; b < nb; b++)
                    for (int p = 0; p < (stages[a] == 3 ? np : 1); p++)
                        for (int v = 0; v < nv; v++)
                            for (int t = 0; t < nt; t++)
                                for (int r = 0; r < nr; r++) {
                                    zero_tune_point_t *q = &pts[n];
                                    q->stage = (int)stages[a];
                                    q->offload = (int)offs[o];
                                    q->micro = micros[i];
                                    q->accum = per_rank / micros[i];
                                    q->reduce_bucket_elems = buckets[b];
                                    q->prefetch_bucket_elems = prefetch[p];
                                    q->overlap_comm = (int)overlaps[v];
                                    q->threads = (int)threads[t];
                                    q->ranks_per_process = (int)rpp[r];
                                    zero_status_t st = price(base, m, cal, q);
                                    if (st) {
                                        free(pts);
                                        return st;
                                    }
                                    n++;
                                }
        }
    *out = pts;
    *count = n;
    return ZERO_OK;
}

int zero__tune_order(const char *tuner, const zero_tune_point_t *pts, int count, uint64_t seed,
                     int *order) {
    int n = 0;
    for (int i = 0; i < count; i++)
        if (pts[i].fits) order[n++] = i;
    if (!strcmp(tuner, "random")) {
        uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
        for (int i = n - 1; i > 0; i--) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17; /* xorshift64 */
            const int j = (int)(s % (uint64_t)(i + 1));
            const int t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    } else if (!strcmp(tuner, "model_based")) {
        for (int i = 1; i < n; i++) { /* stable insertion sort: ties stay in grid order */
            const int k = order[i];
            int j = i;
            for (; j > 0 && pts[order[j - 1]].plan_step_s > pts[k].plan_step_s; j--)
                order[j] = order[j - 1];
            order[j] = k;
        }
    }
    return n;
}

void zero__tune_model_estimate(const zero_tune_point_t *pts, int count, const double *measured_s,
                               double *est) {
    double sum[4] = {0}, all = 0;
    int n[4] = {0}, nall = 0;
    for (int i = 0; i < count; i++) {
        if (!(measured_s[i] > 0) || !(pts[i].plan_step_s > 0)) continue;
        const double r = measured_s[i] / pts[i].plan_step_s;
        sum[pts[i].stage & 3] += r;
        n[pts[i].stage & 3]++;
        all += r;
        nall++;
    }
    for (int i = 0; i < count; i++) {
        const int s = pts[i].stage & 3;
        const double f = n[s] ? sum[s] / n[s] : nall ? all / nall : 1.0;
        est[i] = pts[i].plan_step_s * f;
    }
}

int zero__tune_model_next(const zero_tune_point_t *pts, int count, const double *measured_s,
                          const int *ran, const int *left, int nleft) {
    int stage_ran[4] = {0}, untried = 0;
    for (int i = 0; i < count; i++)
        if (ran[i]) stage_ran[pts[i].stage & 3] = 1;
    for (int j = 0; j < nleft; j++) untried |= !stage_ran[pts[left[j]].stage & 3];
    double *est = malloc((size_t)count * sizeof *est);
    if (!est) return 0; /* the planner's order */
    zero__tune_model_estimate(pts, count, measured_s, est);
    int pick = -1;
    for (int j = 0; j < nleft; j++) {
        const int i = left[j];
        if (untried && stage_ran[pts[i].stage & 3]) continue;
        if (pick < 0 || est[i] < est[left[pick]]) pick = j;
    }
    free(est);
    return pick;
}
