/* random_model.h — a GPT of random weights (model_test_util.h's randomize, scale 0.1) saved as a
 * world-1 checkpoint without optimizer states: the generator tests' model. Include after
 * model/model_test_util.h. */
#ifndef ZERO_TESTS_INFER_RANDOM_MODEL_H
#define ZERO_TESTS_INFER_RANDOM_MODEL_H

#include "check.h"
#include "model/gpt.h"
#include "zero/zero.h"

#include <stdio.h>

static void save_random_model(const zero_gpt_config_t *cfg, const char *save_dir) {
    zero_engine_params_t ep = zero_engine_params_default();
    zero_engine_t *eng = NULL;
    zero_gpt_t *gpt = NULL;
    CHECK(zero_engine_init(&eng, &ep) == ZERO_OK &&
              zero__gpt_init(&gpt, cfg, eng, 1, 0, 1) == ZERO_OK,
          "engine and model: %s", zero_last_error());
    if (!gpt) return;
    randomize(eng, 0.1);
    zero_ckpt_engine_layout_t lay;
    CHECK(zero_ckpt_engine_layout_init(&lay, eng) == ZERO_OK, "layout");
    zero_ckpt_save_params_t sp = zero_ckpt_save_params_default();
    sp.save_dir = save_dir;
    sp.world = 1;
    sp.with_optim = 0;
    char json[200];
    snprintf(json, sizeof json,
             "{\"layers\": %d, \"heads\": %d, \"dim\": %d, \"vocab\": %d, \"seq\": %d}",
             cfg->layers, cfg->heads, cfg->dim, cfg->vocab, cfg->seq);
    zero_ckpt_meta_t meta = {0};
    meta.step = 1;
    meta.model_json = json;
    zero_ckpt_shard_io_t io = zero_ckpt_engine_io(eng);
    CHECK(zero_ckpt_save(&sp, &lay.layout, &meta, &io, NULL, 0) == ZERO_OK, "save %s: %s", save_dir,
          zero_last_error());
    zero_ckpt_engine_layout_free(&lay);
    zero__gpt_free(gpt);
    zero_engine_free(eng);
}

/* Bytes of one block of dim 64 as the generator stores it: each tensor in es-byte elements (or,
 * for the four matrices with bits 8 or 4, rows of int8 or packed int4 with one fp32 scale per
 * 64), rounded up to 64 bytes. */
static size_t block_bytes(size_t es, int bits) {
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
