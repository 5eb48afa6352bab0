/* memcheck.c — the pre-flight memory check: before anything is allocated, estimate what this
 * process will need (its ranks' engine and model memory from zero__gpt_memory_estimate, their
 * fixed overhead, the data and the program itself), compare it with what the machine and the
 * memory cgroup have available, and refuse a run that cannot fit, naming the estimate, the
 * memory available and the changes that would fit (stage, dtype, activation checkpointing,
 * micro-batch, ranks), each with its own estimate.
 *
 * Not here: the allocations (engine, model); the accounting of what they really use (the
 * report). Invariant: the estimate is the engine's own theory (zero_engine_estimate_memory) and
 * the model's own layout pass, so it moves when they do; tests/train/test_train_memcheck.c keeps
 * it within a stated tolerance of the measured peak.
 */
#include "train/preflight.h"

#include "core/core_internal.h"
#include "core/fileio.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

/* The program itself (code, libraries, their data), measured: `zero train` of a 1-layer model on
 * one rank peaks at 22 MiB of resident memory, of which 3 MiB are accounted and 5 MiB the
 * built-in corpus and its tokens. Under mpirun the MPI library adds its own: 8 MiB per process
 * for that model on 2 ranks, up to 16 MiB for the 85M model on 2-4 ranks (docs/benchmarks.md,
 * "zero plan"). Predictions, not bounds: `zero plan` compares them with measured peaks
 * (tests/plan/test_plan_rss.py, bench/bench_plan.sh). */
#define PROCESS_BASE_BYTES (16ull << 20)
#define MPI_PROCESS_BYTES (16ull << 20)
/* Each thread rank beyond its accounted memory: its thread and its two communicators' progress
 * threads (stacks, thread-local caches), the kernels' per-thread state, malloc's headers.
 * Measured (docs/benchmarks.md, "Many thread ranks"): peak RSS minus the accounted memory is
 * 0.16 MiB per rank at 256 ranks, 0.17 at 1024 and 0.32 at 2048. */
#define RANK_OVERHEAD_BYTES (384ull << 10)

#define GiB (1024.0 * 1024.0 * 1024.0)

/* The knobs the estimate depends on, a copy of the config's. */
typedef struct shape {
    int stage, checkpointing, micro, world, local;
    zero_dtype_t dtype;
} shape_t;

typedef zero_train_process_estimate_t estimate_t;

/* A text file a tokenizer encodes into memory: at most one token per byte, 2 bytes a token
 * (uint16; GPT-2's tokens average about 0.4 per byte of English, so this bounds it well above). */
static uint64_t encoded_bytes(const zero_train_config_t *cfg, const char *path) {
    struct stat sb;
    size_t n = strlen(path);
    if (!cfg->tokenizer[0] || !path[0] || (n >= 4 && !strcmp(path + n - 4, ".bin")) ||
        stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return 0;
    return 2 * (uint64_t)sb.st_size;
}

static uint64_t data_bytes(const zero_train_config_t *cfg) {
    /* Data files are mapped and each window's pages released after it is copied: nothing that
     * grows with the files stays resident, except text files encoded by a tokenizer. The
     * built-in corpus is its text, one byte a token. */
    if (!cfg->data_path[0]) return (uint64_t)cfg->builtin_bytes;
    return encoded_bytes(cfg, cfg->data_path) + encoded_bytes(cfg, cfg->val_path);
}

static zero_status_t estimate(const zero_train_config_t *cfg, const shape_t *s, int threads,
                              int mpi, estimate_t *e) {
    memset(e, 0, sizeof *e);
    /* The run's own engine parameters, with the shape's changes. */
    zero_engine_params_t ep = zero_engine_params_default();
    zero_status_t st = zero__train_config_engine_params(cfg, &ep);
    if (st) return st;
    ep.stage = s->stage;
    if (s->dtype != ep.compute_dtype) {
        ep.compute_dtype = s->dtype;
        ep.grad_accum_dtype = ZERO_DTYPE_FP32;
    }
    ep.grad_accum_steps = (int)((int64_t)cfg->grad_accum * cfg->micro_batch / s->micro);
    st = zero__gpt_memory_estimate(&cfg->model, &ep, s->world, s->micro, s->checkpointing, threads,
                                   &e->rank);
    if (st) return st;
    const uint64_t batch = 2ull * (uint64_t)s->micro * (uint64_t)cfg->model.seq * sizeof(int32_t);
    e->per_rank = e->rank.total_bytes + batch + RANK_OVERHEAD_BYTES;
    e->data = data_bytes(cfg);
    e->program = PROCESS_BASE_BYTES + (mpi ? MPI_PROCESS_BYTES : 0);
    e->process = (uint64_t)s->local * e->per_rank + e->data + e->program;
    return ZERO_OK;
}

/* ------------------------------------------------------------------------------ available */

/* A number from a one-line file ("max" = no limit: UINT64_MAX); 0 if unreadable. */
static int read_u64(const char *path, uint64_t *v) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = "";
    int ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok) return 0;
    if (!strncmp(buf, "max", 3)) {
        *v = UINT64_MAX;
        return 1;
    }
    char *end = NULL;
    unsigned long long x = strtoull(buf, &end, 10);
    if (end == buf) return 0;
    *v = x;
    return 1;
}

/* `key value` from a memory.stat file, 0 if absent. */
static uint64_t stat_value(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char name[128];
    unsigned long long v;
    uint64_t out = 0;
    while (fscanf(f, "%127s %llu", name, &v) == 2)
        if (!strcmp(name, key)) {
            out = v;
            break;
        }
    fclose(f);
    return out;
}

/* MemAvailable, or no limit when /proc/meminfo does not say */
static uint64_t mem_available(void) {
    const uint64_t m = zero__mem_available();
    return m ? m : UINT64_MAX;
}

/* The tightest memory cgroup limit on this process: walk from its cgroup up to the root of the
 * v1 memory hierarchy or the v2 unified one, and keep the level with the least room (limit -
 * usage + inactive file cache, which the kernel reclaims before it kills). */
typedef struct cgroup_room {
    uint64_t limit, room;
    char path[1024];
} cgroup_room_t;

static void cgroup_walk(const char *root, const char *rel, int v2, cgroup_room_t *best) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s%s", root, rel);
    for (;;) {
        char p[1100];
        uint64_t limit = 0, usage = 0;
        snprintf(p, sizeof p, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
        int have = read_u64(p, &limit);
        snprintf(p, sizeof p, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
        have = have && read_u64(p, &usage);
        /* v1 writes "no limit" as a huge page-aligned number. */
        if (have && limit < (1ull << 60)) {
            snprintf(p, sizeof p, "%s/memory.stat", dir);
            uint64_t inactive = stat_value(p, v2 ? "inactive_file" : "total_inactive_file");
            uint64_t used = usage > inactive ? usage - inactive : 0;
            uint64_t room = limit > used ? limit - used : 0;
            if (room < best->room) {
                best->room = room;
                best->limit = limit;
                snprintf(best->path, sizeof best->path, "%s", dir);
            }
        }
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < strlen(root)) break;
        *slash = 0;
    }
}

static void cgroup_room(cgroup_room_t *best) {
    best->limit = best->room = UINT64_MAX;
    best->path[0] = 0;
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = 0;
        const char *controllers = c1 + 1, *rel = c2 + 1;
        if (!strcmp(rel, "/")) rel = "";
        if (c1 == line + 1 && line[0] == '0' && !*controllers) {
            cgroup_walk("/sys/fs/cgroup", rel, 1, best);
            cgroup_walk("/sys/fs/cgroup/unified", rel, 1, best);
        } else {
            char list[256];
            snprintf(list, sizeof list, ",%s,", controllers);
            if (strstr(list, ",memory,")) cgroup_walk("/sys/fs/cgroup/memory", rel, 0, best);
        }
    }
    fclose(f);
}

/* ------------------------------------------------------------------------------ check */

/* Bytes as "12.34 GiB" or, below a GiB, "56.7 MiB". */
static const char *human(char *buf, size_t n, uint64_t bytes) {
    if ((double)bytes >= GiB)
        snprintf(buf, n, "%.2f GiB", (double)bytes / GiB);
    else
        snprintf(buf, n, "%.1f MiB", (double)bytes / (1024.0 * 1024.0));
    return buf;
}

static void describe(char *buf, size_t n, const estimate_t *e, int local) {
    const zero_memory_estimate_t *r = &e->rank;
    char t[10][32];
    snprintf(
        buf, n,
        "%s (%d rank%s x %s: parameters %s, gradients %s, optimizer states %s%s, activations "
        "%s, communication buffers %s, per-rank overhead %s; data %s; program %s)",
        human(t[0], 32, e->process), local, local == 1 ? "" : "s", human(t[1], 32, e->per_rank),
        human(t[2], 32, r->bytes[ZERO_MEM_PARAMS]), human(t[3], 32, r->bytes[ZERO_MEM_GRADS]),
        human(t[4], 32, r->bytes[ZERO_MEM_OPTIM] + r->bytes[ZERO_MEM_OFFLOAD]),
        r->bytes[ZERO_MEM_OFFLOAD] ? " (staging of the swap files)" : "",
        human(t[5], 32, r->bytes[ZERO_MEM_ACTIVATIONS]), human(t[6], 32, r->bytes[ZERO_MEM_COMM]),
        human(t[7], 32, e->per_rank - r->total_bytes + r->bytes[ZERO_MEM_OTHER]),
        human(t[8], 32, e->data), human(t[9], 32, e->program));
}

/* Append "name (X GiB)" for a changed shape when it fits. */
static void try_option(const zero_train_config_t *cfg, const shape_t *s, int threads, int mpi,
                       uint64_t room, const char *name, char *list, size_t n, int *fits) {
    estimate_t e;
    if (estimate(cfg, s, threads, mpi, &e) || e.process > room) return;
    size_t len = strlen(list);
    snprintf(list + len, n - len, "%s%s (%.2f GiB)", *fits ? ", " : "", name,
             (double)e.process / GiB);
    (*fits)++;
}

/* offload_optimizer / offload_param nvme: this machine's ranks' swap files must fit the file
 * system of nvme_path (they are preallocated when the units are declared; this says so before
 * anything is). With both offloads under different directories, each must hold all the files
 * (the estimate does not split them): a conservative check. */
static zero_status_t disk_check_path(const char *key, const char *path, uint64_t need, int local,
                                     uint64_t ram, FILE *out) {
    struct statvfs vfs;
    if (statvfs(path, &vfs) != 0)
        return zero__error(ZERO_ERR_IO,
                           "%s '%s': %s (expected an existing directory for the swap files)", key,
                           path, strerror(errno));
    const uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    char a[32], b[32], c[32];
    if (need > avail)
        return zero__error(ZERO_ERR_IO,
                           "%s '%s': the swap files of %d rank%s need %s (%" PRIu64
                           " bytes) but the file system has %s (%" PRIu64 " bytes) free",
                           key, path, local, local == 1 ? "" : "s", human(a, 32, need), need,
                           human(b, 32, avail), avail);
    if (out)
        fprintf(out,
                "offload: swap files of %d rank%s under %s: %s on disk (%s free), %s of staging "
                "memory per rank\n",
                local, local == 1 ? "" : "s", path, human(a, 32, need), human(b, 32, avail),
                human(c, 32, ram));
    return ZERO_OK;
}

static zero_status_t disk_check(const zero_train_config_t *cfg, const estimate_t *e, int local,
                                FILE *out) {
    const uint64_t need = (uint64_t)local * e->rank.disk_bytes;
    if (!need) return ZERO_OK;
    const uint64_t ram = e->rank.bytes[ZERO_MEM_OFFLOAD];
    const int opt = !strcasecmp(cfg->offload_optimizer, "nvme");
    const int par = !strcasecmp(cfg->offload_param, "nvme") && cfg->stage == 3;
    zero_status_t st = ZERO_OK;
    if (opt)
        st = disk_check_path("zero_optimization.offload_optimizer.nvme_path", cfg->nvme_path, need,
                             local, ram, out);
    if (!st && par && (!opt || strcmp(cfg->nvme_path, cfg->param_nvme_path)))
        st = disk_check_path("zero_optimization.offload_param.nvme_path", cfg->param_nvme_path,
                             need, local, ram, out);
    return st;
}

zero_status_t zero__train_memory_check(const zero_train_config_t *cfg, int world, int local,
                                       int threads, int mpi, FILE *out) {
    const shape_t s = {cfg->stage,
                       cfg->checkpointing,
                       cfg->micro_batch,
                       world,
                       local,
                       zero__train_config_compute_dtype(cfg)};
    estimate_t e;
    zero_status_t st = estimate(cfg, &s, threads, mpi, &e);
    if (st || (st = disk_check(cfg, &e, local, out))) return st;
    const uint64_t avail = mem_available();
    cgroup_room_t cg;
    cgroup_room(&cg);
    const uint64_t room = cg.room < avail ? cg.room : avail;
    char what[768];
    describe(what, sizeof what, &e, local);
    if (e.process <= room) {
        /* A large model takes a while to allocate and initialise: say what is coming. */
        if (out && e.process > (1ull << 30)) {
            fprintf(out,
                    "memory: this process needs an estimated %s; %.2f GiB available; "
                    "allocating and initialising the model...\n",
                    what, (double)room / GiB);
            fflush(out);
        }
        return ZERO_OK;
    }
    char where[1200];
    if (cg.path[0])
        snprintf(where, sizeof where,
                 "MemAvailable %.2f GiB; memory cgroup %s: limit %.2f GiB, %.2f GiB free",
                 (double)avail / GiB, cg.path, (double)cg.limit / GiB, (double)cg.room / GiB);
    else
        snprintf(where, sizeof where, "MemAvailable in /proc/meminfo; no memory cgroup limit");
    if (!cfg->memory_check) {
        zero__log(ZERO_LOG_WARN, -1, 0,
                  "memory check overridden (train.memory_check = false): this process needs an "
                  "estimated %s but %.2f GiB is available (%s)",
                  what, (double)room / GiB, where);
        return ZERO_OK;
    }
    /* What would fit, each change alone; then all of them together. */
    char fit[1024] = "";
    int fits = 0;
    for (int stage = s.stage + 1; stage <= 3; stage++) {
        shape_t t = s;
        t.stage = stage;
        char name[32];
        snprintf(name, sizeof name, "--stage %d", stage);
        try_option(cfg, &t, threads, mpi, room, name, fit, sizeof fit, &fits);
    }
    if (s.dtype == ZERO_DTYPE_FP32) {
        shape_t t = s;
        t.dtype = ZERO_DTYPE_BF16;
        try_option(cfg, &t, threads, mpi, room, "--dtype bf16", fit, sizeof fit, &fits);
    }
    if (!s.checkpointing) {
        shape_t t = s;
        t.checkpointing = 1;
        try_option(cfg, &t, threads, mpi, room, "model.activation_checkpointing = true", fit,
                   sizeof fit, &fits);
    }
    for (int m = s.micro / 2; m >= 1; m /= 2) {
        if (s.micro % m) continue;
        shape_t t = s;
        t.micro = m;
        char name[96];
        snprintf(name, sizeof name, "train_micro_batch_size_per_gpu = %d with %d-fold accumulation",
                 m, cfg->grad_accum * (s.micro / m));
        int before = fits;
        try_option(cfg, &t, threads, mpi, room, name, fit, sizeof fit, &fits);
        if (fits > before) break;
    }
    if (mpi) {
        /* More machines: the same ranks per machine, the state sharded over more of them. */
        for (int w = world * 2; w <= 4096 && s.stage > 0; w *= 2) {
            shape_t t = s;
            t.world = w;
            char name[64];
            snprintf(name, sizeof name, "%d MPI ranks (%d per machine)", w, local);
            int before = fits;
            try_option(cfg, &t, threads, mpi, room, name, fit, sizeof fit, &fits);
            if (fits > before) break;
        }
    } else {
        /* Fewer thread ranks: each holds its activations (and at stage 0 a whole replica). */
        for (int w = world / 2; w >= 1; w /= 2) {
            shape_t t = s;
            t.world = t.local = w;
            char name[32];
            snprintf(name, sizeof name, "--ranks %d", w);
            int before = fits;
            try_option(cfg, &t, threads, mpi, room, name, fit, sizeof fit, &fits);
            if (fits > before) break;
        }
    }
    shape_t all = s;
    all.stage = 3;
    all.dtype = s.dtype == ZERO_DTYPE_FP32 ? ZERO_DTYPE_BF16 : s.dtype;
    all.checkpointing = 1;
    all.micro = 1;
    estimate_t ea;
    char least[256] = "";
    if (!fits && !estimate(cfg, &all, threads, mpi, &ea))
        snprintf(least, sizeof least,
                 "; no single change fits: stage 3, bf16, activation checkpointing and "
                 "micro-batch 1 together need %.2f GiB%s",
                 (double)ea.process / GiB,
                 ea.process <= room ? " (fits)" : ", more than available: a smaller model");
    return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                       "not enough memory: this process needs an estimated %s but %.2f GiB is "
                       "available (%s)%s%s%s; to start anyway: --ignore-memory-check "
                       "(train.memory_check = false)",
                       what, (double)room / GiB, where, fits ? "; these would fit: " : "", fit,
                       least);
}

zero_status_t zero__train_memory_estimate(const zero_train_config_t *cfg, int world, int threads,
                                          zero_memory_estimate_t *out) {
    const shape_t s = {cfg->stage,
                       cfg->checkpointing,
                       cfg->micro_batch,
                       world,
                       world,
                       zero__train_config_compute_dtype(cfg)};
    estimate_t e;
    zero_status_t st = estimate(cfg, &s, threads, 0, &e);
    if (!st) *out = e.rank;
    return st;
}

zero_status_t zero__train_process_estimate(const zero_train_config_t *cfg, int world, int local,
                                           int threads, int mpi,
                                           zero_train_process_estimate_t *out) {
    const shape_t s = {cfg->stage,
                       cfg->checkpointing,
                       cfg->micro_batch,
                       world,
                       local,
                       zero__train_config_compute_dtype(cfg)};
    return estimate(cfg, &s, threads, mpi, out);
}
