/* test_safetensors.c — `zero convert`'s export and the import: a GPT-shaped checkpoint (names and
 * shapes of src/model/gpt.c, saved at world 2) is exported to safetensors in fp32 and bf16;
 * a naive reader here checks every value at its Hugging Face position (Conv1D weights
 * transposed), tools/safetensors_check.py checks the structure independently, the import gives
 * the values back, a model of another shape is refused naming the first tensor, and the peak RSS
 * of exporting a 54M-parameter model is reported against 2x the largest tensor + 64 MiB.
 *
 * usage: test_safetensors [PYTHON CHECKER.py]   (the Python check is skipped without them)
 */
#include "zero/zero.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

/* ---- a GPT layout, written from the GPT-2 description (not from gpt.c's code) */
typedef struct gpt {
    int L, C, V, T;
    zero_ckpt_layout_t layout;
    zero_ckpt_unit_t units[64];
    zero_ckpt_tensor_t tensors[64][12];
    char names[64][24];
} gpt_t;

static void add(zero_ckpt_unit_t *u, zero_ckpt_tensor_t *ts, const char *name, size_t a, size_t b) {
    zero_ckpt_tensor_t *t = &ts[u->tensor_count++];
    t->name = name;
    t->ndim = b ? 2 : 1;
    t->shape[0] = a;
    t->shape[1] = b;
    t->offset = u->param_count;
    u->param_count += a * (b ? b : 1);
    /* the engine aligns tensors to 16 elements */
    u->param_count = (u->param_count + 15) / 16 * 16;
}

static void gpt_init(gpt_t *g, int L, int C, int V, int T) {
    memset(g, 0, sizeof *g);
    g->L = L, g->C = C, g->V = V, g->T = T;
    size_t c = (size_t)C;
    zero_ckpt_unit_t *u = &g->units[0];
    u->name = "embeddings";
    u->tensors = g->tensors[0];
    add(u, g->tensors[0], "wte", (size_t)V, c);
    add(u, g->tensors[0], "wpe", (size_t)T, c);
    for (int l = 0; l < L; l++) {
        u = &g->units[1 + l];
        snprintf(g->names[l], sizeof g->names[l], "block.%d", l);
        u->name = g->names[l];
        zero_ckpt_tensor_t *ts = g->tensors[1 + l];
        u->tensors = ts;
        add(u, ts, "ln1.weight", c, 0);
        add(u, ts, "ln1.bias", c, 0);
        add(u, ts, "attn.qkv.weight", 3 * c, c);
        add(u, ts, "attn.qkv.bias", 3 * c, 0);
        add(u, ts, "attn.proj.weight", c, c);
        add(u, ts, "attn.proj.bias", c, 0);
        add(u, ts, "ln2.weight", c, 0);
        add(u, ts, "ln2.bias", c, 0);
        add(u, ts, "mlp.fc.weight", 4 * c, c);
        add(u, ts, "mlp.fc.bias", 4 * c, 0);
        add(u, ts, "mlp.proj.weight", c, 4 * c);
        add(u, ts, "mlp.proj.bias", c, 0);
    }
    u = &g->units[1 + L];
    u->name = "final";
    u->tensors = g->tensors[1 + L];
    add(u, g->tensors[1 + L], "lnf.weight", c, 0);
    add(u, g->tensors[1 + L], "lnf.bias", c, 0);
    g->layout.unit_count = L + 2;
    g->layout.units = g->units;
}

static float value(int unit, size_t i) {
    uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(unit * 0x9E3779B9u);
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return ((float)(x & 0xFFFFF) - 524288.0f) / 131072.0f;
}

static zero_status_t get(void *user, int rank, int unit, zero_ckpt_state_t state, size_t offset,
                         size_t count, float *out) {
    const gpt_t *g = user;
    (void)rank;
    (void)state;
    size_t pc = g->units[unit].param_count;
    for (size_t i = 0; i < count; i++) out[i] = offset + i < pc ? value(unit, offset + i) : 0.0f;
    return ZERO_OK;
}

typedef struct {
    long long puts, bad;
    int bf16;
} import_check_t;

static uint16_t naive_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t lsb = (u >> 16) & 1;
    return (uint16_t)((u + 0x7FFF + lsb) >> 16); /* finite inputs only */
}
static float bf16_val(float f) {
    uint32_t u = (uint32_t)naive_bf16(f) << 16;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

static zero_status_t put(void *user, int rank, int unit, zero_ckpt_state_t state, size_t offset,
                         size_t count, const float *in) {
    import_check_t *k = user;
    (void)rank;
    k->puts++;
    if (state != ZERO_CKPT_PARAMS) k->bad++;
    for (size_t i = 0; i < count; i++) {
        float want = value(unit, offset + i);
        if (k->bf16) want = bf16_val(want);
        if (memcmp(&want, &in[i], 4)) k->bad++;
    }
    return ZERO_OK;
}

/* ---- a naive reader: find "name":{ in the header, parse shape, dtype and offsets */
typedef struct {
    unsigned char *data;
    size_t size, hlen;
} file_t;

static int read_whole(const char *path, file_t *f) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    fseek(fp, 0, SEEK_END);
    f->size = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->data = malloc(f->size + 1);
    size_t got = fread(f->data, 1, f->size, fp);
    fclose(fp);
    if (got != f->size || f->size < 8) return 0;
    f->hlen = 0;
    for (int i = 7; i >= 0; i--) f->hlen = (f->hlen << 8) | f->data[i];
    return 8 + f->hlen <= f->size;
}

/* Returns a pointer to the tensor's data or NULL; fills dims and dtype. */
static const unsigned char *find(const file_t *f, const char *name, size_t *d0, size_t *d1, int *nd,
                                 char *dtype) {
    char key[300];
    snprintf(key, sizeof key, "\"%s\":{", name);
    char *hdr = malloc(f->hlen + 1);
    memcpy(hdr, f->data + 8, f->hlen);
    hdr[f->hlen] = '\0';
    const char *p = strstr(hdr, key);
    const unsigned char *res = NULL;
    unsigned long long b, e, a0 = 0, a1 = 0;
    if (p) {
        const char *dt = strstr(p, "\"dtype\":\"");
        const char *sh = strstr(p, "\"shape\":[");
        const char *of = strstr(p, "\"data_offsets\":[");
        if (dt && sh && of && sscanf(dt + 9, "%7[A-Z0-9]", dtype) == 1 &&
            sscanf(of + 16, "%llu,%llu", &b, &e) == 2) {
            *nd = sscanf(sh + 9, "%llu,%llu", &a0, &a1);
            if (sh[9] == ']') *nd = 0;
            *d0 = (size_t)a0;
            *d1 = (size_t)a1;
            if (8 + f->hlen + e <= f->size) res = f->data + 8 + f->hlen + b;
        }
    }
    free(hdr);
    return res;
}

static void check_export(const gpt_t *g, const char *path, int bf16) {
    file_t f = {0};
    CHECK(read_whole(path, &f), "read %s", path);
    long long bad = 0, tensors = 0;
    for (int u = 0; u < g->layout.unit_count; u++)
        for (int t = 0; t < g->units[u].tensor_count; t++) {
            const zero_ckpt_tensor_t *T = &g->units[u].tensors[t];
            char hf[128], dtype[8] = "";
            int tr, nd = -1;
            size_t d0 = 0, d1 = 0;
            if (zero_ckpt_hf_gpt2_name(g->units[u].name, T->name, hf, sizeof hf, &tr)) {
                bad++;
                continue;
            }
            const unsigned char *d = find(&f, hf, &d0, &d1, &nd, dtype);
            size_t rows = T->shape[0], cols = T->ndim == 2 ? T->shape[1] : 1;
            int shape_ok = T->ndim == 1 ? (nd == 1 && d0 == rows)
                           : tr         ? (nd == 2 && d0 == cols && d1 == rows)
                                        : (nd == 2 && d0 == rows && d1 == cols);
            if (!d || !shape_ok || strcmp(dtype, bf16 ? "BF16" : "F32")) {
                fprintf(stderr, "tensor %s: found %d dims [%zu, %zu] %s\n", hf, nd, d0, d1, dtype);
                bad++;
                continue;
            }
            tensors++;
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++) {
                    float want = value(u, T->offset + r * cols + c);
                    size_t pos = tr ? c * rows + r : r * cols + c; /* HF Conv1D: [in, out] */
                    if (bf16) {
                        uint16_t h = (uint16_t)(d[2 * pos] | d[2 * pos + 1] << 8);
                        bad += h != naive_bf16(want);
                    } else {
                        float got;
                        memcpy(&got, d + 4 * pos, 4);
                        bad += memcmp(&got, &want, 4) != 0;
                    }
                }
        }
    CHECK(bad == 0, "%s: %lld bad values or tensors (%lld tensors ok)", path, bad, tensors);
    free(f.data);
}

static void run_python(const char *python, const char *checker, const char *path, const gpt_t *g,
                       const char *dtype, int expect_ok) {
    if (!python || !checker) {
        printf("  python check skipped (no interpreter given)\n");
        return;
    }
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' --gpt2 %d,%d,%d,%d --dtype %s --finite", python,
             checker, path, g->L, g->C, g->V, g->T, dtype);
    fflush(stdout);
    int rc = system(cmd);
    int ok = WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
    CHECK(ok == expect_ok, "python checker on %s: exit %d, expected %s", path, WEXITSTATUS(rc),
          expect_ok ? "success" : "failure");
}

int main(int argc, char **argv) {
    const char *python = argc > 2 ? argv[1] : NULL, *checker = argc > 2 ? argv[2] : NULL;
    const char *tmpd = getenv("TMPDIR");
    char root[512], dir[600], out32[700], out16[700], path[800];
    snprintf(root, sizeof root, "%s/zero-st-test-XXXXXX", tmpd && *tmpd ? tmpd : "/tmp");
    if (!mkdtemp(root)) return 1;
    zero_log_set_level(ZERO_LOG_WARN);
    double t0 = zero_time_now();

    gpt_t *g = malloc(sizeof *g);
    gpt_init(g, 2, 48, 300, 40);
    snprintf(dir, sizeof dir, "%s/ck", root);
    zero_ckpt_save_params_t sp = zero_ckpt_save_params_default();
    sp.save_dir = dir;
    sp.world = 2;
    sp.with_optim = 0;
    zero_ckpt_meta_t meta = {.step = 5, .model_json = "{\"layers\":2}"};
    zero_ckpt_shard_io_t io = {get, NULL, g};
    CHECK(zero_ckpt_save(&sp, &g->layout, &meta, &io, path, sizeof path) == ZERO_OK, "save");
    zero_ckpt_t *c = NULL;
    CHECK(zero_ckpt_open(&c, dir) == ZERO_OK, "open");
    snprintf(out32, sizeof out32, "%s/model.safetensors", root);
    snprintf(out16, sizeof out16, "%s/model-bf16.safetensors", root);
    CHECK(zero_ckpt_export_safetensors(c, out32, ZERO_DTYPE_FP32) == ZERO_OK, "export fp32");
    CHECK(zero_ckpt_export_safetensors(c, out16, ZERO_DTYPE_BF16) == ZERO_OK, "export bf16");
    CHECK(zero_ckpt_export_safetensors(c, out16, ZERO_DTYPE_FP16) == ZERO_ERR_INVALID_ARG,
          "fp16 refused");
    zero_ckpt_close(c);
    check_export(g, out32, 0);
    check_export(g, out16, 1);
    run_python(python, checker, out32, g, "F32", 1);
    run_python(python, checker, out16, g, "BF16", 1);
    /* The checker must notice a wrong configuration (it is not a rubber stamp). */
    gpt_t *g3 = malloc(sizeof *g3);
    gpt_init(g3, 3, 48, 300, 40);
    run_python(python, checker, out32, g3, "F32", 0);

    /* Import: values back (fp32 exactly, bf16 rounded); another shape refused, nothing put. */
    import_check_t k = {0, 0, 0};
    zero_ckpt_shard_io_t iio = {NULL, put, &k};
    CHECK(zero_ckpt_import_safetensors(out32, &g->layout, &iio) == ZERO_OK && k.bad == 0 &&
              k.puts > 0,
          "import fp32: %lld bad in %lld puts", k.bad, k.puts);
    k = (import_check_t){0, 0, 1};
    CHECK(zero_ckpt_import_safetensors(out16, &g->layout, &iio) == ZERO_OK && k.bad == 0,
          "import bf16: %lld bad", k.bad);
    k = (import_check_t){0, 0, 0};
    zero_status_t st = zero_ckpt_import_safetensors(out32, &g3->layout, &iio);
    CHECK(st == ZERO_ERR_MISMATCH && k.puts == 0 && strstr(zero_last_error(), "h.2.ln_1.weight"),
          "more layers: missing tensor named (status %d)", (int)st);
    printf("  3 layers     -> %s\n", zero_last_error());
    gpt_t *gw = malloc(sizeof *gw);
    gpt_init(gw, 2, 48, 300, 64);
    st = zero_ckpt_import_safetensors(out32, &gw->layout, &iio);
    CHECK(st == ZERO_ERR_MISMATCH && k.puts == 0 &&
              strstr(zero_last_error(), "wpe.weight has shape [40, 48], expected [64, 48]"),
          "longer context: shape mismatch named (status %d)", (int)st);
    printf("  seq 64       -> %s\n", zero_last_error());

    /* Peak RSS of an export of a 54M-parameter GPT (2 layers, C 768, V 50257, T 1024), measured
     * in a child that does nothing else. */
    gpt_t *gb = malloc(sizeof *gb);
    gpt_init(gb, 2, 768, 50257, 1024);
    snprintf(dir, sizeof dir, "%s/big", root);
    sp.save_dir = dir;
    sp.world = 1;
    io.user = gb;
    double ts = zero_time_now();
    CHECK(zero_ckpt_save(&sp, &gb->layout, &meta, &io, NULL, 0) == ZERO_OK, "save big");
    double save_s = zero_time_now() - ts;
    fflush(stdout);
    int pipefd[2];
    if (pipe(pipefd) != 0) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        size_t before = zero_peak_rss_bytes();
        zero_ckpt_t *cb = NULL;
        char outb[800];
        snprintf(outb, sizeof outb, "%s/big.safetensors", root);
        double t = zero_time_now();
        zero_status_t s = zero_ckpt_open(&cb, dir);
        if (s == ZERO_OK) s = zero_ckpt_export_safetensors(cb, outb, ZERO_DTYPE_FP32);
        zero_ckpt_close(cb);
        double r[3] = {(double)before, (double)zero_peak_rss_bytes(), zero_time_now() - t};
        if (write(pipefd[1], r, sizeof r) != (ssize_t)sizeof r) _exit(3);
        _exit(s == ZERO_OK ? 0 : 1);
    }
    close(pipefd[1]);
    double r[3] = {0, 0, 0};
    ssize_t got = read(pipefd[0], r, sizeof r);
    int status;
    waitpid(pid, &status, 0);
    close(pipefd[0]);
    double largest = 50257.0 * 768 * 4, bound = 2 * largest + 64.0 * 1048576;
    CHECK(got == (ssize_t)sizeof r && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "big export in a child");
    printf("  export of %.1fM params: %.2f s (save %.2f s), peak RSS %.1f MiB (%.1f MiB at "
           "start), bound 2 x largest tensor %.1f MiB + 64 MiB = %.1f MiB\n",
           (double)(gb->units[0].param_count + 2 * gb->units[1].param_count) / 1e6, r[2], save_s,
           r[1] / 1048576, r[0] / 1048576, largest / 1048576, bound / 1048576);
    CHECK(r[1] <= bound, "peak RSS %.1f MiB within %.1f MiB", r[1] / 1048576, bound / 1048576);

    snprintf(path, sizeof path, "rm -rf '%s'", root);
    if (system(path) != 0) fprintf(stderr, "warning: could not remove %s\n", root);
    free(g);
    free(g3);
    free(gw);
    free(gb);
    printf("test_safetensors: %.1f s\n%d passed, %d failed\n", zero_time_now() - t0, passed,
           failed);
    return failed ? 1 : 0;
}
