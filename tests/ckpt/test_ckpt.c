/* test_ckpt.c — checkpoints: round trips at equal and other world sizes (re-slicing), metadata,
 * `latest` and keep-last (only the saver's run, newest saves kept; the newest checkpoint without
 * `latest`), the pre-save check, ranges across chunks and ranks, the collective path over a threads
 * communicator, and the fault paths: truncated file, flipped byte, wrong magic and version,
 * missing rank file, missing COMPLETE, edited manifest, another model's layout, a failing state
 * callback, a size-limited file (RLIMIT_FSIZE), a full tmpfs and a save killed with SIGKILL at
 * random moments.
 *
 * Oracle: the harness (ckpt_harness.h) recomputes every value from its indices, independently
 * of the files. "Nothing loaded" is checked by counting put calls.
 */
#include "ckpt_harness.h"
#include "ckpt/ckpt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "check.h"
#include "thread_ranks.h"

/* SIGKILL rounds: 20 in the optimised build; sanitizers make every save several times slower,
 * so fewer there to keep the suite's time budget. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define DEFAULT_KILL_ROUNDS 8
#else
#define DEFAULT_KILL_ROUNDS 20
#endif

static char root[512];

static void rm_rf(const char *path) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", path);
}

static void cp_r(const char *from, const char *to) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not copy %s\n", from);
}

static zero_ckpt_meta_t meta_of(int64_t step) {
    zero_ckpt_meta_t m = {0};
    m.step = step;
    m.stage = 2;
    m.model_json = "{\"layers\": 2, \"dim\": 64}";
    m.training_json = "{\"lr\": 0.0003}";
    m.data_json = "{\"position\": 12345}";
    m.rng_json = "[1, 2, 3]";
    m.lr_schedule_json = NULL;
    m.loss_scaler_json = "{\"scale\": 65536}";
    return m;
}

static zero_status_t save(harness_t *h, const char *dir, int world, int optim, int keep, char *path,
                          size_t path_size) {
    zero_ckpt_save_params_t p = zero_ckpt_save_params_default();
    p.save_dir = dir;
    p.world = world;
    p.with_optim = optim;
    p.keep_last = keep;
    zero_ckpt_meta_t m = meta_of(h->step);
    zero_ckpt_shard_io_t io = h_io(h);
    return zero_ckpt_save(&p, &h->layout, &m, &io, path, path_size);
}

/* Open path and load at `world`; returns the status; *puts receives the number of put calls. */
static zero_status_t load(harness_t *h, const char *path, int world, int optim, long long *puts) {
    zero_ckpt_t *c = NULL;
    h_load_begin(h, world);
    zero_status_t st = zero_ckpt_open(&c, path);
    if (st == ZERO_OK) {
        zero_ckpt_load_params_t p = zero_ckpt_load_params_default();
        p.world = world;
        p.with_optim = optim;
        zero_ckpt_shard_io_t io = h_io(h);
        st = zero_ckpt_load(c, &p, &h->layout, &io);
    }
    if (puts) *puts = h->put_calls;
    zero_ckpt_close(c);
    return st;
}

static const size_t sizes[] = {1048576 + 37, 1000, 5, 70001};
enum { NU = 4 };

static void test_roundtrip(void) {
    static const int pairs[][2] = {{1, 1}, {4, 2}, {2, 3}, {1, 4}, {3, 1}, {7, 2}, {2, 2}};
    char dir[600], path[700];
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        int ws = pairs[i][0], wl = pairs[i][1];
        for (int optim = 0; optim <= 1; optim++) {
            harness_t h;
            h_init(&h, NU, sizes, 100 + (int64_t)i);
            snprintf(dir, sizeof dir, "%s/rt-%zu-%d", root, i, optim);
            zero_status_t st = save(&h, dir, ws, optim, 0, path, sizeof path);
            CHECK(st == ZERO_OK, "save world %d optim %d", ws, optim);
            long long puts;
            st = load(&h, dir, wl, optim, &puts);
            CHECK(st == ZERO_OK && h.bad == 0 && h_load_missing(&h, optim ? 3 : 1) == 0,
                  "load %d -> %d optim %d: status %d, %lld bad, %lld missing", ws, wl, optim,
                  (int)st, h.bad, h_load_missing(&h, optim ? 3 : 1));
            if (!optim) {
                st = load(&h, dir, wl, 1, &puts);
                CHECK(st == ZERO_ERR_FORMAT && puts == 0,
                      "optimizer state asked from a params-only checkpoint: status %d", (int)st);
            }
            h_free(&h);
        }
    }
}

static void test_meta_and_ranges(void) {
    harness_t h;
    h_init(&h, NU, sizes, 42);
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/meta", root);
    CHECK(save(&h, dir, 3, 1, 0, path, sizeof path) == ZERO_OK, "save");
    zero_ckpt_t *c = NULL;
    CHECK(zero_ckpt_open(&c, path) == ZERO_OK, "open %s", path);
    if (!c) return;
    const zero_ckpt_meta_t *m = zero_ckpt_get_meta(c);
    CHECK(m->step == 42 && m->stage == 2 && zero_ckpt_world(c) == 3 && zero_ckpt_has_optim(c),
          "step %lld stage %d world %d", (long long)m->step, m->stage, zero_ckpt_world(c));
    CHECK(!strcmp(m->model_json, "{\"layers\":2,\"dim\":64}"), "model json %s", m->model_json);
    CHECK(!strcmp(m->rng_json, "[1,2,3]"), "rng json %s", m->rng_json);
    CHECK(!strcmp(m->lr_schedule_json, "null"), "null json %s", m->lr_schedule_json);
    CHECK(!strcmp(m->data_json, "{\"position\":12345}"), "data json %s", m->data_json);
    CHECK(zero_ckpt_check_layout(c, &h.layout) == ZERO_OK, "layout matches");
    CHECK(zero_ckpt_verify(c) == ZERO_OK, "verify");
    /* Random ranges, crossing chunk and rank boundaries. */
    float *buf = malloc(sizes[0] * sizeof(float));
    unsigned seed = 7;
    int bad = 0;
    for (int it = 0; it < 40; it++) {
        int u = it % NU;
        int s = (it / NU) % 3;
        size_t pc = sizes[u];
        size_t a = (size_t)rand_r(&seed) % pc, n = (size_t)rand_r(&seed) % (pc - a + 1);
        if (it == 0) a = 0, n = pc;
        if (zero_ckpt_read_range(c, u, (zero_ckpt_state_t)s, a, n, buf) != ZERO_OK) {
            bad++;
            continue;
        }
        for (size_t i = 0; i < n; i++) bad += buf[i] != h_value(42, u, s, a + i);
    }
    CHECK(bad == 0, "read_range: %d bad values", bad);
    CHECK(zero_ckpt_read_range(c, 1, ZERO_CKPT_PARAMS, 999, 2, buf) == ZERO_ERR_INVALID_ARG,
          "range beyond the unit refused");
    free(buf);
    zero_ckpt_close(c);
    /* Opening by save dir and by DIR/latest finds the same checkpoint. */
    char lp[700];
    snprintf(lp, sizeof lp, "%s/latest", dir);
    c = NULL;
    CHECK(zero_ckpt_open(&c, lp) == ZERO_OK && zero_ckpt_get_meta(c)->step == 42, "open latest");
    zero_ckpt_close(c);
    h_free(&h);
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

static void test_latest_keep_last(void) {
    char dir[600], p[700];
    snprintf(dir, sizeof dir, "%s/keep", root);
    static const size_t small[] = {100, 3000};
    for (int step = 1; step <= 5; step++) {
        harness_t h;
        h_init(&h, 2, small, step);
        CHECK(save(&h, dir, 2, 1, 2, NULL, 0) == ZERO_OK, "save step %d", step);
        h_free(&h);
    }
    int present = 0;
    for (int step = 1; step <= 5; step++) {
        snprintf(p, sizeof p, "%s/step-%08d", dir, step);
        present |= exists(p) << step;
    }
    CHECK(present == ((1 << 4) | (1 << 5)), "keep-last 2 keeps steps 4, 5 (mask %x)", present);
    harness_t h;
    h_init(&h, 2, small, 5);
    long long puts;
    CHECK(load(&h, dir, 1, 1, &puts) == ZERO_OK && h.bad == 0, "latest loads step 5");
    /* Re-saving an existing step replaces it. */
    CHECK(save(&h, dir, 1, 0, 2, NULL, 0) == ZERO_OK, "re-save step 5");
    CHECK(load(&h, dir, 2, 0, &puts) == ZERO_OK && h.bad == 0, "re-saved step 5 loads");
    h_free(&h);
}

/* Modify a copy of a good checkpoint, expect open or load to fail with `want` in the message and
 * no put call. */
typedef void (*damage_fn)(const char *ckpt_dir);

static void expect_refused(const char *good, const char *label, damage_fn damage, const char *want,
                           const zero_ckpt_layout_t *other_layout) {
    char bad[700];
    snprintf(bad, sizeof bad, "%s/bad-%s", root, label);
    cp_r(good, bad);
    if (damage) damage(bad);
    harness_t h;
    h_init(&h, NU, sizes, 9);
    h_load_begin(&h, 2);
    zero_ckpt_t *c = NULL;
    zero_status_t st = zero_ckpt_open(&c, bad);
    if (st == ZERO_OK) {
        zero_ckpt_load_params_t p = zero_ckpt_load_params_default();
        p.world = 2;
        zero_ckpt_shard_io_t io = h_io(&h);
        st = zero_ckpt_load(c, &p, other_layout ? other_layout : &h.layout, &io);
    }
    const char *msg = zero_last_error();
    CHECK(st != ZERO_OK && h.put_calls == 0 && strstr(msg, want),
          "%s: expected a refusal mentioning \"%s\" with nothing loaded (status %d, %lld puts)",
          label, want, (int)st, h.put_calls);
    if (st != ZERO_OK) printf("  %-14s -> %s\n", label, msg);
    zero_ckpt_close(c);
    h_free(&h);
    rm_rf(bad);
}

static void patch(const char *path, long offset, const void *bytes, size_t n) {
    int fd = open(path, O_WRONLY);
    if (fd < 0 || pwrite(fd, bytes, n, offset) != (ssize_t)n) fprintf(stderr, "patch %s\n", path);
    if (fd >= 0) close(fd);
}
static void flip_at(const char *path, long offset) {
    unsigned char b;
    int fd = open(path, O_RDWR);
    if (fd >= 0 && pread(fd, &b, 1, offset) == 1) {
        b ^= 0x10;
        if (pwrite(fd, &b, 1, offset) != 1) fprintf(stderr, "flip %s\n", path);
    }
    if (fd >= 0) close(fd);
}
static void f_path(char *out, size_t n, const char *dir, const char *name) {
    snprintf(out, n, "%s/%s", dir, name);
}
static void d_truncate(const char *d) {
    char p[800];
    f_path(p, sizeof p, d, "rank-00001.params");
    if (truncate(p, 5000) != 0) fprintf(stderr, "truncate\n");
}
static void d_flip_data(const char *d) {
    char p[800];
    f_path(p, sizeof p, d, "rank-00000.optim");
    flip_at(p, 4096 + 2 * 1048576 + 12345); /* inside adam_v of unit 0 */
}
static void d_flip_header(const char *d) {
    char p[800];
    f_path(p, sizeof p, d, "rank-00001.params");
    flip_at(p, 100);
}
static void d_magic(const char *d) {
    char p[800];
    f_path(p, sizeof p, d, "rank-00000.params");
    patch(p, 0, "NOTZERO!", 8);
}
static void d_version(const char *d) {
    char p[800];
    f_path(p, sizeof p, d, "rank-00000.params");
    unsigned char v[4] = {2, 0, 0, 0};
    patch(p, 8, v, 4);
}
static void d_missing(const char *d) {
    char p[800];
    f_path(p, sizeof p, d, "rank-00001.optim");
    unlink(p);
}
static void d_no_complete(const char *d) {
    char p[800];
    f_path(p, sizeof p, d, "COMPLETE");
    unlink(p);
}
static void d_manifest(const char *d) {
    char p[800];
    f_path(p, sizeof p, d, "manifest.json");
    flip_at(p, 40);
}
static void d_other_rank(const char *d) {
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "cp '%s/rank-00001.params' '%s/rank-00000.params'", d, d);
    if (system(cmd) != 0) fprintf(stderr, "cp\n");
}

static void test_refusals(void) {
    harness_t h;
    h_init(&h, NU, sizes, 9);
    char good[600];
    snprintf(good, sizeof good, "%s/good", root);
    CHECK(save(&h, good, 2, 1, 0, NULL, 0) == ZERO_OK, "save the good checkpoint");
    char gp[700];
    snprintf(gp, sizeof gp, "%s/step-00000009", good);
    expect_refused(gp, "truncated", d_truncate, "truncated", NULL);
    expect_refused(gp, "flipped-data", d_flip_data, "checksum mismatch", NULL);
    expect_refused(gp, "flipped-head", d_flip_header, "header checksum", NULL);
    expect_refused(gp, "magic", d_magic, "magic", NULL);
    expect_refused(gp, "version", d_version, "version 2, expected 1", NULL);
    expect_refused(gp, "missing-rank", d_missing, "rank-00001.optim", NULL);
    expect_refused(gp, "no-complete", d_no_complete, "incomplete", NULL);
    expect_refused(gp, "manifest", d_manifest, "checksum mismatch", NULL);
    expect_refused(gp, "swapped-rank", d_other_rank, "expected params of rank 0", NULL);
    /* Another model: unit 3 has a different size. */
    harness_t o;
    static const size_t other[] = {1048576 + 37, 1000, 5, 70017};
    h_init(&o, NU, other, 9);
    expect_refused(gp, "other-model", NULL, "is w [4375, 16] at offset 0, expected w [4376, 16]",
                   &o.layout);
    h_free(&o);
    h_free(&h);
}

/* A failing state callback and a size-limited file: the error is reported, no temporary stays
 * behind and the previous checkpoint is still `latest` and loads. */
static int count_entries(const char *dir) {
    char cmd[800];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *f = popen(cmd, "r");
    int n = -1;
    if (f) {
        if (fscanf(f, "%d", &n) != 1) n = -1;
        pclose(f);
    }
    return n;
}

static void test_write_errors(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/werr", root);
    harness_t h;
    h_init(&h, NU, sizes, 1);
    CHECK(save(&h, dir, 2, 1, 0, NULL, 0) == ZERO_OK, "first save");
    h_free(&h);
    int before = count_entries(dir);

    h_init(&h, NU, sizes, 2);
    h.fail_get_after = 5;
    zero_status_t st = save(&h, dir, 2, 1, 0, NULL, 0);
    CHECK(st == ZERO_ERR_INTERNAL, "a failing get callback is passed on (status %d)", (int)st);
    CHECK(count_entries(dir) == before, "no temporary left (%d entries, expected %d)",
          count_entries(dir), before);
    h_free(&h);

    /* Disk full: RLIMIT_FSIZE in a child (the limit would also hit the parent's later files). */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {3 << 20, 3 << 20};
        setrlimit(RLIMIT_FSIZE, &rl);
        harness_t hc;
        h_init(&hc, NU, sizes, 3);
        zero_status_t cs = save(&hc, dir, 2, 1, 0, NULL, 0);
        printf("  disk full      -> %s\n", zero_last_error());
        fflush(stdout);
        _exit(cs == ZERO_ERR_IO && strstr(zero_last_error(), "cannot write") ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "size-limited save reports an I/O error");
    CHECK(count_entries(dir) == before, "no temporary left after the failed save");
    h_init(&h, NU, sizes, 1);
    long long puts;
    CHECK(load(&h, dir, 2, 1, &puts) == ZERO_OK && h.bad == 0 && h_load_missing(&h, 3) == 0,
          "previous checkpoint still latest and intact");
    h_free(&h);

    /* A really full disk: a 2 MiB tmpfs in a private mount namespace (needs CAP_SYS_ADMIN;
     * skipped otherwise). A first small checkpoint fits, the second does not. */
    char mnt[700];
    snprintf(mnt, sizeof mnt, "%s/tmpfs", root);
    mkdir(mnt, 0755);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("tmpfs", mnt, "tmpfs", 0, "size=2m") != 0)
            _exit(77);
        static const size_t small[] = {1000, 5};
        harness_t hc;
        h_init(&hc, 2, small, 1);
        if (save(&hc, mnt, 2, 1, 0, NULL, 0) != ZERO_OK) _exit(2);
        h_free(&hc);
        h_init(&hc, NU, sizes, 2); /* 12.6 MB of state: does not fit */
        zero_status_t cs = save(&hc, mnt, 2, 1, 0, NULL, 0);
        printf("  tmpfs full     -> %s\n", zero_last_error());
        fflush(stdout);
        if (cs != ZERO_ERR_IO || !strstr(zero_last_error(), "No space left")) _exit(3);
        h_free(&hc);
        h_init(&hc, 2, small, 1);
        long long p2;
        if (load(&hc, mnt, 1, 1, &p2) != ZERO_OK || hc.bad || h_load_missing(&hc, 3)) _exit(4);
        if (count_entries(mnt) != 2) _exit(5); /* latest + step-00000001 */
        _exit(0);
    }
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
        printf("  tmpfs full     -> skipped (cannot mount a tmpfs here)\n");
    else
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "full tmpfs: error reported and the previous checkpoint intact (child exit %d)",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);

    /* Read-only save directory: only meaningful when permissions bind us (not as root). */
    char ro[700], probe[800];
    snprintf(ro, sizeof ro, "%s/readonly", root);
    mkdir(ro, 0555);
    chmod(ro, 0555);
    snprintf(probe, sizeof probe, "%s/probe", ro);
    int fd = open(probe, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) {
        close(fd);
        unlink(probe);
        printf("  read-only dir  -> skipped (permissions do not bind this user)\n");
    } else {
        h_init(&h, 1, sizes + 1, 4);
        st = save(&h, ro, 1, 1, 0, NULL, 0);
        CHECK(st == ZERO_ERR_IO, "read-only directory refused (status %d)", (int)st);
        printf("  read-only dir  -> %s\n", zero_last_error());
        h_free(&h);
    }
    chmod(ro, 0755);
    /* A regular file where the save directory should be. */
    char file_dir[700];
    snprintf(file_dir, sizeof file_dir, "%s/afile", root);
    fd = open(file_dir, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) close(fd);
    h_init(&h, 1, sizes + 1, 4);
    st = save(&h, file_dir, 1, 1, 0, NULL, 0);
    CHECK(st == ZERO_ERR_IO, "save into a file refused (status %d)", (int)st);
    printf("  file as dir    -> %s\n", zero_last_error());
    h_free(&h);
}

/* A child saves steps in a loop; the parent kills it at a random moment. `latest` must always
 * open, verify and load the values of the step it names. */
static void test_sigkill(int rounds) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/kill", root);
    static const size_t ks[] = {3 * 1048576 + 3, 4097};
    harness_t h;
    h_init(&h, 2, ks, 1);
    CHECK(save(&h, dir, 2, 1, 2, NULL, 0) == ZERO_OK, "baseline save");
    h_free(&h);
    unsigned seed = (unsigned)time(NULL);
    printf("  sigkill seed %u\n", seed);
    int ok = 0;
    long long max_step = 1;
    for (int round = 0; round < rounds; round++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            for (int64_t step = 2 + round * 1000;; step++) {
                harness_t hc;
                h_init(&hc, 2, ks, step);
                save(&hc, dir, 1 + (int)(step % 3), 1, 2, NULL, 0);
            }
        }
        struct timespec ts = {0, (long)(rand_r(&seed) % 150) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        zero_ckpt_t *c = NULL;
        zero_status_t st = zero_ckpt_open(&c, dir);
        if (st == ZERO_OK) st = zero_ckpt_verify(c);
        int64_t step = c ? zero_ckpt_get_meta(c)->step : -1;
        zero_ckpt_close(c);
        if (st == ZERO_OK) {
            h_init(&h, 2, ks, step);
            long long puts;
            st = load(&h, dir, 3, 1, &puts);
            if (st == ZERO_OK && h.bad == 0 && h_load_missing(&h, 3) == 0) ok++;
            h_free(&h);
            if (step > max_step) max_step = step;
        }
        CHECK(st == ZERO_OK, "round %d: latest (step %lld) does not load", round, (long long)step);
    }
    CHECK(ok == rounds, "%d of %d rounds loaded correct values", ok, rounds);
    printf("  sigkill: %d rounds, latest always loaded (newest step seen %lld)\n", rounds,
           max_step);
}

/* ------------------------------------------------------------------------------ collective */

typedef struct {
    harness_t *h; /* per rank */
    const char *dir;
    int save;
    zero_status_t st;
} rank_arg_t;

static void rank_main(zero_comm_t *comm, int rank, void *p) {
    rank_arg_t *a = (rank_arg_t *)p + rank; /* p: one argument per rank */
    zero_ckpt_shard_io_t io = h_io(a->h);
    if (a->save) {
        zero_ckpt_save_params_t sp = zero_ckpt_save_params_default();
        sp.save_dir = a->dir;
        sp.comm = comm;
        sp.world = 0;
        zero_ckpt_meta_t m = meta_of(a->h->step);
        a->st = zero_ckpt_save(&sp, &a->h->layout, &m, &io, NULL, 0);
    } else {
        zero_ckpt_t *c = NULL;
        a->st = zero_ckpt_open(&c, a->dir);
        zero_ckpt_load_params_t lp = zero_ckpt_load_params_default();
        lp.comm = comm;
        lp.world = 0;
        /* Every rank must reach the collective, even after a failed open. */
        if (a->st == ZERO_OK) a->st = zero_ckpt_load(c, &lp, &a->h->layout, &io);
        zero_ckpt_close(c);
    }
}

static void run_ranks(int n, const char *dir, int save_mode, harness_t *hs) {
    zero_comm_t *comms[8];
    if (zero_comm_threads_init_all(n, comms, NULL) != ZERO_OK) {
        CHECK(0, "threads communicator");
        return;
    }
    rank_arg_t args[8];
    for (int r = 0; r < n; r++) args[r] = (rank_arg_t){&hs[r], dir, save_mode, ZERO_OK};
    thread_ranks_run(n, comms, rank_main, args);
    for (int r = 0; r < n; r++) {
        CHECK(args[r].st == ZERO_OK, "rank %d of %d %s: status %d", r, n,
              save_mode ? "save" : "load", (int)args[r].st);
        zero_comm_free(comms[r]);
    }
}

static void test_collective(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/coll", root);
    harness_t hs[4];
    for (int r = 0; r < 3; r++) h_init(&hs[r], NU, sizes, 77);
    run_ranks(3, dir, 1, hs);
    for (int r = 0; r < 3; r++) h_free(&hs[r]);
    /* Load at 2 ranks through the communicator; each rank sees only its own shards. */
    for (int r = 0; r < 2; r++) {
        h_init(&hs[r], NU, sizes, 77);
        h_load_begin(&hs[r], 2);
    }
    run_ranks(2, dir, 0, hs);
    for (int r = 0; r < 2; r++) {
        long long covered = 0;
        for (int u = 0; u < NU; u++) {
            size_t so, sc;
            zero_ckpt_shard_range(sizes[u], 2, r, &so, &sc);
            for (int s = 0; s < 3; s++)
                for (size_t i = so; i < so + sc; i++) covered += hs[r].seen[u][s][i];
        }
        long long want = 0;
        for (int u = 0; u < NU; u++) want += 3 * (long long)zero_ckpt_padded_count(sizes[u], 2) / 2;
        CHECK(hs[r].bad == 0 && covered == want, "collective load rank %d: %lld bad, %lld of %lld",
              r, hs[r].bad, covered, want);
        h_free(&hs[r]);
    }
    /* A rank whose state callback fails: every rank reports failure, `latest` stays at 77. */
    zero_comm_t *comms[3];
    if (zero_comm_threads_init_all(3, comms, NULL) == ZERO_OK) {
        rank_arg_t args[3];
        for (int r = 0; r < 3; r++) {
            h_init(&hs[r], NU, sizes, 78);
            hs[r].fail_get_after = r == 1 ? 3 : 0;
            args[r] = (rank_arg_t){&hs[r], dir, 1, ZERO_OK};
        }
        thread_ranks_run(3, comms, rank_main, args);
        int all_failed = 1;
        for (int r = 0; r < 3; r++) {
            all_failed &= args[r].st != ZERO_OK;
            zero_comm_free(comms[r]);
            h_free(&hs[r]);
        }
        CHECK(all_failed, "a failing rank fails the collective save on every rank");
        zero_ckpt_t *c = NULL;
        CHECK(zero_ckpt_open(&c, dir) == ZERO_OK && zero_ckpt_get_meta(c)->step == 77,
              "latest still names step 77");
        zero_ckpt_close(c);
    }
    /* Manual check of a saved file set from one caller: the same checkpoint at world 1. */
    harness_t h;
    h_init(&h, NU, sizes, 77);
    long long puts;
    CHECK(load(&h, dir, 1, 1, &puts) == ZERO_OK && h.bad == 0 && h_load_missing(&h, 3) == 0,
          "collective save loads at world 1");
    h_free(&h);
}

static zero_status_t save_run(harness_t *h, const char *dir, uint64_t run_id, int keep) {
    zero_ckpt_save_params_t p = zero_ckpt_save_params_default();
    p.save_dir = dir;
    p.world = 2;
    p.keep_last = keep;
    zero_ckpt_meta_t m = meta_of(h->step);
    m.run_id = run_id;
    zero_ckpt_shard_io_t io = h_io(h);
    return zero_ckpt_save(&p, &h->layout, &m, &io, NULL, 0);
}

/* Bit s set when step-s exists in dir (s <= 30). */
static int step_mask(const char *dir) {
    int mask = 0;
    for (int s = 0; s <= 30; s++) {
        char p[700];
        snprintf(p, sizeof p, "%s/step-%08d", dir, s);
        mask |= exists(p) << s;
    }
    return mask;
}

/* Keep-last deletes only the saver's run's checkpoints, oldest saves first (not lowest steps);
 * zero_ckpt_find_newest picks the last save whatever `latest` and the step numbers say. The
 * oracle is the order of the saves this test makes. */
static void test_keep_last_runs(void) {
    static const size_t small[] = {100, 3000};
    char dir[600], p[700], newest[700];
    harness_t h;
    /* Run A saves steps 1..5; run B then saves steps 1 and 2 into the same directory with
     * keep-last 1: B's step 1 goes, A's steps 3, 4, 5 stay (the old rule kept the highest
     * steps and deleted B's own new checkpoints). */
    snprintf(dir, sizeof dir, "%s/runs", root);
    for (int step = 1; step <= 5; step++) {
        h_init(&h, 2, small, step);
        CHECK(save_run(&h, dir, 0xA, 0) == ZERO_OK, "run A step %d", step);
        h_free(&h);
    }
    for (int step = 1; step <= 2; step++) {
        h_init(&h, 2, small, step);
        CHECK(save_run(&h, dir, 0xB, 1) == ZERO_OK, "run B step %d", step);
        h_free(&h);
    }
    int mask = step_mask(dir);
    CHECK(mask == ((1 << 2) | (1 << 3) | (1 << 4) | (1 << 5)),
          "run B with keep-last 1 left steps mask %x (expected 2 of B, 3-5 of A)", mask);
    zero_ckpt_t *c = NULL;
    CHECK(zero_ckpt_open(&c, dir) == ZERO_OK && zero_ckpt_get_meta(c)->step == 2 &&
              zero_ckpt_get_meta(c)->run_id == 0xB,
          "latest is run B's step 2 with its run id");
    zero_ckpt_close(c);
    c = NULL;
    snprintf(p, sizeof p, "%s/step-%08d", dir, 5);
    CHECK(zero_ckpt_open(&c, p) == ZERO_OK && zero_ckpt_get_meta(c)->run_id == 0xA,
          "run A's step 5 keeps run id A");
    zero_ckpt_close(c);
    /* `latest` lost: the newest save is B's step 2, not the highest step 5. */
    snprintf(p, sizeof p, "%s/latest", dir);
    unlink(p);
    char want[700];
    snprintf(want, sizeof want, "%s/step-%08d", dir, 2);
    CHECK(zero_ckpt_find_newest(dir, newest, sizeof newest) == ZERO_OK && !strcmp(newest, want),
          "newest without latest: '%s', expected '%s'", newest, want);
    /* An incomplete directory (no COMPLETE) is never the newest. */
    snprintf(p, sizeof p, "%s/step-%08d/COMPLETE", dir, 2);
    unlink(p);
    snprintf(want, sizeof want, "%s/step-%08d", dir, 5);
    CHECK(zero_ckpt_find_newest(dir, newest, sizeof newest) == ZERO_OK && !strcmp(newest, want),
          "newest skips an incomplete checkpoint: '%s', expected '%s'", newest, want);
    snprintf(p, sizeof p, "%s/none", root);
    CHECK(zero_ckpt_find_newest(p, newest, sizeof newest) == ZERO_OK && !newest[0],
          "no save directory: no newest ('%s')", newest);

    /* One run saving step 10 and then step 3 (a restart from an earlier checkpoint): keep-last
     * 1 keeps the newer save, step 3 (the old rule kept step 10 and could not delete 3). */
    snprintf(dir, sizeof dir, "%s/order", root);
    h_init(&h, 2, small, 10);
    CHECK(save_run(&h, dir, 0xC, 1) == ZERO_OK, "save step 10");
    h_free(&h);
    h_init(&h, 2, small, 3);
    CHECK(save_run(&h, dir, 0xC, 1) == ZERO_OK, "save step 3");
    h_free(&h);
    mask = step_mask(dir);
    CHECK(mask == (1 << 3), "keep-last 1 after saves of steps 10 then 3: mask %x", mask);
}

/* zero_ckpt_save_check: what the save will need, checked before it, writing nothing. */
static void test_save_check(void) {
    static const size_t small[] = {100, 3000};
    harness_t h;
    h_init(&h, 2, small, 1);
    zero_ckpt_save_params_t p = zero_ckpt_save_params_default();
    zero_ckpt_meta_t m = meta_of(1);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/check/sub", root);
    p.save_dir = dir;
    CHECK(zero_ckpt_save_check(&p, &h.layout, &m) == ZERO_OK, "check a new directory");
    CHECK(count_entries(dir) == 0, "the check left %d entries", count_entries(dir));
    /* a file where the directory should be */
    char file[600];
    snprintf(file, sizeof file, "%s/check/file", root);
    int fd = open(file, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) close(fd);
    p.save_dir = file;
    zero_status_t st = zero_ckpt_save_check(&p, &h.layout, &m);
    CHECK(st == ZERO_ERR_IO && strstr(zero_last_error(), file), "file as save dir: %d '%s'",
          (int)st, zero_last_error());
    /* a layout the save would refuse */
    p.save_dir = dir;
    zero_ckpt_unit_t bad_unit = h.layout.units[0];
    bad_unit.name = NULL;
    zero_ckpt_layout_t bad = {1, &bad_unit};
    CHECK(zero_ckpt_save_check(&p, &bad, &m) == ZERO_ERR_INVALID_ARG, "bad layout refused");
    /* metadata that is not JSON */
    m.data_json = "{not json";
    st = zero_ckpt_save_check(&p, &h.layout, &m);
    CHECK(st == ZERO_ERR_INVALID_ARG && strstr(zero_last_error(), "data"),
          "bad metadata refused: %d '%s'", (int)st, zero_last_error());
    h_free(&h);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : DEFAULT_KILL_ROUNDS;
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/zero-ckpt-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    zero_log_set_level(ZERO_LOG_WARN);
    double t0 = zero_time_now();
    test_roundtrip();
    test_meta_and_ranges();
    test_latest_keep_last();
    test_keep_last_runs();
    test_save_check();
    test_refusals();
    test_write_errors();
    test_collective();
    test_sigkill(rounds);
    rm_rf(root);
    printf("test_ckpt: %.1f s\n", zero_time_now() - t0);
    return check_report();
}
