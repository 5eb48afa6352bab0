/* trainer.c — the training loop over ranks: data -> engine + model per rank -> steps with
 * progress and a metrics log -> validation -> samples -> a report gathered on rank 0.
 *
 * Checkpoints: --resume / --init-from are applied right after the model is built, before the
 * first evaluation; saves happen every train.save_every steps and at the end (train/checkpoint.c).
 * Not here: mixed precision (a later issue extends this loop through the engine).
 * Invariants: every allocation of a rank happens before its first step (engine buffers,
 * activations, batch buffers); every rank makes the same sequence of model calls (training,
 * validation, samples), because under stage 3 each forward gathers parameters collectively;
 * validation batches are the same fixed windows at every evaluation, so validation losses are
 * comparable across a run. The trainer's own collectives (loss averages, the report gather) share
 * the rank's communicator; the engine counts its traffic on a private split of it.
 */
#include "train/trainer.h"

#include "comm/comm_internal.h"
#include "core/core_internal.h"
#include "core/fileio.h"
#include "kernels/kernels.h"
#include "kernels/kernels_lp.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/monitor.h"
#include "train/online_tune.h"
#include "train/outputs.h"
#include "train/preflight.h"
#include "train/sample.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Shared by the ranks of one process. */
typedef struct job {
    zero_train_config_t *cfg;
    const zero_train_io_t *io;
    int world, threads;
    zero_backend_t backend;
    zero_dataset_t data;   /* read-only once loaded: the rank threads share it */
    zero_tokenizer_t *tok; /* owned: data.tokenizer's (immutable, shared), or NULL */
    double unigram_entropy, ln_vocab, t_start;
    /* Threads backend with several ranks: each rank's report, written by its own rank before a
     * barrier and read by rank 0 after it (gather_reports). */
    zero_train_rank_report_t *reports;
} job_t;

/* One rank. */
typedef struct run {
    job_t *job;
    const zero_train_config_t *cfg;
    int rank, world;
    FILE *out;               /* rank 0: io->out; others NULL */
    FILE *metrics;           /* rank 0 only */
    zero_monitor_t *monitor; /* rank 0 only: tensorboard / csv_monitor (NULL: off) */
    zero_comm_t *comm;       /* borrowed: this rank's communicator (NULL: one rank) */
    zero_comm_t *ep_comm;    /* owned: the expert-parallel block (model.moe.ep_size > 1), or NULL */
    uint64_t moe_a2a, moe_a2a_theory; /* the last step's all-to-all bytes (rank report) */
    zero_engine_t *eng;
    zero_gpt_t *gpt;
    int32_t *x, *y;        /* (B, T) */
    int64_t skipped_steps; /* steps this run skipped for an inf/NaN gradient */
    double elapsed_base;   /* a resumed run's seconds before this invocation (checkpoint) */
    int64_t skipped_base;  /* a resumed run's skipped steps before this invocation */
    /* Handed from rank_setup to rank_loop and rank_finish. */
    zero_train_position_t pos; /* where the run starts */
    char ckpt_path[1024];      /* the checkpoint resumed from, then the last one saved */
    int start;                 /* the step the run starts at */
    double my_peak;            /* this rank's matmul peak, FLOP/s (0: not measured) */
    double memory_bytes_per_s; /* memory traffic rate for the roofline (0: none) */
    /* Handed from rank_loop to rank_finish. */
    double train_s; /* seconds in training steps */
    double *step_s; /* owned: each step's seconds, step_count of them */
    int step_count;
    int end_step, stop_signal; /* the last step reached; the signal that stopped it, or 0 */
} run_t;

static void say(const run_t *r, const char *fmt, ...) ZERO_PRINTF(2, 3);
static void say(const run_t *r, const char *fmt, ...) {
    if (!r->out) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(r->out, fmt, ap);
    va_end(ap);
    fflush(r->out);
}

/* Sum over ranks in rank order (the comm layer's guarantee), so every rank gets the same bits. */
static zero_status_t sum_ranks(run_t *r, double *v, size_t n) {
    if (!r->comm || r->world == 1) return ZERO_OK;
    return zero_comm_all_reduce(v, v, n, ZERO_DTYPE_FP64, ZERO_OP_SUM, r->comm);
}

/* FP8 delayed scaling, once per optimizer step: the step's amax of every tensor reduced with
 * MAX over all ranks (each holds the whole model: every rank shares every tensor), in one
 * all-reduce as Transformer Engine's reduce_amax, then every rank makes the same scales. */
static zero_status_t fp8_step(run_t *r) {
    zero_fp8_t *f = zero__gpt_fp8(r->gpt);
    size_t n = 0;
    float *amax = zero__fp8_step_amax(f, &n);
    if (n && r->comm && r->world > 1) {
        zero_status_t st =
            zero_comm_all_reduce(amax, amax, n, ZERO_DTYPE_FP32, ZERO_OP_MAX, r->comm);
        if (st) return st;
    }
    zero__fp8_update(f);
    return ZERO_OK;
}

/* A hash of the fp8 delayed recipe's scales and histories (0 without them). */
static uint64_t fp8_state_hash(const zero_fp8_t *f) {
    const size_t n = zero__fp8_saved_count(f);
    float *v = n ? malloc(n * sizeof *v) : NULL;
    if (!v) return 0;
    zero__fp8_save(f, v);
    uint64_t h = zero__hash_bytes(0, v, n * sizeof *v);
    free(v);
    return h;
}

/* The values each step sums over ranks in one all-reduce: the loss, and the signal handlers'
 * requests (a count of ranks asking for a checkpoint; per signal number, a count of ranks asking
 * to stop), so that every rank sees the same requests after the same step. */
enum { STEP_LOSS, STEP_SAVE, STEP_STOP, STEP_SUM_COUNT = STEP_STOP + ZERO_TRAIN_SIGNAL_MAX };

/* This rank's share of the requests. Ranks as threads share one process and its flags: rank 0
 * alone reads them there; under MPI every rank reads its own process's. */
static void step_requests(const run_t *r, double *sums) {
    const zero_train_io_t *io = r->job->io;
    if (r->job->backend != ZERO_BACKEND_MPI && r->rank != 0) return;
    if (io->save_request && atomic_exchange(io->save_request, 0)) sums[STEP_SAVE] = 1.0;
    int sig = io->stop_signal ? atomic_load(io->stop_signal) : 0;
    if (sig > 0 && sig < ZERO_TRAIN_SIGNAL_MAX) sums[STEP_STOP + sig] = 1.0;
}

/* The stop signal all ranks agree on after the sum: the lowest number any rank asked for. */
static int agreed_stop(const double *sums) {
    for (int sig = 1; sig < ZERO_TRAIN_SIGNAL_MAX; sig++)
        if (sums[STEP_STOP + sig] > 0) return sig;
    return 0;
}

static const char *signal_name(int sig) {
    switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "a signal";
    }
}

/* Mean loss over `batches` micro-batches per rank: validation windows (rank r takes global batch
 * i * world + r), or (split_train) training windows drawn from a fixed seed so the figure is
 * repeatable. */
static zero_status_t evaluate(run_t *r, int split_train, float *loss) {
    const int B = r->cfg->micro_batch, T = r->cfg->model.seq;
    double sum = 0.0;
    uint64_t rng = 0x5eedull + (uint64_t)r->cfg->seed;
    zero__gpt_set_eval(r->gpt, 1); /* MoE: eval_capacity_factor, no routing statistics */
    for (int i = 0; i < r->cfg->eval_batches; i++) {
        if (split_train)
            zero__data_train_batch_shard(&r->job->data, &rng, B, T, r->rank, r->world, r->x, r->y);
        else
            zero__data_val_batch(&r->job->data, (size_t)i * (size_t)r->world + (size_t)r->rank, B,
                                 T, r->x, r->y);
        float l = 0.0f;
        zero_status_t st = zero__gpt_forward(r->gpt, r->x, r->y, B, T, &l);
        if (st) return st;
        sum += l;
    }
    zero__gpt_set_eval(r->gpt, 0);
    /* no step follows: a parameter shard a rank could not read fails every rank here */
    zero_status_t st = zero_engine_check(r->eng);
    if (!st) st = sum_ranks(r, &sum, 1);
    if (st) return st;
    *loss = (float)(sum / ((double)r->cfg->eval_batches * r->world));
    return ZERO_OK;
}

static void fmt_duration(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e7) {
        snprintf(buf, n, "--:--");
        return;
    }
    int t = (int)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%d:%02d", t / 60, t % 60);
}

/* A progress line: the step's own loss (mean over ranks and micro-steps) beside its running
 * average (an exponential one, weight 0.1 on the newest step), which shows the trend through the
 * batches' noise. */
static void progress(const run_t *r, int step, int steps, float loss, float avg, double tok_s,
                     double eta, const zero_step_stats_t *ss) {
    const float lr = ss->lr;
    const double norm = ss->grad_norm;
    char etas[32], extra[96] = "";
    fmt_duration(etas, sizeof etas, eta);
    /* fp16 shows its loss scale; a skipped step (inf/NaN gradient) says so on its line. */
    const float next_scale = zero_engine_loss_scale(r->eng);
    if (ss->skipped && r->cfg->fp16)
        snprintf(extra, sizeof extra, " | skipped: inf/NaN gradient, loss scale %g -> %g",
                 (double)ss->loss_scale, (double)next_scale);
    else if (ss->skipped)
        snprintf(extra, sizeof extra, " | skipped: inf/NaN gradient");
    else if (r->cfg->fp16)
        snprintf(extra, sizeof extra, " | scale %g", (double)ss->loss_scale);
    if (r->job->io->tty) {
        const int width = 24;
        int filled = steps ? (int)((double)step * width / steps) : width;
        char bar[64];
        for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
        bar[width] = 0;
        say(r, "\r\033[K[%s] step %d/%d | loss %.4f (avg %.4f) | %.1fk tok/s | ETA %s%s", bar, step,
            steps, (double)loss, (double)avg, tok_s / 1e3, etas, extra);
    } else {
        say(r,
            "step %5d/%d | loss %.4f (avg %.4f) | lr %.2e | norm %.3f | %.1fk tok/s | ETA %s%s\n",
            step, steps, (double)loss, (double)avg, (double)lr, norm, tok_s / 1e3, etas, extra);
    }
}

static void print_sample(const run_t *r, const int32_t *toks, int n) {
    const zero_tokenizer_t *tok = r->job->tok;
    say(r, "----\n");
    for (int i = 0; i < n; i++) {
        int t = toks[i];
        size_t len = 0;
        const char *bytes = tok ? zero_tokenizer_token(tok, t, &len) : NULL;
        if (tok) { /* a padded vocabulary's ids past the tokenizer's have no text */
            if (bytes)
                say(r, "%.*s", (int)len, bytes);
            else
                say(r, "[token %d]", t);
        } else if (r->cfg->model.vocab <= 256) {
            unsigned char ch = (unsigned char)t;
            if (ch == '\n' || ch == '\t' || (ch >= 32 && ch < 127))
                say(r, "%c", ch);
            else
                say(r, "\\x%02x", ch);
        } else {
            say(r, "%s%d", i ? " " : "", t);
        }
    }
    say(r, "\n");
}

/* Every rank generates (the same tokens: same weights, same seed), rank 0 prints. */
static zero_status_t samples(run_t *r) {
    const zero_train_config_t *c = r->cfg;
    if (c->samples <= 0) return ZERO_OK;
    int plen = 0;
    int total = c->sample_tokens + (int)strlen(c->prompt) + 1;
    int32_t *toks = malloc((size_t)total * sizeof *toks);
    if (!toks) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot allocate sample buffer");
    const zero_tokenizer_t *tok = r->job->tok;
    if (tok && (c->prompt[0] || zero_tokenizer_eot(tok) < 0)) {
        int32_t *ids = NULL;
        size_t n = 0;
        zero_status_t st = zero_tokenizer_encode(tok, c->prompt[0] ? c->prompt : "\n",
                                                 c->prompt[0] ? strlen(c->prompt) : 1, &ids, &n);
        if (st) {
            free(toks);
            return st;
        }
        memcpy(toks, ids, n * sizeof *ids); /* n <= the prompt's bytes */
        plen = (int)n;
        free(ids);
    } else if (tok) { /* GPT-2's unconditional samples start at <|endoftext|> */
        toks[plen++] = zero_tokenizer_eot(tok);
    } else if (c->prompt[0] && c->model.vocab >= 256) {
        for (const char *p = c->prompt; *p; p++) toks[plen++] = (unsigned char)*p;
    } else {
        toks[plen++] = c->model.vocab > '\n' ? '\n' : 0;
    }
    uint64_t rng = 0xa11ce5ull + (uint64_t)c->seed;
    zero__gpt_set_eval(r->gpt, 1); /* no training follows */
    say(r, "samples (temperature %.2f, top-k %d):\n", (double)c->temperature, c->top_k);
    zero_status_t st = ZERO_OK;
    for (int s = 0; s < c->samples && !st; s++) {
        st = zero__generate(r->gpt, toks, plen, plen + c->sample_tokens, c->temperature, c->top_k,
                            &rng);
        if (!st) print_sample(r, toks, plen + c->sample_tokens);
    }
    say(r, "----\n");
    free(toks);
    return st;
}

static void rank_report(run_t *r, zero_train_rank_report_t *rr) {
    memset(rr, 0, sizeof *rr);
    rr->rank = r->rank;
    rr->world = r->world;
    rr->stage = r->cfg->stage;
    rr->threads = r->job->threads;
    rr->peak_rss_bytes = zero_peak_rss_bytes();
    zero_engine_report_t er;
    zero_engine_get_report(r->eng, &er);
    for (int c = 0; c < ZERO_MEM_CATEGORY_COUNT; c++) {
        rr->memory_bytes[c] = er.memory_bytes[c];
        rr->memory_peak_bytes[c] = er.memory_peak_bytes[c];
        rr->memory_theory_bytes[c] = er.memory_theory_bytes[c];
    }
    rr->comm_bytes_per_step = er.comm_bytes_per_step;
    rr->comm_theory_bytes_per_step = er.comm_theory_bytes_per_step;
    rr->comm_inter_node_bytes_per_step = er.comm_inter_node_bytes_per_step;
    rr->comm_inter_node_theory_bytes_per_step = er.comm_inter_node_theory_bytes_per_step;
    for (int c = 0; c < ZERO_COLL_COUNT; c++)
        rr->comm_sent_bytes_per_step_by_coll[c] = er.comm_sent_bytes_per_step_by_coll[c];
    for (int k = 0; k < ZERO_XFER_KIND_COUNT; k++) {
        rr->comm_sent_bytes_per_step_by_kind[k] = er.comm_sent_bytes_per_step_by_kind[k];
        rr->comm_theory_bytes_per_step_by_kind[k] = er.comm_theory_bytes_per_step_by_kind[k];
    }
    rr->padded_params = er.padded_param_count;
    for (int k = 0; k < 3; k++) {
        rr->model_state_bytes[k] = er.model_state_bytes[k];
        rr->model_state_theory_bytes[k] = er.model_state_theory_bytes[k];
        for (int kind = 0; kind < 2; kind++) {
            rr->model_state_split_bytes[kind][k] = er.model_state_split_bytes[kind][k];
            rr->model_state_split_theory_bytes[kind][k] =
                er.model_state_split_theory_bytes[kind][k];
        }
    }
    rr->grad_pool_bytes = er.grad_pool_bytes;
    rr->gather_pool_bytes = er.gather_pool_bytes;
    rr->swap_disk_bytes = er.swap_disk_bytes;
    rr->swap_read_bytes_per_step = er.swap_read_bytes_per_step;
    rr->swap_written_bytes_per_step = er.swap_written_bytes_per_step;
    rr->swap_wait_s_per_step = er.swap_wait_s_per_step;
    rr->moe_a2a_bytes_per_step = r->moe_a2a;
    rr->moe_a2a_theory_bytes_per_step = r->moe_a2a_theory;
}

static const zero_mem_category_t table_cats[] = {ZERO_MEM_PARAMS, ZERO_MEM_GRADS, ZERO_MEM_OPTIM,
                                                 ZERO_MEM_ACTIVATIONS, ZERO_MEM_COMM};

/* Every rank ends with the fp8 scales and histories of rank 0 (their hashes agree). */
static int fp8_ranks_agree(const zero_train_rank_report_t *all, int world) {
    for (int k = 1; k < world; k++)
        if (all[k].fp8_state_hash != all[0].fp8_state_hash) return 0;
    return 1;
}

static void print_tables(const run_t *r, const zero_train_rank_report_t *all) {
    const double MiB = 1048576.0;
    say(r, "report: memory per rank in MiB, measured / theory (theory 0: not modelled)\n");
    say(r, "  rank");
    for (size_t i = 0; i < ZERO_ARRAY_LEN(table_cats); i++)
        say(r, " %17s", zero_mem_category_name(table_cats[i]));
    say(r, " %10s\n", "peak RSS");
    for (int k = 0; k < r->world; k++) {
        say(r, "  %4d", (int)all[k].rank);
        for (size_t i = 0; i < ZERO_ARRAY_LEN(table_cats); i++) {
            char cell[64];
            snprintf(cell, sizeof cell, "%.2f / %.2f",
                     (double)all[k].memory_bytes[table_cats[i]] / MiB,
                     (double)all[k].memory_theory_bytes[table_cats[i]] / MiB);
            say(r, " %17s", cell);
        }
        say(r, " %10.1f\n", (double)all[k].peak_rss_bytes / MiB);
    }
    if (r->job->backend == ZERO_BACKEND_THREADS && r->world > 1)
        say(r, "  (peak RSS is the whole process: the ranks are its threads)\n");
    /* The ZeRO paper's breakdown: what stays between steps, the transient pools apart. */
    const zero_dtype_t cdt = zero__train_config_compute_dtype(r->cfg);
    if (cdt != ZERO_DTYPE_FP32) /* which hardware ran the 16-bit GEMMs: AMX, AVX512-BF16, ... */
        say(r, "report: %s matmuls: %s (%s)\n", zero_dtype_name(cdt), zero__matmul_lp_path(cdt),
            zero__matmul_lp_impl(cdt));
    const zero_fp8_config_t *f8 = &r->cfg->model.fp8;
    if (f8->enabled) /* the buffers of the quantized inputs are in the activations above */
        say(r,
            "report: fp8 GEMM inputs (%s, recipe %s): scaling state %zu bytes per rank (other "
            "memory)%s\n",
            r->cfg->fp8_format, r->cfg->fp8_recipe, zero__fp8_state_bytes(f8, r->cfg->model.layers),
            f8->recipe != ZERO_FP8_DELAYED   ? ""
            : fp8_ranks_agree(all, r->world) ? ", the same scales on every rank"
                                             : ", DIFFERENT scales on some ranks");
    say(r,
        "report: model states per rank in MiB (%s compute, %s gradient accumulation, %s Adam "
        "states), measured / theory\n",
        zero_dtype_name(cdt), zero_dtype_name(zero__train_config_accum_dtype(r->cfg)),
        zero_dtype_name(zero__train_config_state_dtype(r->cfg)));
    for (int k = 0; k < r->world; k++) {
        uint64_t m = 0, t = 0;
        for (int i = 0; i < 3; i++) {
            m += all[k].model_state_bytes[i];
            t += all[k].model_state_theory_bytes[i];
        }
        say(r,
            "  rank %d: parameters %.2f / %.2f, gradients %.2f / %.2f, optimizer states %.2f / "
            "%.2f, total %.2f / %.2f; transient: gradient pool %.2f, gather pool %.2f\n",
            (int)all[k].rank, all[k].model_state_bytes[0] / MiB,
            all[k].model_state_theory_bytes[0] / MiB, all[k].model_state_bytes[1] / MiB,
            all[k].model_state_theory_bytes[1] / MiB, all[k].model_state_bytes[2] / MiB,
            all[k].model_state_theory_bytes[2] / MiB, m / MiB, t / MiB,
            all[k].grad_pool_bytes / MiB, all[k].gather_pool_bytes / MiB);
        /* Stacked (expert) units apart, each beside its theory (N = its group's size). */
        const uint64_t *e = all[k].model_state_split_bytes[1];
        const uint64_t *et = all[k].model_state_split_theory_bytes[1];
        const uint64_t *d = all[k].model_state_split_bytes[0];
        const uint64_t *dt = all[k].model_state_split_theory_bytes[0];
        if (et[0] + et[1] + et[2] > 0)
            say(r,
                "  rank %d: of which dense units: %.2f / %.2f, %.2f / %.2f, %.2f / %.2f; expert "
                "units: %.2f / %.2f, %.2f / %.2f, %.2f / %.2f\n",
                (int)all[k].rank, d[0] / MiB, dt[0] / MiB, d[1] / MiB, dt[1] / MiB, d[2] / MiB,
                dt[2] / MiB, e[0] / MiB, et[0] / MiB, e[1] / MiB, et[1] / MiB, e[2] / MiB,
                et[2] / MiB);
    }
    for (int k = 0; k < r->world; k++)
        if (all[k].swap_disk_bytes)
            say(r,
                "report: rank %d: model states on NVMe: %.2f MiB of swap files; in memory "
                "%.2f / %.2f MiB (staging buffers and checksums, measured / theory); last step "
                "read %.2f MiB, wrote %.2f MiB (the files: %.2f), waited %.3f s for the disk\n",
                (int)all[k].rank, all[k].swap_disk_bytes / MiB,
                all[k].memory_bytes[ZERO_MEM_OFFLOAD] / MiB,
                all[k].memory_theory_bytes[ZERO_MEM_OFFLOAD] / MiB,
                all[k].swap_read_bytes_per_step / MiB, all[k].swap_written_bytes_per_step / MiB,
                all[k].swap_disk_bytes / MiB, all[k].swap_wait_s_per_step);
    say(r, "report: communication per rank per step in MiB, measured / theory, by kind\n");
    for (int k = 0; k < r->world; k++) {
        say(r, "  rank %d: %.3f / %.3f", (int)all[k].rank, (double)all[k].comm_bytes_per_step / MiB,
            (double)all[k].comm_theory_bytes_per_step / MiB);
        for (int x = 0; x < ZERO_XFER_KIND_COUNT; x++)
            say(r, "%s%s %.3f / %.3f", x ? ", " : " (", zero_xfer_kind_name((zero_xfer_kind_t)x),
                (double)all[k].comm_sent_bytes_per_step_by_kind[x] / MiB,
                (double)all[k].comm_theory_bytes_per_step_by_kind[x] / MiB);
        if (all[k].comm_inter_node_bytes_per_step || all[k].comm_inter_node_theory_bytes_per_step)
            say(r, "; to other nodes %.3f / %.3f",
                (double)all[k].comm_inter_node_bytes_per_step / MiB,
                (double)all[k].comm_inter_node_theory_bytes_per_step / MiB);
        int any = 0;
        for (int c = 0; c < ZERO_COLL_COUNT; c++)
            if (all[k].comm_sent_bytes_per_step_by_coll[c]) {
                say(r, "%s%s %.3f",
                    any ? ", " : "; by collective: ", zero_coll_name((zero_coll_t)c),
                    (double)all[k].comm_sent_bytes_per_step_by_coll[c] / MiB);
                any = 1;
            }
        say(r, ")\n");
    }
    if (r->cfg->model.moe.experts > 0 && r->cfg->model.moe.ep_size > 1 && r->end_step > r->start) {
        say(r,
            "report: expert parallelism (ep_size %d): MoE all-to-all per rank per step in MiB, "
            "measured / theory from the routed counts\n",
            r->cfg->model.moe.ep_size);
        for (int k = 0; k < r->world; k++)
            say(r, "  rank %d: %.4f / %.4f\n", (int)all[k].rank,
                (double)all[k].moe_a2a_bytes_per_step / MiB,
                (double)all[k].moe_a2a_theory_bytes_per_step / MiB);
    }
}

/* Global samples (sequences) trained when `tokens` tokens were: the x of the monitors' scalars,
 * as DeepSpeed counts them (independent of the world size, so a resharded resume continues). */
static int64_t samples_of(const zero_train_config_t *cfg, double tokens) {
    return (int64_t)(tokens / cfg->model.seq + 0.5);
}

/* The step's record in the metrics log and the monitors (rank 0; those that are open). tok_s:
 * the run's tokens/s so far (the log's); step_tok_s and mfu: this step's rate (the monitors') and
 * model FLOP utilisation (both; NaN when the peak was not measured). A write error (a full disk)
 * fails the run, naming the file. tokens, elapsed_s and skipped_steps count from the run's start,
 * earlier invocations of a resumed run included. grad_norm has 17 digits: the float64 norm read
 * back bitwise (the norms of layouts that must agree exactly are compared from the log). */
static zero_status_t step_outputs(run_t *r, int step, float loss, const zero_step_stats_t *ss,
                                  double tokens, double tok_s, double step_s, double step_tok_s,
                                  double mfu, float val_loss) {
    zero_monitor_point_t pt = {samples_of(r->cfg, tokens),
                               loss,
                               ss->lr,
                               r->cfg->fp16 ? ss->loss_scale : NAN,
                               ss->grad_norm,
                               step_tok_s,
                               mfu,
                               val_loss};
    zero_status_t st = zero__monitor_write(r->monitor, &pt);
    if (st || !r->metrics) return st;
    fprintf(r->metrics,
            "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.17g, \"clipped\": %s, "
            "\"skipped\": %s, \"tokens\": %.0f, \"tokens_per_s\": %.6g, \"step_s\": %.6g, "
            "\"elapsed_s\": %.6g, \"optimizer_step_s\": %.6g, \"compute_dtype\": \"%s\", "
            "\"loss_scale\": %.9g, \"skipped_steps\": %lld, \"units_in_backward\": %d",
            step, (double)loss, (double)ss->lr, ss->grad_norm, ss->clipped ? "true" : "false",
            ss->skipped ? "true" : "false", tokens, tok_s, step_s,
            r->elapsed_base + zero_time_now() - r->job->t_start, ss->step_s,
            zero_dtype_name(zero__train_config_compute_dtype(r->cfg)), (double)ss->loss_scale,
            (long long)(r->skipped_base + r->skipped_steps), ss->units_in_backward);
    if (!isnan(mfu)) fprintf(r->metrics, ", \"mfu\": %.6g", mfu);
    if (!isnan(val_loss)) fprintf(r->metrics, ", \"val_loss\": %.9g", (double)val_loss);
    fprintf(r->metrics, "}\n");
    return zero__train_metrics_flush(r->metrics, r->job->io->metrics_path, 0);
}

/* Every rank learns whether any rank failed: one that went on would wait for the failed one in
 * its next collective until the timeout. Returns st, or on a rank that did not fail itself an
 * error naming `what` another rank could not do. */
static zero_status_t agree_status(run_t *r, zero_status_t st, const char *what) {
    double bad = st ? 1.0 : 0.0;
    zero_status_t a = sum_ranks(r, &bad, 1);
    if (st) return st;
    if (a) return a;
    if (bad > 0) return zero__error(ZERO_ERR_IO, "another rank could not %s", what);
    return ZERO_OK;
}

/* The position after `step` steps, for a checkpoint. */
static zero_train_position_t position_at(const run_t *r, const zero_train_position_t *start,
                                         int64_t step, uint64_t rng, double tokens) {
    zero_train_position_t p = *start;
    p.step = step;
    p.data_rng = rng;
    p.tokens = start->tokens + tokens;
    p.elapsed_s = r->elapsed_base + zero_time_now() - r->job->t_start;
    return p;
}

static zero_status_t engine_params(const run_t *r, zero_engine_params_t *ep) {
    *ep = zero_engine_params_default();
    ep->seed = (uint64_t)r->cfg->seed;
    ep->threads = r->job->threads;
    ep->comm = r->comm;
    return zero__train_config_engine_params(r->cfg, ep);
}

/* Every rank's report to rank 0 (*all: W reports there, NULL elsewhere). Thread ranks write
 * theirs into the job's shared array and meet at a barrier (whose release/acquire ordering
 * publishes the writes); an all-gather would give each of W thread ranks all W reports, W^2 x
 * 352 bytes in one process (1.5 GB at 2048 ranks). MPI ranks all-gather: W reports per
 * process. */
static zero_status_t gather_reports(run_t *r, const zero_train_rank_report_t *mine,
                                    zero_train_rank_report_t **all) {
    const size_t W = (size_t)r->world;
    const int shared = r->job->reports != NULL;
    *all = NULL;
    if ((r->rank == 0 || !shared) && !(*all = calloc(W, sizeof **all)))
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot gather %zu rank reports", W);
    zero_status_t st = ZERO_OK;
    if (!r->comm) {
        (*all)[0] = *mine;
    } else if (shared) {
        r->job->reports[r->rank] = *mine;
        st = zero_comm_barrier(r->comm);
        if (!st && r->rank == 0) memcpy(*all, r->job->reports, W * sizeof **all);
    } else {
        st = zero_comm_all_gather(mine, *all, sizeof *mine, ZERO_DTYPE_UINT8, r->comm);
    }
    if (st || r->rank != 0) {
        free(*all);
        *all = NULL;
    }
    return st;
}

/* Every rank writes its shard files into the temporary directory rank 0 makes in train.save_dir
 * (docs/checkpoint-format.md), so the ranks must share that directory: on nodes whose save_dir
 * is a local disk the first save would fail after a whole interval of training. Checked before
 * step 1: rank 0 creates a probe file named by a token it shares, every rank looks for it. */
static zero_status_t check_save_dir_shared(run_t *r) {
    const zero_train_config_t *cfg = r->cfg;
    if (!cfg->save_dir[0] || r->job->world == 1 || r->job->backend != ZERO_BACKEND_MPI)
        return ZERO_OK; /* thread ranks share one process's file system */
    /* below 2^53: exact in the double the sum carries */
    const uint64_t mine = ((uint64_t)getpid() << 32 ^ (uint64_t)(zero_time_now() * 1e6)) >> 11;
    double token = r->rank == 0 ? (double)mine : 0.0;
    zero_status_t st = sum_ranks(r, &token, 1);
    if (st) return st;
    char probe[ZERO_CONFIG_STR_MAX + 64];
    snprintf(probe, sizeof probe, "%s/.shared-probe-%.0f", cfg->save_dir, token);
    if (r->rank == 0) {
        int fd = open(probe, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
            st = zero__error(ZERO_ERR_IO, "train.save_dir: cannot create %s: %s", probe,
                             strerror(errno));
        else
            close(fd);
    }
    st = agree_status(r, st, "create a probe file in train.save_dir");
    if (st) return st;
    struct stat sb;
    if (r->rank != 0 && stat(probe, &sb) != 0)
        st = zero__error(ZERO_ERR_CONFIG,
                         "train.save_dir = \"%s\" is not the directory rank 0 writes: rank %d "
                         "does not see rank 0's probe file %s (expected a directory every rank "
                         "shares, such as a shared file system: each rank writes its shard files "
                         "into the checkpoint directory rank 0 creates; docs/multinode.md)",
                         cfg->save_dir, r->rank, probe);
    /* the others have looked once every rank has come back */
    zero_status_t agreed = agree_status(r, st,
                                        "see train.save_dir as rank 0 does (expected a "
                                        "directory every rank shares; docs/multinode.md)");
    if (r->rank == 0) unlink(probe);
    return agreed;
}

/* The dtype of the run's GEMMs, whose peak is the MFU's denominator: bf16 when its 16-bit GEMMs
 * run on bf16 operands (AMX, AVX512-BF16, oneDNN), fp32 otherwise (fp32 runs, fp16 and bf16
 * widening to the fp32 GEMM). */
static zero_dtype_t gemm_dtype(const zero_train_config_t *cfg) {
    const zero_dtype_t cdt = zero__train_config_compute_dtype(cfg);
    return cdt == ZERO_DTYPE_BF16 && strcmp(zero__matmul_lp_path(cdt), "widening")
               ? ZERO_DTYPE_BF16
               : ZERO_DTYPE_FP32;
}

/* The machine's figures for the MFU and the roofline: the run's matmul peak, of its GEMMs' dtype
 * (train.peak_gflops; else the calibration file's fp32 GEMM rate when the GEMMs are fp32, it was
 * measured with this run's threads and the run has one rank; else measured now, all ranks at
 * once, so that the sum is what the machine gives this run's layout; a bf16 run measures the
 * fp32 peak too, for the hardware's ratio) and the memory traffic rate (twice the rate of a 64
 * MiB copy on the rank's threads, measured now, ~0.05 s: the calibration file's memcpy is one
 * thread's). Leaves r->my_peak, r->memory_bytes_per_s and the report's peaks and sources. */
static zero_status_t machine_figures(run_t *r, zero_train_report_t *rep) {
    const job_t *job = r->job;
    const zero_train_io_t *io = job->io;
    const int W = job->world;
    const zero_dtype_t gdt = gemm_dtype(r->cfg);
    rep->peak_dtype = zero_dtype_name(gdt);
    if (r->cfg->peak_gflops > 0) {
        rep->peak_flops_per_s = r->cfg->peak_gflops * 1e9;
        r->my_peak = rep->peak_flops_per_s / W;
        rep->peak_source = "--peak";
    } else if (io->calibration_path && W == 1 && io->calibration_threads == job->threads &&
               io->calibration_gemm_flops > 0 && gdt == ZERO_DTYPE_FP32) {
        r->my_peak = rep->peak_flops_per_s = io->calibration_gemm_flops;
        rep->peak_source = "calibration";
    } else {
        double peaks[2] = {zero__matmul_peak_flops(gdt, job->threads), 0.0};
        if (gdt != ZERO_DTYPE_FP32)
            peaks[1] = zero__matmul_peak_flops(ZERO_DTYPE_FP32, job->threads);
        r->my_peak = peaks[0];
        zero_status_t st = sum_ranks(r, peaks, 2);
        if (st) return st;
        rep->peak_flops_per_s = peaks[0];
        rep->peak_fp32_flops_per_s = gdt == ZERO_DTYPE_FP32 ? peaks[0] : peaks[1];
        rep->peak_source = "measured";
    }
    r->memory_bytes_per_s = 2.0 * zero__memcpy_rate((size_t)64 << 20, 4, job->threads);
    rep->memory_bytes_per_s = r->memory_bytes_per_s;
    char from[1100], ratio[128] = "";
    if (!strcmp(rep->peak_source, "calibration"))
        snprintf(from, sizeof from, "from %s", io->calibration_path);
    else
        snprintf(from, sizeof from, "%s",
                 r->cfg->peak_gflops > 0 ? "given by --peak" : "measured at start-up");
    if (gdt != ZERO_DTYPE_FP32 && rep->peak_fp32_flops_per_s > 0)
        snprintf(ratio, sizeof ratio, "; fp32 %.1f GFLOP/s, so %s runs %.2fx fp32",
                 rep->peak_fp32_flops_per_s / 1e9, rep->peak_dtype,
                 rep->peak_flops_per_s / rep->peak_fp32_flops_per_s);
    say(r, "matmul peak: %.1f GFLOP/s %s over %d rank%s x %d thread%s (%s; %s)%s\n",
        rep->peak_flops_per_s / 1e9, rep->peak_dtype, W, W == 1 ? "" : "s", job->threads,
        job->threads == 1 ? "" : "s",
        gdt == ZERO_DTYPE_FP32 ? zero__matmul_library() : zero__matmul_lp_impl(gdt), from, ratio);
    say(r,
        "memory: %.1f GB/s read + written (a 64 MiB copy on %d thread%s, measured at start-up)\n",
        r->memory_bytes_per_s / 1e9, job->threads, job->threads == 1 ? "" : "s");
    return ZERO_OK;
}

/* Before step 1: output checks, engine, model, batch buffers, the start-up report, the
 * matmul peak, the resume point, the checkpoint and metrics checks and the first
 * evaluation. Leaves r->pos, r->ckpt_path, r->start and r->my_peak. */
static zero_status_t rank_setup(run_t *r, zero_train_report_t *rep) {
    job_t *job = r->job;
    const zero_train_config_t *cfg = r->cfg;
    const int rank = r->rank;
    const int B = cfg->micro_batch, T = cfg->model.seq, W = job->world;
    zero_status_t st = ZERO_OK;

    /* Every output path is checked before anything else (a bad one fails now, not after the
     * last step); the metrics log is opened once the resume point is known. */
    st = zero__train_outputs_check(cfg, job->io->report_path, job->io->metrics_path, rank);
    if (!st && rank == 0) st = zero__monitor_check(cfg);
    st = agree_status(r, st, "use the output paths");
    if (!st) st = check_save_dir_shared(r);
    if (st) return st;

    /* engine + model */
    zero_engine_params_t ep;
    st = engine_params(r, &ep);
    if (st) return st;
    const double t_init = zero_time_now();
    st = zero_engine_init(&r->eng, &ep);
    if (st) return st;
    /* expert parallelism: blocks of ep_size consecutive ranks exchange tokens */
    if (cfg->model.moe.experts > 0 && cfg->model.moe.ep_size > 1) {
        st = zero_comm_split(r->comm, rank / cfg->model.moe.ep_size, rank, &r->ep_comm);
        if (st) return st;
    }
    st = zero__gpt_init_ep(&r->gpt, &cfg->model, r->eng, B, cfg->checkpointing, job->threads,
                           r->ep_comm);
    if (st) return st;
    if (zero_time_now() - t_init > 1.0)
        say(r, "model allocated and initialised in %.1f s\n", zero_time_now() - t_init);
    r->x = malloc((size_t)B * T * sizeof *r->x);
    r->y = malloc((size_t)B * T * sizeof *r->y);
    if (!r->x || !r->y) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot allocate batch buffers");
        return st;
    }
    rep->params = zero_engine_param_count(r->eng);
    rep->threads = job->threads;
    rep->flops_per_token = zero__gpt_flops_per_token(&cfg->model);
    rep->activation_bytes = zero__gpt_activation_bytes(r->gpt);
    rep->fp8_state_bytes = zero__fp8_state_bytes(&cfg->model.fp8, cfg->model.layers);
    zero_mem_get_stats(zero_engine_mem(r->eng), &rep->mem);

    say(r, "zero train: GPT %d layers, %d heads, dim %d, vocab %d, seq %d: %.3fM parameters\n",
        cfg->model.layers, cfg->model.heads, cfg->model.dim, cfg->model.vocab, cfg->model.seq,
        (double)rep->params / 1e6);
    const zero_moe_config_t *moe = &cfg->model.moe;
    if (moe->experts > 0)
        say(r,
            "moe: %d experts, top-%d, every %d layers, hidden %zu, %d shared; capacity factor %g "
            "(eval %g, min %d%s); aux %g, z %g; %.3fM active parameters per token\n",
            moe->experts, moe->top_k, moe->every, zero__moe_hidden(moe, cfg->model.dim),
            moe->shared_experts, moe->capacity_factor, moe->eval_capacity_factor, moe->min_capacity,
            moe->drop_tokens ? "" : ", no dropping", (double)moe->aux_loss_coef,
            (double)moe->z_loss_coef, (double)zero__gpt_active_param_count(&cfg->model) / 1e6);
    const zero_fp8_config_t *f8 = &cfg->model.fp8;
    if (f8->enabled) {
        say(r, "fp8: the blocks' GEMM inputs X, W in e4m3, dY in %s; recipe %s",
            f8->hybrid ? "e5m2 (hybrid)" : "e4m3", zero__fp8_recipe_name(f8->recipe));
        if (f8->recipe == ZERO_FP8_DELAYED)
            say(r, " (margin %d, amax history %d steps, %.1f KiB of scaling state per rank)",
                f8->margin, f8->history_len, (double)rep->fp8_state_bytes / 1024.0);
        else
            say(r, " (1 x 128 tiles of X and dY, 128 x 128 blocks of W)");
        say(r, "; the GEMMs run on the dequantized %s values\n",
            zero_dtype_name(zero__train_config_compute_dtype(cfg)));
        if (f8->weight_gather)
            say(r,
                "fp8: weight gather: the blocks' linear weights on the E4M3 grid (a power-of-two "
                "scale per 128 elements), all-gathered at stage 3 as codes and scales\n");
    }
    const zero_dataset_t *data = &job->data;
    say(r,
        "data: %s (%s, %d file%s, %s), %zu tokens: %zu train, %zu validation%s%s%s; "
        "unigram entropy %.3f nats (ln vocab %.3f)\n",
        data->source, zero__data_format_name(data->format), data->shard_count,
        data->shard_count == 1 ? "" : "s",
        data->format == ZERO_DATA_TEXT_BPE ? "encoded in memory" : "mapped", data->count,
        data->train_count, data->count - data->train_count, data->val_given ? " from '" : "",
        data->val_given ? data->shards[data->shard_count - 1].path : "", data->val_given ? "'" : "",
        rep->unigram_entropy, rep->ln_vocab);
    say(r,
        "batch %d = %d x %d accumulation x %d ranks, of %d tokens; %d steps; lr %.2e (%s, "
        "warm-up %d)\n",
        cfg->train_batch_size, B, cfg->grad_accum, W, T, cfg->steps, (double)ep.lr, cfg->scheduler,
        cfg->warmup_steps);
    const char *wait = getenv("OMP_WAIT_POLICY");
    say(r,
        "ZeRO stage %d on %d rank%s (%s backend), %d compute thread%s per rank (OpenMP wait %s)\n",
        cfg->stage, W, W == 1 ? "" : "s", zero_backend_name(job->backend), job->threads,
        job->threads == 1 ? "" : "s", wait && *wait ? wait : "default");
    say(r,
        "memory (rank 0): params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB, activations "
        "%.1f MiB%s\n",
        rep->mem.live_bytes[ZERO_MEM_PARAMS] / 1048576.0,
        rep->mem.live_bytes[ZERO_MEM_GRADS] / 1048576.0,
        rep->mem.live_bytes[ZERO_MEM_OPTIM] / 1048576.0,
        rep->mem.live_bytes[ZERO_MEM_ACTIVATIONS] / 1048576.0,
        cfg->checkpointing ? " (checkpointing)" : "");
    if (job->io->measure_peak) {
        st = machine_figures(r, rep);
        if (st) return st;
    }

    /* Where the run starts: fresh, from a checkpoint, or from imported weights. Every rank
     * reads for itself; they agree on the outcome before the first collective of training. */
    r->pos = zero__train_position_fresh(cfg);
    if (cfg->resume[0])
        st = zero__train_ckpt_resume(cfg, r->eng, zero__gpt_fp8(r->gpt), rank, &r->pos,
                                     r->ckpt_path, sizeof r->ckpt_path);
    else if (cfg->init_from[0])
        st = zero__train_init_from(cfg, r->eng);
    double bad = st ? 1.0 : 0.0;
    zero_status_t agree = sum_ranks(r, &bad, 1);
    if (!st && agree) st = agree;
    if (!st && bad > 0)
        st = zero__error(ZERO_ERR_IO, "another rank could not %s",
                         cfg->resume[0] ? "resume from the checkpoint" : "import the weights");
    if (st) return st;
    if (cfg->resume[0] && !r->ckpt_path[0])
        say(r, "no checkpoint in %s yet: starting from step 0\n", cfg->save_dir);
    else if (cfg->resume[0])
        say(r, "resumed from %s at step %lld (optimizer step %lld)\n", r->ckpt_path,
            (long long)r->pos.step, (long long)zero_engine_step_count(r->eng));
    else if (cfg->init_from[0])
        say(r, "weights initialised from %s\n", cfg->init_from);
    r->start = (int)r->pos.step;
    if (r->ckpt_path[0]) {
        zero_loss_scaler_state_t lst;
        zero_loss_scaler_get_state(zero_engine_loss_scaler(r->eng), &lst);
        r->elapsed_base = r->pos.elapsed_s;
        r->skipped_base = lst.skipped_steps;
    }
    if (r->ckpt_path[0] && cfg->steps <= r->start && rank == 0) {
        zero__log(ZERO_LOG_WARN, -1, 0,
                  "train.steps = %d is not above the step of checkpoint %s, %d: nothing to "
                  "train (train.steps is the total to reach, not the steps to add); the run "
                  "evaluates the checkpoint's weights and reports 0 steps trained",
                  cfg->steps, r->ckpt_path, r->start);
        say(r, "nothing to train: train.steps = %d, the checkpoint is at step %d\n", cfg->steps,
            r->start);
    }
    /* Before step 1: the checkpoint the run will save is built and checked (a layout or
     * manifest error shows now, not after the last step), and the metrics log is opened,
     * keeping a resumed run's records up to its checkpoint. */
    if (cfg->save_dir[0])
        st = zero__train_ckpt_save_check(cfg, r->eng, zero__gpt_fp8(r->gpt), r->comm, &r->pos);
    if (!st && rank == 0 && job->io->metrics_path)
        st = zero__train_metrics_open(job->io->metrics_path, r->ckpt_path[0] ? r->pos.step : 0,
                                      &r->metrics);
    if (!st && rank == 0)
        st = zero__monitor_open(cfg, r->ckpt_path[0] ? samples_of(cfg, r->pos.tokens) : 0,
                                &r->monitor);
    st = agree_status(r, st, "prepare the checkpoint, the metrics log or the monitors");
    if (st) return st;

    st = evaluate(r, 0, &rep->init_val_loss);
    if (st) return st;
    say(r, "step %5d | val loss %.4f\n", r->start, (double)rep->init_val_loss);
    rep->final_val_loss = rep->init_val_loss;
    return ZERO_OK;
}

/* The steps from r->start: batches, engine step, signals, progress, evaluations, metrics
 * and checkpoints, then the last checkpoint and the metrics log closed. Leaves
 * r->train_s, r->end_step and r->stop_signal. */
static zero_status_t rank_loop(run_t *r, zero_train_report_t *rep) {
    job_t *job = r->job;
    const zero_train_config_t *cfg = r->cfg;
    const int rank = r->rank;
    const int B = cfg->micro_batch, T = cfg->model.seq, W = job->world;
    zero_status_t st = ZERO_OK;

    uint64_t rng = r->pos.data_rng;
    r->train_s = 0.0;
    r->step_count = 0;
    r->step_s = malloc((size_t)ZERO_MAX(cfg->steps - r->start, 1) * sizeof *r->step_s);
    if (!r->step_s) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot allocate the step times");
    double smooth = -1.0;
    const double tokens_per_step = (double)B * T * cfg->grad_accum * W;
    int64_t saved_step = r->ckpt_path[0] ? r->pos.step : -1; /* a checkpoint of this step exists */
    r->end_step = cfg->steps;
    r->stop_signal = 0;
    zero_online_tune_t tuner;
    zero__online_tune_init(&tuner, r->eng, cfg->tune_online ? cfg->tune_online_interval : 0);
    for (int step = r->start; step < cfg->steps; step++) {
        double t0 = zero_time_now();
        double loss_sum = 0.0, sums[STEP_SUM_COUNT] = {0};
        zero__gpt_moe_stats_reset(r->gpt);   /* the report shows the last step's routing */
        zero__gpt_moe_traffic_reset(r->gpt); /* and its all-to-all bytes */
        for (int micro = 0; micro < cfg->grad_accum; micro++) {
            zero__data_train_batch_shard(&job->data, &rng, B, T, rank, W, r->x, r->y);
            float l = 0.0f;
            st = zero__gpt_forward(r->gpt, r->x, r->y, B, T, &l);
            if (!st) st = zero__gpt_backward(r->gpt);
            if (st) return st;
            loss_sum += l;
        }
        zero__gpt_moe_traffic(r->gpt, &r->moe_a2a, &r->moe_a2a_theory);
        st = fp8_step(r);
        if (st) return st;
        zero_step_stats_t ss;
        st = zero_engine_step(r->eng, &ss);
        sums[STEP_LOSS] = loss_sum;
        step_requests(r, sums);
        if (!st) st = sum_ranks(r, sums, STEP_SUM_COUNT);
        if (!st) st = zero__train_replica_check(cfg, r->eng, step + 1, step + 1 == cfg->steps);
        if (st) return st;
        loss_sum = sums[STEP_LOSS];
        r->stop_signal = agreed_stop(sums);
        const int save_asked = sums[STEP_SAVE] > 0;
        r->skipped_steps += ss.skipped;
        rep->skipped_steps = r->skipped_steps;
        rep->loss_scale = zero_engine_loss_scale(r->eng);
        double step_s = zero_time_now() - t0;
        r->train_s += step_s;
        r->step_s[r->step_count++] = step_s;
        /* between steps: the next window's settings (the same on every rank) */
        if (job->io->tty && zero__online_tune_decides_next(&tuner)) say(r, "\r\033[K");
        st = zero__online_tune_step(&tuner, r->eng, r->comm, step + 1, step_s, r->out);
        if (st) return st;
        float loss = (float)(loss_sum / ((double)cfg->grad_accum * W));
        rep->last_step_loss = loss;
        smooth = smooth < 0 ? loss : 0.9 * smooth + 0.1 * loss;
        rep->tokens += tokens_per_step;
        double tok_s = rep->tokens / r->train_s;
        double eta = r->train_s / (step + 1 - r->start) * (cfg->steps - step - 1);
        int last = step + 1 == cfg->steps || r->stop_signal;
        if (job->io->tty || (step + 1) % cfg->steps_per_print == 0 || step == r->start || last ||
            ss.skipped)
            progress(r, step + 1, cfg->steps, loss, (float)smooth, tok_s, eta, &ss);
        float val = NAN;
        if ((cfg->eval_interval > 0 && (step + 1) % cfg->eval_interval == 0) || last) {
            st = evaluate(r, 0, &rep->final_val_loss);
            if (st) return st;
            val = rep->final_val_loss;
            if (job->io->tty) say(r, "\r\033[K");
            say(r, "step %5d | val loss %.4f | train loss (avg) %.4f | %.1fk tok/s\n", step + 1,
                (double)rep->final_val_loss, smooth, tok_s / 1e3);
        }
        const double mfu =
            rep->peak_flops_per_s > 0
                ? tokens_per_step / step_s * rep->flops_per_token / rep->peak_flops_per_s
                : NAN;
        st = step_outputs(r, step + 1, loss, &ss, r->pos.tokens + rep->tokens, tok_s, step_s,
                          tokens_per_step / step_s, mfu, val);
        if (job->io->metrics_path || cfg->tb_enabled || cfg->csv_enabled)
            st = agree_status(r, st, "write the metrics log or the monitors");
        if (st) return st;
        /* Periodic checkpoints, requested ones, and always one after the last step. */
        if (cfg->save_dir[0] &&
            ((cfg->save_every > 0 && (step + 1) % cfg->save_every == 0) || last || save_asked)) {
            zero_train_position_t now = position_at(r, &r->pos, step + 1, rng, rep->tokens);
            st = zero__train_ckpt_save(cfg, r->eng, zero__gpt_fp8(r->gpt), r->comm, &now,
                                       r->ckpt_path, sizeof r->ckpt_path);
            if (st) return st;
            saved_step = step + 1;
            if (job->io->tty) say(r, "\r\033[K");
            say(r, "step %5d | checkpoint saved to %s%s\n", step + 1, r->ckpt_path,
                save_asked ? " (requested)" : "");
        } else if (save_asked) {
            if (job->io->tty) say(r, "\r\033[K");
            say(r, "step %5d | checkpoint requested, but train.save_dir is not set: none saved\n",
                step + 1);
        }
        if (r->stop_signal) {
            r->end_step = step + 1;
            if (job->io->tty) say(r, "\r\033[K");
            say(r, "step %5d | stopped by %s (signal %d)%s\n", r->end_step,
                signal_name(r->stop_signal), r->stop_signal,
                cfg->save_dir[0] ? ": checkpoint saved" : ": no train.save_dir, no checkpoint");
            break;
        }
    }
    /* A run that took no step still leaves a checkpoint, unless it resumed from one (which holds
     * this very state already). */
    if (!r->stop_signal && cfg->save_dir[0] &&
        saved_step != (int64_t)ZERO_MAX(r->start, cfg->steps)) {
        zero_train_position_t now =
            position_at(r, &r->pos, ZERO_MAX(r->start, cfg->steps), rng, rep->tokens);
        st = zero__train_ckpt_save(cfg, r->eng, zero__gpt_fp8(r->gpt), r->comm, &now, r->ckpt_path,
                                   sizeof r->ckpt_path);
        if (st) return st;
        say(r, "checkpoint saved to %s\n", r->ckpt_path);
    }
    if (r->metrics) {
        st = zero__train_metrics_flush(r->metrics, job->io->metrics_path, 1);
        r->metrics = NULL;
    }
    if (r->monitor) {
        zero_status_t m = zero__monitor_close(r->monitor);
        r->monitor = NULL;
        if (!st) st = m;
    }
    if (job->io->metrics_path || cfg->tb_enabled || cfg->csv_enabled)
        st = agree_status(r, st, "close the metrics log or the monitors");
    return st;
}

/* The last step's routing statistics summed over the ranks (collective: every rank calls it)
 * into rep->moe_stats; nothing for a dense model, nor when this invocation trained no step (an
 * evaluation or sampling run, --steps 0 or a resume at its last step: every figure would be 0;
 * the report says so instead). Every rank has the same rep->steps. */
static zero_status_t moe_stats(run_t *r, zero_train_report_t *rep) {
    size_t n = zero__gpt_moe_stats(r->gpt, NULL);
    if (n == 0 || rep->steps == 0) return ZERO_OK;
    rep->moe_stats = malloc(n * sizeof *rep->moe_stats);
    if (!rep->moe_stats) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "moe statistics");
    rep->moe_stats_count = n;
    zero__gpt_moe_stats(r->gpt, rep->moe_stats);
    return sum_ranks(r, rep->moe_stats, n);
}

/* One line per MoE layer: tokens per expert, drops, mean aux and z losses of the last step; one
 * line saying there is none when no step was trained. */
static void print_moe(const run_t *r, const zero_train_report_t *rep) {
    const zero_moe_config_t *m = &r->cfg->model.moe;
    const size_t E = (size_t)m->experts, w = ZERO_GPT_MOE_STATS(E);
    size_t i = 0;
    if (E > 0 && rep->steps == 0) say(r, "report: moe routing: no training step in this run\n");
    for (int l = 0; l < r->cfg->model.layers && rep->moe_stats; l++) {
        if (!zero__moe_is_layer(m, l)) continue;
        const double *v = rep->moe_stats + i++ * w;
        const double choices = v[E + ZERO_GPT_MOE_CHOICES], fw = v[E + ZERO_GPT_MOE_FORWARDS];
        say(r, "report: moe block.%d tokens per expert (last step, all ranks):", l);
        for (size_t e = 0; e < E; e++) say(r, " %.0f", v[e]);
        say(r, "; dropped %.0f of %.0f (%.2f%%); aux %.4f, z %.4f\n", v[E + ZERO_GPT_MOE_DROPPED],
            choices, choices > 0 ? 100.0 * v[E + ZERO_GPT_MOE_DROPPED] / choices : 0.0,
            fw > 0 ? v[E + ZERO_GPT_MOE_AUX] / fw : 0.0, fw > 0 ? v[E + ZERO_GPT_MOE_Z] / fw : 0.0);
    }
}

/* After training: final evaluation, samples, fingerprint, every rank's report gathered on
 * rank 0 (rep->ranks) and the closing report. */
static zero_status_t rank_finish(run_t *r, zero_train_report_t *rep) {
    job_t *job = r->job;
    const zero_train_config_t *cfg = r->cfg;
    const int rank = r->rank;
    zero_train_rank_report_t *all = NULL;
    zero_status_t st = ZERO_OK;

    rep->steps = ZERO_MAX(r->end_step - r->start, 0); /* trained by this invocation */
    rep->stop_signal = r->stop_signal;
    rep->start_step = r->start;
    rep->train_s = r->train_s;
    st = moe_stats(r, rep);
    if (!st) st = evaluate(r, 1, &rep->final_train_loss);
    if (st) goto done;
    rep->tokens_per_s = r->train_s > 0 ? rep->tokens / r->train_s : 0.0;
    rep->flops_per_s = rep->tokens_per_s * rep->flops_per_token;
    rep->mfu = rep->peak_flops_per_s > 0 ? rep->flops_per_s / rep->peak_flops_per_s : 0.0;
    if (r->my_peak > 0 && r->step_count > 0) {
        /* the first two steps warm caches and pages up (as bench_e2e.sh skips them) */
        const int warm = r->step_count > 2 ? 2 : 0;
        rep->median_step_s = zero__train_median(r->step_s + warm, (size_t)(r->step_count - warm));
        const size_t params = zero_engine_param_count(r->eng);
        const size_t shard = cfg->stage == 0 ? params : (params + job->world - 1) / job->world;
        zero__train_roofline(
            &cfg->model, (double)cfg->micro_batch * cfg->model.seq * cfg->grad_accum, params, shard,
            job->world, zero_dtype_size(zero__train_config_compute_dtype(cfg)), r->my_peak,
            r->memory_bytes_per_s, &rep->roofline);
        rep->roofline_ratio =
            rep->roofline.total_s > 0 ? rep->median_step_s / rep->roofline.total_s : 0.0;
    }

    if (!r->stop_signal) st = samples(r); /* a stopping run leaves promptly */
    if (!st) st = zero_engine_check(r->eng);
    if (!st) st = zero_engine_fingerprint(r->eng, &rep->weights_fingerprint);
    if (st) goto done;
    zero_mem_get_stats(zero_engine_mem(r->eng), &rep->mem);

    /* Gather every rank's figures on every rank (a fixed-size struct as bytes). */
    zero_train_rank_report_t mine;
    rank_report(r, &mine);
    mine.peak_flops_per_s = r->my_peak;
    mine.fp8_state_hash = fp8_state_hash(zero__gpt_fp8(r->gpt));
    st = gather_reports(r, &mine, &all);
    if (st) goto done;
    rep->elapsed_s = zero_time_now() - job->t_start;

    say(r, "report: train loss %.4f, val loss %.4f (start %.4f, unigram %.4f, ln V %.4f)\n",
        (double)rep->final_train_loss, (double)rep->final_val_loss, (double)rep->init_val_loss,
        rep->unigram_entropy, rep->ln_vocab);
    say(r, "report: %.0f tokens in %.1f s: %.1fk tok/s, %.2f GFLOP/s", rep->tokens, rep->train_s,
        rep->tokens_per_s / 1e3, rep->flops_per_s / 1e9);
    if (rep->peak_flops_per_s > 0)
        say(r, " = %.1f%% of the %.1f GFLOP/s %s matmul peak (MFU)%s", 100.0 * rep->mfu,
            rep->peak_flops_per_s / 1e9, rep->peak_dtype,
            rep->mfu <= 1.0                       ? ""
            : !strcmp(rep->peak_source, "--peak") ? "; above 100%: --peak is below this machine's"
                                                  : "; above 100%: the peak was measured while "
                                                    "other work ran");
    say(r, "\n");
    if (rep->roofline.total_s > 0)
        say(r,
            "report: roofline %.1f ms/step (GEMMs %.1f ms at %.1f GFLOP/s %s + memory passes %.1f "
            "ms, %.1f MiB at %.1f GB/s); median step %.1f ms = %.2fx the roofline\n",
            1e3 * rep->roofline.total_s, 1e3 * rep->roofline.gemm_s, r->my_peak / 1e9,
            rep->peak_dtype, 1e3 * rep->roofline.memory_s,
            (rep->roofline.activation_bytes + rep->roofline.parameter_bytes) / 1048576.0,
            r->memory_bytes_per_s / 1e9, 1e3 * rep->median_step_s, rep->roofline_ratio);
    if (rank == 0) print_tables(r, all);
    print_moe(r, rep);
    if (r->stop_signal)
        say(r, "report: stopped early by %s (signal %d) after step %d of %d\n",
            signal_name(r->stop_signal), r->stop_signal, r->end_step, cfg->steps);
    say(r, "report: weights fingerprint %016llx; %.1f s in all\n",
        (unsigned long long)rep->weights_fingerprint, rep->elapsed_s);
    if (rank == 0) {
        rep->ranks = all;
        all = NULL;
    }
done:
    free(all);
    return st;
}

/* The whole run of one rank. rep is filled on every rank; rep->ranks only on rank 0. */
static zero_status_t rank_main(job_t *job, int rank, zero_comm_t *comm, zero_train_report_t *rep) {
    const zero_train_config_t *cfg = job->cfg;
    run_t r;
    memset(&r, 0, sizeof r);
    r.job = job;
    r.cfg = cfg;
    r.rank = rank;
    r.world = job->world;
    r.comm = comm;
    r.out = rank == 0 ? job->io->out : NULL;
    memset(rep, 0, sizeof *rep);
    rep->rank = rank;
    rep->world = job->world;
    rep->stage = cfg->stage;
    rep->backend = zero_backend_name(job->backend);
    rep->unigram_entropy = job->unigram_entropy;
    rep->ln_vocab = job->ln_vocab;
    zero_status_t st = rank_setup(&r, rep);
    if (!st) st = rank_loop(&r, rep);
    if (!st) st = rank_finish(&r, rep);
    if (r.metrics) fclose(r.metrics);
    free(r.x);
    free(r.y);
    free(r.step_s);
    zero__gpt_free(r.gpt);
    zero_comm_free(r.ep_comm);
    zero_engine_free(r.eng);
    if (st) zero__train_report_free(rep);
    return st;
}

void zero__train_report_free(zero_train_report_t *rep) {
    if (!rep) return;
    free(rep->ranks);
    rep->ranks = NULL;
    free(rep->moe_stats);
    rep->moe_stats = NULL;
    rep->moe_stats_count = 0;
}

/* Which backend a config runs on; ZERO_ERR_UNSUPPORTED for MPI in a build without it. */
static zero_status_t choose_backend(const zero_train_config_t *cfg, zero_backend_t *out) {
    if (!strcmp(cfg->backend, "threads")) {
        *out = ZERO_BACKEND_THREADS;
    } else if (!strcmp(cfg->backend, "mpi")) {
        if (!zero_comm_mpi_available())
            return zero__error(ZERO_ERR_UNSUPPORTED,
                               "train.backend = \"mpi\" but this build has no MPI backend "
                               "(expected \"threads\", or rebuild with Open MPI)");
        *out = ZERO_BACKEND_MPI;
    } else {
        *out = zero_comm_mpi_available() && zero_comm_mpi_launched() ? ZERO_BACKEND_MPI
                                                                     : ZERO_BACKEND_THREADS;
    }
    return ZERO_OK;
}

int zero__train_world_size(const zero_train_config_t *cfg) {
    zero_backend_t b = ZERO_BACKEND_THREADS;
    if (choose_backend(cfg, &b) || b == ZERO_BACKEND_THREADS) return cfg->ranks;
    /* Before MPI_Init: the launcher's environment (comm/launch.c). */
    int n = zero__launch_size();
    return n > 0 ? n : 1;
}

/* Ranks of the job on this machine: all of them, or the launcher's local count. */
static int local_ranks(zero_backend_t b, int world) {
    int local = b == ZERO_BACKEND_MPI ? zero__launch_local_size() : 0;
    return local > 0 ? local : world;
}

/* train.threads, or (0) the machine's cores shared out among its ranks, at least 1. */
static int threads_per_rank(const zero_train_config_t *cfg, zero_backend_t b, int world) {
    if (cfg->threads > 0) return cfg->threads;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cores > 0 ? (int)(cores / local_ranks(b, world)) : 1;
    return threads < 1 ? 1 : threads;
}

/* The process that prints before the ranks exist: the only one, or MPI's rank 0. */
static int first_process(zero_backend_t b) {
    return b != ZERO_BACKEND_MPI || zero__launch_rank() <= 0;
}

int zero__train_machine_threads(const zero_train_config_t *cfg) {
    zero_backend_t b = ZERO_BACKEND_THREADS;
    if (choose_backend(cfg, &b)) b = ZERO_BACKEND_THREADS; /* the run itself reports it */
    int world = zero__train_world_size(cfg);
    /* swap files on NVMe: each rank's aio threads too (they checksum every page they move) */
    int nvme = !strcmp(cfg->offload_optimizer, "nvme") || !strcmp(cfg->offload_param, "nvme");
    return local_ranks(b, world) *
           (threads_per_rank(cfg, b, world) + (nvme ? cfg->aio_threads : 0));
}

typedef struct rank_thread {
    job_t *job;
    int rank;
    zero_comm_t *comm;
    zero_train_report_t rep;
    zero_status_t st;
    char err[1024];
    pthread_t tid;
} rank_thread_t;

static void *rank_thread_main(void *p) {
    rank_thread_t *t = p;
    t->st = rank_main(t->job, t->rank, t->comm, &t->rep);
    if (t->st) snprintf(t->err, sizeof t->err, "%s", zero_last_error());
    return NULL;
}

/* Ranks as threads: rank 0 on the calling thread (it owns the output), the others on new ones. */
static zero_status_t run_threads(job_t *job, zero_train_report_t *rep) {
    const int n = job->world;
    if (n == 1) return rank_main(job, 0, NULL, rep);
    zero_comm_t **comms = calloc((size_t)n, sizeof *comms);
    rank_thread_t *t = calloc((size_t)n, sizeof *t);
    job->reports = calloc((size_t)n, sizeof *job->reports);
    if (!comms || !t || !job->reports) {
        free(comms);
        free(t);
        free(job->reports);
        job->reports = NULL;
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot set up %d ranks", n);
    }
    int started = 1;
    zero_comm_params_t cp = zero_comm_params_default();
    cp.timeout_s = job->cfg->timeout_s;
    cp.ranks_per_node = job->cfg->ranks_per_node;
    zero_status_t st = zero_comm_threads_init_all(n, comms, &cp);
    if (st) goto done;
    for (int k = 0; k < n; k++) {
        t[k].job = job;
        t[k].rank = k;
        t[k].comm = comms[k];
    }
    for (int k = 1; k < n; k++) {
        if (pthread_create(&t[k].tid, NULL, rank_thread_main, &t[k]) != 0) {
            /* The started ranks would wait for this one until the collective timeout: fail them
             * fast is not possible from here, so report after they give up. */
            t[k].st = zero__error(ZERO_ERR_INTERNAL, "cannot start the thread of rank %d", k);
            snprintf(t[k].err, sizeof t[k].err, "%s", zero_last_error());
            break;
        }
        started++;
    }
    rank_thread_main(&t[0]);
    for (int k = 1; k < started; k++) pthread_join(t[k].tid, NULL);
    st = ZERO_OK;
    for (int k = 0; k < n && !st; k++)
        if (t[k].st) st = zero__error(t[k].st, "rank %d: %s", k, t[k].err);
    if (!st)
        *rep = t[0].rep;
    else
        zero__train_report_free(&t[0].rep);
    for (int k = 1; k < n; k++) zero__train_report_free(&t[k].rep);
done:
    for (int k = 0; k < n; k++) zero_comm_free(comms[k]);
    free(comms);
    free(t);
    free(job->reports);
    job->reports = NULL;
    return st;
}

/* On failure with more than one rank, MPI is left initialised: finalizing waits for every rank,
 * forever if one hangs (a stopped process), so the caller aborts the job instead
 * (zero_comm_mpi_abort) once it has printed the error. */
static zero_status_t run_mpi(job_t *job, zero_train_report_t *rep) {
    zero_comm_t *comm = NULL;
    zero_comm_params_t cp = zero_comm_params_default();
    cp.timeout_s = job->cfg->timeout_s;
    zero_status_t st = zero_comm_mpi_init(&comm, &cp);
    if (st) return st;
    int world = zero_comm_size(comm), rank = zero_comm_rank(comm);
    if (zero__train_config_is_set(job->cfg, "train.ranks_per_node")) {
        st = zero__error(ZERO_ERR_CONFIG,
                         "train.ranks_per_node = %d is for the threads backend: under MPI the "
                         "nodes are the MPI library's (ranks on one machine share a node); leave "
                         "it out",
                         job->cfg->ranks_per_node);
    } else if (zero__train_config_is_set(job->cfg, "train.ranks") && job->cfg->ranks != world) {
        st = zero__error(ZERO_ERR_CONFIG,
                         "train.ranks = %d but the MPI job has %d ranks (expected the same, or "
                         "no --ranks under mpirun)",
                         job->cfg->ranks, world);
    } else if (world != job->world) {
        /* The launcher's environment disagreed with MPI: re-resolve the batch sizes. */
        job->world = world;
        st = zero__train_config_check(job->cfg, world);
    }
    if (!st) st = zero__train_agree(job->cfg, &job->data, comm);
    if (!st) st = rank_main(job, rank, comm, rep);
    zero_comm_free(comm);
    if (!st || world == 1) zero_comm_mpi_finalize();
    return st;
}

zero_status_t zero__train_data_vocab(zero_train_config_t *cfg) {
    if (zero__train_config_is_set(cfg, "model.vocab")) return ZERO_OK;
    int vocab = 0;
    zero_status_t st = ZERO_OK;
    if (cfg->tokenizer[0]) {
        zero_tokenizer_t *tok;
        st = zero_tokenizer_init(&tok, cfg->tokenizer);
        if (!st) vocab = zero_tokenizer_vocab(tok);
        zero_tokenizer_free(tok);
    } else if (cfg->data_path[0]) {
        st = zero__data_dir_vocab(cfg->data_path, &vocab);
    }
    if (st || vocab == 0) return st;
    char value[32];
    snprintf(value, sizeof value, "%d", vocab);
    return zero__train_config_set(cfg, "model.vocab", value); /* checks the key's range */
}

zero_status_t zero__train_run(zero_train_config_t *cfg, const zero_train_io_t *io_in,
                              zero_train_report_t *rep_out) {
    static const zero_train_io_t io_default = {.measure_peak = 1};
    job_t job;
    memset(&job, 0, sizeof job);
    job.t_start = zero_time_now();
    job.cfg = cfg;
    job.io = io_in ? io_in : &io_default;
    zero_train_report_t rep;
    memset(&rep, 0, sizeof rep);

    zero_status_t st = choose_backend(cfg, &job.backend);
    if (st) return st;
    st = zero__train_data_vocab(cfg);
    if (st) return st;
    job.world = zero__train_world_size(cfg);
    st = zero__train_config_check(cfg, job.world);
    if (st) return st;
    if (job.backend == ZERO_BACKEND_MPI && !zero__train_config_is_set(cfg, "train.ranks"))
        cfg->ranks = job.world;
    job.threads = threads_per_rank(cfg, job.backend, job.world);
    const int T = cfg->model.seq;
    st = zero__train_memory_check(cfg, job.world, local_ranks(job.backend, job.world), job.threads,
                                  job.backend == ZERO_BACKEND_MPI,
                                  first_process(job.backend) ? job.io->out : NULL);
    if (st) return st;

    /* data: opened once per process (and encoded, given a tokenizer), shared read-only by the
     * rank threads */
    if (cfg->tokenizer[0]) {
        st = zero_tokenizer_init(&job.tok, cfg->tokenizer);
        if (!st && cfg->model.vocab < zero_tokenizer_vocab(job.tok))
            st = zero__error(ZERO_ERR_CONFIG,
                             "model.vocab = %d is smaller than the %d tokens of data.tokenizer "
                             "'%s' (expected at least %d, or leave model.vocab unset)",
                             cfg->model.vocab, zero_tokenizer_vocab(job.tok), cfg->tokenizer,
                             zero_tokenizer_vocab(job.tok));
        if (st) goto done;
    }
    if (cfg->data_path[0])
        st = zero__data_open_tokenized(&job.data, cfg->data_path, cfg->val_path, cfg->model.vocab,
                                       job.tok);
    else if (cfg->val_path[0])
        st = zero__error(ZERO_ERR_CONFIG,
                         "data.val_path = '%s' without data.path (expected training data too: "
                         "the built-in corpus holds out its own validation tail)",
                         cfg->val_path);
    else if (job.tok)
        st = zero__error(ZERO_ERR_CONFIG,
                         "data.tokenizer = '%s' without data.path (expected a text file to "
                         "encode: the built-in corpus is byte-level)",
                         cfg->tokenizer);
    else if (cfg->model.vocab < 256)
        st = zero__error(ZERO_ERR_CONFIG,
                         "the built-in corpus is byte-level text: model.vocab = %d is too small "
                         "(expected >= 256)",
                         cfg->model.vocab);
    else
        st = zero__data_builtin(&job.data, (size_t)cfg->builtin_bytes, (uint64_t)cfg->seed);
    if (st) goto done;
    if (job.data.val_given && zero__train_config_is_set(cfg, "data.val_fraction") &&
        first_process(job.backend))
        zero__log(ZERO_LOG_WARN, -1, 0,
                  "data.val_fraction = %g does not apply: the validation data is given apart "
                  "('%s')",
                  (double)cfg->val_fraction, job.data.shards[job.data.shard_count - 1].path);
    st = zero__data_split(&job.data, cfg->val_fraction, T);
    if (st) goto done;
    job.data.sequential = !strcmp(cfg->data_order, "sequential");
    job.unigram_entropy =
        zero__data_unigram_entropy(&job.data, job.data.train_count, job.data.count);
    job.ln_vocab = log((double)cfg->model.vocab);

    st = job.backend == ZERO_BACKEND_MPI ? run_mpi(&job, &rep) : run_threads(&job, &rep);
done:
    zero__data_free(&job.data);
    zero_tokenizer_free(job.tok);
    if (!st && rep_out)
        *rep_out = rep;
    else
        zero__train_report_free(&rep);
    return st;
}

static void add_categories(cJSON *parent, const char *name, const uint64_t *bytes) {
    cJSON *o = cJSON_AddObjectToObject(parent, name);
    for (int c = 0; o && c < ZERO_MEM_CATEGORY_COUNT; c++)
        cJSON_AddNumberToObject(o, zero_mem_category_name((zero_mem_category_t)c),
                                (double)bytes[c]);
}

/* "moe": per MoE layer the last step's routing over all ranks (print_moe's figures). */
static void add_moe_json(cJSON *root, const zero_train_report_t *rep,
                         const zero_train_config_t *cfg) {
    const zero_moe_config_t *m = &cfg->model.moe;
    if (!rep->moe_stats) return;
    const size_t E = (size_t)m->experts, w = ZERO_GPT_MOE_STATS(E);
    cJSON *arr = cJSON_AddArrayToObject(root, "moe");
    size_t i = 0;
    for (int l = 0; arr && l < cfg->model.layers; l++) {
        if (!zero__moe_is_layer(m, l)) continue;
        const double *v = rep->moe_stats + i++ * w, fw = v[E + ZERO_GPT_MOE_FORWARDS];
        cJSON *o = cJSON_CreateObject();
        if (!o) return;
        cJSON_AddItemToArray(arr, o);
        cJSON_AddNumberToObject(o, "layer", l);
        cJSON_AddItemToObject(o, "tokens_per_expert", cJSON_CreateDoubleArray(v, (int)E));
        cJSON_AddNumberToObject(o, "dropped", v[E + ZERO_GPT_MOE_DROPPED]);
        cJSON_AddNumberToObject(o, "choices", v[E + ZERO_GPT_MOE_CHOICES]);
        cJSON_AddNumberToObject(o, "aux_loss", fw > 0 ? v[E + ZERO_GPT_MOE_AUX] / fw : 0.0);
        cJSON_AddNumberToObject(o, "z_loss", fw > 0 ? v[E + ZERO_GPT_MOE_Z] / fw : 0.0);
    }
}

zero_status_t zero__train_report_write(const zero_train_report_t *rep,
                                       const zero_train_config_t *cfg, const char *path) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "report: out of memory");
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)rep->weights_fingerprint);
    cJSON_AddStringToObject(root, "weights_fingerprint", hex);
    cJSON_AddNumberToObject(root, "stage", rep->stage);
    cJSON_AddNumberToObject(root, "world_size", rep->world);
    cJSON_AddStringToObject(root, "backend", rep->backend ? rep->backend : "threads");
    cJSON_AddNumberToObject(root, "tokens_per_s", rep->tokens_per_s);
    cJSON_AddNumberToObject(root, "flops_per_s", rep->flops_per_s);
    cJSON_AddNumberToObject(root, "flops_per_token", rep->flops_per_token);
    cJSON_AddNumberToObject(root, "matmul_peak_flops_per_s", rep->peak_flops_per_s);
    cJSON_AddNumberToObject(root, "mfu", rep->mfu);
    cJSON_AddStringToObject(root, "matmul_peak_source",
                            rep->peak_source ? rep->peak_source : "none");
    cJSON_AddStringToObject(root, "matmul_peak_dtype", rep->peak_dtype ? rep->peak_dtype : "none");
    cJSON_AddNumberToObject(root, "matmul_peak_fp32_flops_per_s", rep->peak_fp32_flops_per_s);
    cJSON_AddNumberToObject(root, "memory_bytes_per_s", rep->memory_bytes_per_s);
    cJSON_AddNumberToObject(root, "median_step_s", rep->median_step_s);
    cJSON_AddNumberToObject(root, "roofline_step_s", rep->roofline.total_s);
    cJSON_AddNumberToObject(root, "roofline_gemm_s", rep->roofline.gemm_s);
    cJSON_AddNumberToObject(root, "roofline_memory_s", rep->roofline.memory_s);
    cJSON_AddNumberToObject(root, "roofline_gemm_flops", rep->roofline.gemm_flops);
    cJSON_AddNumberToObject(root, "roofline_activation_bytes", rep->roofline.activation_bytes);
    cJSON_AddNumberToObject(root, "roofline_parameter_bytes", rep->roofline.parameter_bytes);
    cJSON_AddNumberToObject(root, "roofline_ratio", rep->roofline_ratio);
    cJSON_AddNumberToObject(root, "final_train_loss", rep->final_train_loss);
    cJSON_AddNumberToObject(root, "final_val_loss", rep->final_val_loss);
    cJSON_AddNumberToObject(root, "initial_val_loss", rep->init_val_loss);
    cJSON_AddNumberToObject(root, "last_step_loss", rep->last_step_loss);
    cJSON_AddNumberToObject(root, "unigram_entropy", rep->unigram_entropy);
    cJSON_AddNumberToObject(root, "ln_vocab", rep->ln_vocab);
    cJSON_AddNumberToObject(root, "params", (double)rep->params);
    cJSON_AddNumberToObject(root, "active_params",
                            (double)zero__gpt_active_param_count(&cfg->model));
    add_moe_json(root, rep, cfg);
    cJSON_AddNumberToObject(root, "steps", rep->steps);
    cJSON_AddNumberToObject(root, "start_step", rep->start_step);
    cJSON_AddNumberToObject(root, "stop_signal", rep->stop_signal);
    cJSON_AddNumberToObject(root, "tokens", rep->tokens);
    cJSON_AddNumberToObject(root, "train_s", rep->train_s);
    cJSON_AddNumberToObject(root, "elapsed_s", rep->elapsed_s);
    cJSON_AddNumberToObject(root, "threads", rep->threads);
    cJSON_AddNumberToObject(root, "ranks", rep->world);
    cJSON_AddNumberToObject(root, "zero_stage", rep->stage);
    cJSON_AddStringToObject(root, "matmul_library", zero__matmul_library());
    const zero_dtype_t cdt = zero__train_config_compute_dtype(cfg);
    cJSON_AddStringToObject(root, "compute_dtype", zero_dtype_name(cdt));
    cJSON_AddStringToObject(root, "optim_state_dtype",
                            zero_dtype_name(zero__train_config_state_dtype(cfg)));
    /* the 16-bit GEMMs' path (kernels_lp.h), "fp32" for an fp32 run */
    cJSON_AddStringToObject(root, "matmul_path",
                            cdt == ZERO_DTYPE_FP32 ? "fp32" : zero__matmul_lp_path(cdt));
    cJSON_AddStringToObject(root, "grad_accum_dtype",
                            zero_dtype_name(zero__train_config_accum_dtype(cfg)));
    cJSON_AddNumberToObject(root, "loss_scale", rep->loss_scale);
    cJSON_AddNumberToObject(root, "skipped_steps", (double)rep->skipped_steps);
    cJSON *mem = cJSON_AddObjectToObject(root, "memory_peak_bytes");
    for (int c = 0; mem && c < ZERO_MEM_CATEGORY_COUNT; c++)
        cJSON_AddNumberToObject(mem, zero_mem_category_name((zero_mem_category_t)c),
                                (double)rep->mem.peak_bytes[c]);
    if (mem) cJSON_AddNumberToObject(mem, "total", (double)rep->mem.peak_total_bytes);
    cJSON *per = cJSON_AddArrayToObject(root, "per_rank");
    for (int k = 0; per && rep->ranks && k < rep->world; k++) {
        const zero_train_rank_report_t *rr = &rep->ranks[k];
        cJSON *o = cJSON_CreateObject();
        if (!o) break;
        cJSON_AddItemToArray(per, o);
        cJSON_AddNumberToObject(o, "rank", rr->rank);
        add_categories(o, "memory_bytes", rr->memory_bytes);
        add_categories(o, "memory_peak_bytes", rr->memory_peak_bytes);
        add_categories(o, "memory_theory_bytes", rr->memory_theory_bytes);
        cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)rr->peak_rss_bytes);
        cJSON_AddNumberToObject(o, "comm_bytes_per_step", (double)rr->comm_bytes_per_step);
        cJSON_AddNumberToObject(o, "comm_theory_bytes_per_step",
                                (double)rr->comm_theory_bytes_per_step);
        cJSON_AddNumberToObject(o, "comm_inter_node_bytes_per_step",
                                (double)rr->comm_inter_node_bytes_per_step);
        cJSON_AddNumberToObject(o, "comm_inter_node_theory_bytes_per_step",
                                (double)rr->comm_inter_node_theory_bytes_per_step);
        cJSON *bc = cJSON_AddObjectToObject(o, "comm_sent_bytes_per_step_by_collective");
        for (int c = 0; bc && c < ZERO_COLL_COUNT; c++)
            cJSON_AddNumberToObject(bc, zero_coll_name((zero_coll_t)c),
                                    (double)rr->comm_sent_bytes_per_step_by_coll[c]);
        cJSON *bk = cJSON_AddObjectToObject(o, "comm_sent_bytes_per_step_by_kind");
        cJSON *tk = cJSON_AddObjectToObject(o, "comm_theory_bytes_per_step_by_kind");
        for (int x = 0; bk && tk && x < ZERO_XFER_KIND_COUNT; x++) {
            const char *name = zero_xfer_kind_name((zero_xfer_kind_t)x);
            cJSON_AddNumberToObject(bk, name, (double)rr->comm_sent_bytes_per_step_by_kind[x]);
            cJSON_AddNumberToObject(tk, name, (double)rr->comm_theory_bytes_per_step_by_kind[x]);
        }
        cJSON_AddNumberToObject(o, "padded_params", (double)rr->padded_params);
        char f8hex[17];
        snprintf(f8hex, sizeof f8hex, "%016llx", (unsigned long long)rr->fp8_state_hash);
        cJSON_AddStringToObject(o, "fp8_state_hash", f8hex);
        cJSON_AddNumberToObject(o, "swap_disk_bytes", (double)rr->swap_disk_bytes);
        cJSON_AddNumberToObject(o, "swap_read_bytes_per_step",
                                (double)rr->swap_read_bytes_per_step);
        cJSON_AddNumberToObject(o, "swap_written_bytes_per_step",
                                (double)rr->swap_written_bytes_per_step);
        cJSON_AddNumberToObject(o, "swap_wait_s_per_step", rr->swap_wait_s_per_step);
        cJSON_AddNumberToObject(o, "moe_a2a_bytes_per_step", (double)rr->moe_a2a_bytes_per_step);
        cJSON_AddNumberToObject(o, "moe_a2a_theory_bytes_per_step",
                                (double)rr->moe_a2a_theory_bytes_per_step);
        /* The paper's breakdown of model states, measured and theory, transient pools apart. */
        static const char *const ms_names[3] = {"parameters", "gradients", "optimizer_states"};
        cJSON *ms = cJSON_AddObjectToObject(o, "model_state_bytes");
        cJSON *mt = cJSON_AddObjectToObject(o, "model_state_theory_bytes");
        double ms_total = 0, mt_total = 0;
        for (int i = 0; i < 3; i++) {
            if (ms) cJSON_AddNumberToObject(ms, ms_names[i], (double)rr->model_state_bytes[i]);
            if (mt)
                cJSON_AddNumberToObject(mt, ms_names[i], (double)rr->model_state_theory_bytes[i]);
            ms_total += (double)rr->model_state_bytes[i];
            mt_total += (double)rr->model_state_theory_bytes[i];
        }
        if (ms) cJSON_AddNumberToObject(ms, "total", ms_total);
        if (mt) cJSON_AddNumberToObject(mt, "total", mt_total);
        /* the same split into dense (world) and expert (stacked) units */
        static const char *const kind_names[2] = {"dense", "expert"};
        for (int kind = 0; kind < 2; kind++) {
            char key[64];
            snprintf(key, sizeof key, "model_state_%s_bytes", kind_names[kind]);
            cJSON *ks = cJSON_AddObjectToObject(o, key);
            snprintf(key, sizeof key, "model_state_%s_theory_bytes", kind_names[kind]);
            cJSON *kt = cJSON_AddObjectToObject(o, key);
            for (int i = 0; i < 3; i++) {
                if (ks)
                    cJSON_AddNumberToObject(ks, ms_names[i],
                                            (double)rr->model_state_split_bytes[kind][i]);
                if (kt)
                    cJSON_AddNumberToObject(kt, ms_names[i],
                                            (double)rr->model_state_split_theory_bytes[kind][i]);
            }
        }
        cJSON_AddNumberToObject(o, "grad_pool_bytes", (double)rr->grad_pool_bytes);
        cJSON_AddNumberToObject(o, "gather_pool_bytes", (double)rr->gather_pool_bytes);
        cJSON_AddNumberToObject(o, "matmul_peak_flops_per_s", rr->peak_flops_per_s);
    }
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    if (model) {
        cJSON_AddNumberToObject(model, "layers", cfg->model.layers);
        cJSON_AddNumberToObject(model, "heads", cfg->model.heads);
        cJSON_AddNumberToObject(model, "dim", cfg->model.dim);
        cJSON_AddNumberToObject(model, "vocab", cfg->model.vocab);
        cJSON_AddNumberToObject(model, "seq", cfg->model.seq);
        cJSON_AddBoolToObject(model, "activation_checkpointing", cfg->checkpointing);
    }
    cJSON *fp8 = cJSON_AddObjectToObject(root, "fp8");
    if (fp8) {
        cJSON_AddBoolToObject(fp8, "enabled", cfg->model.fp8.enabled);
        cJSON_AddStringToObject(fp8, "format", cfg->fp8_format);
        cJSON_AddStringToObject(fp8, "recipe", cfg->fp8_recipe);
        cJSON_AddNumberToObject(fp8, "margin", cfg->model.fp8.margin);
        cJSON_AddNumberToObject(fp8, "amax_history_len", cfg->model.fp8.history_len);
        cJSON_AddBoolToObject(fp8, "weight_gather", cfg->model.fp8.weight_gather);
        cJSON_AddNumberToObject(fp8, "state_bytes", (double)rep->fp8_state_bytes);
    }
    cJSON_AddNumberToObject(root, "train_batch_size", cfg->train_batch_size);
    cJSON_AddNumberToObject(root, "micro_batch", cfg->micro_batch);
    cJSON_AddNumberToObject(root, "gradient_accumulation_steps", cfg->grad_accum);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "report: out of memory");
    /* Replaced atomically (temporary file, fsync, rename): a failure midway leaves the previous
     * report, never a truncated one. */
    char dir[4096];
    const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
    size_t dlen = slash ? (size_t)(slash - path) : 0;
    zero_status_t st = ZERO_OK;
    if (!*name || dlen >= sizeof dir)
        st = zero__error(ZERO_ERR_INVALID_ARG,
                         "report path '%s': expected a file name (at most %zu bytes of directory)",
                         path, sizeof dir - 1);
    char *line = NULL;
    size_t n = strlen(text);
    if (!st && !(line = malloc(n + 1)))
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "report: out of memory");
    if (!st) {
        zero__dir_of(path, dir, sizeof dir);
        memcpy(line, text, n);
        line[n] = '\n';
        st = zero__write_file_atomic(dir, name, line, n + 1);
    }
    free(line);
    cJSON_free(text);
    return st;
}
