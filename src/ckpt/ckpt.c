/* ckpt.c — saving (atomic directory commit, `latest`, keep-last), opening, verifying and loading
 * checkpoints, with resharding by re-slicing.
 *
 * Commit protocol (the crash-safety argument, docs/checkpoint-format.md): everything is written
 * into `.step-N.tmp-ID/` and fsynced file by file; `COMPLETE` (holding the manifest's CRC32C) is
 * written last and the directory fsynced; the directory is renamed to `step-N/` and the parent
 * fsynced; only then is `latest` replaced (temp file, fsync, rename, fsync). A crash at any point
 * leaves either the old state or the new one: `latest` never names a directory without COMPLETE.
 * Old checkpoints are deleted only after all of that succeeded, and only the saver's run's own
 * (manifest run_id), oldest saves first: never another run's, never by step number alone.
 *
 * Not here: knowledge of the engine or the model (see zero_ckpt_shard_io_t), and concurrency
 * between two savers of the same save_dir (one trainer owns a save_dir).
 */
#include "ckpt/ckpt_internal.h"
#include "core/core_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

zero_ckpt_save_params_t zero_ckpt_save_params_default(void) {
    zero_ckpt_save_params_t p = {0};
    p.world = 0; /* the communicator's size, or 1 without one */
    p.with_optim = 1;
    return p;
}

zero_ckpt_load_params_t zero_ckpt_load_params_default(void) {
    zero_ckpt_load_params_t p = {0};
    p.world = 0; /* the communicator's size, or 1 without one */
    p.with_optim = 1;
    return p;
}

static uint64_t make_nonce(void) {
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^
                 ((uint64_t)getpid() << 32) ^ (counter++ * 0x9E3779B97F4A7C15ull);
    /* splitmix64 finaliser */
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Any rank failed? Ranks agree (MAX of a flag), so every rank takes the same branch. */
static int any_failed(zero_comm_t *comm, zero_status_t st) {
    if (!comm) return st != ZERO_OK;
    float mine = st != ZERO_OK ? 1.0f : 0.0f, all = 1.0f;
    if (zero_comm_all_reduce(&mine, &all, 1, ZERO_DTYPE_FP32, ZERO_OP_MAX, comm) != ZERO_OK)
        return 1;
    return all != 0.0f;
}

static int is_step_name(const char *name, long long *step) {
    if (strncmp(name, "step-", 5) != 0 || !name[5]) return 0;
    long long v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > 100000000000000LL) return 0;
        v = v * 10 + (*p - '0');
    }
    *step = v;
    return 1;
}

/* What retention and zero_ckpt_find_newest need to know of a `step-*` directory. */
typedef struct entry {
    long long step;
    uint64_t run_id;
    int64_t saved_us; /* the manifest's save time; COMPLETE's mtime for older checkpoints */
} entry_t;

/* 1 when dir/name is a complete checkpoint (COMPLETE's CRC matches a manifest that parses). */
static int read_entry(const char *dir, const char *name, entry_t *out) {
    char path[4096 + 64], fp[4096 + 96];
    char *complete = NULL, *manifest = NULL;
    size_t msize = 0;
    unsigned version = 0, crc = 0;
    int ok = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(fp, sizeof fp, "%s/COMPLETE", path);
    struct stat sb;
    if (stat(fp, &sb) != 0 || zero__read_file(fp, 4096, &complete, NULL) != ZERO_OK) return 0;
    if (sscanf(complete, "zero-checkpoint %u\nmanifest-crc32c %x", &version, &crc) == 2) {
        snprintf(fp, sizeof fp, "%s/manifest.json", path);
        zero__manifest_t m;
        if (zero__read_file(fp, (size_t)1 << 28, &manifest, &msize) == ZERO_OK &&
            zero__crc32c(0, manifest, msize) == crc &&
            zero__manifest_parse(&m, manifest, msize, fp) == ZERO_OK) {
            out->step = (long long)m.meta.step;
            out->run_id = m.meta.run_id;
            out->saved_us = m.saved_unix_us
                                ? m.saved_unix_us
                                : (int64_t)sb.st_mtim.tv_sec * 1000000 + sb.st_mtim.tv_nsec / 1000;
            zero__manifest_free(&m);
            ok = 1;
        }
    }
    free(complete);
    free(manifest);
    return ok;
}

/* The complete checkpoints of dir (*out malloc'ed, *n entries; a missing dir has none). */
static zero_status_t list_entries(const char *dir, entry_t **out, size_t *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return ZERO_OK;
        return zero__error(ZERO_ERR_IO, "cannot list checkpoint directory %s: %s", dir,
                           strerror(errno));
    }
    size_t cap = 0;
    zero_status_t st = ZERO_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long s;
        entry_t en;
        if (!is_step_name(e->d_name, &s) || !read_entry(dir, e->d_name, &en)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            entry_t *t = realloc(*out, cap * sizeof *t);
            if (!t) {
                st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot list %s: out of memory", dir);
                break;
            }
            *out = t;
        }
        (*out)[(*n)++] = en;
    }
    closedir(d);
    if (st) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return st;
}

/* Newest first: by save time, then by step. */
static int cmp_newest(const void *a, const void *b) {
    const entry_t *x = a, *y = b;
    if (x->saved_us != y->saved_us) return x->saved_us > y->saved_us ? -1 : 1;
    return (x->step < y->step) - (x->step > y->step);
}

/* Delete all but the newest `keep` saves of run `run_id` (never step `protect`). Checkpoints of
 * other runs, and directories that are not complete checkpoints, are never touched: a run may
 * share its save directory with another's checkpoints (train.overwrite), and step numbers say
 * nothing about which save is newer. */
static void prune(const char *dir, int keep, long long protect, uint64_t run_id) {
    entry_t *all = NULL;
    size_t n = 0, mine = 0;
    if (list_entries(dir, &all, &n) != ZERO_OK) return;
    for (size_t i = 0; i < n; i++)
        if (all[i].run_id == run_id) all[mine++] = all[i];
    if (mine > (size_t)keep) {
        qsort(all, mine, sizeof *all, cmp_newest);
        for (size_t i = (size_t)keep; i < mine; i++) {
            if (all[i].step == protect) continue;
            char path[4096 + 64];
            snprintf(path, sizeof path, "%s/step-%08lld", dir, all[i].step);
            zero__rmtree(path);
            zero__log(ZERO_LOG_DEBUG, -1, 0, "checkpoint: deleted %s (keep-last %d)", path, keep);
        }
        zero__fsync_path(dir);
    }
    free(all);
}

zero_status_t zero_ckpt_find_newest(const char *save_dir, char *path_out, size_t path_out_size) {
    if (!save_dir || !path_out || !path_out_size)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_ckpt_find_newest: NULL argument");
    path_out[0] = 0;
    entry_t *all = NULL;
    size_t n = 0;
    zero_status_t st = list_entries(save_dir, &all, &n);
    if (st) return st;
    if (n > 0) {
        qsort(all, n, sizeof *all, cmp_newest);
        snprintf(path_out, path_out_size, "%s/step-%08lld", save_dir, all[0].step);
    }
    free(all);
    return ZERO_OK;
}

/* Remove temporaries of saves that died (their names start with ".step-" and hold ".tmp-"). */
static void remove_stale_temporaries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".step-", 6) != 0 ||
            (!strstr(e->d_name, ".tmp-") && !strstr(e->d_name, ".old-")))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        zero__rmtree(path);
    }
    closedir(d);
}

static zero_status_t commit(const char *dir, const char *tmp, const char *name, uint64_t nonce,
                            const char *manifest, char *path_out, size_t path_out_size) {
    zero_status_t st = zero__write_file_atomic(tmp, "manifest.json", manifest, strlen(manifest));
    if (st != ZERO_OK) return st;
    char complete[128];
    int n = snprintf(complete, sizeof complete, "zero-checkpoint %d\nmanifest-crc32c %08x\n",
                     ZERO_CKPT_FORMAT_VERSION, zero__crc32c(0, manifest, strlen(manifest)));
    if ((st = zero__write_file_atomic(tmp, "COMPLETE", complete, (size_t)n)) != ZERO_OK) return st;
    char final[4096 + 64], old[4096 + 96];
    snprintf(final, sizeof final, "%s/%s", dir, name);
    snprintf(old, sizeof old, "%s/.%s.old-%016" PRIx64, dir, name, nonce);
    int had_old = 0;
    struct stat sb;
    if (stat(final, &sb) == 0) { /* re-saving a step: move the old one aside first */
        if (rename(final, old) != 0)
            return zero__error(ZERO_ERR_IO, "cannot move the existing %s aside: %s", final,
                               strerror(errno));
        had_old = 1;
    }
    if (rename(tmp, final) != 0) {
        st = zero__error(ZERO_ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
        if (had_old) rename(old, final);
        return st;
    }
    if ((st = zero__fsync_path(dir)) != ZERO_OK) return st;
    char latest[64];
    n = snprintf(latest, sizeof latest, "%s\n", name);
    if ((st = zero__write_file_atomic(dir, "latest", latest, (size_t)n)) != ZERO_OK) return st;
    if (had_old) zero__rmtree(old);
    if (path_out && path_out_size) snprintf(path_out, path_out_size, "%s", final);
    return ZERO_OK;
}

/* The checks zero_ckpt_save and zero_ckpt_save_check share; *world receives the world size. */
static zero_status_t check_save_args(const zero_ckpt_save_params_t *p,
                                     const zero_ckpt_layout_t *layout, const zero_ckpt_meta_t *meta,
                                     int *world) {
    if (!p || !p->save_dir || !meta)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_ckpt_save: NULL argument");
    zero_status_t st = zero_ckpt_layout_check(layout);
    if (st != ZERO_OK) return st;
    *world = p->comm ? zero_comm_size(p->comm) : (p->world > 0 ? p->world : 1);
    if (*world < 1 || (p->comm && p->world > 0 && p->world != *world))
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "checkpoint save: world size %d is invalid (expected >= 1 and equal "
                           "to the communicator's size %d)",
                           p->world, *world);
    if (meta->step < 0)
        return zero__error(ZERO_ERR_INVALID_ARG, "checkpoint save: step %lld, expected >= 0",
                           (long long)meta->step);
    return ZERO_OK;
}

zero_status_t zero_ckpt_save_check(const zero_ckpt_save_params_t *p,
                                   const zero_ckpt_layout_t *layout, const zero_ckpt_meta_t *meta) {
    int world = 0;
    zero_status_t st = check_save_args(p, layout, meta, &world);
    char *manifest = NULL;
    if (st == ZERO_OK) st = zero__manifest_build(&manifest, world, p->with_optim, 0, layout, meta);
    free(manifest);
    if (st == ZERO_OK) st = zero__mkdir_p(p->save_dir);
    if (st == ZERO_OK) st = zero__dir_writable(p->save_dir);
    return st;
}

zero_status_t zero_ckpt_save(const zero_ckpt_save_params_t *p, const zero_ckpt_layout_t *layout,
                             const zero_ckpt_meta_t *meta, const zero_ckpt_shard_io_t *io,
                             char *path_out, size_t path_out_size) {
    if (!io) return zero__error(ZERO_ERR_INVALID_ARG, "zero_ckpt_save: NULL argument");
    int world = 0;
    zero_status_t st = check_save_args(p, layout, meta, &world);
    if (st != ZERO_OK) return st;
    int rank = p->comm ? zero_comm_rank(p->comm) : 0;
    char name[64], tmp[4096];
    snprintf(name, sizeof name, "step-%08lld", (long long)meta->step);

    /* Rank 0 prepares the temporary directory and picks the checkpoint id. */
    unsigned char shared[12] = {0}; /* nonce (8) + status of rank 0 (4) */
    if (rank == 0) {
        uint64_t nonce = make_nonce();
        st = zero__mkdir_p(p->save_dir);
        if (st == ZERO_OK) {
            remove_stale_temporaries(p->save_dir);
            snprintf(tmp, sizeof tmp, "%s/.%s.tmp-%016" PRIx64, p->save_dir, name, nonce);
            if (mkdir(tmp, 0777) != 0)
                st = zero__error(ZERO_ERR_IO, "cannot create checkpoint directory %s: %s", tmp,
                                 strerror(errno));
        }
        zero__put_u64(shared, nonce);
        zero__put_u32(shared + 8, (uint32_t)(st != ZERO_OK));
    }
    if (p->comm) {
        unsigned char recv[12];
        zero_status_t cs =
            zero_comm_broadcast(shared, recv, sizeof shared, ZERO_DTYPE_UINT8, 0, p->comm);
        if (cs != ZERO_OK) return cs;
        memcpy(shared, recv, sizeof shared);
    }
    uint64_t nonce = zero__get_u64(shared);
    if (zero__get_u32(shared + 8)) {
        if (rank != 0)
            st = zero__error(ZERO_ERR_IO, "checkpoint save to %s failed on rank 0", p->save_dir);
        return st;
    }
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp-%016" PRIx64, p->save_dir, name, nonce);

    int r0 = p->comm ? rank : 0, r1 = p->comm ? rank + 1 : world;
    for (int r = r0; r < r1 && st == ZERO_OK; r++) {
        for (int k = 0; k < (p->with_optim ? 2 : 1) && st == ZERO_OK; k++) {
            char path[4096 + 64];
            snprintf(path, sizeof path, "%s/rank-%05d.%s", tmp, r, k ? "optim" : "params");
            st = zero__shard_write(path, k ? ZERO__CKPT_KIND_OPTIM : ZERO__CKPT_KIND_PARAMS, r,
                                   world, meta->step, nonce, layout, io);
        }
    }
    char *manifest = NULL;
    if (st == ZERO_OK && rank == 0)
        st = zero__manifest_build(&manifest, world, p->with_optim, nonce, layout, meta);
    if (any_failed(p->comm, st)) {
        if (st == ZERO_OK)
            st = zero__error(ZERO_ERR_IO, "checkpoint save to %s failed on another rank", tmp);
        if (p->comm) zero_comm_barrier(p->comm); /* every rank is done with tmp */
        if (rank == 0) zero__rmtree(tmp);
        free(manifest);
        return st;
    }
    if (rank == 0) {
        st = zero__fsync_path(tmp);
        if (st == ZERO_OK)
            st = commit(p->save_dir, tmp, name, nonce, manifest, path_out, path_out_size);
        if (st != ZERO_OK)
            zero__rmtree(tmp);
        else if (p->keep_last > 0)
            prune(p->save_dir, p->keep_last, (long long)meta->step, meta->run_id);
    } else if (path_out && path_out_size) {
        snprintf(path_out, path_out_size, "%s/%s", p->save_dir, name);
    }
    free(manifest);
    if (any_failed(p->comm, st) && st == ZERO_OK)
        st = zero__error(ZERO_ERR_IO, "checkpoint commit in %s failed on rank 0", p->save_dir);
    if (st == ZERO_OK && rank == 0)
        zero__log(ZERO_LOG_INFO, -1, 0, "checkpoint: saved %s/%s (world %d%s)", p->save_dir, name,
                  world, p->with_optim ? ", with optimizer state" : "");
    return st;
}

/* ------------------------------------------------------------------------------ opening */

struct zero_ckpt {
    char path[4096];
    zero__manifest_t m;
    zero__shard_file_t *files; /* world * 2 (params, optim); optim fd -1 when absent */
    float *scratch;            /* one chunk; reads are single-threaded per handle */
};

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static zero_status_t resolve_latest(const char *dir, char *out, size_t out_size) {
    char lp[4096], *text = NULL;
    snprintf(lp, sizeof lp, "%s/latest", dir);
    zero_status_t st = zero__read_file(lp, 256, &text, NULL);
    if (st != ZERO_OK) return st;
    size_t n = strcspn(text, "\n");
    text[n] = '\0';
    long long s;
    if (!is_step_name(text, &s)) {
        st = zero__error(ZERO_ERR_FORMAT, "%s holds \"%.40s\", expected a name like step-00000123",
                         lp, text);
        free(text);
        return st;
    }
    snprintf(out, out_size, "%s/%s", dir, text);
    free(text);
    return ZERO_OK;
}

void zero_ckpt_close(zero_ckpt_t *c) {
    if (!c) return;
    if (c->files)
        for (int i = 0; i < 2 * c->m.world; i++) zero__shard_close(&c->files[i]);
    free(c->files);
    free(c->scratch);
    zero__manifest_free(&c->m);
    free(c);
}

zero_status_t zero_ckpt_open(zero_ckpt_t **out, const char *path) {
    if (!out || !path) return zero__error(ZERO_ERR_INVALID_ARG, "zero_ckpt_open: NULL argument");
    *out = NULL;
    zero_ckpt_t *c = calloc(1, sizeof *c);
    if (!c) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "zero_ckpt_open: out of memory");
    zero_status_t st = ZERO_OK;
    char probe[4096];
    size_t len = strlen(path);
    snprintf(probe, sizeof probe, "%s/latest", path);
    if (len >= 6 && !strcmp(path + len - 6, "latest") && !is_dir(path)) {
        char parent[4096];
        snprintf(parent, sizeof parent, "%.*s", (int)(len > 6 ? len - 7 : 0), path);
        if (!parent[0]) snprintf(parent, sizeof parent, ".");
        st = resolve_latest(parent, c->path, sizeof c->path);
    } else if (access(probe, F_OK) == 0) {
        st = resolve_latest(path, c->path, sizeof c->path);
    } else {
        snprintf(c->path, sizeof c->path, "%s", path);
    }
    if (st != ZERO_OK) goto fail;
    if (!is_dir(c->path)) {
        st = zero__error(ZERO_ERR_IO,
                         "checkpoint %s: not a directory (expected a checkpoint "
                         "directory, a save directory with `latest`, or DIR/latest)",
                         c->path);
        goto fail;
    }
    char fp[4096 + 32], *complete = NULL, *manifest = NULL;
    size_t msize = 0;
    snprintf(fp, sizeof fp, "%s/COMPLETE", c->path);
    if (access(fp, F_OK) != 0) {
        st = zero__error(ZERO_ERR_FORMAT,
                         "checkpoint %s is incomplete: no COMPLETE marker (an interrupted save; "
                         "it is never loaded)",
                         c->path);
        goto fail;
    }
    if ((st = zero__read_file(fp, 4096, &complete, NULL)) != ZERO_OK) goto fail;
    unsigned version = 0, want_crc = 0;
    int ok = sscanf(complete, "zero-checkpoint %u\nmanifest-crc32c %x", &version, &want_crc) == 2;
    free(complete);
    if (!ok) {
        st = zero__error(ZERO_ERR_FORMAT,
                         "%s: expected \"zero-checkpoint N\" and "
                         "\"manifest-crc32c X\" lines",
                         fp);
        goto fail;
    }
    snprintf(fp, sizeof fp, "%s/manifest.json", c->path);
    if ((st = zero__read_file(fp, (size_t)1 << 28, &manifest, &msize)) != ZERO_OK) goto fail;
    uint32_t got_crc = zero__crc32c(0, manifest, msize);
    if (got_crc != want_crc) {
        free(manifest);
        st = zero__error(ZERO_ERR_FORMAT,
                         "%s: checksum mismatch: COMPLETE expects crc32c %08x, found %08x", fp,
                         want_crc, got_crc);
        goto fail;
    }
    st = zero__manifest_parse(&c->m, manifest, msize, fp);
    free(manifest);
    if (st != ZERO_OK) goto fail;
    c->files = calloc((size_t)c->m.world * 2, sizeof *c->files);
    c->scratch = malloc(ZERO__CKPT_CHUNK_ELEMS * sizeof(float));
    if (!c->files || !c->scratch) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "zero_ckpt_open: out of memory");
        goto fail;
    }
    for (int i = 0; i < 2 * c->m.world; i++) c->files[i].fd = -1;
    for (int r = 0; r < c->m.world; r++)
        for (int k = 0; k < (c->m.with_optim ? 2 : 1); k++) {
            snprintf(fp, sizeof fp, "%s/rank-%05d.%s", c->path, r, k ? "optim" : "params");
            st = zero__shard_open(&c->files[2 * r + k], fp,
                                  k ? ZERO__CKPT_KIND_OPTIM : ZERO__CKPT_KIND_PARAMS, r, c->m.world,
                                  c->m.meta.step, c->m.nonce, &c->m.layout);
            if (st != ZERO_OK) goto fail;
        }
    *out = c;
    return ZERO_OK;
fail:
    zero_ckpt_close(c);
    return st;
}

const char *zero_ckpt_path(const zero_ckpt_t *c) { return c->path; }
int zero_ckpt_world(const zero_ckpt_t *c) { return c->m.world; }
int zero_ckpt_has_optim(const zero_ckpt_t *c) { return c->m.with_optim; }
const zero_ckpt_meta_t *zero_ckpt_get_meta(const zero_ckpt_t *c) { return &c->m.meta; }
const zero_ckpt_layout_t *zero_ckpt_get_layout(const zero_ckpt_t *c) { return &c->m.layout; }

static void shape_str(char *buf, size_t size, const zero_ckpt_tensor_t *t) {
    size_t o = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < t->ndim && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, "%s%zu", d ? ", " : "", t->shape[d]);
    if (o < size) snprintf(buf + o, size - o, "]");
}

zero_status_t zero_ckpt_check_layout(const zero_ckpt_t *c, const zero_ckpt_layout_t *e) {
    const zero_ckpt_layout_t *f = &c->m.layout;
    if (f->unit_count != e->unit_count)
        return zero__error(ZERO_ERR_MISMATCH,
                           "checkpoint %s was saved for another model: %d units, expected %d",
                           c->path, f->unit_count, e->unit_count);
    for (int u = 0; u < e->unit_count; u++) {
        const zero_ckpt_unit_t *A = &e->units[u], *B = &f->units[u];
        if (strcmp(A->name, B->name) || A->tensor_count != B->tensor_count)
            return zero__error(ZERO_ERR_MISMATCH,
                               "checkpoint %s was saved for another model: unit %d is %s with %d "
                               "tensors, expected %s with %d tensors",
                               c->path, u, B->name, B->tensor_count, A->name, A->tensor_count);
        /* Tensors first: a different shape is the useful message, the size follows from it. */
        for (int t = 0; t < A->tensor_count; t++) {
            const zero_ckpt_tensor_t *x = &A->tensors[t], *y = &B->tensors[t];
            int same = !strcmp(x->name, y->name) && x->ndim == y->ndim && x->offset == y->offset;
            for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == y->shape[d];
            if (!same) {
                char sx[96], sy[96], why[256] = "";
                shape_str(sx, sizeof sx, x);
                shape_str(sy, sizeof sy, y);
                /* Stacked units: the logical shapes must agree; name the cut that cannot. */
                const int ca = A->copies > 1 ? A->copies : 1, cb = B->copies > 1 ? B->copies : 1;
                if ((ca > 1 || cb > 1) && x->ndim == y->ndim && y->shape[0] % (size_t)ca)
                    snprintf(why, sizeof why,
                             " (a stacked unit, saved as %d copies; this engine holds %d copies "
                             "of dimension 0 = %zu, and the saved dimension 0 of %zu is not "
                             "divisible by %d)",
                             cb, ca, x->shape[0] / (size_t)ca, y->shape[0], ca);
                else if (ca > 1 || cb > 1)
                    snprintf(why, sizeof why,
                             " (a stacked unit, saved as %d copies; this engine holds %d copies: "
                             "the logical shapes must agree)",
                             cb, ca);
                return zero__error(ZERO_ERR_MISMATCH,
                                   "checkpoint %s was saved for another model: unit %s tensor %d "
                                   "is %s %s at offset %zu, expected %s %s at offset %zu%s",
                                   c->path, A->name, t, y->name, sy, y->offset, x->name, sx,
                                   x->offset, why);
            }
        }
        if (A->param_count != B->param_count)
            return zero__error(ZERO_ERR_MISMATCH,
                               "checkpoint %s was saved for another model: unit %s has %zu "
                               "params, expected %zu",
                               c->path, A->name, B->param_count, A->param_count);
    }
    return ZERO_OK;
}

zero_status_t zero_ckpt_verify(const zero_ckpt_t *c) {
    for (int i = 0; i < 2 * c->m.world; i++) {
        if (c->files[i].fd < 0) continue;
        zero_status_t st = zero__shard_verify_all((zero__shard_file_t *)&c->files[i], c->scratch);
        if (st != ZERO_OK) return st;
    }
    return ZERO_OK;
}

static zero__shard_file_t *file_of(const zero_ckpt_t *c, int rank, zero_ckpt_state_t s,
                                   int *state_index) {
    *state_index = s == ZERO_CKPT_ADAM_V ? 1 : 0;
    return &c->files[2 * rank + (s == ZERO_CKPT_PARAMS ? 0 : 1)];
}

zero_status_t zero_ckpt_read_range(const zero_ckpt_t *c, int unit, zero_ckpt_state_t state,
                                   size_t offset, size_t count, float *out) {
    if (unit < 0 || unit >= c->m.layout.unit_count || (unsigned)state >= ZERO_CKPT_STATE_COUNT)
        return zero__error(ZERO_ERR_INVALID_ARG, "checkpoint read: unit %d / state %d invalid",
                           unit, (int)state);
    size_t pc = c->m.layout.units[unit].param_count;
    if (offset > pc || count > pc - offset)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "checkpoint read: [%zu, +%zu) leaves unit %s of %zu elements", offset,
                           count, c->m.layout.units[unit].name, pc);
    if (state != ZERO_CKPT_PARAMS && !c->m.with_optim)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "checkpoint %s has no optimizer state (saved without it)", c->path);
    if (count == 0) return ZERO_OK;
    size_t s0, S;
    zero_ckpt_shard_range(pc, c->m.world, 1, &s0, &S); /* S = shard size at the saved world */
    for (size_t r = offset / S; r * S < offset + count; r++) {
        size_t a = ZERO_MAX(offset, r * S), e = ZERO_MIN(offset + count, (r + 1) * S);
        int si;
        zero__shard_file_t *f = file_of(c, (int)r, state, &si);
        zero_status_t st = zero__shard_read(f, unit, si, a, e - a, out + (a - offset), c->scratch);
        if (st != ZERO_OK) return st;
    }
    return ZERO_OK;
}

zero_status_t zero_ckpt_load(const zero_ckpt_t *c, const zero_ckpt_load_params_t *p,
                             const zero_ckpt_layout_t *expected, const zero_ckpt_shard_io_t *io) {
    if (!c && p && p->comm) {
        /* This rank could not open the checkpoint: take part in the agreement so that the
         * other ranks fail too instead of waiting for it. */
        zero_status_t own =
            zero__error(ZERO_ERR_INVALID_ARG, "zero_ckpt_load: no checkpoint (its open failed)");
        any_failed(p->comm, own);
        return own;
    }
    if (!c || !p || !io || !io->put)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_ckpt_load: NULL argument or no put");
    int world = p->comm ? zero_comm_size(p->comm) : (p->world > 0 ? p->world : 1);
    int rank = p->comm ? zero_comm_rank(p->comm) : 0;
    zero_status_t st = ZERO_OK;
    if (world < 1 || (p->comm && p->world > 0 && p->world != world))
        st = zero__error(ZERO_ERR_INVALID_ARG,
                         "checkpoint load: world size %d is invalid (expected >= 1 and equal to "
                         "the communicator's size %d)",
                         p->world, world);
    else if (p->with_optim && !c->m.with_optim)
        st = zero__error(ZERO_ERR_FORMAT,
                         "checkpoint %s has no optimizer state, but loading it was asked "
                         "(resume needs a checkpoint saved with its optimizer state)",
                         c->path);
    else if (expected)
        st = zero_ckpt_check_layout(c, expected);
    int r0 = p->comm ? rank : 0, r1 = p->comm ? rank + 1 : world;
    const zero_ckpt_layout_t *L = &c->m.layout;
    int nstates = p->with_optim ? ZERO_CKPT_STATE_COUNT : 1;
    /* Pass 1: verify every chunk of every old file this caller will read. */
    if (st == ZERO_OK) {
        unsigned char *need = calloc((size_t)c->m.world, 1);
        if (!need) st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "checkpoint load: out of memory");
        for (int r = r0; need && r < r1; r++)
            for (int u = 0; u < L->unit_count; u++) {
                size_t off, cnt, pc = L->units[u].param_count, S0, S;
                zero_ckpt_shard_range(pc, world, r, &off, &cnt);
                zero_ckpt_shard_range(pc, c->m.world, 1, &S0, &S);
                size_t e = ZERO_MIN(off + cnt, pc);
                for (size_t o = off; o < e; o = (o / S + 1) * S) need[o / S] = 1;
            }
        for (int r = 0; need && st == ZERO_OK && r < c->m.world; r++)
            for (int k = 0; need[r] && k < (p->with_optim ? 2 : 1) && st == ZERO_OK; k++)
                st = zero__shard_verify_all(&c->files[2 * r + k], c->scratch);
        free(need);
    }
    if (any_failed(p->comm, st)) {
        if (st == ZERO_OK)
            st = zero__error(ZERO_ERR_FORMAT, "checkpoint %s failed to verify on another rank",
                             c->path);
        return st;
    }
    /* Pass 2: deliver, chunk by chunk; padding beyond param_count as zeros. */
    float *buf = malloc(ZERO__CKPT_CHUNK_ELEMS * sizeof(float));
    if (!buf) st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "checkpoint load: out of memory");
    for (int r = r0; buf && st == ZERO_OK && r < r1; r++)
        for (int u = 0; st == ZERO_OK && u < L->unit_count; u++)
            for (int s = 0; st == ZERO_OK && s < nstates; s++) {
                size_t off, cnt, pc = L->units[u].param_count;
                zero_ckpt_shard_range(pc, world, r, &off, &cnt);
                for (size_t o = off; st == ZERO_OK && o < off + cnt; o += ZERO__CKPT_CHUNK_ELEMS) {
                    size_t n = ZERO_MIN(ZERO__CKPT_CHUNK_ELEMS, off + cnt - o);
                    size_t real = o < pc ? ZERO_MIN(n, pc - o) : 0;
                    if (real) st = zero_ckpt_read_range(c, u, (zero_ckpt_state_t)s, o, real, buf);
                    if (real < n) memset(buf + real, 0, (n - real) * sizeof(float));
                    if (st == ZERO_OK)
                        st = io->put(io->user, r, u, (zero_ckpt_state_t)s, o, n, buf);
                }
            }
    free(buf);
    return st;
}
