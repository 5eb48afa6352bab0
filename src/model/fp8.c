/* fp8.c — FP8 compute of the GPT's linear layers: scales and the quantize-dequantize of a GEMM
 * input (fp8.h).
 *
 * Tensors of the delayed recipe are numbered (layer, linear, role): one scale, one step amax
 * and one history each, in three flat fp32 arrays of one allocation (ZERO_MEM_OTHER). The step's
 * amax is a max, so a checkpointed block's recomputed forward may record it again unchanged.
 * Blockwise: no state; the scales come from the values at hand.
 */
#include "model/fp8.h"

#include "core/core_internal.h"

#include <stdlib.h>
#include <string.h>

struct zero_fp8 {
    zero_fp8_config_t cfg;
    size_t tensors;  /* layers x ZERO_FP8_LINEARS x ZERO_FP8_ROLE_COUNT (delayed), else 0 */
    float *scale;    /* (tensors) the scales in force */
    float *amax;     /* (tensors) this step's amax so far */
    float *history;  /* (tensors, history_len) */
    void *mem_block; /* owned: scale, amax and history */
};

static const char *const recipe_names[] = {"delayed", "blockwise"};
_Static_assert(ZERO_ARRAY_LEN(recipe_names) == ZERO_FP8_RECIPE_COUNT, "recipe name table");

const char *zero__fp8_recipe_name(int recipe) {
    return (unsigned)recipe < ZERO_FP8_RECIPE_COUNT ? recipe_names[recipe] : "?";
}

static size_t tensor_count(const zero_fp8_config_t *cfg, int layers) {
    if (!cfg->enabled || cfg->recipe != ZERO_FP8_DELAYED || layers < 1) return 0;
    return (size_t)layers * ZERO_FP8_LINEARS * ZERO_FP8_ROLE_COUNT;
}

size_t zero__fp8_state_bytes(const zero_fp8_config_t *cfg, int layers) {
    return tensor_count(cfg, layers) * (2 + (size_t)cfg->history_len) * sizeof(float);
}

zero_status_t zero__fp8_init(zero_fp8_t **out, const zero_fp8_config_t *cfg, int layers,
                             zero_mem_t *mem) {
    *out = NULL;
    if (!cfg->enabled) return ZERO_OK;
    zero_fp8_t *s = calloc(1, sizeof *s);
    if (!s) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "fp8: out of memory");
    s->cfg = *cfg;
    s->tensors = tensor_count(cfg, layers);
    const size_t bytes = zero__fp8_state_bytes(cfg, layers);
    if (bytes) {
        s->mem_block = zero_mem_alloc(mem, ZERO_MEM_OTHER, bytes, 64);
        if (!s->mem_block) {
            free(s);
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "fp8: cannot allocate %zu bytes of scaling state", bytes);
        }
        memset(s->mem_block, 0, bytes);
        s->scale = s->mem_block;
        s->amax = s->scale + s->tensors;
        s->history = s->amax + s->tensors;
        for (size_t i = 0; i < s->tensors; i++) s->scale[i] = 1.0f;
    }
    *out = s;
    return ZERO_OK;
}

void zero__fp8_free(zero_fp8_t *s) {
    if (!s) return;
    zero_mem_free(s->mem_block);
    free(s);
}

static zero__fp8_format_t format_of(const zero_fp8_t *s, zero_fp8_role_t role) {
    return role == ZERO_FP8_DY && s->cfg.hybrid ? ZERO__FP8_E5M2 : ZERO__FP8_E4M3;
}

void zero__fp8_input(zero_fp8_t *s, void *out, const void *x, zero_dtype_t dt, size_t rows,
                     size_t cols, int layer, int linear, zero_fp8_role_t role, int record,
                     int threads) {
    const zero__fp8_format_t f = format_of(s, role);
    if (s->cfg.recipe == ZERO_FP8_BLOCKWISE) {
        /* DeepSeek's 1e-4 floor suits activations and weights; dY of a mean loss is about
         * 1 / tokens and smaller, where that floor would leave a tile a few codes: gradient
         * tiles take their own amax (a zero tile scale 1). */
        zero__fp8_qdq_tiles(out, x, dt, rows, cols, role == ZERO_FP8_W ? ZERO__FP8_TILE : 1,
                            role == ZERO_FP8_DY ? 0.0f : ZERO__FP8_AMAX_FLOOR, f, threads);
        return;
    }
    const size_t t =
        ((size_t)layer * ZERO_FP8_LINEARS + (size_t)linear) * ZERO_FP8_ROLE_COUNT + (size_t)role;
    ZERO_ASSERT(t < s->tensors);
    if (record) {
        float a = zero__fp8_amax(x, dt, rows * cols, threads);
        if (a > s->amax[t]) s->amax[t] = a;
    }
    zero__fp8_qdq(out, x, dt, rows * cols, s->scale[t], f, threads);
}

float *zero__fp8_step_amax(zero_fp8_t *s, size_t *count) {
    *count = s ? s->tensors : 0;
    return *count ? s->amax : NULL;
}

void zero__fp8_update(zero_fp8_t *s) {
    if (!s) return;
    const size_t len = (size_t)s->cfg.history_len;
    for (size_t t = 0; t < s->tensors; t++) {
        const float fmax = zero__fp8_max(format_of(s, (zero_fp8_role_t)(t % ZERO_FP8_ROLE_COUNT)));
        zero__fp8_delayed_update(&s->scale[t], s->history + t * len, len, s->amax[t], fmax,
                                 s->cfg.margin);
        s->amax[t] = 0.0f;
    }
}

size_t zero__fp8_saved_count(const zero_fp8_t *s) {
    return s ? s->tensors * (1 + (size_t)s->cfg.history_len) : 0;
}

void zero__fp8_save(const zero_fp8_t *s, float *out) {
    const size_t n = zero__fp8_saved_count(s);
    if (!n) return;
    memcpy(out, s->scale, s->tensors * sizeof *out);
    memcpy(out + s->tensors, s->history, (n - s->tensors) * sizeof *out);
}

zero_status_t zero__fp8_load(zero_fp8_t *s, const float *in, size_t count) {
    const size_t n = zero__fp8_saved_count(s);
    if (count != n)
        return zero__error(ZERO_ERR_MISMATCH,
                           "fp8 scaling state of %zu values where this run keeps %zu (expected "
                           "the same fp8.recipe, fp8.amax_history_len and model.layers)",
                           count, n);
    if (!n) return ZERO_OK;
    memcpy(s->scale, in, s->tensors * sizeof *in);
    memcpy(s->history, in + s->tensors, (n - s->tensors) * sizeof *in);
    memset(s->amax, 0, s->tensors * sizeof *s->amax);
    return ZERO_OK;
}
