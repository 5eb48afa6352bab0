/* random_model.h — the generator tests' models: an engine's GPT saved as a checkpoint without
 * optimizer states, a GPT of random weights (model_test_util.h's randomize, scale 0.1) saved so,
 * and a block's stored bytes. Include after model/model_test_util.h. */
#ifndef ZERO_TESTS_INFER_RANDOM_MODEL_H
#define ZERO_TESTS_INFER_RANDOM_MODEL_H

#include "check.h"
#include "model/gpt.h"
#include "zero/zero.h"

#include <stdio.h>

/* Save eng's weights as a checkpoint at `world` without optimizer states, with model_json (the
 * manifest's model keys). */
static inline void save_model(zero_engine_t *eng, const char *model_json, const char *save_dir,
                              int world) {
    zero_ckpt_engine_layout_t lay;
    CHECK(zero_ckpt_engine_layout_init(&lay, eng) == ZERO_OK, "layout");
    zero_ckpt_save_params_t sp = zero_ckpt_save_params_default();
    sp.save_dir = save_dir;
    sp.world = world;
    sp.with_optim = 0;
    zero_ckpt_meta_t meta = {0};
    meta.step = 1;
    meta.model_json = model_json;
    zero_ckpt_shard_io_t io = zero_ckpt_engine_io(eng);
    CHECK(zero_ckpt_save(&sp, &lay.layout, &meta, &io, NULL, 0) == ZERO_OK, "save %s: %s", save_dir,
          zero_last_error());
    zero_ckpt_engine_layout_free(&lay);
}

/* cfg's model keys as JSON, in buf. */
static inline const char *gpt_json(const zero_gpt_config_t *cfg, char buf[200]) {
    snprintf(buf, 200, "{\"layers\": %d, \"heads\": %d, \"dim\": %d, \"vocab\": %d, \"seq\": %d}",
             cfg->layers, cfg->heads, cfg->dim, cfg->vocab, cfg->seq);
    return buf;
}

/* A model cfg of random weights saved at world 1 under save_dir. */
static inline void save_random_model(const zero_gpt_config_t *cfg, const char *save_dir) {
    zero_engine_params_t ep = zero_engine_params_default();
    zero_engine_t *eng = NULL;
    zero_gpt_t *gpt = NULL;
    CHECK(zero_engine_init(&eng, &ep) == ZERO_OK &&
              zero__gpt_init(&gpt, cfg, eng, 1, 0, 1) == ZERO_OK,
          "engine and model: %s", zero_last_error());
    if (!gpt) return;
    randomize(eng, 0.1);
    char json[200];
    save_model(eng, gpt_json(cfg, json), save_dir, 1);
    zero__gpt_free(gpt);
    zero_engine_free(eng);
}

/* Bytes of one block of dim 64 as the generator stores it: each tensor in es-byte elements (or,
 * for the four matrices with bits 8 or 4, rows of int8 or packed int4 with one fp32 scale per
 * 64), rounded up to 64 bytes. */
static inline size_t block_bytes(size_t es, int bits) {
    const size_t C = 64;
    const size_t shape[12][2] = {{C, 1}, {C, 1}, {3 * C, C}, {3 * C, 1}, {C, C},     {C, 1},
                                 {C, 1}, {C, 1}, {4 * C, C}, {4 * C, 1}, {C, 4 * C}, {C, 1}};
    size_t total = 0;
    for (int t = 0; t < 12; t++) {
        const size_t K = shape[t][1],
                     bytes = bits && K > 1 ? shape[t][0] * (4 * ((K + 63) / 64) + K * bits / 8)
                                           : shape[t][0] * K * es;
        total += (bytes + 63) / 64 * 64;
    }
    return total;
}

#endif /* ZERO_TESTS_INFER_RANDOM_MODEL_H */
