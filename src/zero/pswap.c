/* pswap.c — stage 3's parameter shards on NVMe (zero_optimization.offload_param device nvme).
 *
 * Each non-persistent unit's shard (S_u elements of the compute dtype) lives in a swap file of its
 * own per rank (nvme_path/zero-PID-rR-uU.param.swp, preallocated when the unit is declared,
 * deleted with the engine; io/aio.h checksums every page). In RAM there are only `buffer_count`
 * slots, each the size of the largest shard (ZERO_MEM_OFFLOAD). Every access to a shard goes
 * through zero__shard_map / zero__shard_unmap: the map makes the shard resident in a slot (reading
 * it, or waiting for a read posted ahead) and pins it; the unmap unpins it and, when it was
 * written, marks the slot dirty. A dirty slot is written back when it is evicted and at
 * zero__pswap_sync (after the step's update), which also empties every slot, so the next step
 * reads what is on disk. The bytes moved are the shard's bytes: nothing is converted, so the
 * results are the same bits as with the shards in RAM.
 *
 * Who reads ahead: fetch.c maps a shard when it posts the unit's all-gather (start_gather; the
 * prefetch posts those ahead of use) and unmaps it when the gather has landed; after each fetch
 * it posts the read of the next unit of the recorded schedule that is not resident
 * (zero__pswap_read_ahead), so that read runs while the model computes.
 * Not here: the optimizer's states (swap.c); with fp32 compute the master is the shard, so it is
 * reached through this map (state.c's RAM residency), never through swap.c.
 * Invariants: a pinned slot is never evicted; a read-ahead takes a free slot or evicts an
 * unpinned clean one, never waits and never evicts a dirty one.
 */
#include "engine_internal.h"

#include "core/fileio.h"
#include "io/aio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct pslot {
    void *buf; /* cap bytes, page-aligned (ZERO_MEM_OFFLOAD) */
    int unit;  /* resident unit, -1: free */
    int pins;
    int dirty;
    uint64_t used;        /* LRU stamp */
    zero__aio_req_t *req; /* read in flight into buf */
} pslot_t;

struct zero__pswap {
    zero_engine_t *eng;
    zero__aio_t *aio;         /* the engine's (borrowed) */
    zero__aio_file_t **files; /* per unit, NULL: not offloaded */
    int file_cap;
    pslot_t *slots;
    int slot_count;
    size_t cap; /* bytes per slot: the largest shard, whole pages */
    uint64_t clock;
};

static size_t round_page(size_t b) {
    return (b + ZERO__AIO_ALIGN - 1) / ZERO__AIO_ALIGN * ZERO__AIO_ALIGN;
}

static size_t shard_bytes(const zero_engine_t *eng, const zero__unit_t *un) {
    return round_page(un->shard_count * eng->ce);
}

zero_status_t zero__pswap_check_params(const zero_engine_params_t *p) {
    if (p->offload_param.device == ZERO_OFFLOAD_NVME && p->stage != 3)
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.offload_param.device nvme needs "
                           "zero_optimization.stage 3 (got stage %d): only stage 3 partitions the "
                           "parameters",
                           p->stage);
    return zero__offload_check(&p->offload_param, "offload_param", "parameter swap files", 1,
                               "resident parameter shards");
}

zero_status_t zero__pswap_init(zero_engine_t *eng) {
    const zero_engine_params_t *p = &eng->params;
    if (p->offload_param.device != ZERO_OFFLOAD_NVME) return ZERO_OK;
    const char *dir = p->offload_param.nvme_path;
    zero_status_t st = zero__dir_writable(dir);
    if (st)
        return zero__error(st, "zero_optimization.offload_param.nvme_path '%s': %s", dir,
                           zero_last_error());
    zero__pswap_t *ps = calloc(1, sizeof *ps);
    if (!ps) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "parameter swap: out of memory");
    ps->eng = eng;
    ps->slot_count = p->offload_param.buffer_count;
    ps->slots = calloc((size_t)ps->slot_count, sizeof *ps->slots);
    if (!ps->slots) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "parameter swap: out of memory");
    } else {
        ps->aio = eng->aio;
        for (int i = 0; i < ps->slot_count; i++) ps->slots[i].unit = -1;
        eng->pswap = ps;
        if (eng->rank == 0)
            zero__log(ZERO_LOG_INFO, eng->rank, eng->world,
                      "parameter shards on NVMe under %s (%s, %d resident buffers)", dir,
                      zero__aio_engine_name(ps->aio), ps->slot_count);
        return ZERO_OK;
    }
    free(ps->slots);
    free(ps);
    return st;
}

/* Wait for the slot's read, if any; a failed read leaves the slot free. */
static zero_status_t settle(pslot_t *s) {
    if (!s->req) return ZERO_OK;
    zero_status_t st = zero__aio_wait(s->req);
    s->req = NULL;
    if (st) s->unit = -1;
    return st;
}

/* Write a dirty slot back to its unit's file. */
static zero_status_t flush(zero__pswap_t *ps, pslot_t *s) {
    if (s->unit < 0 || !s->dirty) return ZERO_OK;
    const zero__unit_t *un = &ps->eng->units[s->unit];
    zero_status_t st = zero__aio_write(ps->files[s->unit], s->buf, shard_bytes(ps->eng, un), 0);
    if (!st) s->dirty = 0;
    return st;
}

/* Empty slot s (written back first when dirty). A read-ahead in flight is waited and dropped:
 * its error, if any, is reported again by the map that reads the unit. */
static zero_status_t evict(zero__pswap_t *ps, pslot_t *s) {
    ZERO_ASSERT(s->pins == 0);
    if (s->req) (void)settle(s);
    zero_status_t st = flush(ps, s);
    if (st) return st;
    s->unit = -1;
    return ZERO_OK;
}

static pslot_t *find(zero__pswap_t *ps, int unit) {
    for (int i = 0; i < ps->slot_count; i++)
        if (ps->slots[i].unit == unit) return &ps->slots[i];
    return NULL;
}

/* A slot to fill: a free one, else the least recently used unpinned one (clean_only: not dirty
 * and no read in flight). NULL: none. */
static pslot_t *victim(zero__pswap_t *ps, int clean_only) {
    pslot_t *best = NULL;
    for (int i = 0; i < ps->slot_count; i++) {
        pslot_t *s = &ps->slots[i];
        if (!s->buf) continue;
        if (s->unit < 0) return s;
        if (s->pins || (clean_only && (s->dirty || s->req))) continue;
        if (!best || s->used < best->used) best = s;
    }
    return best;
}

int zero__pswap_can_map(const zero_engine_t *eng, const zero__unit_t *un) {
    zero__pswap_t *ps = eng->pswap;
    if (!un->poff) return 1;
    return find(ps, (int)(un - eng->units)) || victim(ps, 0);
}

zero_status_t zero__shard_map(const zero_engine_t *eng, const zero__unit_t *un, void **ptr) {
    if (!un->poff) {
        *ptr = un->shard;
        return ZERO_OK;
    }
    zero__pswap_t *ps = eng->pswap;
    const int u = (int)(un - eng->units);
    pslot_t *s = find(ps, u);
    zero_status_t st = ZERO_OK;
    if (!s) {
        if (!(s = victim(ps, 0)))
            return zero__error(ZERO_ERR_INTERNAL,
                               "parameter swap: all %d buffers are in use (unit '%s')",
                               ps->slot_count, un->name);
        if ((st = evict(ps, s))) return st;
        s->unit = u;
        s->dirty = 0;
        if ((st = zero__aio_read_post(ps->files[u], s->buf, shard_bytes(eng, un), 0, &s->req))) {
            s->unit = -1;
            return st;
        }
    }
    if ((st = settle(s))) return st;
    s->pins++;
    s->used = ++ps->clock;
    *ptr = s->buf;
    return ZERO_OK;
}

void zero__shard_unmap(const zero_engine_t *eng, const zero__unit_t *un, int written) {
    if (!un->poff) return;
    pslot_t *s = find(eng->pswap, (int)(un - eng->units));
    ZERO_ASSERT(s && s->pins > 0);
    s->pins--;
    s->dirty |= written != 0;
}

void zero__pswap_read_ahead(const zero_engine_t *eng, const zero__unit_t *un) {
    zero__pswap_t *ps = eng->pswap;
    if (!un->poff) return;
    const int u = (int)(un - eng->units);
    if (find(ps, u)) return;
    pslot_t *s = victim(ps, 1);
    if (!s || evict(ps, s)) return;
    s->unit = u;
    s->dirty = 0;
    s->used = ++ps->clock;
    if (zero__aio_read_post(ps->files[u], s->buf, shard_bytes(eng, un), 0, &s->req)) {
        s->req = NULL; /* refused: the map reads it again and reports */
        s->unit = -1;
    }
}

zero_status_t zero__pswap_add_unit(zero_engine_t *eng, int u) {
    zero__pswap_t *ps = eng->pswap;
    const zero__unit_t *un = &eng->units[u];
    if (u >= ps->file_cap) {
        int cap = ps->file_cap ? 2 * ps->file_cap : 16;
        while (cap <= u) cap *= 2;
        zero__aio_file_t **nf = realloc(ps->files, (size_t)cap * sizeof *nf);
        if (!nf) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "parameter swap: out of memory");
        memset(nf + ps->file_cap, 0, (size_t)(cap - ps->file_cap) * sizeof *nf);
        ps->files = nf;
        ps->file_cap = cap;
    }
    const size_t bytes = shard_bytes(eng, un);
    char path[1200];
    snprintf(path, sizeof path, "%s/zero-%ld-r%d-u%d.param.swp",
             eng->params.offload_param.nvme_path, (long)getpid(), eng->rank, u);
    zero_status_t st = zero__aio_file_create(ps->aio, path, (int64_t)bytes, &ps->files[u]);
    if (st) return st;
    if (bytes <= ps->cap) return ZERO_OK;
    /* Every slot grows to the largest shard (nothing is pinned while units are declared), one
     * at a time, old buffer freed first so the peak is the final size. A slot left without a
     * buffer (out of memory) is never used. */
    for (int i = 0; i < ps->slot_count && !st; i++) {
        pslot_t *s = &ps->slots[i];
        if ((st = evict(ps, s))) break;
        zero__aio_buffer_free(s->buf);
        if (!(s->buf = zero__aio_buffer_alloc(eng->mem, bytes)))
            st = zero__error(ZERO_ERR_OUT_OF_MEMORY,
                             "parameter swap: no memory for %d buffers of %zu bytes",
                             ps->slot_count, bytes);
    }
    if (st) {
        zero__pswap_drop_unit(eng, u);
        return st;
    }
    ps->cap = bytes;
    return ZERO_OK;
}

void zero__pswap_drop_unit(zero_engine_t *eng, int u) {
    zero__pswap_t *ps = eng->pswap;
    if (!ps || u >= ps->file_cap || !ps->files[u]) return;
    pslot_t *s = find(ps, u);
    if (s) {
        if (s->req) (void)settle(s);
        s->unit = -1;
        s->pins = 0;
        s->dirty = 0;
    }
    zero__aio_file_close(ps->files[u], 1);
    ps->files[u] = NULL;
}

zero_status_t zero__pswap_sync(zero_engine_t *eng) {
    zero__pswap_t *ps = eng->pswap;
    if (!ps) return ZERO_OK;
    zero_status_t st = ZERO_OK;
    for (int i = 0; i < ps->slot_count; i++) {
        pslot_t *s = &ps->slots[i];
        if (s->pins) continue;
        zero_status_t r = evict(ps, s);
        if (r && !st) st = r;
    }
    return st;
}

uint64_t zero__pswap_disk_bytes(const zero_engine_t *eng) {
    const zero__pswap_t *ps = eng->pswap;
    uint64_t b = 0;
    for (int u = 0; ps && u < eng->unit_count && u < ps->file_cap; u++)
        if (ps->files[u]) b += shard_bytes(eng, &eng->units[u]);
    return b;
}

size_t zero__pswap_memory_bytes(const zero_engine_t *eng) {
    const zero__pswap_t *ps = eng->pswap;
    if (!ps) return 0;
    /* the slots, and io/aio.c's 4-byte CRC32C per 4 KiB page of every file */
    return (size_t)((uint64_t)ps->slot_count * ps->cap +
                    zero__pswap_disk_bytes(eng) / ZERO__AIO_ALIGN * sizeof(uint32_t));
}

void zero__pswap_free(zero_engine_t *eng) {
    zero__pswap_t *ps = eng->pswap;
    if (!ps) return;
    for (int i = 0; i < ps->slot_count; i++) {
        if (ps->slots[i].req) (void)settle(&ps->slots[i]);
        zero__aio_buffer_free(ps->slots[i].buf);
    }
    for (int u = 0; u < ps->file_cap; u++) zero__aio_file_close(ps->files[u], 1);
    free(ps->files);
    free(ps->slots);
    free(ps);
    eng->pswap = NULL;
}
