/* layout.c — units: the padded layout, buffer allocation by stage, initialisation, queries and
 * the read/write paths for checkpoints and tests.
 *
 * Not here: anything that communicates (buckets.c, fetch.c, step.c).
 * Invariants: the layout rule of core (zero__padded_count): tensor offsets are multiples of 16
 * elements; a unit's padded length is a multiple of its group's size x 16 (x 256 with 8-bit
 * optimizer states), so every shard starts 64-byte aligned; padding stays zero. Initial values
 * depend only on (seed, unit, tensor, element), never on the stage or world size.
 */
#include "engine_internal.h"

#include "optim/adamw.h"

#include <math.h>
#include <string.h>

zero__unit_t *zero__engine_unit(const zero_engine_t *eng, int u) {
    if (!eng || u < 0 || u >= eng->unit_count) {
        zero__error(ZERO_ERR_INVALID_ARG, "unit %d does not exist (the engine has %d units)", u,
                    eng ? eng->unit_count : 0);
        return NULL;
    }
    return &eng->units[u];
}

void zero__unit_free_buffers(zero__unit_t *un) {
    zero_mem_free(un->full);
    zero_mem_free(un->shard);
    zero_mem_free(un->sec);
    zero_mem_free(un->loco);
    zero_mem_free(un->master);
    zero_mem_free(un->work);
    zero_mem_free(un->acc);
    zero_mem_free(un->m);
    zero_mem_free(un->v);
    zero__q8_free(un);
    zero__onebit_free(un);
    free(un->tensors);
    free(un->tensor_names);
    free(un->offsets);
    free(un->counts);
    memset(un, 0, sizeof *un);
}

/* splitmix64: a counter-based generator, so element i of a tensor gets the same value no matter
 * which rank or shard computes it. */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double uniform_open(uint64_t bits) { /* (0, 1]: safe for log() */
    return ((double)(bits >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

/* Elements [lo, hi) of a tensor's initial values into dst[0 .. hi - lo): the same bits as a
 * whole-tensor fill, so a stage-3 rank can initialise its shard without a full scratch copy.
 * Elements of the logical tensor: a stacked unit's copy c starts at c x its count (copy_base). */
static void init_tensor_range(float *dst, size_t lo, size_t hi, const zero_tensor_desc_t *d,
                              uint64_t seed, int unit, int tensor) {
    if (lo >= hi) return;
    switch (d->init) {
    case ZERO_INIT_ZEROS: memset(dst, 0, (hi - lo) * sizeof *dst); break;
    case ZERO_INIT_ONES:
        for (size_t i = lo; i < hi; i++) dst[i - lo] = 1.0f;
        break;
    case ZERO_INIT_NORMAL: {
        uint64_t key = mix64(seed ^ mix64(((uint64_t)unit << 32) | (uint64_t)tensor));
        for (size_t i = lo & ~(size_t)1; i < hi; i += 2) {
            /* Box-Muller: one pair of uniforms gives two normals (elements i and i+1). */
            double u1 = uniform_open(mix64(key + 2 * i));
            double u2 = uniform_open(mix64(key + 2 * i + 1));
            double r = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
            if (i >= lo) dst[i - lo] = (float)(d->init_std * r * cos(th));
            if (i + 1 >= lo && i + 1 < hi) dst[i + 1 - lo] = (float)(d->init_std * r * sin(th));
        }
        break;
    }
    default: ZERO_ASSERT(0);
    }
}

/* Where copy grp->copy of a stacked unit's tensor t starts in its logical tensor. */
static size_t copy_base(const zero__unit_t *u, int t) {
    return (size_t)u->grp->copy * u->counts[t];
}

static zero_status_t check_tensors(const char *name, const zero_tensor_desc_t *tensors, int count) {
    for (int t = 0; t < count; t++) {
        const zero_tensor_desc_t *d = &tensors[t];
        if (!d->name || !d->name[0] || strlen(d->name) >= ZERO__NAME_MAX_LEN)
            return zero__error(ZERO_ERR_INVALID_ARG,
                               "unit '%s': tensor %d needs a name of 1..%d characters", name, t,
                               ZERO__NAME_MAX_LEN - 1);
        if (d->ndim < 1 || d->ndim > ZERO_TENSOR_MAX_DIMS)
            return zero__error(ZERO_ERR_INVALID_ARG,
                               "unit '%s' tensor '%s': ndim %d is invalid (expected 1..%d)", name,
                               d->name, d->ndim, ZERO_TENSOR_MAX_DIMS);
        for (int k = 0; k < d->ndim; k++)
            if (d->shape[k] == 0)
                return zero__error(ZERO_ERR_INVALID_ARG,
                                   "unit '%s' tensor '%s': dimension %d is 0 (expected >= 1)", name,
                                   d->name, k);
        if ((unsigned)d->init >= ZERO_INIT_COUNT)
            return zero__error(ZERO_ERR_INVALID_ARG, "unit '%s' tensor '%s': init %d is invalid",
                               name, d->name, (int)d->init);
        for (int s = 0; s < t; s++)
            if (!strcmp(tensors[s].name, d->name))
                return zero__error(ZERO_ERR_INVALID_ARG,
                                   "unit '%s' declares tensor '%s' twice (names must be unique)",
                                   name, d->name);
    }
    return ZERO_OK;
}

zero_status_t zero__master_io(const zero_engine_t *eng, const zero__unit_t *un, size_t offset,
                              size_t count, float *out, const float *in) {
    const int sharded = zero__unit_sharded(un);
    const size_t plo = sharded ? zero__shard_lo(un) : 0;
    void *held = un->full;
    if (sharded) { /* the shard, mapped (offload_param: read from its swap file) */
        zero_status_t st = zero__shard_map(eng, un, &held);
        if (st) return st;
    }
    void *params = zero__elem(held, offset - plo, eng->ce);
    size_t mlo, mn;
    zero__optim_held_range(eng, un, ZERO_ENGINE_STATE_MASTER, &mlo, &mn);
    size_t a = ZERO_MAX(offset, mlo), b = ZERO_MIN(offset + count, mlo + mn);
    if (out)
        zero__widen(out, params, count, eng->params.compute_dtype);
    else
        zero__narrow(params, in, count, eng->params.compute_dtype);
    if (sharded) zero__shard_unmap(eng, un, out == NULL);
    if (a >= b) return ZERO_OK;
    /* the fp32 master's part, through the residency of the optimizer's states */
    const zero__optim_residency_t *res = &eng->residency;
    const int u = (int)(un - eng->units);
    void *m = NULL;
    zero_status_t st = res->map(res->ctx, u, ZERO_ENGINE_STATE_MASTER, a, b - a, &m);
    if (st) return st;
    if (out)
        memcpy(out + (a - offset), m, (b - a) * sizeof(float));
    else
        memcpy(m, in + (a - offset), (b - a) * sizeof(float));
    return res->unmap(res->ctx, u, ZERO_ENGINE_STATE_MASTER, m, a, b - a, out == NULL);
}

/* 16-bit compute: the initial values of the params range (the full unit, or stage 3's shard)
 * in chunks through the engine's scratch, rounded into the params and copied exactly into the
 * fp32 master where the master range (a subrange: stage 0 full, else the owned shard) covers
 * them. Chunks keep the bits of a whole-tensor fill (init_tensor_range). */
static zero_status_t init_lowp(zero_engine_t *eng, zero__unit_t *u, int index) {
    const size_t P = u->padded_count, S = u->shard_count, lo = zero__shard_lo(u);
    const int sharded = zero__unit_sharded(u);
    const size_t plo = sharded ? lo : 0, pn = sharded ? S : P;
    for (int t = 0; t < u->tensor_count; t++) {
        size_t a0 = ZERO_MAX(u->offsets[t], plo);
        size_t b0 = ZERO_MIN(u->offsets[t] + u->counts[t], plo + pn);
        for (size_t a = a0; a < b0; a += ZERO__SCRATCH_COUNT) {
            size_t b = ZERO_MIN(b0, a + ZERO__SCRATCH_COUNT);
            const size_t base = copy_base(u, t) - u->offsets[t];
            init_tensor_range(eng->scratch, base + a, base + b, &u->tensors[t], eng->params.seed,
                              index, t);
            zero_status_t st = zero__master_io(eng, u, a, b - a, NULL, eng->scratch);
            if (st) return st;
        }
    }
    return ZERO_OK;
}

/* Allocate the stage's buffers (see the memory theory in engine.h) and fill the parameters. */
static zero_status_t alloc_unit(zero_engine_t *eng, zero__unit_t *u, int index) {
    const zero__stage_policy_t pol = eng->pol;
    const size_t P = u->padded_count, S = u->shard_count, f = sizeof(float);
    const size_t ce = eng->ce, ae = eng->ae;
    zero_mem_t *mem = eng->mem;
    u->persistent =
        pol.shard_params && (int64_t)u->param_count <= eng->params.persistence_threshold_elems;
    /* hpZ: the secondary shard, P_u / h elements, for the whole run (filled at a step's first
     * gather of the unit) */
    if (zero__hpz_unit(eng, u)) {
        u->sec = zero_mem_calloc(mem, ZERO_MEM_PARAMS, zero__hpz_count(eng, u) * ce, 64);
        if (!u->sec)
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "engine: out of memory for the hpZ secondary shard of unit '%s'",
                               u->name);
    }
    /* offload_param nvme: the shard lives in its own swap file, made before the fill below. */
    if (eng->pswap && pol.shard_params && !u->persistent) {
        zero_status_t st = zero__pswap_add_unit(eng, index);
        if (st) return st;
        u->poff = 1;
        u->goff = eng->gswap != NULL; /* its gradient accumulator too */
    }
    /* Offloaded states live in the unit's swap file, made before the master's fill below. */
    if (eng->swap) {
        zero_status_t st = zero__swap_add_unit(eng, index);
        if (st) return st;
    }
    if (eng->lowp) {
        /* The fp32 master beside the 16-bit params: optimizer state (12 bytes per element with
         * m and v), so it is accounted under ZERO_MEM_OPTIM as in the paper's breakdown. */
        if (!eng->swap) {
            u->master = zero_mem_calloc(
                mem, ZERO_MEM_OPTIM,
                (pol.shard_optim ? S : P) * zero__optim_states[ZERO_ENGINE_STATE_MASTER].esize, 64);
            if (!u->master) goto fail;
        }
        if (!pol.shard_params || u->persistent)
            u->full = zero_mem_calloc(mem, ZERO_MEM_PARAMS, P * ce, 64);
        else if (!u->poff)
            u->shard = zero_mem_calloc(mem, ZERO_MEM_PARAMS, S * ce, 64);
        if (!u->full && !zero__unit_sharded(u)) goto fail;
        zero_status_t st = init_lowp(eng, u, index);
        if (st) return st;
        if (zero__fp8w_unit(eng, u)) /* the initial values on the E4M3 grid (fp8w.c) */
            zero__fp8w_round(eng, u, u->shard ? u->shard : u->full,
                             u->shard ? zero__shard_lo(u) : 0, u->shard ? zero__shard_lo(u) : 0,
                             u->shard ? S : P);
    } else if (!pol.shard_params || u->persistent) {
        u->full = zero_mem_calloc(mem, ZERO_MEM_PARAMS, P * f, 64);
        if (!u->full) goto fail;
        for (int t = 0; t < u->tensor_count; t++)
            init_tensor_range((float *)u->full + u->offsets[t], copy_base(u, t),
                              copy_base(u, t) + u->counts[t], &u->tensors[t], eng->params.seed,
                              index, t);
    } else {
        /* Only the owned range [lo, lo + S), straight into the shard: a full-size scratch
         * would be a transient P-sized allocation per unit, and freeing such blocks makes
         * glibc raise its mmap threshold and keep later freed memory resident. */
        void *shard = NULL;
        if (!u->poff) {
            u->shard = zero_mem_calloc(mem, ZERO_MEM_PARAMS, S * f, 64);
            if (!u->shard) goto fail;
        }
        zero_status_t st = zero__shard_map(eng, u, &shard);
        if (st) return st;
        const size_t lo = zero__shard_lo(u);
        for (int t = 0; t < u->tensor_count; t++) {
            size_t a = ZERO_MAX(u->offsets[t], lo);
            size_t b = ZERO_MIN(u->offsets[t] + u->counts[t], lo + S);
            const size_t base = copy_base(u, t) - u->offsets[t];
            if (a < b)
                init_tensor_range((float *)shard + (a - lo), base + a, base + b, &u->tensors[t],
                                  eng->params.seed, index, t);
        }
        zero__shard_unmap(eng, u, 1);
    }
    if (!pol.shard_grads) {
        u->work = zero_mem_calloc(mem, ZERO_MEM_GRADS, zero__work_count(u) * ce, 64);
        if (!u->work) goto fail;
    }
    if (!u->goff && !zero__one_grad_buffer(eng, u)) {
        u->acc = zero_mem_calloc(mem, ZERO_MEM_GRADS, S * ae, 64);
        if (!u->acc) goto fail;
    }
    if (eng->pswap) {
        zero_status_t st = zero__pswap_sync(eng); /* the fill is on disk */
        if (st) return st;
    }
    if (eng->swap) return zero__swap_sync(eng); /* the fill is on disk */
    if (eng->q8) {
        if (zero__q8_alloc(eng, u)) goto fail;
        return ZERO_OK;
    }
    size_t mcount = pol.shard_optim ? S : P;
    u->m = zero_mem_calloc(mem, ZERO_MEM_OPTIM,
                           mcount * zero__optim_states[ZERO_ENGINE_STATE_ADAM_M].esize, 64);
    u->v = zero_mem_calloc(mem, ZERO_MEM_OPTIM,
                           mcount * zero__optim_states[ZERO_ENGINE_STATE_ADAM_V].esize, 64);
    if (!u->m || !u->v) goto fail;
    if (zero__onebit_alloc(eng, u)) goto fail;
    return ZERO_OK;
fail:
    return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                       "engine: cannot allocate unit '%s' (%zu parameters, %zu padded, stage %d)",
                       u->name, u->param_count, P, eng->params.stage);
}

static zero_status_t add_unit(zero_engine_t *eng, int group, const char *name,
                              const zero_tensor_desc_t *tensors, int count, int exact,
                              int *unit_out);

zero_status_t zero_engine_add_unit(zero_engine_t *eng, const char *name,
                                   const zero_tensor_desc_t *tensors, int count, int *unit_out) {
    return add_unit(eng, 0, name, tensors, count, 0, unit_out);
}

zero_status_t zero_engine_add_group(zero_engine_t *eng, int color, int *group_out) {
    if (!eng || !group_out)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_add_group: NULL argument");
    if (eng->step > 0 || eng->event_count > 0)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "zero_engine_add_group: partition group (color %d) added after training "
                           "started (add groups before the first fetch)",
                           color);
    return zero__xfer_group_split(eng, color, group_out);
}

zero_status_t zero_engine_unit_group(const zero_engine_t *eng, int u, int *group_size, int *copy,
                                     int *copies) {
    const zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un) return ZERO_ERR_INVALID_ARG;
    if (group_size) *group_size = un->grp->size;
    if (copy) *copy = un->grp->copy;
    if (copies) *copies = un->grp->copies;
    return ZERO_OK;
}

zero_status_t zero_engine_set_unit_slots(zero_engine_t *eng, int u, int slots) {
    zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un) return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_set_unit_slots: no unit %d", u);
    const int copies = un->grp->copies;
    if (slots < 1 || (slots != 1 && slots != copies))
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "zero_engine_set_unit_slots: unit %d '%s': slots %d is invalid "
                           "(expected 1, or the unit's copies %d: one partial per source rank of "
                           "its expert-parallel block%s)",
                           u, un->name, slots, copies,
                           copies == 1 ? "; a unit with one copy takes 1" : "");
    if (slots > 1 && eng->params.onebit)
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_engine_set_unit_slots: unit %d '%s': optimizer.type OneBitAdam "
                           "(1-bit Adam) takes one slot (expected model.moe.ep_size 1)",
                           u, un->name);
    if (eng->event_count > 0 || eng->xfer.have_last)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "zero_engine_set_unit_slots: unit %d '%s': slots set after training "
                           "started (set them before the first fetch)",
                           u, un->name);
    if (slots == un->slots) return ZERO_OK;
    un->slots = slots;
    /* one slot over a one-rank group keeps one gradient buffer, more need the accumulator too
     * (zero__one_grad_buffer); both zero before training */
    if (zero__one_grad_buffer(eng, un)) {
        zero_mem_free(un->acc);
        un->acc = NULL;
    } else if (!un->acc && !un->goff) {
        un->acc = zero_mem_calloc(eng->mem, ZERO_MEM_GRADS, un->shard_count * eng->ae, 64);
        if (!un->acc)
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "engine: no memory for the gradient accumulator of unit '%s'",
                               un->name);
    }
    if (!un->work) return ZERO_OK;
    /* Stages 0-1 own the working buffer for good: one of the new size, the old one freed first
     * (zeros: nothing to keep; should the allocation fail, zero_unit_grads tries again). */
    zero_mem_free(un->work);
    un->work = zero_mem_calloc(eng->mem, ZERO_MEM_GRADS, zero__work_count(un) * eng->ce, 64);
    if (!un->work)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                           "engine: no memory for the %d gradient slots of unit '%s'", slots,
                           un->name);
    return ZERO_OK;
}

int zero_engine_unit_slots(const zero_engine_t *eng, int u) {
    const zero__unit_t *un = zero__engine_unit(eng, u);
    return un ? un->slots : 0;
}

/* A unit declared through zero_engine_add_unit_in, in any group, world included, sums its norm
 * exactly (engine.h): at ep 1 an MoE model's experts are such a unit of the world, and their
 * share must be the one they have as a stacked unit at any other ep. */
zero_status_t zero_engine_add_unit_in(zero_engine_t *eng, int group, const char *name,
                                      const zero_tensor_desc_t *tensors, int count, int *unit_out) {
    return add_unit(eng, group, name, tensors, count, 1, unit_out);
}

static zero_status_t add_unit(zero_engine_t *eng, int group, const char *name,
                              const zero_tensor_desc_t *tensors, int count, int exact,
                              int *unit_out) {
    if (eng && (group < 0 || group >= eng->group_count))
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "unit '%s': partition group %d does not exist (the engine has %d)",
                           name ? name : "(null)", group, eng->group_count);
    if (!eng || !name || !tensors || count < 1)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "zero_engine_add_unit: engine, name and at least one tensor are "
                           "required (got %d tensors)",
                           count);
    /* its mean over a smaller group is not the world's (onebit.c averages over the group) */
    if (eng->params.onebit && group != 0)
        return zero__error(ZERO_ERR_CONFIG,
                           "unit '%s' in partition group %d: optimizer.type OneBitAdam (1-bit "
                           "Adam) takes units of the world only (expected model.moe.ep_size 1)",
                           name, group);
    if (strlen(name) >= ZERO__NAME_MAX_LEN)
        return zero__error(ZERO_ERR_INVALID_ARG, "unit name '%s' is longer than %d characters",
                           name, ZERO__NAME_MAX_LEN - 1);
    if (eng->step > 0 || eng->event_count > 0)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "unit '%s' declared after training started (declare every unit before "
                           "the first fetch)",
                           name);
    zero_status_t st = check_tensors(name, tensors, count);
    if (st) return st;
    if (eng->unit_count == eng->unit_cap) {
        int cap = eng->unit_cap ? 2 * eng->unit_cap : 16;
        zero__unit_t *nu = realloc(eng->units, (size_t)cap * sizeof *nu);
        if (!nu) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "engine: out of memory for units");
        eng->units = nu;
        eng->unit_cap = cap;
    }
    zero__unit_t u;
    memset(&u, 0, sizeof u);
    snprintf(u.name, sizeof u.name, "%s", name);
    u.tensor_count = count;
    u.tensors = calloc((size_t)count, sizeof *u.tensors);
    u.tensor_names = calloc((size_t)count, sizeof *u.tensor_names);
    u.offsets = calloc((size_t)count, sizeof *u.offsets);
    u.counts = calloc((size_t)count, sizeof *u.counts);
    if (!u.tensors || !u.tensor_names || !u.offsets || !u.counts) {
        zero__unit_free_buffers(&u);
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "engine: out of memory for unit '%s'", name);
    }
    size_t off = 0;
    for (int t = 0; t < count; t++) {
        u.tensors[t] = tensors[t];
        snprintf(u.tensor_names[t], ZERO__NAME_MAX_LEN, "%s", tensors[t].name);
        u.tensors[t].name = u.tensor_names[t];
        size_t n = 1;
        for (int k = 0; k < tensors[t].ndim; k++) n *= tensors[t].shape[k];
        u.offsets[t] = off;
        u.counts[t] = n;
        u.param_count += n;
        off += zero__tensor_span(n);
    }
    /* Layout rule of ARCHITECTURE.md section 3, over the unit's partition group. */
    u.grp = &eng->groups[group];
    u.slots = 1;
    u.exact = exact;
    /* (with 8-bit optimizer states a multiple of group size x 256: q8state.c) */
    u.padded_count = zero__align_up(off, (size_t)u.grp->size * zero__pad_quantum(eng));
    u.shard_count = u.padded_count / (size_t)u.grp->size;
    /* Allocated in its slot (not counted yet): the initial fill of a 16-bit master reaches it
     * through the residency of the optimizer's states, which finds units by index. */
    int index = eng->unit_count;
    eng->units[index] = u;
    st = alloc_unit(eng, &eng->units[index], index);
    if (st) {
        zero__swap_drop_unit(eng, index);
        zero__pswap_drop_unit(eng, index);
        zero__unit_free_buffers(&eng->units[index]);
        return st;
    }
    eng->unit_count++;
    eng->exact_units += exact;
    if (unit_out) *unit_out = index;
    return ZERO_OK;
}

int zero_engine_unit_count(const zero_engine_t *eng) { return eng ? eng->unit_count : 0; }

const char *zero_engine_unit_name(const zero_engine_t *eng, int u) {
    const zero__unit_t *un = zero__engine_unit(eng, u);
    return un ? un->name : NULL;
}

size_t zero_engine_unit_param_count(const zero_engine_t *eng, int u) {
    const zero__unit_t *un = zero__engine_unit(eng, u);
    return un ? un->param_count : 0;
}

size_t zero_engine_unit_padded_count(const zero_engine_t *eng, int u) {
    const zero__unit_t *un = zero__engine_unit(eng, u);
    return un ? un->padded_count : 0;
}

size_t zero_engine_param_count(const zero_engine_t *eng) {
    size_t n = 0;
    for (int i = 0; eng && i < eng->unit_count; i++) n += eng->units[i].param_count;
    return n;
}

int zero_engine_tensor_count(const zero_engine_t *eng, int u) {
    const zero__unit_t *un = zero__engine_unit(eng, u);
    return un ? un->tensor_count : 0;
}

size_t zero_engine_tensor_offset(const zero_engine_t *eng, int u, int t) {
    const zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un || t < 0 || t >= un->tensor_count) return (size_t)-1;
    return un->offsets[t];
}

const zero_tensor_desc_t *zero_engine_tensor_desc(const zero_engine_t *eng, int u, int t) {
    const zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un || t < 0 || t >= un->tensor_count) return NULL;
    return &un->tensors[t];
}

zero_status_t zero_engine_shard_range(const zero_engine_t *eng, int u, size_t *offset,
                                      size_t *count) {
    const zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un) return ZERO_ERR_INVALID_ARG;
    if (offset) *offset = zero__shard_lo(un);
    if (count) *count = un->shard_count;
    return ZERO_OK;
}

/* Where [offset, offset + count) of unit u lives for reading or writing parameters (a pointer
 * to the element in the compute dtype); a shard is mapped (zero__shard_map): the caller unmaps
 * it when *mapped is set. */
static zero_status_t param_range(const zero_engine_t *eng, int u, size_t offset, size_t count,
                                 void **ptr, int *mapped) {
    zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un) return ZERO_ERR_INVALID_ARG;
    if (offset > un->padded_count || count > un->padded_count - offset)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "range [%zu, %zu) leaves unit %d '%s' of %zu elements", offset,
                           offset + count, u, un->name, un->padded_count);
    *mapped = 0;
    if (zero__unit_sharded(un)) {
        size_t lo = zero__shard_lo(un);
        if (offset < lo || offset + count > lo + un->shard_count)
            return zero__error(ZERO_ERR_INVALID_ARG,
                               "range [%zu, %zu) of unit %d '%s' is not on rank %d under stage 3 "
                               "(it owns [%zu, %zu))",
                               offset, offset + count, u, un->name, eng->rank, lo,
                               lo + un->shard_count);
        void *shard = NULL;
        zero_status_t st = zero__shard_map(eng, un, &shard);
        if (st) return st;
        *mapped = 1;
        *ptr = zero__elem(shard, offset - lo, eng->ce);
        return ZERO_OK;
    }
    *ptr = zero__elem(un->full, offset, eng->ce);
    return ZERO_OK;
}

zero_status_t zero_engine_params_read(const zero_engine_t *eng, int u, size_t offset, size_t count,
                                      float *out) {
    void *p = NULL;
    int mapped = 0;
    zero_status_t st = zero__overlap_refuse(eng, "zero_engine_params_read");
    if (!st) st = param_range(eng, u, offset, count, &p, &mapped);
    if (st) return st;
    zero__widen(out, p, count, eng->params.compute_dtype);
    if (mapped) zero__shard_unmap(eng, &eng->units[u], 0);
    return ZERO_OK;
}

zero_status_t zero_engine_params_write(zero_engine_t *eng, int u, size_t offset, size_t count,
                                       const float *in) {
    void *p = NULL;
    int mapped = 0;
    zero_status_t st = zero__overlap_refuse(eng, "zero_engine_params_write");
    if (!st) st = param_range(eng, u, offset, count, &p, &mapped);
    if (st) return st;
    if (eng->lowp) /* the master takes the written values exactly where this rank holds it */
        st = zero__master_io(eng, &eng->units[u], offset, count, NULL, in);
    else
        zero__narrow(p, in, count, eng->params.compute_dtype); /* fp32: a copy */
    if (!st && zero__fp8w_unit(eng, &eng->units[u]))
        st = zero__fp8w_refresh(eng, &eng->units[u], offset, count);
    if (mapped) zero__shard_unmap(eng, &eng->units[u], 1);
    zero__hpz_invalidate(eng);
    return st;
}

zero_status_t zero_engine_grads_read(zero_engine_t *eng, int u, size_t offset, size_t count,
                                     float *out) {
    zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un) return ZERO_ERR_INVALID_ARG;
    if (zero__overlap_refuse(eng, "zero_engine_grads_read")) return ZERO_ERR_INVALID_ARG;
    size_t lo = zero__shard_lo(un);
    if (offset < lo || offset > lo + un->shard_count || count > lo + un->shard_count - offset)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "gradient range [%zu, %zu) of unit %d '%s' is not on rank %d (it owns "
                           "[%zu, %zu) of %zu elements)",
                           offset, offset + count, u, un->name, eng->rank, lo, lo + un->shard_count,
                           un->padded_count);
    /* The accumulator is complete only once the posted reduce-scatters have landed. Draining
     * posts nothing new for an empty bucket, so this is safe when called on one rank only if
     * the current bucket is empty; the model calls it after grads_done on every rank. */
    zero_status_t st = zero__buckets_drain(eng);
    if (st) return st;
    if (un->pending) { /* one rank: the gradient is still in the working buffer (buckets.c) */
        zero__widen(out, zero__elem(un->work, offset - lo, eng->ce), count,
                    eng->params.compute_dtype);
        return ZERO_OK;
    }
    if (!un->acc && !un->goff) { /* zero__one_grad_buffer: nothing handed back yet */
        memset(out, 0, count * sizeof *out);
        return ZERO_OK;
    }
    void *acc = NULL;
    if ((st = zero__acc_map(eng, un, ZERO__ACC_ZERO, &acc))) return st;
    zero__widen(out, zero__elem(acc, offset - lo, eng->ae), count, eng->params.grad_accum_dtype);
    return zero__acc_unmap(eng, un, 0);
}
