/* test_ckpt_ranks.c — resharding on the real engine: GPT models trained by nobody but given
 * distinct weights are saved from W ranks at one ZeRO stage (threads communicator, each rank
 * writing its own shard files) and loaded at W' ranks and another stage:
 *   4 ranks stage 3 -> 2 ranks stage 1,  2 ranks stage 2 -> 3 ranks stage 3,
 *   1 rank stage 0 -> 4 ranks stage 3,   3 ranks stage 1 -> 1 rank stage 0.
 * Oracle: zero_engine_fingerprint (the engine's hash of the full weights, the same however they
 * are sharded) after loading equals the saver's, and differs from a fresh engine's.
 * Loading: stage 3 ranks load their own shard through the communicator; stages 0-2 hold whole
 * units that must be equal on every rank, so each rank loads the whole checkpoint (world 1).
 */
#include "model/gpt.h"
#include "zero/zero.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "thread_ranks.h"

static const zero_gpt_config_t cfg = {2, 4, 32, 96, 16, {0}, {0}};

typedef struct {
    int stage, save;
    const char *dir;
    zero_status_t st;
    char err[512];
    uint64_t fp_fresh, fp_after;
} rank_t;

static float weight(int unit, size_t i) {
    uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(unit * 0x9E3779B9u);
    x ^= x >> 15;
    return ((float)(x & 0xFFFF) - 32768.0f) / 65536.0f;
}

static void rank_main(zero_comm_t *comm, int rank, void *arg) {
    rank_t *r = (rank_t *)arg + rank; /* arg: one rank_t per rank */
    zero_engine_t *eng = NULL;
    zero_gpt_t *gpt = NULL;
    zero_ckpt_engine_layout_t L = {0};
    zero_ckpt_t *c = NULL;
    float *buf = NULL;
    int world = zero_comm_size(comm);
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = r->stage;
    p.comm = world > 1 ? comm : NULL;
    p.persistence_threshold_elems = 0; /* every unit sharded in stage 3 */
    zero_status_t st = zero_engine_init(&eng, &p);
    if (st == ZERO_OK) st = zero__gpt_init(&gpt, &cfg, eng, 1, 0, 1);
    if (st == ZERO_OK) st = zero_ckpt_engine_layout_init(&L, eng);
    if (st == ZERO_OK) st = zero_engine_fingerprint(eng, &r->fp_fresh);
    zero_ckpt_shard_io_t io = zero_ckpt_engine_io(eng);
    if (st == ZERO_OK && r->save) {
        /* distinct weights: a whole-unit put, clipped to the owned shard in stage 3 */
        for (int u = 0; st == ZERO_OK && u < L.layout.unit_count; u++) {
            size_t n = L.units[u].param_count;
            buf = realloc(buf, n * sizeof *buf);
            for (size_t i = 0; i < n; i++) buf[i] = weight(u, i);
            st = io.put(io.user, 0, u, ZERO_CKPT_PARAMS, 0, n, buf);
        }
        if (st == ZERO_OK) st = zero_engine_fingerprint(eng, &r->fp_after);
        zero_ckpt_save_params_t sp = zero_ckpt_save_params_default();
        sp.save_dir = r->dir;
        sp.with_optim = 0;
        sp.comm = comm;
        sp.world = 0;
        zero_ckpt_meta_t meta = {.step = 11, .stage = r->stage};
        if (st == ZERO_OK) st = zero_ckpt_save(&sp, &L.layout, &meta, &io, NULL, 0);
    } else if (st == ZERO_OK) {
        st = zero_ckpt_open(&c, r->dir);
        zero_ckpt_load_params_t lp = zero_ckpt_load_params_default();
        lp.with_optim = 0;
        if (r->stage == 3) {
            lp.comm = comm;
            lp.world = 0;
        }
        /* stage 3 loads are collective: a rank whose open failed still calls (with NULL) */
        if (st == ZERO_OK || r->stage == 3) {
            zero_status_t ls = zero_ckpt_load(c, &lp, &L.layout, &io);
            if (st == ZERO_OK) st = ls;
        }
        zero_status_t f = zero_engine_fingerprint(eng, &r->fp_after);
        if (st == ZERO_OK) st = f;
    }
    if (st != ZERO_OK) snprintf(r->err, sizeof r->err, "%s", zero_last_error());
    r->st = st;
    free(buf);
    zero_ckpt_close(c);
    zero_ckpt_engine_layout_free(&L);
    zero__gpt_free(gpt);
    zero_engine_free(eng);
}

/* Run `world` ranks at `stage`; returns rank 0's fingerprints. */
static int run(int world, int stage, int save, const char *dir, uint64_t *fresh, uint64_t *after) {
    zero_comm_t *comms[8];
    rank_t r[8];
    if (zero_comm_threads_init_all(world, comms, NULL) != ZERO_OK) return 0;
    for (int i = 0; i < world; i++) {
        memset(&r[i], 0, sizeof r[i]);
        r[i].stage = stage;
        r[i].save = save;
        r[i].dir = dir;
    }
    thread_ranks_run(world, comms, rank_main, r);
    int ok = 1;
    for (int i = 0; i < world; i++) {
        if (r[i].st != ZERO_OK) {
            fprintf(stderr, "rank %d of %d (stage %d, %s): %s\n", i, world, stage,
                    save ? "save" : "load", r[i].err);
            ok = 0;
        }
        if (r[i].fp_after != r[0].fp_after) ok = 0;
        zero_comm_free(comms[i]);
    }
    *fresh = r[0].fp_fresh;
    *after = r[0].fp_after;
    return ok;
}

int main(void) {
    static const int cases[][4] = {{4, 3, 2, 1}, {2, 2, 3, 3}, {1, 0, 4, 3}, {3, 1, 1, 0}};
    const char *tmpd = getenv("TMPDIR");
    char root[512], dir[600];
    snprintf(root, sizeof root, "%s/zero-ckranks-XXXXXX", tmpd && *tmpd ? tmpd : "/tmp");
    if (!mkdtemp(root)) return 1;
    zero_log_set_level(ZERO_LOG_WARN);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int ws = cases[k][0], ss = cases[k][1], wl = cases[k][2], sl = cases[k][3];
        snprintf(dir, sizeof dir, "%s/case%zu", root, k);
        uint64_t fresh_s, saved, fresh_l, loaded;
        int ok_s = run(ws, ss, 1, dir, &fresh_s, &saved);
        CHECK(ok_s && saved != fresh_s, "save at %d ranks stage %d", ws, ss);
        int ok_l = run(wl, sl, 0, dir, &fresh_l, &loaded);
        CHECK(ok_l && loaded == saved && fresh_l == fresh_s,
              "load %d ranks stage %d -> %d ranks stage %d: fingerprint %016llx, saved %016llx", ws,
              ss, wl, sl, (unsigned long long)loaded, (unsigned long long)saved);
        printf("  %d ranks stage %d -> %d ranks stage %d: fingerprint %016llx %s\n", ws, ss, wl, sl,
               (unsigned long long)loaded, loaded == saved ? "(equal)" : "(DIFFERENT)");
    }
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", root);
    return check_report();
}
