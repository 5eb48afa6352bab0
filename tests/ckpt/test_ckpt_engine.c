/* test_ckpt_engine.c — the checkpoint module on the real engine and GPT model (stage 0, one
 * rank), through zero_ckpt_engine_layout_init / zero_ckpt_engine_io only:
 *   - every tensor the GPT declares has a Hugging Face GPT-2 name, and weight decay applies to
 *     exactly its 2-D tensors (wte and wpe included), as the docs say;
 *   - save, clobber the weights, load: zero_engine_fingerprint is back to the saved one;
 *   - a checkpoint of another model shape is refused with nothing written;
 *   - export to safetensors, import into a fresh engine with other initial weights: the
 *     fingerprint equals the original (the `zero train --init-from` path), and the Python
 *     reader accepts the file with GPT-2's names and shapes;
 *   - importing into a model of another shape names the first mismatching tensor.
 * Oracle: the engine's own fingerprint (FNV-1a of the weights), independent of this module.
 *
 *   - `zero convert CHECKPOINT OUT --dtype bf16` (the CLI) writes a file the Python reader
 *     accepts as BF16, and fails with exit codes 2 (usage) and 1 (bad checkpoint).
 *
 * usage: test_ckpt_engine [PYTHON CHECKER.py [ZERO_CLI]]
 */
#include "model/gpt.h"
#include "zero/zero.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "check.h"

typedef struct {
    zero_engine_t *eng;
    zero_gpt_t *gpt;
} model_t;

static int make(model_t *m, zero_gpt_config_t c, uint64_t seed) {
    zero_engine_params_t p = zero_engine_params_default();
    p.seed = seed;
    m->eng = NULL;
    m->gpt = NULL;
    if (zero_engine_init(&m->eng, &p) != ZERO_OK) return 0;
    return zero__gpt_init(&m->gpt, &c, m->eng, 1, 0, 1) == ZERO_OK;
}

static void drop(model_t *m) {
    zero__gpt_free(m->gpt);
    zero_engine_free(m->eng);
}

static uint64_t fp(model_t *m) {
    uint64_t f = 0;
    if (zero_engine_fingerprint(m->eng, &f) != ZERO_OK) return 0;
    return f;
}

int main(int argc, char **argv) {
    const char *python = argc > 2 ? argv[1] : NULL, *checker = argc > 2 ? argv[2] : NULL;
    const char *cli = argc > 3 ? argv[3] : NULL;
    const char *tmpd = getenv("TMPDIR");
    char root[512], file[700], cmd[4096];
    snprintf(root, sizeof root, "%s/zero-ckeng-XXXXXX", tmpd && *tmpd ? tmpd : "/tmp");
    if (!mkdtemp(root)) return 1;
    zero_log_set_level(ZERO_LOG_WARN);

    zero_gpt_config_t cfg = {2, 4, 32, 64, 16, {0}, {0}}; /* layers, heads, dim, vocab, seq */
    model_t a;
    if (!make(&a, cfg, 1)) {
        fprintf(stderr, "cannot build the model: %s\n", zero_last_error());
        return 1;
    }
    uint64_t f0 = fp(&a);
    zero_ckpt_engine_layout_t L;
    CHECK(zero_ckpt_engine_layout_init(&L, a.eng) == ZERO_OK, "layout from the engine");
    int unnamed = 0;
    for (int u = 0; u < L.layout.unit_count; u++)
        for (int t = 0; t < L.units[u].tensor_count; t++) {
            char hf[128];
            int tr;
            const zero_ckpt_name_map_t *m = zero__gpt_names();
            if (!m->name(m->user, L.units[u].name, L.units[u].tensors[t].name, hf, sizeof hf,
                         &tr)) {
                fprintf(stderr, "tensor %s of unit %s has no name\n", L.units[u].tensors[t].name,
                        L.units[u].name);
                unnamed++;
            }
        }
    CHECK(unnamed == 0, "%d GPT tensors without a Hugging Face name", unnamed);
    /* The weight-decay rule the docs state (docs/config.md, engine.h): every 2-D weight decays,
     * embeddings included; 1-D tensors (biases, layernorm gains) do not. The checkpoint keeps
     * the flags as the engine has them. */
    int decay_wrong = 0;
    for (int u = 0; u < L.layout.unit_count; u++)
        for (int t = 0; t < L.units[u].tensor_count; t++) {
            const zero_ckpt_tensor_t *T = &L.units[u].tensors[t];
            int no_decay = (T->flags & ZERO_TENSOR_NO_DECAY) != 0;
            if (no_decay != (T->ndim == 1)) {
                fprintf(stderr, "%s %s: %d-D, no-decay flag %d\n", L.units[u].name, T->name,
                        T->ndim, no_decay);
                decay_wrong++;
            }
        }
    CHECK(decay_wrong == 0, "%d GPT tensors break the decay rule (2-D decays, 1-D does not)",
          decay_wrong);

    /* save, clobber, load */
    zero_ckpt_shard_io_t io = zero_ckpt_engine_io(a.eng);
    zero_ckpt_save_params_t sp = zero_ckpt_save_params_default();
    sp.save_dir = root;
    sp.with_optim = 0;
    zero_ckpt_meta_t meta = {.step = 7, .model_json = "{\"layers\":2,\"dim\":32}"};
    CHECK(zero_ckpt_save(&sp, &L.layout, &meta, &io, NULL, 0) == ZERO_OK, "save");
    /* with Adam m and v too (zero_engine_state_read), into a save dir of its own */
    char root_optim[600];
    snprintf(root_optim, sizeof root_optim, "%s/optim", root);
    sp.save_dir = root_optim;
    sp.with_optim = 1;
    meta.step = 8;
    CHECK(zero_ckpt_save(&sp, &L.layout, &meta, &io, NULL, 0) == ZERO_OK,
          "save with the optimizer state: %s", zero_last_error());
    sp.save_dir = root;
    for (int u = 0; u < L.layout.unit_count; u++) {
        size_t n = L.units[u].param_count;
        float *z = calloc(n, sizeof *z);
        zero_engine_params_write(a.eng, u, 0, n, z);
        free(z);
    }
    CHECK(fp(&a) != f0, "weights clobbered");
    zero_ckpt_t *c = NULL;
    CHECK(zero_ckpt_open(&c, root) == ZERO_OK && zero_ckpt_get_meta(c)->step == 7,
          "open latest (step 7: the failed save left nothing)");
    zero_ckpt_load_params_t lp = zero_ckpt_load_params_default();
    lp.with_optim = 0;
    CHECK(c && zero_ckpt_load(c, &lp, &L.layout, &io) == ZERO_OK, "load");
    CHECK(fp(&a) == f0, "fingerprint after load %016llx, expected %016llx",
          (unsigned long long)fp(&a), (unsigned long long)f0);

    /* another model shape: refused, nothing written */
    model_t b;
    zero_gpt_config_t cfg_b = cfg;
    cfg_b.seq = 32;
    if (make(&b, cfg_b, 2)) {
        zero_ckpt_engine_layout_t Lb;
        zero_ckpt_engine_layout_init(&Lb, b.eng);
        zero_ckpt_shard_io_t iob = zero_ckpt_engine_io(b.eng);
        uint64_t fb = fp(&b);
        zero_status_t st = zero_ckpt_load(c, &lp, &Lb.layout, &iob);
        CHECK(st == ZERO_ERR_MISMATCH && fp(&b) == fb && strstr(zero_last_error(), "wpe"),
              "another model refused (status %d)", (int)st);
        printf("  other model -> %s\n", zero_last_error());
        snprintf(file, sizeof file, "%s/model.safetensors", root);
        /* export, then import into the other shape: the first mismatching tensor is named */
        CHECK(zero_ckpt_export_safetensors(c, zero__gpt_names(), file, ZERO_DTYPE_FP32) == ZERO_OK,
              "export");
        st = zero_ckpt_import_safetensors(file, &Lb.layout, zero__gpt_names(), &iob);
        CHECK(st == ZERO_ERR_MISMATCH && fp(&b) == fb &&
                  strstr(zero_last_error(), "wpe.weight has shape [16, 32], expected [32, 32]"),
              "import into another shape refused (status %d)", (int)st);
        printf("  init-from   -> %s\n", zero_last_error());
        zero_ckpt_engine_layout_free(&Lb);
        drop(&b);
    } else {
        CHECK(0, "second model: %s", zero_last_error());
    }
    zero_ckpt_close(c);

    /* import into a fresh engine with other initial weights */
    model_t d;
    if (make(&d, cfg, 99)) {
        CHECK(fp(&d) != f0, "fresh model differs");
        zero_ckpt_engine_layout_t Ld;
        zero_ckpt_engine_layout_init(&Ld, d.eng);
        zero_ckpt_shard_io_t iod = zero_ckpt_engine_io(d.eng);
        CHECK(zero_ckpt_import_safetensors(file, &Ld.layout, zero__gpt_names(), &iod) == ZERO_OK,
              "import");
        CHECK(fp(&d) == f0, "fingerprint after import %016llx, expected %016llx",
              (unsigned long long)fp(&d), (unsigned long long)f0);
        zero_ckpt_engine_layout_free(&Ld);
        drop(&d);
    }
    if (python && checker) {
        snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' --gpt2 %d,%d,%d,%d --dtype F32 --finite", python,
                 checker, file, cfg.layers, cfg.dim, cfg.vocab, cfg.seq);
        fflush(stdout);
        int rc = system(cmd);
        CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "python reader on the GPT export");
    }
    if (cli) {
        char out16[800];
        snprintf(out16, sizeof out16, "%s/cli-bf16.safetensors", root);
        snprintf(cmd, sizeof cmd, "'%s' convert '%s/latest' '%s' --dtype bf16", cli, root, out16);
        fflush(stdout);
        int rc = system(cmd);
        CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "zero convert --dtype bf16: exit %d",
              WEXITSTATUS(rc));
        if (python && checker) {
            snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' --gpt2 %d,%d,%d,%d --dtype BF16 --finite",
                     python, checker, out16, cfg.layers, cfg.dim, cfg.vocab, cfg.seq);
            rc = system(cmd);
            CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "python reader on the CLI's bf16 file");
        }
        snprintf(cmd, sizeof cmd, "'%s' convert '%s' '%s' --dtype fp8 2>/dev/null", cli, root,
                 out16);
        rc = system(cmd);
        CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "zero convert --dtype fp8: exit %d",
              WEXITSTATUS(rc));
        snprintf(cmd, sizeof cmd, "'%s' convert '%s/nothing-here' '%s'", cli, root, out16);
        rc = system(cmd);
        CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 1,
              "zero convert of a missing checkpoint: "
              "exit %d",
              WEXITSTATUS(rc));
    }
    zero_ckpt_engine_layout_free(&L);
    drop(&a);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", root);
    return check_report();
}
