/* fuzz_ckpt_smoke.c — a self-contained driver for fuzz_ckpt.c that needs no libFuzzer: it saves a
 * small valid checkpoint, takes its shard files and manifest (and a safetensors file made in
 * memory) as seeds and feeds the target
 * random mutations of them (bit flips, byte overwrites, little-endian counts set to edge values,
 * truncation, insertion) for a time budget. Runs in every build (also under ASan/UBSan), so the
 * readers stay fuzzed where clang is missing.
 *
 * usage: fuzz_ckpt_smoke [SECONDS] [--emit-seeds DIR]
 *   SECONDS         time budget (default 3)
 *   --emit-seeds D  write the seeds (with their selector byte) into D for libFuzzer, and exit
 * Exit status 0 unless a valid seed is refused (a crash ends the process anyway).
 */
#include "zero/zero.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static zero_status_t get(void *user, int rank, int unit, zero_ckpt_state_t state, size_t offset,
                         size_t count, float *out) {
    (void)user;
    for (size_t i = 0; i < count; i++) out[i] = (float)(rank + unit + (int)state) + offset + i;
    return ZERO_OK;
}

static unsigned char *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    if (b && fread(b + 1, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *size = (size_t)n + 1;
    return b;
}

/* The seeds: two shard files and the manifest of a checkpoint saved here, and a safetensors file
 * made here (3 tensors, F32 and BF16, with metadata), each behind its selector byte. */
#define NSEEDS 4
static const unsigned char selector[NSEEDS] = {0, 0, 1, 4};

static unsigned char *safetensors_seed(size_t *size) {
    static const char header[] =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[10,8],\"data_offsets\":[0,320]},"
        "\"wpe.weight\":{\"dtype\":\"BF16\",\"shape\":[4,8],\"data_offsets\":[320,384]},"
        "\"ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[384,416]}}";
    size_t h = sizeof header - 1, hp = (h + 7) / 8 * 8;
    *size = 1 + 8 + hp + 416;
    unsigned char *b = calloc(1, *size);
    if (!b) return NULL;
    for (int i = 0; i < 8; i++) b[1 + i] = (unsigned char)((uint64_t)hp >> (8 * i));
    memcpy(b + 9, header, h);
    memset(b + 9 + h, ' ', hp - h);
    return b;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

int main(int argc, char **argv) {
    double budget = 3.0;
    const char *emit = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--emit-seeds") && i + 1 < argc)
            emit = argv[++i];
        else
            budget = atof(argv[i]);
    }
    zero_log_set_level(ZERO_LOG_ERROR);
    char root[512], dir[600], path[800];
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/zero-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) return 1;
    snprintf(dir, sizeof dir, "%s/ck", root);

    /* A small valid checkpoint: 3 units, world 2, with optimizer state. */
    zero_ckpt_tensor_t t0[2] = {{"wte", 2, {10, 8}, 0, 2}, {"wpe", 2, {4, 8}, 80, 1}};
    zero_ckpt_tensor_t t1[1] = {{"ln1.weight", 1, {8}, 0, 1}};
    zero_ckpt_tensor_t t2[1] = {{"lnf.bias", 1, {40}, 0, 1}};
    zero_ckpt_unit_t units[3] = {
        {"embeddings", 112, 2, t0, 1}, {"block.0", 8, 1, t1, 1}, {"final", 40, 1, t2, 1}};
    zero_ckpt_layout_t layout = {3, units};
    zero_ckpt_save_params_t sp = zero_ckpt_save_params_default();
    sp.save_dir = dir;
    sp.world = 2;
    zero_ckpt_meta_t meta = {.step = 3, .model_json = "{\"dim\": 8}", .rng_json = "[1,2]"};
    zero_ckpt_shard_io_t io = {get, NULL, NULL};
    if (zero_ckpt_save(&sp, &layout, &meta, &io, path, sizeof path) != ZERO_OK) {
        fprintf(stderr, "fuzz_ckpt_smoke: cannot save the seed checkpoint: %s\n",
                zero_last_error());
        return 1;
    }
    const char *names[NSEEDS] = {"rank-00000.params", "rank-00001.optim", "manifest.json",
                                 "model.safetensors"};
    unsigned char *seed[NSEEDS];
    size_t seed_size[NSEEDS];
    int failed = 0;
    for (int s = 0; s < NSEEDS; s++) {
        char fp[1000];
        snprintf(fp, sizeof fp, "%s/%s", path, names[s]);
        seed[s] = s == 3 ? safetensors_seed(&seed_size[s]) : slurp(fp, &seed_size[s]);
        if (!seed[s]) return 1;
        seed[s][0] = selector[s];
        zero_status_t st =
            s == 3   ? zero_ckpt_parse_safetensors_header(seed[s] + 1, seed_size[s] - 1)
            : s == 2 ? zero_ckpt_parse_manifest((char *)seed[s] + 1, seed_size[s] - 1)
                     : zero_ckpt_parse_shard_header(seed[s] + 1, seed_size[s] - 1);
        if (st != ZERO_OK) {
            fprintf(stderr, "fuzz_ckpt_smoke: valid seed %s refused: %s\n", names[s],
                    zero_last_error());
            failed = 1;
        }
    }
    if (emit) {
        mkdir(emit, 0777);
        for (int s = 0; s < NSEEDS; s++) {
            char fp[1000];
            for (int fix = 0; fix < (s < 2 ? 2 : 1); fix++) {
                snprintf(fp, sizeof fp, "%s/seed-%d-%d", emit, s, fix);
                seed[s][0] = (unsigned char)(selector[s] | (fix ? 2 : 0));
                FILE *f = fopen(fp, "wb");
                if (!f || fwrite(seed[s], 1, seed_size[s], f) != seed_size[s]) return 1;
                fclose(f);
            }
        }
    } else {
        double t0s = zero_time_now();
        long long runs = 0;
        size_t cap = 1 << 16;
        unsigned char *buf = malloc(cap);
        while (zero_time_now() - t0s < budget) {
            for (int batch = 0; batch < 256; batch++, runs++) {
                int s = (int)(rnd() % NSEEDS);
                size_t n = seed_size[s] < cap ? seed_size[s] : cap;
                memcpy(buf, seed[s], n);
                int muts = 1 + (int)(rnd() % 4);
                for (int m = 0; m < muts; m++) {
                    size_t at = 1 + (size_t)(rnd() % (n > 1 ? n - 1 : 1));
                    switch (rnd() % 6) {
                    case 0: buf[at] ^= (unsigned char)(1u << (rnd() % 8)); break;
                    case 1: buf[at] = (unsigned char)rnd(); break;
                    case 2: { /* an edge value into a 4- or 8-byte field of the header */
                        static const uint64_t edges[] = {
                            0, 1, 2, 0x7FFFFFFF, 0xFFFFFFFF, ~0ull, 1ull << 40, 4096, 65536};
                        uint64_t v = edges[rnd() % 9];
                        size_t f = 1 + 4 * (size_t)(rnd() % 40);
                        for (int k = 0; k < 8 && f + k < n; k++)
                            buf[f + k] = (unsigned char)(v >> (8 * k));
                        break;
                    }
                    case 3: n = at; break; /* truncate */
                    case 4:                /* digits in JSON */
                        buf[at] = (unsigned char)("0123456789-e.\"{}[],"[rnd() % 19]);
                        break;
                    default:
                        if (n + 1 < cap) {
                            memmove(buf + at + 1, buf + at, n - at);
                            buf[at] = (unsigned char)rnd();
                            n++;
                        }
                    }
                }
                if (s < 2 && (rnd() & 1)) buf[0] |= 2; /* recompute the header CRC */
                LLVMFuzzerTestOneInput(buf, n);
            }
        }
        free(buf);
        printf("fuzz_ckpt_smoke: %lld inputs in %.1f s, no crash\n", runs, zero_time_now() - t0s);
    }
    for (int s = 0; s < NSEEDS; s++) free(seed[s]);
    snprintf(path, sizeof path, "rm -rf '%s'", root);
    if (system(path) != 0) fprintf(stderr, "warning: could not remove %s\n", root);
    printf("%d passed, %d failed\n", failed ? 0 : 1, failed);
    return failed;
}
