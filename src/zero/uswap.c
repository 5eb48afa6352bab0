/* uswap.c — per-unit swap files of stage 3 on NVMe: the parameter shards
 * (zero_optimization.offload_param device nvme) and, with both offloads at nvme, the gradient
 * accumulators (ZeRO-Infinity swaps the gradient partitions out during backward).
 *
 * A cache (zero__uswap_t) keeps one swap file per offloaded unit and rank
 * (nvme_path/zero-PID-rR-uU.KIND.swp, preallocated when the unit is declared, deleted with the
 * engine; io/aio.h checksums every page) and a few slots in RAM, each the size of the largest
 * unit's data (ZERO_MEM_OFFLOAD). Every access goes through map / unmap: the map makes the unit's
 * data resident in a slot (reading it, waiting for a read posted ahead, or, when the caller
 * overwrites it, not reading at all) and pins it; the unmap unpins it and, when it was written,
 * marks the slot dirty or (write_through) posts its write at once. A dirty slot is written back
 * when it is evicted and at the sync, which also empties every slot, so the next step reads what
 * is on disk. The bytes moved are the data's bytes: nothing is converted, so the results are the
 * same bits as with the data in RAM.
 *
 * Parameters (eng->pswap, compute dtype, offload_param.buffer_count slots): fetch.c maps a shard
 * when it posts the unit's all-gather (the prefetch posts those ahead of use), unmaps it when the
 * gather has landed, and reads the coming units of the recorded schedule ahead, as many as
 * buffers are free (after the step's sync, the next step's first ones); the update writes the
 * shards, which go back after the step, and reads the next unit's ahead into a buffer whose
 * write has finished. With fp32 compute the master is the shard, so it is
 * reached through this map (state.c's RAM residency), never through swap.c.
 * Gradients (eng->gswap, grad_accum_dtype, two slots, write-through): buckets.c maps a unit's
 * accumulator where a reduced gradient lands in it and unmaps it written, which posts its write
 * while backward goes on; the unit's sum of squares is taken then (the step's norm needs no read);
 * the step reads each accumulator once for the update, the next unit's ahead. A unit's first
 * gradient of a step is not read: the file's old contents are the last step's.
 * Invariants: a pinned slot is never evicted; a read-ahead takes a free slot or evicts an
 * unpinned clean one that was not read ahead itself, never waits and never evicts a dirty one
 * (a finished write it collects, and reports if it failed); a slot with a request in flight
 * (read or write) is waited for before its buffer is used again.
 */
#include "engine_internal.h"

#include "core/fileio.h"
#include "io/aio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct uslot {
    void *buf; /* cap bytes, page-aligned (ZERO_MEM_OFFLOAD) */
    int unit;  /* resident unit, -1: free */
    int pins;
    int dirty;
    uint64_t used;        /* LRU stamp */
    zero__aio_req_t *req; /* read or write in flight on buf */
    int writing;          /* req is a write */
    int ahead;            /* read ahead, not mapped since: no other read-ahead evicts it */
} uslot_t;

struct zero__uswap {
    zero_engine_t *eng;
    zero__aio_t *aio; /* the engine's (borrowed) */
    const char *kind; /* "param", "grad": file suffix and messages */
    const char *dir;
    size_t esize;             /* bytes per element */
    int write_through;        /* unmap(written) posts the write */
    zero__aio_file_t **files; /* per unit, NULL: not offloaded */
    int file_cap;
    uslot_t *slots;
    int slot_count;
    size_t cap; /* bytes per slot: the largest unit's data, whole pages */
    uint64_t clock;
};

static size_t unit_bytes(const zero__uswap_t *us, int u) {
    return zero__align_up(us->eng->units[u].shard_count * us->esize, ZERO__AIO_ALIGN);
}

static zero_status_t uswap_init(zero_engine_t *eng, zero__uswap_t **out, const char *key,
                                const char *dir, const char *kind, size_t esize, int slots,
                                int write_through) {
    zero_status_t st = zero__dir_writable(dir);
    if (st) return zero__error(st, "zero_optimization.%s '%s': %s", key, dir, zero_last_error());
    zero__uswap_t *us = calloc(1, sizeof *us);
    uslot_t *s = calloc((size_t)slots, sizeof *s);
    if (!us || !s) {
        free(us);
        free(s);
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "%s swap: out of memory", kind);
    }
    *us = (zero__uswap_t){.eng = eng,
                          .aio = eng->aio,
                          .kind = kind,
                          .dir = dir,
                          .esize = esize,
                          .write_through = write_through,
                          .slots = s,
                          .slot_count = slots};
    for (int i = 0; i < slots; i++) s[i].unit = -1;
    *out = us;
    return ZERO_OK;
}

/* Wait for the slot's request, if any; a failed one leaves the slot free. */
static zero_status_t settle(uslot_t *s) {
    if (!s->req) return ZERO_OK;
    zero_status_t st = zero__aio_wait(s->req);
    s->req = NULL;
    s->writing = 0;
    if (st) s->unit = -1;
    return st;
}

/* Post the write of a dirty slot to its unit's file. */
static zero_status_t post_write(zero__uswap_t *us, uslot_t *s) {
    if (s->unit < 0 || !s->dirty) return ZERO_OK;
    ZERO_ASSERT(!s->req);
    zero_status_t st =
        zero__aio_write_post(us->files[s->unit], s->buf, unit_bytes(us, s->unit), 0, &s->req);
    if (st) return st;
    s->dirty = 0;
    s->writing = 1;
    return ZERO_OK;
}

/* Empty slot s, written back first when dirty. A read-ahead in flight is waited and dropped:
 * its error, if any, is reported again by the map that reads the unit; a failed write is
 * returned (the data never reached its file: the caller fails the step). */
static zero_status_t evict(zero__uswap_t *us, uslot_t *s) {
    ZERO_ASSERT(s->pins == 0);
    const int writing = s->writing;
    zero_status_t st = settle(s);
    if (st && !writing) st = ZERO_OK;
    if (!st) st = post_write(us, s);
    if (!st) st = settle(s);
    s->unit = -1;
    s->dirty = 0;
    s->ahead = 0;
    return st;
}

static uslot_t *find(zero__uswap_t *us, int unit) {
    for (int i = 0; i < us->slot_count; i++)
        if (us->slots[i].unit == unit) return &us->slots[i];
    return NULL;
}

/* A slot to fill: a free one, else the least recently used unpinned one whose unit is not in
 * keep (needed sooner than the one to be read). for_read_ahead: only one that is not dirty, not
 * read ahead itself (a deeper read-ahead never undoes a nearer one) and has no request in
 * flight, a finished write excepted (the step's write-behind: its slot is clean once
 * collected). NULL: none. */
static uslot_t *victim(zero__uswap_t *us, int for_read_ahead, const int *keep, int nkeep) {
    uslot_t *best = NULL;
    for (int i = 0; i < us->slot_count; i++) {
        uslot_t *s = &us->slots[i];
        if (!s->buf) continue;
        if (s->unit < 0 && !s->req) return s;
        if (s->pins) continue;
        if (for_read_ahead &&
            (s->dirty || s->ahead || (s->req && !(s->writing && zero__aio_test(s->req)))))
            continue;
        int kept = 0;
        for (int k = 0; k < nkeep && !kept; k++) kept = keep[k] == s->unit;
        if (kept) continue;
        if (!best || s->used < best->used) best = s;
    }
    return best;
}

static int uswap_can_map(zero__uswap_t *us, int u) { return find(us, u) || victim(us, 0, NULL, 0); }

/* Unit u's data resident and pinned in *ptr. read 0: the caller overwrites it all, so a slot is
 * taken without reading (a resident copy is used as it is). */
static zero_status_t uswap_map(zero__uswap_t *us, int u, int read, void **ptr) {
    uslot_t *s = find(us, u);
    zero_status_t st = ZERO_OK;
    if (!s) {
        if (!(s = victim(us, 0, NULL, 0)))
            return zero__error(ZERO_ERR_INTERNAL, "%s swap: all %d buffers are in use (unit '%s')",
                               us->kind, us->slot_count, us->eng->units[u].name);
        if ((st = evict(us, s))) return st;
        s->unit = u;
        if (read &&
            (st = zero__aio_read_post(us->files[u], s->buf, unit_bytes(us, u), 0, &s->req))) {
            s->unit = -1;
            return st;
        }
    }
    /* a read posted ahead, or this unit's own write still in flight */
    if ((st = settle(s))) return st;
    s->ahead = 0;
    s->pins++;
    s->used = ++us->clock;
    *ptr = s->buf;
    return ZERO_OK;
}

static zero_status_t uswap_unmap(zero__uswap_t *us, int u, int written) {
    uslot_t *s = find(us, u);
    ZERO_ASSERT(s && s->pins > 0);
    s->pins--;
    s->dirty |= written != 0;
    if (us->write_through && s->pins == 0) return post_write(us, s);
    return ZERO_OK;
}

/* Post the read of unit u into a slot unless it is resident (*posted 1; 0: no slot was free
 * that holds none of the units keep[0..nkeep)). An error is a write collected from the slot that
 * failed: its data never reached the file. */
static zero_status_t uswap_read_ahead(zero__uswap_t *us, int u, const int *keep, int nkeep,
                                      int *posted) {
    *posted = 1;
    if (find(us, u)) return ZERO_OK;
    uslot_t *s = victim(us, 1, keep, nkeep);
    zero_status_t st = s ? evict(us, s) : ZERO_OK;
    if (!s || st) {
        *posted = 0;
        return st;
    }
    s->unit = u;
    s->used = ++us->clock;
    s->ahead = 1;
    if (zero__aio_read_post(us->files[u], s->buf, unit_bytes(us, u), 0, &s->req)) {
        s->req = NULL; /* refused: the map reads it again and reports */
        s->unit = -1;
        s->ahead = 0;
    }
    return ZERO_OK;
}

static void uswap_drop_unit(zero__uswap_t *us, int u) {
    if (!us || u >= us->file_cap || !us->files[u]) return;
    uslot_t *s = find(us, u);
    if (s) {
        (void)settle(s);
        *s = (uslot_t){.buf = s->buf, .unit = -1};
    }
    zero__aio_file_close(us->files[u], 1);
    us->files[u] = NULL;
}

static zero_status_t uswap_add_unit(zero__uswap_t *us, int u) {
    zero_engine_t *eng = us->eng;
    if (u >= us->file_cap) {
        int cap = us->file_cap ? 2 * us->file_cap : 16;
        while (cap <= u) cap *= 2;
        zero__aio_file_t **nf = realloc(us->files, (size_t)cap * sizeof *nf);
        if (!nf) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "%s swap: out of memory", us->kind);
        memset(nf + us->file_cap, 0, (size_t)(cap - us->file_cap) * sizeof *nf);
        us->files = nf;
        us->file_cap = cap;
    }
    const size_t bytes = unit_bytes(us, u);
    char path[1200];
    snprintf(path, sizeof path, "%s/zero-%ld-r%d-u%d.%s.swp", us->dir, (long)getpid(), eng->rank, u,
             us->kind);
    zero_status_t st = zero__aio_file_create(us->aio, path, (int64_t)bytes, &us->files[u]);
    if (st) return st;
    if (bytes <= us->cap) return ZERO_OK;
    /* Every slot grows to the largest unit (nothing is pinned while units are declared), one at
     * a time, old buffer freed first so the peak is the final size; zeroed, so that the bytes
     * past a unit's data that a page-sized write carries are defined. A slot left without a
     * buffer (out of memory) is never used. */
    for (int i = 0; i < us->slot_count && !st; i++) {
        uslot_t *s = &us->slots[i];
        if ((st = evict(us, s))) break;
        zero__aio_buffer_free(s->buf);
        if (!(s->buf = zero__aio_buffer_alloc(eng->mem, bytes)))
            st = zero__error(ZERO_ERR_OUT_OF_MEMORY,
                             "%s swap: no memory for %d buffers of %zu bytes", us->kind,
                             us->slot_count, bytes);
        else
            memset(s->buf, 0, bytes);
    }
    if (st) {
        uswap_drop_unit(us, u);
        return st;
    }
    us->cap = bytes;
    return ZERO_OK;
}

static zero_status_t uswap_sync(zero__uswap_t *us) {
    if (!us) return ZERO_OK;
    zero_status_t st = ZERO_OK;
    for (int i = 0; i < us->slot_count; i++) /* every write in flight at once */
        if (!us->slots[i].pins && !us->slots[i].req) {
            zero_status_t r = post_write(us, &us->slots[i]);
            if (r && !st) st = r;
        }
    for (int i = 0; i < us->slot_count; i++) {
        uslot_t *s = &us->slots[i];
        if (s->pins) continue;
        zero_status_t r = evict(us, s);
        if (r && !st) st = r;
    }
    return st;
}

static uint64_t uswap_disk_bytes(const zero__uswap_t *us) {
    uint64_t b = 0;
    for (int u = 0; us && u < us->eng->unit_count && u < us->file_cap; u++)
        if (us->files[u]) b += unit_bytes(us, u);
    return b;
}

static size_t uswap_memory_bytes(const zero__uswap_t *us) {
    if (!us) return 0;
    /* the slots, and io/aio.c's 4-byte CRC32C per 4 KiB page of every file */
    return (size_t)((uint64_t)us->slot_count * us->cap +
                    uswap_disk_bytes(us) / ZERO__AIO_ALIGN * sizeof(uint32_t));
}

static void uswap_free(zero__uswap_t **pus) {
    zero__uswap_t *us = *pus;
    if (!us) return;
    for (int i = 0; i < us->slot_count; i++) {
        (void)settle(&us->slots[i]);
        zero__aio_buffer_free(us->slots[i].buf);
    }
    for (int u = 0; u < us->file_cap; u++) zero__aio_file_close(us->files[u], 1);
    free(us->files);
    free(us->slots);
    free(us);
    *pus = NULL;
}

/* ------------------------------------------------------------------ the engine's two caches */

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
    zero_status_t st =
        uswap_init(eng, &eng->pswap, "offload_param.nvme_path", p->offload_param.nvme_path, "param",
                   eng->ce, p->offload_param.buffer_count, 0);
    if (!st && eng->pol.shard_params && p->offload_optimizer.device == ZERO_OFFLOAD_NVME)
        st = uswap_init(eng, &eng->gswap, "offload_optimizer.nvme_path",
                        p->offload_optimizer.nvme_path, "grad", eng->ae, ZERO__GSWAP_SLOTS, 1);
    if (st) {
        zero__pswap_free(eng);
        return st;
    }
    if (eng->rank == 0)
        zero__log(ZERO_LOG_INFO, eng->rank, eng->world,
                  "parameter shards on NVMe under %s (%s, %d resident buffers)%s",
                  p->offload_param.nvme_path, zero__aio_engine_name(eng->aio),
                  p->offload_param.buffer_count,
                  eng->gswap ? "; gradient accumulators beside the optimizer's states" : "");
    return ZERO_OK;
}

zero_status_t zero__pswap_add_unit(zero_engine_t *eng, int u) {
    zero_status_t st = uswap_add_unit(eng->pswap, u);
    if (!st && eng->gswap && (st = uswap_add_unit(eng->gswap, u))) uswap_drop_unit(eng->pswap, u);
    return st;
}

void zero__pswap_drop_unit(zero_engine_t *eng, int u) {
    uswap_drop_unit(eng->pswap, u);
    uswap_drop_unit(eng->gswap, u);
}

zero_status_t zero__shard_map(const zero_engine_t *eng, const zero__unit_t *un, void **ptr) {
    if (!un->poff) {
        *ptr = un->shard;
        return ZERO_OK;
    }
    return uswap_map(eng->pswap, (int)(un - eng->units), 1, ptr);
}

void zero__shard_unmap(const zero_engine_t *eng, const zero__unit_t *un, int written) {
    if (un->poff) (void)uswap_unmap(eng->pswap, (int)(un - eng->units), written);
}

zero_status_t zero__shard_write_behind(const zero_engine_t *eng, const zero__unit_t *un) {
    if (!un->poff) return ZERO_OK;
    uslot_t *s = find(eng->pswap, (int)(un - eng->units));
    return s && !s->pins && !s->req ? post_write(eng->pswap, s) : ZERO_OK;
}

int zero__acc_can_map(const zero_engine_t *eng, const zero__unit_t *un) {
    return !un->goff || uswap_can_map(eng->gswap, (int)(un - eng->units));
}

/* Resident with no request in flight, or one that has completed. */
static int uswap_ready(zero__uswap_t *us, int u) {
    const uslot_t *s = find(us, u);
    return s && (!s->req || zero__aio_test(s->req));
}

int zero__uswap_ready(const zero_engine_t *eng, const zero__unit_t *un) {
    const int u = (int)(un - eng->units);
    return (!un->poff || uswap_ready(eng->pswap, u)) &&
           (!un->goff || !un->acc_on_disk || uswap_ready(eng->gswap, u));
}

int zero__pswap_can_map(const zero_engine_t *eng, const zero__unit_t *un) {
    return !un->poff || uswap_can_map(eng->pswap, (int)(un - eng->units));
}

zero_status_t zero__pswap_read_ahead(const zero_engine_t *eng, const zero__unit_t *un,
                                     const int *keep, int nkeep, int *posted) {
    *posted = 1;
    return un->poff ? uswap_read_ahead(eng->pswap, (int)(un - eng->units), keep, nkeep, posted)
                    : ZERO_OK;
}

zero_status_t zero__acc_map(zero_engine_t *eng, zero__unit_t *un, int fill, void **ptr) {
    if (!un->goff) {
        *ptr = un->acc;
        return ZERO_OK;
    }
    const int u = (int)(un - eng->units);
    zero_status_t st = uswap_map(eng->gswap, u, un->acc_on_disk, ptr);
    if (st && eng->world > 1 && (fill & ZERO__ACC_BACKWARD)) {
        /* Backward: the other ranks' reduce-scatters go on, and the model stops at an error.
         * As for a parameter shard lost at a fetch (fetch.c): recorded, this rank accumulates
         * into zeros, and the step's control record fails every rank before any update. The
         * error is this unit's read or the write of the unit whose buffer it takes (the aio
         * message names the file). */
        zero__fetch_lost(eng, st,
                         "step %lld: the gradient of unit %d '%s' on NVMe (its read, or the "
                         "write of the buffer it takes) failed: %s",
                         (long long)eng->step, u, un->name, zero_last_error());
        if (!(st = uswap_map(eng->gswap, u, 0, ptr))) {
            memset(*ptr, 0, un->shard_count * eng->ae);
            return ZERO_OK;
        }
    }
    if (!st && !un->acc_on_disk && (fill & ZERO__ACC_ZERO))
        memset(*ptr, 0, un->shard_count * eng->ae);
    if (st)
        return zero__engine_fail(eng, st, "step %lld: the gradient of unit '%s' on NVMe: %s",
                                 (long long)eng->step, un->name, zero_last_error());
    return ZERO_OK;
}

zero_status_t zero__acc_unmap(zero_engine_t *eng, zero__unit_t *un, int written) {
    if (!un->goff) return ZERO_OK;
    const int u = (int)(un - eng->units);
    uslot_t *s = find(eng->gswap, u);
    ZERO_ASSERT(s && s->pins > 0);
    if (written == ZERO__ACC_SPENT) { /* zeros now, the file stale until the next step writes */
        s->pins--;
        s->dirty = 0;
        return ZERO_OK;
    }
    /* overlap_step: the unit's last gradient of the step, which its update in backward reads
     * next from this slot: not written through (an eviction before that writes it back) */
    const int hold = written && eng->overlap && !un->persistent &&
                     un->landed_count + 1 == eng->params.grad_accum_steps;
    if (written) {
        /* the step's norm takes each unit's sum as it stands after the last write: the same
         * computation over the same values as the step's own pass over un->acc */
        void *acc = find(eng->gswap, u)->buf;
        const zero_dtype_t adt = eng->params.grad_accum_dtype;
        if (un->exact) {
            memset(&un->acc_xsum, 0, sizeof un->acc_xsum);
            zero__xsum_add_squares(&un->acc_xsum, acc, un->shard_count, adt, eng->params.threads);
        } else {
            un->acc_sumsq = zero__sumsq_dt(eng, acc, un->shard_count, adt);
        }
        un->acc_on_disk = 1;
    }
    if (hold) {
        s->pins--;
        s->dirty = 1;
        return ZERO_OK;
    }
    zero_status_t st = uswap_unmap(eng->gswap, u, written);
    if (st)
        return zero__engine_fail(eng, st,
                                 "step %lld: writing the gradient of unit '%s' to NVMe: %s",
                                 (long long)eng->step, un->name, zero_last_error());
    return ZERO_OK;
}

zero_status_t zero__acc_read_ahead(zero_engine_t *eng, const zero__unit_t *un) {
    int posted;
    return un->goff && un->acc_on_disk
               ? uswap_read_ahead(eng->gswap, (int)(un - eng->units), NULL, 0, &posted)
               : ZERO_OK;
}

zero_status_t zero__pswap_sync(zero_engine_t *eng) {
    zero_status_t st = uswap_sync(eng->pswap), st2 = uswap_sync(eng->gswap);
    return st ? st : st2;
}

zero__aio_file_t *zero__uswap_file(const zero_engine_t *eng, int grads, int u) {
    const zero__uswap_t *us = grads ? eng->gswap : eng->pswap;
    return us && u >= 0 && u < us->file_cap ? us->files[u] : NULL;
}

uint64_t zero__pswap_disk_bytes(const zero_engine_t *eng) {
    return uswap_disk_bytes(eng->pswap) + uswap_disk_bytes(eng->gswap);
}

size_t zero__pswap_memory_bytes(const zero_engine_t *eng) {
    return uswap_memory_bytes(eng->pswap) + uswap_memory_bytes(eng->gswap);
}

void zero__pswap_free(zero_engine_t *eng) {
    uswap_free(&eng->gswap);
    uswap_free(&eng->pswap);
}
