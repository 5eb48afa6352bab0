/* test_generate_shard.c — generation with the weights sharded over ranks
 * (zero_generator_params.comm).
 *
 * A random 5-layer model (dim 64, 4 heads, vocab 256, context 64) saved as a checkpoint. For
 * fp32, bf16, int8 and int4 weights on 2 and 3 thread ranks (3 does not divide the blocks'
 * bytes: each region is padded to 64 x 3 bytes), batch 2, a prefill of 20 tokens then 30 steps,
 * twice with a reset between:
 * - every rank's logits are bitwise those of the one-rank generator at every position;
 * - resident weight bytes = the one-rank generator's less its L blocks, plus two layer buffers
 *   and L slices of a block padded to 64 N bytes (closed form);
 * - bytes received from the other ranks, in closed form: F forwards acquire F L layers, each
 *   release posts the gather of the layer two uses ahead and init posts the first two, so
 *   (F L + 2) gathers of (N - 1) / N of a padded block.
 * Bad input: nvme_path with more than one rank is ZERO_ERR_CONFIG on every rank.
 */
#include "check.h"
#include "core/core_internal.h"
#include "thread_ranks.h"

#define MODEL_TEST_SEED 0x5ba2d11ull
#include "model/model_test_util.h"
#include "random_model.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { L = 5, B = 2, P = 20, STEPS = 30, V = 256, ROUNDS = 2, MAXR = 3 };
enum { FORWARDS = ROUNDS * (1 + STEPS) }; /* a prefill of 20 is one chunk */
enum { NLOG = ROUNDS * (STEPS + 1) * B * V };

typedef struct job {
    const char *model;
    zero_generator_params_t gp;
    const int32_t *seq;               /* (B, P + STEPS) */
    float *logits[MAXR];              /* (ROUNDS, STEPS + 1, B, V) per rank */
    zero_generator_info_t info[MAXR]; /* after the last call */
    zero_status_t init_st[MAXR];
    char err[MAXR][512]; /* init's message */
} job_t;

/* One rank's run: the logits of every position over two rounds. */
static void decode(zero_comm_t *comm, int rank, void *arg) {
    job_t *j = arg;
    zero_generator_params_t gp = j->gp;
    gp.comm = comm;
    zero_generator_t *g = NULL;
    j->init_st[rank] = zero_generator_init(&g, j->model, &gp);
    snprintf(j->err[rank], sizeof j->err[rank], "%s", g ? "" : zero_last_error());
    if (!g) return;
    for (int round = 0; round < ROUNDS; round++) {
        int32_t col[B * P];
        const float *lg = NULL;
        zero_generator_reset(g);
        for (int b = 0; b < B; b++) memcpy(col + b * P, j->seq + b * (P + STEPS), P * sizeof *col);
        CHECK(zero_generator_prefill(g, col, P, &lg) == ZERO_OK, "rank %d prefill: %s", rank,
              zero_last_error());
        for (int s = 0; lg && s <= STEPS; s++) {
            memcpy(j->logits[rank] + ((size_t)round * (STEPS + 1) + (size_t)s) * B * V, lg,
                   B * V * sizeof *lg);
            if (s == STEPS) break;
            for (int b = 0; b < B; b++) col[b] = j->seq[b * (P + STEPS) + P + s];
            CHECK(zero_generator_step(g, col, &lg) == ZERO_OK, "rank %d step %d: %s", rank, s,
                  zero_last_error());
        }
    }
    j->info[rank] = *zero_generator_info(g);
    zero_generator_free(g);
}

static void run(job_t *j, int ranks) {
    for (int r = 0; r < ranks; r++) memset(j->logits[r], 0, NLOG * sizeof(float));
    if (ranks == 1)
        decode(NULL, 0, j);
    else
        CHECK(thread_ranks_clique(ranks, 60.0, decode, j) == ZERO_OK, "clique of %d", ranks);
}

int main(void) {
    char dir[64], ckpt[100];
    snprintf(dir, sizeof dir, "test_generate_shard.%d", (int)getpid());
    snprintf(ckpt, sizeof ckpt, "%s/model", dir);
    mkdir(dir, 0755);
    const zero_gpt_config_t cfg = {.layers = L, .heads = 4, .dim = 64, .vocab = V, .seq = 64};
    save_random_model(&cfg, ckpt);
    int32_t seq[B * (P + STEPS)];
    for (int i = 0; i < B * (P + STEPS); i++) seq[i] = (int32_t)(urand() * V);
    job_t one = {.model = ckpt, .seq = seq}, many = {.model = ckpt, .seq = seq};
    one.logits[0] = malloc(NLOG * sizeof(float));
    for (int r = 0; r < MAXR; r++) many.logits[r] = malloc(NLOG * sizeof(float));
    const struct {
        zero_dtype_t dt;
        int bits;
    } kinds[] = {
        {ZERO_DTYPE_FP32, 0}, {ZERO_DTYPE_BF16, 0}, {ZERO_DTYPE_FP32, 8}, {ZERO_DTYPE_FP32, 4}};
    for (size_t k = 0; k < ZERO_ARRAY_LEN(kinds); k++) {
        const char *what = kinds[k].bits == 8   ? "int8"
                           : kinds[k].bits == 4 ? "int4"
                                                : zero_dtype_name(kinds[k].dt);
        zero_generator_params_t gp = zero_generator_params_default();
        gp.batch = B;
        gp.threads = 1;
        gp.dtype = kinds[k].dt;
        gp.weight_bits = kinds[k].bits;
        one.gp = many.gp = gp;
        run(&one, 1);
        const zero_generator_info_t *ref = &one.info[0];
        CHECK(one.init_st[0] == ZERO_OK && ref->ranks == 1 && ref->gather_bytes == 0 &&
                  ref->resident_weight_bytes == ref->weight_bytes,
              "%s on one rank: %s", what, zero_last_error());
        for (int N = 2; N <= MAXR; N++) {
            run(&many, N);
            for (int r = 0; r < N; r++) {
                const zero_generator_info_t *in = &many.info[r];
                CHECK(many.init_st[r] == ZERO_OK, "%s, %d ranks, rank %d: init %s", what, N, r,
                      zero_status_str(many.init_st[r]));
                CHECK(!memcmp(one.logits[0], many.logits[r], NLOG * sizeof(float)),
                      "%s, %d ranks, rank %d: logits differ from one rank's", what, N, r);
                const size_t bb = block_bytes(zero_dtype_size(kinds[k].dt), kinds[k].bits);
                const size_t R = (bb + 64 * (size_t)N - 1) / (64 * (size_t)N) * 64 * (size_t)N;
                const size_t want = ref->weight_bytes - L * bb + 2 * R + L * (R / (size_t)N);
                CHECK(in->ranks == N && in->weight_bytes == ref->weight_bytes &&
                          in->resident_weight_bytes == want,
                      "%s, %d ranks, rank %d: ranks %d, weights %zu (one rank %zu), resident %zu "
                      "(expected the one rank's less %d blocks of %zu, plus 2 + %d/%d padded "
                      "blocks of %zu: %zu)",
                      what, N, r, in->ranks, in->weight_bytes, ref->weight_bytes,
                      in->resident_weight_bytes, L, bb, L, N, R, want);
                const uint64_t gathered = ((uint64_t)FORWARDS * L + 2) * (R - R / (size_t)N);
                CHECK(in->gather_bytes == gathered && !in->io_engine && !in->io_bytes_read,
                      "%s, %d ranks, rank %d: %llu bytes gathered (expected %d gathers of %zu: "
                      "%llu), io engine %s",
                      what, N, r, (unsigned long long)in->gather_bytes, FORWARDS * L + 2,
                      R - R / (size_t)N, (unsigned long long)gathered,
                      in->io_engine ? in->io_engine : "none");
            }
            printf("%s on %d ranks: every rank's logits bitwise one rank's; %zu of %zu weight "
                   "bytes resident, %.2f MiB gathered, %.3f s waited\n",
                   what, N, many.info[0].resident_weight_bytes, many.info[0].weight_bytes,
                   many.info[0].gather_bytes / 1048576.0, many.info[0].gather_wait_s);
        }
    }
    /* bad input: sharded and streamed from a file at once */
    char nvme[120];
    snprintf(nvme, sizeof nvme, "%s", dir);
    zero_generator_params_t gp = zero_generator_params_default();
    gp.nvme_path = nvme;
    many.gp = gp;
    run(&many, 2);
    for (int r = 0; r < 2; r++)
        CHECK(many.init_st[r] == ZERO_ERR_CONFIG && strstr(many.err[r], "sharded over 2 ranks"),
              "rank %d: nvme_path with 2 ranks: %s: %s", r, zero_status_str(many.init_st[r]),
              many.err[r]);
    free(one.logits[0]);
    for (int r = 0; r < MAXR; r++) free(many.logits[r]);
    char cmd[100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
