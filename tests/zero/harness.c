/* harness.c — see harness.h. Data are a deterministic function of (step, global sample), where
 * the global sample of rank r in micro-step m is m * ranks + r, so (ranks = R, accum = A) and
 * (ranks = 1, accum = R * A) see the same global batch. */
#include "harness.h"
#include "thread_ranks.h"

#include "model/gpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

run_cfg_t harness_default_cfg(int stage, int ranks, int accum) {
    run_cfg_t c;
    memset(&c, 0, sizeof c);
    c.stage = stage;
    c.ranks = ranks;
    c.accum = accum;
    c.steps = 3;
    c.reduce_bucket_bytes = 48 * 1024; /* several buckets per backward */
    c.prefetch_elems = 30000;          /* about two blocks ahead */
    c.persistence_elems = 600;         /* the final norm stays resident, the rest is sharded */
    c.max_live_elems = 1000000;
    c.timeout_s = 60;
    return c;
}

static uint32_t hash32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

static void make_batch(int step, int sample, int32_t *tok, int32_t *tgt) {
    for (int b = 0; b < HARNESS_BATCH; b++) {
        uint32_t s = hash32((uint32_t)(step * 7919 + sample * 104729 + b * 31 + 1));
        int32_t t = (int32_t)(s % HARNESS_VOCAB);
        for (int i = 0; i < HARNESS_SEQ; i++) {
            tok[b * HARNESS_SEQ + i] = t;
            /* a learnable rule with a little noise */
            int32_t next = (t * 5 + 3) % HARNESS_VOCAB;
            if (hash32(s + (uint32_t)i) % 8 == 0)
                next = (int32_t)(hash32(s ^ (uint32_t)i) % HARNESS_VOCAB);
            tgt[b * HARNESS_SEQ + i] = next;
            t = next;
        }
    }
}

static zero_status_t fail(rank_result_t *out, zero_status_t st, const char *what) {
    out->status = st;
    snprintf(out->error, sizeof out->error, "%s: %s", what, zero_last_error());
    return st;
}

zero_status_t harness_gpt_rank(zero_comm_t *comm, const run_cfg_t *cfg, rank_result_t *out) {
    memset(out, 0, sizeof *out);
    zero_mem_t *mem = NULL;
    zero_engine_t *eng = NULL;
    zero_gpt_t *gpt = NULL;
    zero_status_t st = zero_mem_init(&mem, NULL);
    if (st) return fail(out, st, "mem");
    int rank = comm ? zero_comm_rank(comm) : 0, ranks = comm ? zero_comm_size(comm) : 1;
    if (comm) {
        zero_comm_set_mem(comm, mem);
        zero_comm_set_timeout(comm, cfg->timeout_s);
    }
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = cfg->stage;
    p.comm = comm;
    p.mem = mem;
    p.lr = 2e-3f;
    p.min_lr = 2e-4f;
    p.warmup_steps = 1;
    p.total_steps = cfg->steps;
    p.grad_clip = 1.0f;
    p.grad_accum_steps = cfg->accum;
    p.reduce_bucket_bytes = cfg->reduce_bucket_bytes;
    p.prefetch_bucket_elems = cfg->prefetch_elems;
    p.persistence_threshold_elems = cfg->persistence_elems;
    p.max_live_elems = cfg->max_live_elems;
    p.compute_dtype = cfg->dtype;
    p.overlap_comm = !cfg->no_overlap;
    p.grad_accum_dtype = cfg->accum_dtype;
    p.optim_state_dtype = cfg->state_dtype;
    p.onebit = cfg->onebit;
    p.freeze_step = cfg->freeze_step;
    if (cfg->fp16_scale_power > 0) p.loss_scaler.initial_scale_power = cfg->fp16_scale_power;
    zero_gpt_config_t gc = {HARNESS_LAYERS, HARNESS_HEADS, HARNESS_DIM, HARNESS_VOCAB,
                            HARNESS_SEQ,    {0},           {0}};
    int32_t tok[HARNESS_BATCH * HARNESS_SEQ], tgt[HARNESS_BATCH * HARNESS_SEQ];
    if ((st = zero_engine_init(&eng, &p))) {
        fail(out, st, "engine init");
        goto done;
    }
    if ((st = zero__gpt_init(&gpt, &gc, eng, HARNESS_BATCH, 0, 1))) {
        fail(out, st, "gpt init");
        goto done;
    }
    for (int step = 0; step < cfg->steps; step++) {
        int eval = cfg->eval_batches > 0 &&
                   (step == 0 || (cfg->eval_interval > 0 && step % cfg->eval_interval == 0));
        for (int i = 0; eval && i < cfg->eval_batches; i++) {
            make_batch(100000 + i, rank, tok, tgt);
            float loss = 0;
            if ((st = zero__gpt_forward(gpt, tok, tgt, HARNESS_BATCH, HARNESS_SEQ, &loss))) {
                fail(out, st, "evaluation forward");
                goto done;
            }
        }
        double loss_sum = 0;
        for (int m = 0; m < cfg->accum; m++) {
            make_batch(step, m * ranks + rank, tok, tgt);
            float loss = 0;
            if ((st = zero__gpt_forward(gpt, tok, tgt, HARNESS_BATCH, HARNESS_SEQ, &loss)) ||
                (st = zero__gpt_backward(gpt))) {
                fail(out, st, "forward/backward");
                goto done;
            }
            loss_sum += loss;
        }
        zero_step_stats_t ss;
        if ((st = zero_engine_step(eng, &ss))) {
            fail(out, st, "step");
            goto done;
        }
        out->skipped_steps += ss.skipped;
        float l = (float)(loss_sum / cfg->accum);
        if (step == 0) out->first_loss = l;
        out->last_loss = l;
    }
    zero_engine_get_report(eng, &out->report);
    if ((st = zero_engine_fingerprint(eng, &out->fingerprint))) {
        fail(out, st, "fingerprint");
        goto done;
    }
    if (cfg->stage < 3) {
        size_t n = zero_engine_param_count(eng);
        out->weights = malloc(n * sizeof(float));
        out->weight_count = n;
        size_t k = 0;
        for (int u = 0; u < zero_engine_unit_count(eng); u++)
            for (int t = 0; t < zero_engine_tensor_count(eng, u); t++) {
                const zero_tensor_desc_t *d = zero_engine_tensor_desc(eng, u, t);
                size_t c = 1;
                for (int q = 0; q < d->ndim; q++) c *= d->shape[q];
                zero_engine_params_read(eng, u, zero_engine_tensor_offset(eng, u, t), c,
                                        out->weights + k);
                k += c;
            }
    }
done:
    zero__gpt_free(gpt);
    zero_engine_free(eng);
    if (comm) zero_comm_set_mem(comm, NULL);
    zero_mem_free_domain(mem);
    return out->status;
}

typedef struct job {
    const run_cfg_t *cfg;
    rank_result_t *res; /* one per rank */
} job_t;

static void rank_main(zero_comm_t *comm, int rank, void *arg) {
    job_t *j = arg;
    harness_gpt_rank(comm, j->cfg, &j->res[rank]);
}

zero_status_t harness_gpt_threads(const run_cfg_t *cfg, rank_result_t *res) {
    int n = cfg->ranks;
    job_t job = {cfg, res};
    zero_status_t st = thread_ranks_clique(n, cfg->timeout_s, rank_main, &job);
    if (st) {
        for (int r = 0; r < n; r++) fail(&res[r], st, "threads init");
        return st;
    }
    for (int r = 0; r < n; r++)
        if (res[r].status) return res[r].status;
    return ZERO_OK;
}

void harness_result_free(rank_result_t *r) {
    free(r->weights);
    r->weights = NULL;
}
