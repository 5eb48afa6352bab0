/* plan.c — the rows of a plan: for each way to run a config, its memory (the trainer's own
 * pre-flight estimate: engine layout, buffers, pools, activations, overhead), its swap files,
 * its traffic per step and its step time.
 *
 * Traffic: per rank and step, for a collective over N ranks on nodes of L ranks (M = N / L
 * nodes) whose full vector is B bytes (the input of a reduce-scatter, the output of an
 * all-gather), a two-level algorithm sends B (L - 1) / L inside the node and B / L (M - 1) / M
 * to other nodes; with L = N that is the flat ring's B (N - 1) / N. The vectors are the padded
 * parameters P (the paper's Psi, Sec. 7): gradients reduce-scattered once per micro-step,
 * stage 0 all-gathers the reduced gradient (accumulator dtype), stages 1-2 the updated
 * parameters, stage 3 gathers the parameters twice per micro-step (forward and backward), so
 * stages 0-2 move 2 P and stage 3 3 P per micro-step's worth. ZeRO++ (stage 3): qwZ gathers int8
 * (1 + 4 / 256 bytes per element), hpZ makes every window after the step's first a gather inside
 * the node, qgZ sends int4 gradients (1 / 2 + 4 / 256 bytes per element).
 *
 * Not here: checking the prediction against runs (tests/plan), the command line.
 * Invariant: memory comes only from zero__train_process_estimate, so a change to the engine's
 * buffers moves the plan and the pre-flight check together.
 */
#include "plan/plan.h"

#include "core/core_internal.h"
#include "train/preflight.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double zero__plan_paper_bytes(double psi, double K, double n, int stage) {
    switch (stage) {
    case 0: return (2 + 2 + K) * psi;
    case 1: return 4 * psi + K * psi / n;
    case 2: return 2 * psi + (2 + K) * psi / n;
    case 3: return (2 + 2 + K) * psi / n;
    default: return 0;
    }
}

static const char *const offload_names[ZERO_PLAN_OFFLOAD_COUNT] = {"none", "optimizer",
                                                                   "optimizer+params"};
static const char *const ram_names[ZERO_PLAN_RAM_COUNT] = {
    "parameters", "gradients", "optimizer_states", "activations", "buffers", "program"};
_Static_assert(ZERO_ARRAY_LEN(offload_names) == ZERO_PLAN_OFFLOAD_COUNT, "offload names");
_Static_assert(ZERO_ARRAY_LEN(ram_names) == ZERO_PLAN_RAM_COUNT, "RAM category names");

const char *zero__plan_offload_name(zero_plan_offload_t o) {
    return (unsigned)o < ZERO_PLAN_OFFLOAD_COUNT ? offload_names[o] : "?";
}

const char *zero__plan_ram_name(zero_plan_ram_t c) {
    return (unsigned)c < ZERO_PLAN_RAM_COUNT ? ram_names[c] : "?";
}

const char *const zero__plan_assumptions[] = {
    "compute = training FLOPs (6 x active parameters + attention, per token; + 2 x active "
    "parameters per token to recompute with activation checkpointing) / the GEMM rate "
    "(bf16's for bf16, fp32's otherwise), a node's rate shared by its ranks",
    "traffic: two-level collectives, B (L-1)/L bytes inside a node and B/L (M-1)/M between "
    "nodes for a vector of B bytes over M nodes of L ranks; intra-node bytes move at the "
    "node's memcpy rate, inter-node bytes at --link, each shared by the node's ranks",
    "overlap: stages 2-3 hide their per-micro-step reduce-scatters and gathers behind compute "
    "(step = max(compute, comm)); stages 0-1's reduction and every stage's after-step "
    "all-gather add to the step",
    "optimizer: Adam on the rank's shard reads and writes its states once at the memcpy rate, "
    "after backward (not overlapped)",
    "offload: each step reads and writes the swapped optimizer states once, and (parameters "
    "offloaded) reads a parameter shard per gather window and writes it once, at the disk's "
    "rates shared by the node's ranks, not overlapped with compute",
    "memory: the engine's padded layout, buffers and pools, the activations of one micro-batch "
    "and the process's measured overhead (the pre-flight check's estimate); fits = a node's "
    "ranks within --ram and their swap files within --disk",
    NULL};

/* Add a collective's bytes (full vector of B bytes) to the intra / inter totals. */
static void two_level(double B, double L, double M, double *intra, double *inter) {
    *intra += B * (L - 1) / L;
    *inter += B / L * (M - 1) / M;
}

typedef struct ctx {
    const zero_train_config_t *cfg;
    const zero_plan_machine_t *m;
    const zero_plan_calibration_t *cal;
    int per_rank_batch;
} ctx_t;

static zero_status_t make_row(const ctx_t *x, int stage, int off, int zpp, int ckpt, int micro,
                              zero_plan_row_t *r) {
    const zero_plan_machine_t *m = x->m;
    const int N = m->world, L = m->ranks_per_node < N ? m->ranks_per_node : N;
    zero_train_config_t c = *x->cfg;
    c.stage = stage;
    c.checkpointing = ckpt;
    c.micro_batch = micro;
    c.grad_accum = x->per_rank_batch / micro;
    c.train_batch_size = x->per_rank_batch * N;
    snprintf(c.offload_optimizer, sizeof c.offload_optimizer, "%s",
             off >= ZERO_PLAN_OFFLOAD_OPTIM ? "nvme" : "none");
    snprintf(c.offload_param, sizeof c.offload_param, "%s",
             off == ZERO_PLAN_OFFLOAD_PARAMS ? "nvme" : "none");
    /* the estimate never touches the swap files' directory; a config without one plans too */
    if (!c.nvme_path[0]) snprintf(c.nvme_path, sizeof c.nvme_path, ".");
    if (!c.param_nvme_path[0]) snprintf(c.param_nvme_path, sizeof c.param_nvme_path, ".");
    c.quantized_weights = c.quantized_gradients = zpp;
    c.hpz_partition_size = zpp && L > 1 && L < N && off != ZERO_PLAN_OFFLOAD_PARAMS ? L : 1;
    zero_status_t st = zero__train_config_check(&c, N);
    if (st) return st;
    const int local = m->ranks_per_process, mpi = local == 1 && N > 1;
    zero_train_process_estimate_t e;
    st = zero__train_process_estimate(&c, N, local, m->threads, mpi, &e);
    if (st) return st;
    memset(r, 0, sizeof *r);
    r->stage = stage;
    r->offload = off;
    r->zeropp = zpp;
    r->checkpointing = ckpt;
    r->micro = micro;
    r->accum = c.grad_accum;
    const size_t *b = e.rank.bytes;
    r->ram[ZERO_PLAN_RAM_PARAMS] = b[ZERO_MEM_PARAMS];
    r->ram[ZERO_PLAN_RAM_GRADS] = b[ZERO_MEM_GRADS];
    r->ram[ZERO_PLAN_RAM_OPTIM] = b[ZERO_MEM_OPTIM] + b[ZERO_MEM_OFFLOAD];
    r->ram[ZERO_PLAN_RAM_ACTIVATIONS] = b[ZERO_MEM_ACTIVATIONS];
    r->ram[ZERO_PLAN_RAM_BUFFERS] = e.per_rank - r->ram[0] - r->ram[1] - r->ram[2] - r->ram[3];
    r->ram[ZERO_PLAN_RAM_PROGRAM] = (e.data + e.program) / (uint64_t)local;
    r->ram_process = e.process;
    r->model_states =
        e.rank.model_state_bytes[0] + e.rank.model_state_bytes[1] + e.rank.model_state_bytes[2];
    for (int k = 0; k < ZERO_PLAN_RAM_COUNT; k++) r->ram_rank += r->ram[k];
    /* a node holds L ranks: whole processes of `local` ranks, or L of a bigger process's */
    r->ram_node = local >= L ? (uint64_t)L * e.per_rank + e.data + e.program
                             : (uint64_t)(L / local) * e.process;
    /* swap files: the optimizer's alone, the rest is the parameters' and their accumulators' */
    r->disk_optim = r->disk_params = 0;
    if (off != ZERO_PLAN_OFFLOAD_NONE) {
        zero_train_process_estimate_t eo = e;
        if (off == ZERO_PLAN_OFFLOAD_PARAMS) {
            zero_train_config_t co = c;
            snprintf(co.offload_param, sizeof co.offload_param, "none");
            st = zero__train_process_estimate(&co, N, local, m->threads, mpi, &eo);
            if (st) return st;
        }
        r->disk_optim = eo.rank.disk_bytes;
        r->disk_params = e.rank.disk_bytes - eo.rank.disk_bytes;
    }
    r->disk_node = (uint64_t)L * (r->disk_optim + r->disk_params);
    r->fits_ram = r->ram_node <= m->ram_bytes;
    r->fits_disk = r->disk_node <= m->disk_bytes;
    r->paper_bytes = zero__plan_paper_bytes((double)zero__gpt_param_count(&c.model), 12, N, stage);

    /* traffic per step */
    const zero_dtype_t dt = zero__train_config_compute_dtype(&c);
    const double ce = (double)zero_dtype_size(dt),
                 ae = (double)zero_dtype_size(zero__train_config_accum_dtype(&c));
    const double P = (double)e.rank.padded_param_count, A = (double)r->accum;
    const double Ld = L, Md = (double)N / L;
    double in_ovl = 0, out_ovl = 0, in_ser = 0, out_ser = 0; /* overlapped / serial */
    double *gi = stage >= 2 ? &in_ovl : &in_ser, *go = stage >= 2 ? &out_ovl : &out_ser;
    const double grad_bytes = zpp ? P * (0.5 + 4.0 / 256) : P * ce;
    two_level(grad_bytes * A, Ld, Md, gi, go); /* one reduce-scatter per micro-step */
    if (stage == 0) two_level(P * ae, Ld, Md, &in_ser, &out_ser);
    if (stage == 1 || stage == 2) two_level(P * ce, Ld, Md, &in_ser, &out_ser);
    if (stage == 3) { /* 2 A gather windows: forward and backward of each micro-step */
        const double wire = zpp ? P * (1 + 4.0 / 256) : P * ce;
        two_level(wire, Ld, Md, &in_ovl, &out_ovl);
        if (c.hpz_partition_size > 1) /* later windows from the node's secondary shards */
            in_ovl += (2 * A - 1) * P * ce * (Ld - 1) / Ld;
        else
            two_level(wire * (2 * A - 1), Ld, Md, &in_ovl, &out_ovl);
    }
    r->wire_intra = in_ovl + in_ser;
    r->wire_inter = out_ovl + out_ser;

    /* time per step */
    const zero_plan_calibration_t *cal = x->cal;
    const double tokens = (double)x->per_rank_batch * c.model.seq;
    double flops = zero__gpt_flops_per_token(&c.model) * tokens;
    if (ckpt) flops += 2.0 * (double)zero__gpt_active_param_count(&c.model) * tokens;
    const double rate = (dt == ZERO_DTYPE_BF16 ? cal->gemm_bf16_flops : cal->gemm_fp32_flops) / Ld;
    const double mem = cal->memory_bytes_per_s / Ld, link = cal->inter_link_bytes_per_s / Ld;
    r->t_compute = flops / rate;
    const double t_ovl = in_ovl / mem + out_ovl / link, t_ser = in_ser / mem + out_ser / link;
    r->t_comm = t_ovl + t_ser;
    const int lowp = dt != ZERO_DTYPE_FP32;
    const double shard = stage >= 1 ? P / N : P;
    const double states = lowp ? 12 : 8; /* fp32 master (16-bit compute), Adam m and v */
    r->t_optim = shard * (2 * states + ae + (lowp ? ce : 4)) / mem;
    double rd = 0, wr = 0;
    if (off >= ZERO_PLAN_OFFLOAD_OPTIM) rd = wr = shard * states;
    if (off == ZERO_PLAN_OFFLOAD_PARAMS) {
        rd += 2 * A * (P / N) * ce + A * (P / N) * ae; /* each window's shard, accumulators */
        wr += (P / N) * ce + A * (P / N) * ae;
    }
    r->t_disk = rd / (cal->disk_read_bytes_per_s / Ld) + wr / (cal->disk_write_bytes_per_s / Ld);
    r->t_step = (r->t_compute > t_ovl ? r->t_compute : t_ovl) + t_ser + r->t_optim + r->t_disk;
    r->tokens_per_s = tokens * N / r->t_step;
    return ZERO_OK;
}

int zero__plan_micro_list(int per_rank, int *out, int max) {
    int n = 0;
    for (int mb = 1; mb < per_rank && n < max - 1; mb *= 2)
        if (per_rank % mb == 0) out[n++] = mb;
    out[n++] = per_rank;
    return n;
}

zero_status_t zero__plan_run(const zero_train_config_t *cfg, const zero_plan_machine_t *m,
                             const zero_plan_calibration_t *cal, zero_plan_t *out) {
    memset(out, 0, sizeof *out);
    out->best = out->smallest = -1;
    zero_status_t st = zero__gpt_config_check(&cfg->model);
    if (st) {
        char why[512];
        snprintf(why, sizeof why, "%s", zero_last_error());
        return zero__error(ZERO_ERR_CONFIG, "the model cannot be built: %s", why);
    }
    const int N = m->world, L = m->ranks_per_node;
    if (N < 1)
        return zero__error(ZERO_ERR_CONFIG,
                           "--world %d is invalid: set it to the number of ranks (1 or more)", N);
    if (L < 1 || N % L)
        return zero__error(ZERO_ERR_CONFIG,
                           "--ranks-per-node %d does not divide --world %d: set it to a divisor "
                           "of the world size (nodes hold equal numbers of ranks)",
                           L, N);
    /* the global batch: train_batch_size, else the config's micro x accumulation x --world */
    const int64_t global = zero__train_config_is_set(cfg, "train_batch_size")
                               ? cfg->train_batch_size
                               : (int64_t)cfg->micro_batch * cfg->grad_accum * N;
    if (global < 1)
        return zero__error(ZERO_ERR_CONFIG,
                           "train_batch_size = %lld is invalid: set it (or --batch) to 1 or more "
                           "sequences per step",
                           (long long)global);
    if (global % N)
        return zero__error(ZERO_ERR_CONFIG,
                           "--world %d does not divide train_batch_size = %lld: choose a world "
                           "size that divides %lld, or set train_batch_size to a multiple of %d",
                           N, (long long)global, (long long)global, N);
    if (global / N > (1 << 20))
        return zero__error(ZERO_ERR_CONFIG,
                           "train_batch_size = %lld over %d ranks is %lld sequences per rank: "
                           "set train_batch_size to at most %d per rank",
                           (long long)global, N, (long long)(global / N), 1 << 20);
    const ctx_t x = {cfg, m, cal, (int)(global / N)};
    int micros[32];
    const int nm = zero__plan_micro_list(x.per_rank_batch, micros, 32);
    const int cap = 4 * ZERO_PLAN_OFFLOAD_COUNT * 2 * 2 * nm;
    out->rows = calloc((size_t)cap, sizeof *out->rows);
    if (!out->rows) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "plan: out of memory");
    out->global_batch = (int)global;
    out->params = (double)zero__gpt_param_count(&cfg->model);
    out->active_params = (double)zero__gpt_active_param_count(&cfg->model);
    out->flops_per_token = zero__gpt_flops_per_token(&cfg->model);
    out->dtype = zero__train_config_compute_dtype(cfg);
    char first_error[512] = "";
    for (int stage = 0; stage <= 3; stage++)
        for (int off = 0; off < ZERO_PLAN_OFFLOAD_COUNT; off++) {
            if (off == ZERO_PLAN_OFFLOAD_PARAMS && stage < 3) continue; /* stage 3's shards */
            for (int zpp = 0; zpp <= (stage == 3 && N > 1); zpp++)
                for (int ckpt = 0; ckpt <= 1; ckpt++)
                    for (int i = 0; i < nm; i++) {
                        zero_plan_row_t *r = &out->rows[out->count];
                        st = make_row(&x, stage, off, zpp, ckpt, micros[i], r);
                        if (st) {
                            if (!first_error[0])
                                snprintf(first_error, sizeof first_error, "%s", zero_last_error());
                            continue;
                        }
                        out->count++;
                    }
        }
    if (!out->count) {
        zero__plan_free(out);
        return zero__error(ZERO_ERR_CONFIG, "no way to run this config could be planned: %s",
                           first_error);
    }
    for (int i = 0; i < out->count; i++) {
        const zero_plan_row_t *r = &out->rows[i];
        if (out->smallest < 0 || r->ram_node < out->rows[out->smallest].ram_node) out->smallest = i;
        if (!r->fits_ram || !r->fits_disk) continue;
        if (out->best < 0 || r->t_step < out->rows[out->best].t_step ||
            (r->t_step == out->rows[out->best].t_step &&
             r->ram_node < out->rows[out->best].ram_node))
            out->best = i;
    }
    return ZERO_OK;
}

void zero__plan_free(zero_plan_t *plan) {
    if (!plan) return;
    free(plan->rows);
    plan->rows = NULL;
    plan->count = 0;
}
