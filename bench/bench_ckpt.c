/* bench_ckpt.c — checkpoint save and load throughput against the disk's sequential bandwidth,
 * measured in the same run on the same directory (target: at least half of it, issue 5).
 *
 * State: the 85M GPT of configs/gpt-85m.json (12 layers, dim 768, vocab 256, seq 1024) as the
 * engine holds it: fp32 master weights and Adam m, v resident in memory (1.03 GB); the shard
 * callbacks copy from / into those buffers like the engine's would.
 * Disk baseline: write the same number of bytes in 4 MiB blocks plus fsync (like dd
 * conv=fsync), and a cold sequential read after POSIX_FADV_DONTNEED on that file.
 * Save: zero_ckpt_save (every file and directory fsynced). Load: POSIX_FADV_DONTNEED on the
 * checkpoint's files, then open + zero_ckpt_load (verifies every chunk, then delivers).
 * Medians of --reps runs.
 *
 * usage: bench_ckpt [--dir DIR] [--reps N] [--world W] [--layers L]
 */
#include "zero/zero.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    zero_ckpt_layout_t layout;
    zero_ckpt_unit_t units[64];
    zero_ckpt_tensor_t tensors[64][12];
    char names[64][24];
    float *state[64][ZERO_CKPT_STATE_COUNT];
    float *loaded[64][ZERO_CKPT_STATE_COUNT];
    int world;
} model_t;

static void add(zero_ckpt_unit_t *u, zero_ckpt_tensor_t *ts, const char *name, size_t a, size_t b) {
    zero_ckpt_tensor_t *t = &ts[u->tensor_count++];
    t->name = name;
    t->ndim = b ? 2 : 1;
    t->shape[0] = a;
    t->shape[1] = b;
    t->offset = u->param_count;
    u->param_count = (u->param_count + a * (b ? b : 1) + 15) / 16 * 16;
}

static void build(model_t *m, int L, size_t C, size_t V, size_t T) {
    zero_ckpt_unit_t *u = &m->units[0];
    u->name = "embeddings";
    u->tensors = m->tensors[0];
    add(u, m->tensors[0], "wte", V, C);
    add(u, m->tensors[0], "wpe", T, C);
    static const char *bn[12] = {"ln1.weight",    "ln1.bias",         "attn.qkv.weight",
                                 "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
                                 "ln2.weight",    "ln2.bias",         "mlp.fc.weight",
                                 "mlp.fc.bias",   "mlp.proj.weight",  "mlp.proj.bias"};
    size_t shapes[12][2] = {{C, 0}, {C, 0}, {3 * C, C}, {3 * C, 0}, {C, C},     {C, 0},
                            {C, 0}, {C, 0}, {4 * C, C}, {4 * C, 0}, {C, 4 * C}, {C, 0}};
    for (int l = 0; l < L; l++) {
        u = &m->units[1 + l];
        snprintf(m->names[l], sizeof m->names[l], "block.%d", l);
        u->name = m->names[l];
        u->tensors = m->tensors[1 + l];
        for (int t = 0; t < 12; t++) add(u, m->tensors[1 + l], bn[t], shapes[t][0], shapes[t][1]);
    }
    u = &m->units[1 + L];
    u->name = "final";
    u->tensors = m->tensors[1 + L];
    add(u, m->tensors[1 + L], "lnf.weight", C, 0);
    add(u, m->tensors[1 + L], "lnf.bias", C, 0);
    m->layout.unit_count = L + 2;
    m->layout.units = m->units;
}

static zero_status_t get(void *user, int rank, int unit, zero_ckpt_state_t s, size_t offset,
                         size_t count, float *out) {
    model_t *m = user;
    (void)rank;
    memcpy(out, m->state[unit][s] + offset, count * sizeof(float));
    return ZERO_OK;
}

static zero_status_t put(void *user, int rank, int unit, zero_ckpt_state_t s, size_t offset,
                         size_t count, const float *in) {
    model_t *m = user;
    (void)rank;
    memcpy(m->loaded[unit][s] + offset, in, count * sizeof(float));
    return ZERO_OK;
}

static void drop_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

static void drop_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        drop_cache(p);
    }
    closedir(d);
}

static double disk_write(const char *path, size_t bytes, const char *block) {
    double t0 = zero_time_now();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < (4u << 20) ? bytes - done : (4u << 20);
        ssize_t w = write(fd, block, n);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    fsync(fd);
    close(fd);
    return zero_time_now() - t0;
}

static double disk_read(const char *path, char *block) {
    drop_cache(path);
    double t0 = zero_time_now();
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    while (read(fd, block, 4u << 20) > 0) {
    }
    close(fd);
    return zero_time_now() - t0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
    const char *tmp = getenv("TMPDIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tmp && *tmp ? tmp : "/tmp");
    int reps = 3, world = 1, layers = 12;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            snprintf(dir, sizeof dir, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--world") && i + 1 < argc)
            world = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc)
            layers = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_ckpt [--dir DIR] [--reps N] [--world W] [--layers L]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 50 || world < 1 || layers < 1 || layers > 60) return 2;
    zero_log_set_level(ZERO_LOG_WARN);
    static model_t m;
    build(&m, layers, 768, 256, 1024);
    m.world = world;
    size_t params = 0;
    for (int u = 0; u < m.layout.unit_count; u++) {
        size_t n = zero_ckpt_padded_count(m.units[u].param_count, world);
        params += m.units[u].param_count;
        for (int s = 0; s < ZERO_CKPT_STATE_COUNT; s++) {
            m.state[u][s] = calloc(n, sizeof(float));
            m.loaded[u][s] = calloc(n, sizeof(float));
            if (!m.state[u][s] || !m.loaded[u][s]) return 1;
            /* the engine's buffers are resident: touch them so that page faults are not timed */
            memset(m.loaded[u][s], 0xFF, n * sizeof(float));
            for (size_t i = 0; i < m.units[u].param_count; i++)
                m.state[u][s][i] =
                    (float)((i * 2654435761u + (size_t)u * 7 + (size_t)s) % 1000003) * 1e-6f;
        }
    }
    char root[700], base[800];
    snprintf(root, sizeof root, "%s/zero-bench-ckpt-XXXXXX", dir);
    if (!mkdtemp(root)) {
        fprintf(stderr, "bench_ckpt: cannot create a directory in %s: %s\n", dir, strerror(errno));
        return 1;
    }
    snprintf(base, sizeof base, "%s/baseline.bin", root);
    char *block = malloc(4u << 20);
    memset(block, 0x5A, 4u << 20);
    size_t state_bytes = params * 3 * sizeof(float);
    printf("bench_ckpt: %zu params (%d layers, dim 768), state %.1f MB (master + m + v), world "
           "%d, %d reps, dir %s\n",
           params, layers, state_bytes / 1e6, world, reps, dir);
    double ws[50], rs[50], ss[50], ls[50], lw[50];
    size_t file_bytes = 0;
    int ok = 1;
    for (int r = 0; r < reps && ok; r++) {
        double t = disk_write(base, state_bytes, block);
        ws[r] = state_bytes / t;
        rs[r] = state_bytes / disk_read(base, block);
        unlink(base);

        zero_ckpt_save_params_t sp = zero_ckpt_save_params_default();
        sp.save_dir = root;
        sp.world = world;
        sp.keep_last = 1;
        zero_ckpt_meta_t meta = {.step = r + 1};
        zero_ckpt_shard_io_t io = {get, put, &m};
        char path[1000];
        double t0 = zero_time_now();
        zero_status_t st = zero_ckpt_save(&sp, &m.layout, &meta, &io, path, sizeof path);
        double save_s = zero_time_now() - t0;
        if (st != ZERO_OK) {
            fprintf(stderr, "bench_ckpt: save failed: %s\n", zero_last_error());
            ok = 0;
            break;
        }
        file_bytes = 0;
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char p[1400];
            struct stat sb;
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) file_bytes += (size_t)sb.st_size;
        }
        if (d) closedir(d);
        ss[r] = file_bytes / save_s;

        for (int warm = 0; warm < 2; warm++) {
            if (!warm) drop_dir(path);
            t0 = zero_time_now();
            zero_ckpt_t *c = NULL;
            st = zero_ckpt_open(&c, root);
            zero_ckpt_load_params_t lp = zero_ckpt_load_params_default();
            lp.world = world;
            if (st == ZERO_OK) st = zero_ckpt_load(c, &lp, &m.layout, &io);
            zero_ckpt_close(c);
            double load_s = zero_time_now() - t0;
            if (st != ZERO_OK) {
                fprintf(stderr, "bench_ckpt: load failed: %s\n", zero_last_error());
                ok = 0;
                break;
            }
            (warm ? lw : ls)[r] = file_bytes / load_s;
        }
        for (int u = 0; ok && u < m.layout.unit_count; u++)
            for (int s = 0; s < ZERO_CKPT_STATE_COUNT; s++)
                if (memcmp(m.state[u][s], m.loaded[u][s], m.units[u].param_count * sizeof(float))) {
                    fprintf(stderr, "bench_ckpt: loaded state differs (unit %d)\n", u);
                    ok = 0;
                }
        printf("  rep %d: disk write+fsync %.2f GB/s, cold read %.2f GB/s | save %.2f GB/s, load "
               "cold %.2f GB/s, load warm %.2f GB/s\n",
               r, ws[r] / 1e9, rs[r] / 1e9, ss[r] / 1e9, ls[r] / 1e9, lw[r] / 1e9);
        fflush(stdout);
    }
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", root);
    if (!ok) return 1;
    double W = median(ws, reps), R = median(rs, reps), S = median(ss, reps), Lc = median(ls, reps),
           Lw = median(lw, reps);
    printf("checkpoint files %.1f MB\n", file_bytes / 1e6);
    printf("median: disk write+fsync %.2f GB/s, disk cold read %.2f GB/s\n", W / 1e9, R / 1e9);
    printf("median: save %.2f GB/s = %.0f%% of disk write; load (cold) %.2f GB/s = %.0f%% of "
           "disk read; load (warm) %.2f GB/s\n",
           S / 1e9, 100 * S / W, Lc / 1e9, 100 * Lc / R, Lw / 1e9);
    printf("target (>= 50%%): save %s, load %s\n", S >= 0.5 * W ? "met" : "MISSED",
           Lc >= 0.5 * R ? "met" : "MISSED");
    return 0;
}
