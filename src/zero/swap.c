/* swap.c — the optimizer's states in swap files (ZeRO-Infinity's optimizer offload to NVMe): a
 * residency (optim/adamw.h) whose tiles are read from and written to disk through src/io.
 *
 * Files: one per unit and rank, `zero-<pid>-r<rank>-u<unit>.swp` under offload_optimizer's
 * nvme_path, created and preallocated when the unit is declared (a full disk fails there, naming
 * the path and the bytes), deleted with the engine: scratch, never part of a checkpoint. A file
 * holds, one region after the other (each rounded up to 4 KiB), what this rank holds of each
 * swapped state: Adam's m and v, and with 16-bit compute the fp32 master (with fp32 compute the
 * master is the parameters, which stay in RAM: those maps go to the RAM residency). A new file
 * reads as zeros, which is what m and v start as; the master's first values are written by the
 * engine's initial fill through map.
 *
 * Sub-groups: the held range of a unit is cut into sub-groups of G elements (sub_group_size,
 * rounded down to whole 4 KiB pages of fp32, capped by the unit). A staging slot holds one
 * sub-group of every swapped state; there are buffer_count slots, each sized for the largest
 * sub-group, allocated when a unit that needs them is declared. The step maps tiles inside one
 * sub-group (it cuts its tiles at sub_group boundaries: zero__swap_tile_elems), so a map is the
 * slot of that sub-group: made current by waiting for its read-ahead or reading it now. Moving
 * to another sub-group posts the write-back of the one left if it was written
 * (pipeline_write: not waited for; else waited at once) and the read-ahead of the next one in the
 * step's order — units in order, sub-groups in order, after the last the first, for the next
 * step (pipeline_read). A map that spans sub-groups (checkpoint I/O, the fingerprint, the initial
 * fill) takes the slow path: every write finished, a buffer of its own read and, if written,
 * written back at unmap, the slots of that unit dropped.
 *
 * Not here: the I/O itself (io/aio.h: io_uring or a thread pool, O_DIRECT, a CRC32C per page
 * verified on every read: a torn or flipped page is a named error, never a wrong step), which
 * ranges the step updates (step.c).
 * Invariants: at most one slot holds a given sub-group; the current slot is the only one that
 * can be dirty; a sub-group is never read while a write of it is in flight (its slot is found
 * and waited instead).
 */
#include "engine_internal.h"

#include "core/fileio.h"
#include "io/aio.h"

#include <string.h>
#include <unistd.h>

#define QUANTUM (ZERO__AIO_ALIGN / sizeof(float)) /* elements: a sub-group is whole pages */
#define SLOW_MAX 8

typedef enum { SLOT_FREE, SLOT_READING, SLOT_READY, SLOT_CURRENT, SLOT_WRITING } slot_state_t;

typedef struct slot {
    float *buf; /* nstates x cap elements, state i at buf + i * cap */
    slot_state_t state;
    int unit, group; /* the sub-group held (not FREE) */
    int dirty;       /* CURRENT: written since it was read */
    zero__aio_req_t *reqs[ZERO_ENGINE_STATE_COUNT];
    int nreq;
    uint64_t seq; /* when it last changed state: the oldest is recycled first */
} slot_t;

typedef struct swap_unit {
    zero__aio_file_t *file;
    size_t lo, n;         /* the held range, elements of the padded unit */
    int64_t region_bytes; /* of each state, rounded up to 4 KiB */
    int groups;           /* sub-groups: ceil(n / G) */
} swap_unit_t;

typedef struct slow_map { /* a map that spans sub-groups */
    float *buf;
    void *ptr;
    int unit, idx;
    int64_t off_bytes; /* in the state's region */
    size_t bytes;
} slow_map_t;

struct zero__swap {
    zero_engine_t *eng;
    zero__aio_t *aio; /* the engine's (borrowed) */
    int nstates;
    int idx[ZERO_ENGINE_STATE_COUNT]; /* region of each state, -1: not swapped (RAM) */
    size_t G, cap;                    /* sub-group elements; slot capacity per state */
    swap_unit_t *units;
    int unit_count, unit_cap;
    slot_t *slots;
    int slot_count, current; /* current: slot index or -1 */
    uint64_t seq;
    slow_map_t slow[SLOW_MAX];
    int pipeline_read, pipeline_write;
    int reverse; /* units in backward's order (overlap_step) */
    /* overlap_step: the first error of a finished write collected by a read-ahead (which cannot
     * return it), returned by the next acquire or drain */
    zero_status_t late;
    char late_msg[512];
    zero__optim_residency_t ram;
};

static void group_range(const zero__swap_t *sw, const swap_unit_t *su, int g, size_t *rel,
                        size_t *len) {
    *rel = (size_t)g * sw->G;
    *len = ZERO_MIN(sw->G, su->n - *rel);
}

/* Post the reads (write 0) or writes of slot s's sub-group, one request per state. */
static zero_status_t post(zero__swap_t *sw, slot_t *s, int write) {
    const swap_unit_t *su = &sw->units[s->unit];
    size_t rel, len;
    group_range(sw, su, s->group, &rel, &len);
    const size_t bytes = zero__align_up(len * sizeof(float), ZERO__AIO_ALIGN);
    s->nreq = 0;
    for (int i = 0; i < sw->nstates; i++) {
        const int64_t off = i * su->region_bytes + (int64_t)(rel * sizeof(float));
        float *buf = s->buf + (size_t)i * sw->cap;
        zero_status_t st = write
                               ? zero__aio_write_post(su->file, buf, bytes, off, &s->reqs[s->nreq])
                               : zero__aio_read_post(su->file, buf, bytes, off, &s->reqs[s->nreq]);
        if (st) { /* nothing of the slot may stay in flight: wait for what was posted */
            char msg[512];
            snprintf(msg, sizeof msg, "%s", zero_last_error());
            for (int k = 0; k < s->nreq; k++) (void)zero__aio_wait(s->reqs[k]);
            s->nreq = 0;
            s->state = SLOT_FREE;
            return zero__error(st, "%s", msg);
        }
        s->nreq++;
    }
    s->state = write ? SLOT_WRITING : SLOT_READING;
    s->seq = ++sw->seq;
    return ZERO_OK;
}

/* Wait for slot s's requests: its data is then a valid copy of its sub-group (READY), or, on an
 * error, the slot is dropped (FREE) and the first error returned. */
static zero_status_t settle(zero__swap_t *sw, slot_t *s) {
    zero_status_t st = ZERO_OK;
    for (int i = 0; i < s->nreq; i++) {
        zero_status_t r = zero__aio_wait(s->reqs[i]);
        if (r && !st) st = r;
    }
    s->nreq = 0;
    if (s->state == SLOT_READING || s->state == SLOT_WRITING)
        s->state = st ? SLOT_FREE : SLOT_READY;
    s->seq = ++sw->seq;
    return st;
}

/* overlap_step, where the updates in backward write behind one unit after another: every slot
 * whose write has finished becomes a ready copy (a failed one: free, its error kept in late). */
static void collect_writes(zero__swap_t *sw) {
    for (int i = 0; i < sw->slot_count; i++) {
        slot_t *s = &sw->slots[i];
        int done = s->state == SLOT_WRITING;
        for (int k = 0; k < s->nreq && done; k++) done = zero__aio_test(s->reqs[k]);
        if (!done) continue;
        zero_status_t st = settle(sw, s);
        if (st && !sw->late) {
            sw->late = st;
            snprintf(sw->late_msg, sizeof sw->late_msg, "%s", zero_last_error());
        }
    }
}

/* The error kept by collect_writes, once. */
static zero_status_t take_late(zero__swap_t *sw) {
    zero_status_t st = sw->late;
    if (!st) return ZERO_OK;
    sw->late = ZERO_OK;
    return zero__error(st, "%s", sw->late_msg);
}

/* Leave the current sub-group: written back if it was written (waited for unless
 * pipeline_write), else kept as a ready copy. */
static zero_status_t leave_current(zero__swap_t *sw) {
    if (sw->current < 0) return ZERO_OK;
    slot_t *s = &sw->slots[sw->current];
    sw->current = -1;
    s->state = SLOT_READY;
    if (!s->dirty) return ZERO_OK;
    s->dirty = 0;
    zero_status_t st = post(sw, s, 1);
    if (st) return st;
    return sw->pipeline_write ? ZERO_OK : settle(sw, s);
}

/* Every write finished (reads too): afterwards no slot has I/O in flight. */
static zero_status_t drain(zero__swap_t *sw) {
    zero_status_t st = leave_current(sw);
    if (!st) st = take_late(sw);
    for (int i = 0; i < sw->slot_count; i++) {
        slot_t *s = &sw->slots[i];
        if (s->state == SLOT_READING || s->state == SLOT_WRITING) {
            zero_status_t r = settle(sw, s);
            if (r && !st) st = r;
        }
    }
    return st;
}

static slot_t *find(zero__swap_t *sw, int unit, int group) {
    for (int i = 0; i < sw->slot_count; i++) {
        slot_t *s = &sw->slots[i];
        if (s->state != SLOT_FREE && s->unit == unit && s->group == group) return s;
    }
    return NULL;
}

/* The sub-group after (*unit, *group) in the step's order (after the last, the first): units
 * upward, or with overlap_step (eng->overlap: the updates run in backward) downward, sub-groups
 * upward either way. */
static void next_pos(const zero__swap_t *sw, int *unit, int *group) {
    if (++*group >= sw->units[*unit].groups) {
        *group = 0;
        *unit = (*unit + (sw->reverse ? sw->unit_count - 1 : 1)) % sw->unit_count;
    }
}

/* Is (unit, group) among the `depth` sub-groups after (from_unit, from_group)? */
static int ahead(const zero__swap_t *sw, int from_unit, int from_group, int depth, int unit,
                 int group) {
    for (int i = 0; i < depth; i++) {
        next_pos(sw, &from_unit, &from_group);
        if (from_unit == unit && from_group == group) return 1;
    }
    return 0;
}

/* A slot to fill: a free one, else the oldest ready copy that is not among the `depth`
 * sub-groups after `from` (those are about to be used), else (waiting for it) the oldest write
 * or read-ahead; with may_block 0 only free or ready ones (a read-ahead never waits). NULL:
 * none, or *st when waiting failed. */
static slot_t *take(zero__swap_t *sw, int may_block, zero_status_t *st, int from_unit,
                    int from_group, int depth) {
    static const slot_state_t order[] = {SLOT_FREE, SLOT_READY, SLOT_WRITING, SLOT_READING};
    slot_t *best = NULL;
    if (!may_block && sw->reverse) collect_writes(sw);
    for (int pass = 0; pass < (may_block ? 4 : 2) && !best; pass++)
        for (int i = 0; i < sw->slot_count; i++) {
            slot_t *s = &sw->slots[i];
            if (s->state != order[pass] || (best && s->seq >= best->seq)) continue;
            if (s->state == SLOT_READY &&
                ahead(sw, from_unit, from_group, depth, s->unit, s->group))
                continue;
            best = s;
        }
    if (best && (best->state == SLOT_WRITING || best->state == SLOT_READING) &&
        (*st = settle(sw, best)))
        return NULL;
    if (best) best->state = SLOT_FREE;
    return best;
}

/* Post the reads of the `depth` sub-groups after (unit, group) in the step's order, as far as
 * slots are free or hold copies not needed sooner. */
static void read_ahead(zero__swap_t *sw, int unit, int group, int depth) {
    if (!sw->pipeline_read || sw->unit_count == 0) return;
    int u = unit, g = group;
    for (int i = 0; i < depth; i++) {
        next_pos(sw, &u, &g);
        if (find(sw, u, g)) continue;
        zero_status_t st = ZERO_OK;
        slot_t *s = take(sw, 0, &st, unit, group, depth);
        if (!s) return;
        s->unit = u;
        s->group = g;
        if (post(sw, s, 0)) return; /* a refused read-ahead: the map reads it again */
    }
}

/* Make (unit, group) the current slot. */
static zero_status_t acquire(zero__swap_t *sw, int unit, int group, slot_t **out) {
    if (sw->current >= 0) {
        slot_t *c = &sw->slots[sw->current];
        if (c->unit == unit && c->group == group) {
            *out = c;
            return ZERO_OK;
        }
    }
    zero_status_t st = leave_current(sw);
    if (!st) st = take_late(sw);
    if (st) return st;
    slot_t *s = find(sw, unit, group);
    if (s && s->state != SLOT_READY && (st = settle(sw, s))) return st;
    if (!s || s->state != SLOT_READY) {
        if (!(s = take(sw, 1, &st, unit, group, 0))) {
            return st ? st
                      : zero__error(ZERO_ERR_INTERNAL, "optimizer swap: no staging buffer free");
        }
        if (st) return st;
        s->unit = unit;
        s->group = group;
        if ((st = post(sw, s, 0)) || (st = settle(sw, s))) return st;
    }
    s->state = SLOT_CURRENT;
    s->dirty = 0;
    sw->current = (int)(s - sw->slots);
    /* ahead while the current slot is updated, keeping one slot for the write-behind */
    read_ahead(sw, unit, group, ZERO_MAX(sw->slot_count - 2, 1));
    *out = s;
    return ZERO_OK;
}

/* ------------------------------------------------------------------------------ slow path */

static zero_status_t slow_map(zero__swap_t *sw, int unit, int idx, size_t rel, size_t count,
                              void **ptr) {
    slow_map_t *m = NULL;
    for (int i = 0; i < SLOW_MAX && !m; i++)
        if (!sw->slow[i].buf) m = &sw->slow[i];
    if (!m) return zero__error(ZERO_ERR_INTERNAL, "optimizer swap: too many tiles mapped");
    zero_status_t st = drain(sw);
    if (st) return st;
    const swap_unit_t *su = &sw->units[unit];
    const int64_t b0 = (int64_t)(rel * sizeof(float)) / ZERO__AIO_ALIGN * ZERO__AIO_ALIGN;
    const size_t bytes =
        zero__align_up((rel + count) * sizeof(float), ZERO__AIO_ALIGN) - (size_t)b0;
    float *buf = zero__aio_buffer_alloc(sw->eng->mem, bytes);
    if (!buf) return ZERO_ERR_OUT_OF_MEMORY;
    st = zero__aio_read(su->file, buf, bytes, idx * su->region_bytes + b0);
    if (st) {
        zero__aio_buffer_free(buf);
        return st;
    }
    *m = (slow_map_t){buf, (char *)buf + (rel * sizeof(float) - (size_t)b0), unit, idx, b0, bytes};
    *ptr = m->ptr;
    return ZERO_OK;
}

static slow_map_t *slow_find(zero__swap_t *sw, const void *ptr) {
    for (int i = 0; i < SLOW_MAX; i++)
        if (sw->slow[i].buf && sw->slow[i].ptr == ptr) return &sw->slow[i];
    return NULL;
}

static zero_status_t slow_unmap(zero__swap_t *sw, slow_map_t *m, int written) {
    zero_status_t st = ZERO_OK;
    if (written) {
        const swap_unit_t *su = &sw->units[m->unit];
        st = zero__aio_write(su->file, m->buf, m->bytes, m->idx * su->region_bytes + m->off_bytes);
        /* the unit's staged copies may hold the old values now */
        for (int i = 0; i < sw->slot_count; i++)
            if (sw->slots[i].state == SLOT_READY && sw->slots[i].unit == m->unit)
                sw->slots[i].state = SLOT_FREE;
    }
    zero__aio_buffer_free(m->buf);
    memset(m, 0, sizeof *m);
    return st;
}

/* ------------------------------------------------------------------------------ residency */

static zero_status_t swap_map(void *ctx, int unit, zero_engine_state_t state, size_t offset,
                              size_t count, void **ptr) {
    zero__swap_t *sw = ctx;
    const int idx = sw->idx[state];
    if (idx < 0) return sw->ram.map(sw->ram.ctx, unit, state, offset, count, ptr);
    const swap_unit_t *su = &sw->units[unit];
    ZERO_ASSERT(offset >= su->lo && count <= su->n && offset - su->lo <= su->n - count);
    const size_t rel = offset - su->lo;
    const int g = (int)(rel / sw->G);
    if (count == 0 || (rel + count - 1) / sw->G != (size_t)g)
        return slow_map(sw, unit, idx, rel, count, ptr);
    slot_t *s = NULL;
    zero_status_t st = acquire(sw, unit, g, &s);
    if (st) return st;
    *ptr = s->buf + (size_t)idx * sw->cap + (rel - (size_t)g * sw->G);
    return ZERO_OK;
}

static zero_status_t swap_unmap(void *ctx, int unit, zero_engine_state_t state, void *ptr,
                                size_t offset, size_t count, int written) {
    zero__swap_t *sw = ctx;
    if (sw->idx[state] < 0)
        return sw->ram.unmap(sw->ram.ctx, unit, state, ptr, offset, count, written);
    slow_map_t *m = slow_find(sw, ptr);
    if (m) return slow_unmap(sw, m, written);
    if (written && sw->current >= 0) sw->slots[sw->current].dirty = 1;
    return ZERO_OK;
}

/* ------------------------------------------------------------------------------ engine side */

zero_status_t zero__offload_check(const zero_offload_params_t *o, const char *block,
                                  const char *files, int min_buffers, const char *buffers) {
    if ((unsigned)o->device >= ZERO_OFFLOAD_DEVICE_COUNT)
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.%s.device %d is invalid (expected none, cpu or nvme)",
                           block, (int)o->device);
    if (o->device != ZERO_OFFLOAD_NVME) return ZERO_OK;
    if (!o->nvme_path[0])
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.%s.nvme_path is empty (expected the directory of the "
                           "%s with device nvme)",
                           block, files);
    if (o->buffer_count < min_buffers || o->buffer_count > 64)
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.%s.buffer_count %d is invalid (expected %d to 64 %s)",
                           block, o->buffer_count, min_buffers, buffers);
    return ZERO_OK;
}

zero_status_t zero__swap_check_params(const zero_engine_params_t *p) {
    zero_status_t st = zero__offload_check(&p->offload_optimizer, "offload_optimizer", "swap files",
                                           2, "staging buffers");
    if (st) return st;
    if (p->offload_optimizer.overlap_step != 0 && p->offload_optimizer.overlap_step != 1)
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.offload_optimizer.overlap_step %d is invalid "
                           "(expected 0 or 1)",
                           p->offload_optimizer.overlap_step);
    if (p->offload_optimizer.device != ZERO_OFFLOAD_NVME) return st;
    if (p->sub_group_elems < 1)
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.sub_group_size %lld is invalid (expected >= 1)",
                           (long long)p->sub_group_elems);
    return ZERO_OK;
}

zero_status_t zero__swap_init(zero_engine_t *eng) {
    const zero_engine_params_t *p = &eng->params;
    if (p->offload_optimizer.device != ZERO_OFFLOAD_NVME) return ZERO_OK;
    const char *dir = p->offload_optimizer.nvme_path;
    zero_status_t st = zero__dir_writable(dir);
    if (st)
        return zero__error(st, "zero_optimization.offload_optimizer.nvme_path '%s': %s", dir,
                           zero_last_error());
    zero__swap_t *sw = calloc(1, sizeof *sw);
    if (!sw) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "optimizer swap: out of memory");
    sw->eng = eng;
    sw->current = -1;
    sw->pipeline_read = p->offload_optimizer.pipeline_read;
    sw->pipeline_write = p->offload_optimizer.pipeline_write;
    sw->reverse = eng->overlap;
    sw->ram = zero__state_residency_ram(eng);
    for (int s = 0; s < ZERO_ENGINE_STATE_COUNT; s++) sw->idx[s] = -1;
    sw->idx[ZERO_ENGINE_STATE_ADAM_M] = sw->nstates++;
    sw->idx[ZERO_ENGINE_STATE_ADAM_V] = sw->nstates++;
    if (eng->lowp) sw->idx[ZERO_ENGINE_STATE_MASTER] = sw->nstates++;
    sw->G = ZERO_MAX((size_t)p->sub_group_elems / QUANTUM * QUANTUM, QUANTUM);
    sw->slot_count = p->offload_optimizer.buffer_count;
    sw->slots = calloc((size_t)sw->slot_count, sizeof *sw->slots);
    if (!sw->slots) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "optimizer swap: out of memory");
    } else {
        sw->aio = eng->aio;
        eng->swap = sw;
        if (eng->rank == 0)
            zero__log(ZERO_LOG_INFO, eng->rank, eng->world,
                      "optimizer states on NVMe under %s (%s, sub-groups of up to %zu elements, %d "
                      "staging buffers)",
                      dir, zero__aio_engine_name(sw->aio), sw->G, sw->slot_count);
        return ZERO_OK;
    }
    free(sw->slots);
    free(sw);
    return st;
}

/* Every slot can hold a sub-group of `elems` elements per state: grown while no I/O is in
 * flight and nothing is staged (drained, copies dropped). */
static zero_status_t grow_slots(zero__swap_t *sw, size_t elems) {
    if (elems <= sw->cap) return ZERO_OK;
    zero_status_t st = drain(sw);
    if (st) return st;
    for (int i = 0; i < sw->slot_count; i++) {
        slot_t *s = &sw->slots[i];
        zero__aio_buffer_free(s->buf);
        s->state = SLOT_FREE;
        s->buf = zero__aio_buffer_alloc(sw->eng->mem, (size_t)sw->nstates * elems * sizeof(float));
        if (!s->buf) {
            sw->cap = 0;
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "optimizer swap: no memory for %d staging buffers of %zu bytes",
                               sw->slot_count, (size_t)sw->nstates * elems * sizeof(float));
        }
    }
    sw->cap = elems;
    return ZERO_OK;
}

zero_status_t zero__swap_add_unit(zero_engine_t *eng, int u) {
    zero__swap_t *sw = eng->swap;
    if (sw->unit_count == sw->unit_cap) {
        int cap = sw->unit_cap ? 2 * sw->unit_cap : 16;
        swap_unit_t *nu = realloc(sw->units, (size_t)cap * sizeof *nu);
        if (!nu) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "optimizer swap: out of memory");
        sw->units = nu;
        sw->unit_cap = cap;
    }
    ZERO_ASSERT(u == sw->unit_count);
    swap_unit_t su;
    memset(&su, 0, sizeof su);
    zero__optim_held_range(eng, &eng->units[u], ZERO_ENGINE_STATE_ADAM_M, &su.lo, &su.n);
    su.region_bytes = (int64_t)zero__align_up(su.n * sizeof(float), ZERO__AIO_ALIGN);
    su.groups = (int)((su.n + sw->G - 1) / sw->G);
    char path[1200];
    snprintf(path, sizeof path, "%s/zero-%ld-r%d-u%d.swp", eng->params.offload_optimizer.nvme_path,
             (long)getpid(), eng->rank, u);
    zero_status_t st =
        zero__aio_file_create(sw->aio, path, sw->nstates * su.region_bytes, &su.file);
    if (st) return st;
    sw->units[sw->unit_count++] = su;
    st = grow_slots(sw, zero__align_up(ZERO_MIN(sw->G, su.n), QUANTUM));
    if (st) {
        zero__aio_file_close(su.file, 1);
        sw->unit_count--;
    }
    return st;
}

/* The unit's file, if the failed declaration created one (layout.c undoes the unit). */
void zero__swap_drop_unit(zero_engine_t *eng, int u) {
    zero__swap_t *sw = eng->swap;
    if (!sw || u != sw->unit_count - 1) return;
    (void)drain(sw);
    for (int i = 0; i < sw->slot_count; i++)
        if (sw->slots[i].unit == u) sw->slots[i].state = SLOT_FREE;
    zero__aio_file_close(sw->units[u].file, 1);
    sw->unit_count--;
}

zero_status_t zero__swap_sync(zero_engine_t *eng) {
    zero__swap_t *sw = eng->swap;
    if (!sw) return ZERO_OK;
    zero_status_t st = drain(sw);
    /* the next step starts with the first sub-groups: read as many as the slots hold while
     * forward and backward run */
    if (!st && sw->unit_count) {
        const int last = sw->reverse ? 0 : sw->unit_count - 1; /* the position before the first */
        read_ahead(sw, last, sw->units[last].groups - 1, sw->slot_count);
    }
    return st;
}

int zero__swap_ready(zero_engine_t *eng, int unit) {
    zero__swap_t *sw = eng->swap;
    if (!sw || sw->units[unit].groups == 0) return 1;
    slot_t *s = find(sw, unit, 0);
    if (!s) {
        /* read it (and the next ones) ahead from the position before it in the step's order,
         * as far as slots are free */
        int pu = (unit + (sw->reverse ? 1 : sw->unit_count - 1)) % sw->unit_count;
        read_ahead(sw, pu, sw->units[pu].groups - 1, ZERO_MAX(sw->slot_count - 2, 1));
        return 0;
    }
    if (s->state == SLOT_READING || s->state == SLOT_WRITING)
        for (int k = 0; k < s->nreq; k++)
            if (!zero__aio_test(s->reqs[k])) return 0;
    return 1;
}

zero_status_t zero__swap_leave(zero_engine_t *eng) {
    zero__swap_t *sw = eng->swap;
    if (!sw || sw->current < 0) return ZERO_OK;
    const int unit = sw->slots[sw->current].unit, group = sw->slots[sw->current].group;
    zero_status_t st = leave_current(sw);
    if (!st) read_ahead(sw, unit, group, ZERO_MAX(sw->slot_count - 2, 1));
    return st;
}

zero__aio_file_t *zero__swap_file(const zero_engine_t *eng, int u) {
    const zero__swap_t *sw = eng->swap;
    return sw && u >= 0 && u < sw->unit_count ? sw->units[u].file : NULL;
}

size_t zero__swap_tile_elems(const zero_engine_t *eng) { return eng->swap ? eng->swap->G : 0; }

uint64_t zero__swap_disk_bytes(const zero_engine_t *eng) {
    const zero__swap_t *sw = eng->swap;
    uint64_t b = 0;
    for (int u = 0; sw && u < sw->unit_count; u++)
        b += (uint64_t)sw->nstates * (uint64_t)sw->units[u].region_bytes;
    return b;
}

size_t zero__swap_memory_bytes(const zero_engine_t *eng) {
    const zero__swap_t *sw = eng->swap;
    if (!sw) return 0;
    const uint64_t staging =
        (uint64_t)sw->slot_count * (uint64_t)sw->nstates * sw->cap * sizeof(float);
    /* io/aio.c keeps a 4-byte CRC32C per 4 KiB page of every file */
    const uint64_t checksums = zero__swap_disk_bytes(eng) / ZERO__AIO_ALIGN * sizeof(uint32_t);
    return (size_t)(staging + checksums);
}

zero__optim_residency_t zero__swap_residency(zero_engine_t *eng) {
    zero__optim_residency_t r = {swap_map, swap_unmap, eng->swap};
    return r;
}

void zero__swap_free(zero_engine_t *eng) {
    zero__swap_t *sw = eng->swap;
    if (!sw) return;
    (void)drain(sw);
    for (int i = 0; i < SLOW_MAX; i++) zero__aio_buffer_free(sw->slow[i].buf);
    for (int u = 0; u < sw->unit_count; u++) zero__aio_file_close(sw->units[u].file, 1);
    for (int i = 0; i < sw->slot_count; i++) zero__aio_buffer_free(sw->slots[i].buf);
    free(sw->slots);
    free(sw->units);
    free(sw);
    eng->swap = NULL;
}
