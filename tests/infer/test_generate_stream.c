/* test_generate_stream.c — weights streamed from a file (zero_generator_params.nvme_path).
 *
 * A random 5-layer model (dim 64, 4 heads, vocab 256, context 64) saved as a checkpoint and
 * exported as safetensors. For fp32, bf16 and int8 weights and 2, 3 and 8 layer buffers (2 and
 * 3 wrap around the 5 layers, 3 not evenly; 8 holds them all), batch 2, a prefill of 20 tokens
 * then 30 steps, twice with a reset between:
 * - the logits of the streamed generator are bitwise those of the same generator in RAM, at
 *   every position;
 * - the bytes read, in closed form: with fewer buffers than layers every forward reads every
 *   block once, so after F forwards at least F L and at most F L + buffers blocks have been read
 *   (the reads posted ahead may still be in flight); with as many buffers as layers, exactly L
 *   blocks, once;
 * - resident weight bytes = the RAM run's less (L - buffers) blocks' regions, each rounded up
 *   to 4 KiB; the weights file is gone after free;
 * - bad input: nvme_path not a directory (ZERO_ERR_IO naming it), buffer_count 1
 *   (ZERO_ERR_CONFIG).
 * CTest runs it twice: on the engine the I/O layer picks (io_uring where it works) and with
 * ZERO_AIO_BACKEND=threads (the pread/pwrite fallback).
 */
#include "check.h"
#include "core/core_internal.h"
#include "model/gpt.h"
#include "zero/zero.h"

#define MODEL_TEST_SEED 0x57e4a11ull
#include "model/model_test_util.h"
#include "random_model.h"

#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { L = 5, B = 2, P = 20, STEPS = 30, V = 256, ROUNDS = 2 };
enum { FORWARDS = ROUNDS * (1 + STEPS) }; /* a prefill of 20 is one chunk */
static char dir[256];

/* Entries of directory d other than . and .. */
static int entries(const char *d) {
    DIR *h = opendir(d);
    int n = 0;
    for (struct dirent *e; h && (e = readdir(h));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (h) closedir(h);
    return n;
}

/* Logits (ROUNDS, STEPS + 1, B, V) over seq (B, P + STEPS); the final info into *info. */
static void run(const char *model, const zero_generator_params_t *gp, const int32_t *seq,
                float *logits, zero_generator_info_t *info) {
    zero_generator_t *g = NULL;
    CHECK(zero_generator_init(&g, model, gp) == ZERO_OK, "generator from %s (nvme %s): %s", model,
          gp->nvme_path ? gp->nvme_path : "-", zero_last_error());
    if (!g) return;
    for (int round = 0; round < ROUNDS; round++) {
        int32_t col[B * P];
        const float *lg = NULL;
        zero_generator_reset(g);
        for (int b = 0; b < B; b++) memcpy(col + b * P, seq + b * (P + STEPS), P * sizeof *col);
        CHECK(zero_generator_prefill(g, col, P, &lg) == ZERO_OK, "prefill: %s", zero_last_error());
        for (int s = 0; lg && s <= STEPS; s++) {
            memcpy(logits + ((size_t)round * (STEPS + 1) + (size_t)s) * B * V, lg,
                   B * V * sizeof *lg);
            if (s == STEPS) break;
            for (int b = 0; b < B; b++) col[b] = seq[b * (P + STEPS) + P + s];
            CHECK(zero_generator_step(g, col, &lg) == ZERO_OK, "step %d: %s", s, zero_last_error());
        }
    }
    *info = *zero_generator_info(g);
    zero_generator_free(g);
}

int main(void) {
    snprintf(dir, sizeof dir, "test_generate_stream.%d", (int)getpid());
    mkdir(dir, 0755);
    char nvme[300], ckpt[300], st_path[320];
    snprintf(nvme, sizeof nvme, "%s/nvme", dir);
    snprintf(ckpt, sizeof ckpt, "%s/model", dir);
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    mkdir(nvme, 0755);
    /* the model */
    const zero_gpt_config_t cfg = {.layers = L, .heads = 4, .dim = 64, .vocab = V, .seq = 64};
    save_random_model(&cfg, ckpt);
    zero_ckpt_t *c = NULL;
    CHECK(zero_ckpt_open(&c, ckpt) == ZERO_OK &&
              zero_ckpt_export_safetensors(c, zero__gpt_names(), st_path, ZERO_DTYPE_FP32) ==
                  ZERO_OK,
          "export");
    zero_ckpt_close(c);

    int32_t seq[B * (P + STEPS)];
    for (int i = 0; i < B * (P + STEPS); i++) seq[i] = (int32_t)(urand() * V);
    const size_t n = (size_t)ROUNDS * (STEPS + 1) * B * V;
    float *ram = malloc(n * sizeof *ram), *disk = malloc(n * sizeof *disk);
    const struct {
        zero_dtype_t dt;
        int bits;
        const char *model;
    } kinds[] = {{ZERO_DTYPE_FP32, 0, ckpt},
                 {ZERO_DTYPE_BF16, 0, ckpt},
                 {ZERO_DTYPE_FP32, 8, ckpt},
                 {ZERO_DTYPE_FP32, 0, st_path}};
    const int buffers[] = {2, 3, 8};
    for (size_t k = 0; k < ZERO_ARRAY_LEN(kinds); k++) {
        zero_generator_params_t gp = zero_generator_params_default();
        gp.batch = B;
        gp.threads = 2;
        gp.dtype = kinds[k].dt;
        gp.weight_bits = kinds[k].bits;
        zero_generator_info_t in_ram = {0}, in_disk = {0};
        run(kinds[k].model, &gp, seq, ram, &in_ram);
        CHECK(!strcmp(in_ram.offload, "none") &&
                  in_ram.resident_weight_bytes == in_ram.weight_bytes && !in_ram.io_engine &&
                  !in_ram.io_bytes_read,
              "in RAM: every weight resident, nothing read");
        for (size_t j = 0; j < ZERO_ARRAY_LEN(buffers); j++) {
            gp.nvme_path = nvme;
            gp.buffer_count = buffers[j];
            memset(disk, 0, n * sizeof *disk);
            run(kinds[k].model, &gp, seq, disk, &in_disk);
            const int nbuf = buffers[j] < L ? buffers[j] : L;
            const char *what = kinds[k].bits ? "int8" : zero_dtype_name(kinds[k].dt);
            CHECK(!memcmp(ram, disk, n * sizeof *ram),
                  "%s from %s, %d buffers: streamed logits differ from the in-RAM run", what,
                  kinds[k].model, buffers[j]);
            const size_t bb = block_bytes(zero_dtype_size(kinds[k].dt), kinds[k].bits);
            const size_t R = (bb + 4095) / 4096 * 4096, rest = in_disk.resident_weight_bytes;
            CHECK(!strcmp(in_disk.offload, "nvme") && in_disk.buffer_count == nbuf &&
                      in_disk.weight_bytes == in_ram.weight_bytes && in_disk.io_engine &&
                      rest == in_ram.weight_bytes - L * bb + (size_t)nbuf * R,
                  "%s, %d buffers: resident %zu of %zu bytes (expected the RAM run's less %d "
                  "blocks of %zu plus %d regions of %zu)",
                  what, buffers[j], rest, in_ram.weight_bytes, L, bb, nbuf, R);
            const uint64_t got = in_disk.io_bytes_read;
            if (nbuf < L)
                CHECK(got >= (uint64_t)FORWARDS * L * R &&
                          got <= ((uint64_t)FORWARDS * L + nbuf) * R,
                      "%s, %d buffers: %llu bytes read (expected %d to %d blocks of %zu)", what,
                      buffers[j], (unsigned long long)got, FORWARDS * L, FORWARDS * L + nbuf, R);
            else
                CHECK(got == (uint64_t)L * R,
                      "%s, all layers resident: %llu bytes read (expected %d x %zu)", what,
                      (unsigned long long)got, L, R);
            CHECK(entries(nvme) == 0, "the weights file is removed by free");
            printf("%s from %s, %d buffers (%s): bitwise the in-RAM logits; %zu of %zu weight "
                   "bytes resident, %.1f MiB read, %.3f s waited\n",
                   what, strstr(kinds[k].model, ".safetensors") ? "safetensors" : "checkpoint",
                   buffers[j], in_disk.io_engine, rest, in_disk.weight_bytes, got / 1048576.0,
                   in_disk.io_wait_s);
        }
    }
    /* bad input */
    zero_generator_params_t gp = zero_generator_params_default();
    zero_generator_t *g = NULL;
    char missing[320];
    snprintf(missing, sizeof missing, "%s/no-such-dir", dir);
    gp.nvme_path = missing;
    CHECK(zero_generator_init(&g, ckpt, &gp) == ZERO_ERR_IO && !g &&
              strstr(zero_last_error(), "no-such-dir"),
          "nvme_path missing: %s", zero_last_error());
    gp.nvme_path = nvme;
    gp.buffer_count = 1;
    CHECK(zero_generator_init(&g, ckpt, &gp) == ZERO_ERR_CONFIG && !g &&
              strstr(zero_last_error(), "buffer_count = 1"),
          "buffer_count 1: %s", zero_last_error());
    free(ram);
    free(disk);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
