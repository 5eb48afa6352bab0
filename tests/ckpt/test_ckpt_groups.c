/* test_ckpt_groups.c — checkpoints of stacked units (experts over partition groups) hold their
 * logical tensors: save, bitwise resume, and resume at another world size and number of copies.
 *
 * A toy model: a dense unit (the world's) and an "experts" unit of 4 logical experts, declared
 * stacked with E / ep experts per rank in the group of color rank % ep (zero_engine_add_group),
 * or, with ep 0, as a world unit of the logical shapes. Each rank feeds gradients that depend on
 * its rank and the logical element. Runs on threads-backend ranks:
 *  A  4 ranks, ep 2, stage 2: two steps, save (ckpt 1), two more steps (the reference states);
 *  B  4 ranks, ep 2, stage 2: resume ckpt 1, two steps: every state bitwise A's;
 *  C  4 ranks, ep 4, stage 3: resume ckpt 1: every state, read back as logical tensors, equals the
 *     saved tensors element by element (zero_ckpt_read_range); save again (ckpt 2, 4 copies);
 *  D  2 ranks, experts a world unit of the logical shapes, stage 1: resume ckpt 2: the same;
 *  E  1 rank, experts a world unit, stage 0: resume ckpt 1: the same; and the import of ckpt 1's
 *     safetensors export (logical names and shapes) gives ckpt 1's parameters;
 *  F  3 ranks, ep 3 (1 expert each: 3 logical experts): the resume is refused, naming the
 *     tensor and that 4 is not divisible by 3 copies.
 * The manifest records the copies (a bad value is a format error).
 * The fingerprint (a hash of the logical tensors) agrees between A and B, and between C and D.
 * Oracles: the checkpoint's own reader (the files), and the engines' states read back through
 * zero_engine_state_gather and placed here by the stacking rule, independently of engine_io.c.
 */
#include "zero/zero.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "thread_ranks.h"

#define EXPERTS 4
#define STEPS 2
enum { DENSE, MOE, UNITS };
enum { FC_W, FC_B, TENSORS };
static const size_t expert_shape[TENSORS][3] = {{6, 5}, {6}}; /* per expert */

typedef struct {
    int stage, ep; /* ep 0: the experts unit is a world unit of the logical shapes */
    const char *load, *save, *dir;
    int steps_before_save, steps_after;
    zero_status_t st;
    char err[768];
    uint64_t fp; /* zero_engine_fingerprint at the end */
    /* after the run (rank 0): every state of every tensor, logical, tensor-major */
    float *states[ZERO_ENGINE_STATE_COUNT][UNITS][TENSORS];
} rank_t;

static size_t tensor_numel(int u, int t, int experts) {
    if (u == DENSE) return t == FC_W ? 3 * 20 : 7;
    size_t n = (size_t)experts;
    for (int d = 0; d < 2 && expert_shape[t][d]; d++) n *= expert_shape[t][d];
    return n;
}

static zero_status_t declare(zero_engine_t *eng, int ep, int rank) {
    zero_tensor_desc_t dense[TENSORS] = {{"w", 2, {3, 20}, 0, ZERO_INIT_NORMAL, 0.1f},
                                         {"b", 1, {7}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_ZEROS, 0}};
    const size_t local = ep ? EXPERTS / ep : EXPERTS;
    zero_tensor_desc_t moe[TENSORS] = {
        {"fc_w", 3, {local, 6, 5}, 0, ZERO_INIT_NORMAL, 0.1f},
        {"fc_b", 2, {local, 6}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_ZEROS, 0}};
    int group = 0;
    zero_status_t st = ep ? zero_engine_add_group(eng, rank % ep, &group) : ZERO_OK;
    if (!st) st = zero_engine_add_unit(eng, "dense", dense, TENSORS, NULL);
    if (!st) st = zero_engine_add_unit_in(eng, group, "block.0.experts", moe, TENSORS, NULL);
    return st;
}

/* Rank r's gradient of logical element j of tensor t of unit u at optimizer step s: exact. */
static float grad(int r, int u, int t, size_t j, int64_t s) {
    return (float)((int)((j * 7 + (size_t)r * 13 + (size_t)s * 3 + (size_t)(u * 5 + t)) % 17) - 8) /
           32.0f;
}

static zero_status_t train(zero_engine_t *eng, int rank, int steps) {
    for (int k = 0; k < steps; k++) {
        const int64_t s = zero_engine_step_count(eng);
        for (int u = 0; u < UNITS; u++)
            if (!zero_unit_fetch(eng, u)) return ZERO_ERR_INTERNAL;
        for (int u = UNITS - 1; u >= 0; u--) {
            int copy = 0;
            zero_engine_unit_group(eng, u, NULL, &copy, NULL);
            float *g = zero_unit_grads(eng, u);
            if (!g) return ZERO_ERR_INTERNAL;
            for (int t = 0; t < TENSORS; t++) {
                const zero_tensor_desc_t *d = zero_engine_tensor_desc(eng, u, t);
                size_t n = 1;
                for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
                float *gt = g + zero_engine_tensor_offset(eng, u, t);
                for (size_t i = 0; i < n; i++) gt[i] += grad(rank, u, t, (size_t)copy * n + i, s);
            }
            zero_status_t st = zero_unit_grads_done(eng, u);
            zero_unit_release(eng, u);
            if (st) return st;
        }
        zero_status_t st = zero_engine_step(eng, NULL);
        if (st) return st;
    }
    return ZERO_OK;
}

/* Every state of every tensor as logical tensors: all copies gathered, copy c's tensor t placed
 * at c x its elements (the stacking rule of zero_engine_add_unit_in). Collective. */
static zero_status_t read_logical(zero_engine_t *eng, rank_t *r) {
    zero_status_t st = ZERO_OK;
    for (int s = 0; s < ZERO_ENGINE_STATE_COUNT && !st; s++)
        for (int u = 0; u < UNITS && !st; u++) {
            int copies = 1;
            zero_engine_unit_group(eng, u, NULL, NULL, &copies);
            const size_t P = zero_engine_unit_padded_count(eng, u);
            float *all = malloc((size_t)copies * P * sizeof *all);
            st = all ? zero_engine_state_gather(eng, u, (zero_engine_state_t)s, all)
                     : ZERO_ERR_OUT_OF_MEMORY;
            for (int t = 0; t < TENSORS && !st; t++) {
                const size_t total = tensor_numel(u, t, EXPERTS), n = total / (size_t)copies;
                float *out = r->states[s][u][t] = malloc(total * sizeof *out);
                if (!out) {
                    st = ZERO_ERR_OUT_OF_MEMORY;
                    break;
                }
                for (int c = 0; c < copies; c++)
                    memcpy(out + (size_t)c * n,
                           all + (size_t)c * P + zero_engine_tensor_offset(eng, u, t),
                           n * sizeof *out);
            }
            free(all);
        }
    return st;
}

static void free_states(rank_t *r) {
    for (int s = 0; s < ZERO_ENGINE_STATE_COUNT; s++)
        for (int u = 0; u < UNITS; u++)
            for (int t = 0; t < TENSORS; t++) {
                free(r->states[s][u][t]);
                r->states[s][u][t] = NULL;
            }
}

static zero_status_t resume(zero_engine_t *eng, const char *path) {
    zero_ckpt_t *c = NULL;
    zero_ckpt_engine_layout_t L;
    zero_status_t st = zero_ckpt_open(&c, path);
    if (!st && !(st = zero_ckpt_engine_layout_init(&L, eng))) {
        zero_ckpt_shard_io_t io = zero_ckpt_engine_io(eng);
        zero_ckpt_load_params_t lp = zero_ckpt_load_params_default();
        lp.world = 1; /* every rank reads whole (logical) units and keeps what it holds */
        st = zero_ckpt_load(c, &lp, &L.layout, &io);
        if (!st) st = zero_engine_set_step_count(eng, zero_ckpt_get_meta(c)->step);
        zero_ckpt_engine_layout_free(&L);
    }
    zero_ckpt_close(c);
    return st;
}

static zero_status_t save(zero_engine_t *eng, zero_comm_t *comm, const char *dir) {
    zero_ckpt_engine_layout_t L;
    zero_ckpt_engine_save_t *sv = NULL;
    zero_status_t st = zero_ckpt_engine_layout_init(&L, eng);
    if (st) return st;
    if (!(st = zero_ckpt_engine_save_init(&sv, eng, 1))) {
        zero_ckpt_shard_io_t io = zero_ckpt_engine_save_io(sv);
        zero_ckpt_save_params_t sp = zero_ckpt_save_params_default();
        sp.save_dir = dir;
        sp.comm = comm;
        zero_ckpt_meta_t meta = {
            zero_engine_step_count(eng), 0, NULL, NULL, NULL, NULL, NULL, NULL, 0};
        st = zero_ckpt_save(&sp, &L.layout, &meta, &io, NULL, 0);
    }
    zero_ckpt_engine_save_free(sv);
    zero_ckpt_engine_layout_free(&L);
    return st;
}

static void rank_main(zero_comm_t *comm, int rank, void *arg) {
    rank_t *r = (rank_t *)arg + rank;
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = r->stage;
    p.comm = zero_comm_size(comm) > 1 ? comm : NULL;
    p.persistence_threshold_elems = 0;
    p.grad_clip = 0.5f; /* the norm takes part: every unit's weight in it must be right */
    p.total_steps = 8;
    zero_engine_t *eng = NULL;
    zero_status_t st = zero_engine_init(&eng, &p);
    if (!st) st = declare(eng, r->ep, rank);
    if (!st && r->load) st = resume(eng, r->load);
    if (!st) st = train(eng, rank, r->steps_before_save);
    if (!st && r->save) st = save(eng, p.comm, r->save);
    if (!st) st = train(eng, rank, r->steps_after);
    if (!st) st = read_logical(eng, r);
    if (!st) st = zero_engine_fingerprint(eng, &r->fp);
    r->st = st;
    if (st) snprintf(r->err, sizeof r->err, "%s", zero_last_error());
    zero_engine_free(eng);
}

static void run(int n, rank_t *ranks, const char *what) {
    CHECK(thread_ranks_clique(n, 30.0, rank_main, ranks) == ZERO_OK, "%s: clique", what);
    for (int i = 0; i < n; i++)
        CHECK(ranks[i].st == ZERO_OK, "%s rank %d: %s", what, i, ranks[i].err);
}

/* Every state of every tensor equals the checkpoint's tensors, element by element. */
static void same_as_ckpt(const rank_t *r, const char *path, const char *what) {
    zero_ckpt_t *c = NULL;
    CHECK(zero_ckpt_open(&c, path) == ZERO_OK, "%s: open %s: %s", what, path, zero_last_error());
    if (!c) return;
    const zero_ckpt_layout_t *L = zero_ckpt_get_layout(c);
    for (int s = 0; s < ZERO_ENGINE_STATE_COUNT; s++)
        for (int u = 0; u < UNITS; u++)
            for (int t = 0; t < TENSORS; t++) {
                const size_t n = tensor_numel(u, t, EXPERTS);
                const zero_ckpt_tensor_t *T = &L->units[u].tensors[t];
                CHECK(u == DENSE || T->shape[0] == EXPERTS, "%s: saved %s has dimension 0 %zu",
                      what, T->name, T->shape[0]);
                float *f = malloc(n * sizeof *f);
                CHECK(f && zero_ckpt_read_range(c, u, (zero_ckpt_state_t)s, T->offset, n, f) ==
                               ZERO_OK,
                      "%s: read %s", what, T->name);
                size_t bad = n;
                for (size_t i = 0; f && i < n && bad == n; i++)
                    if (memcmp(&f[i], &r->states[s][u][t][i], sizeof *f)) bad = i;
                CHECK(bad == n, "%s: state %d of %s element %zu: %g, saved %g", what, s, T->name,
                      bad, bad < n ? r->states[s][u][t][bad] : 0.0, bad < n ? f[bad] : 0.0);
                free(f);
            }
    zero_ckpt_close(c);
}

static int same_states(const rank_t *a, const rank_t *b) {
    for (int s = 0; s < ZERO_ENGINE_STATE_COUNT; s++)
        for (int u = 0; u < UNITS; u++)
            for (int t = 0; t < TENSORS; t++)
                if (memcmp(a->states[s][u][t], b->states[s][u][t],
                           tensor_numel(u, t, EXPERTS) * sizeof(float)))
                    return 0;
    return 1;
}

static int st_name(const void *user, const char *unit, const char *tensor, char *out,
                   size_t out_size, int *transposed) {
    (void)user;
    *transposed = 0;
    snprintf(out, out_size, "%s.%s", unit, tensor);
    return 1;
}

/* One rank: the safetensors export of ckpt 1 imported into a world-unit engine gives ckpt 1's
 * parameters (logical names and shapes in the file). */
static void export_import(const char *ckpt, const char *file) {
    zero_ckpt_t *c = NULL;
    const zero_ckpt_name_map_t names = {"test", st_name, NULL};
    CHECK(zero_ckpt_open(&c, ckpt) == ZERO_OK &&
              zero_ckpt_export_safetensors(c, &names, file, ZERO_DTYPE_FP32) == ZERO_OK,
          "export: %s", zero_last_error());
    zero_ckpt_close(c);
    zero_engine_params_t p = zero_engine_params_default();
    zero_engine_t *eng = NULL;
    zero_ckpt_engine_layout_t L;
    CHECK(zero_engine_init(&eng, &p) == ZERO_OK && declare(eng, 0, 0) == ZERO_OK &&
              zero_ckpt_engine_layout_init(&L, eng) == ZERO_OK,
          "import engine: %s", zero_last_error());
    zero_ckpt_shard_io_t io = zero_ckpt_engine_io(eng);
    CHECK(zero_ckpt_import_safetensors(file, &L.layout, &names, &io) == ZERO_OK, "import: %s",
          zero_last_error());
    zero_ckpt_engine_layout_free(&L);
    rank_t r = {0};
    CHECK(read_logical(eng, &r) == ZERO_OK, "import read");
    zero_engine_free(eng);
    CHECK(zero_ckpt_open(&c, ckpt) == ZERO_OK, "open");
    for (int u = 0; u < UNITS && c; u++)
        for (int t = 0; t < TENSORS; t++) {
            const zero_ckpt_tensor_t *T = &zero_ckpt_get_layout(c)->units[u].tensors[t];
            const size_t n = tensor_numel(u, t, EXPERTS);
            float *f = malloc(n * sizeof *f);
            CHECK(f && zero_ckpt_read_range(c, u, ZERO_CKPT_PARAMS, T->offset, n, f) == ZERO_OK &&
                      !memcmp(f, r.states[ZERO_ENGINE_STATE_MASTER][u][t], n * sizeof *f),
                  "import: %s differs from the checkpoint", T->name);
            free(f);
        }
    zero_ckpt_close(c);
    free_states(&r);
}

/* The manifest says the experts were saved as 2 copies; a bad "copies" is a named format error. */
static void manifest_copies(const char *ckpt) {
    zero_ckpt_t *c = NULL;
    CHECK(zero_ckpt_open(&c, ckpt) == ZERO_OK, "open %s", ckpt);
    const zero_ckpt_layout_t *L = c ? zero_ckpt_get_layout(c) : NULL;
    CHECK(L && L->units[DENSE].copies == 1 && L->units[MOE].copies == 2,
          "manifest copies: dense %d, experts %d", L ? L->units[DENSE].copies : -1,
          L ? L->units[MOE].copies : -1);
    zero_ckpt_close(c);
    char path[256];
    snprintf(path, sizeof path, "%s/manifest.json", ckpt);
    FILE *f = fopen(path, "rb");
    static char text[1 << 16];
    const size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    char *at = strstr(text, "\"copies\"");
    CHECK(at != NULL, "the manifest has no copies key");
    if (!at) return;
    at += strlen("\"copies\"");
    while (*at == ':' || *at == ' ' || *at == '\t') at++;
    *at = '0'; /* copies 0 */
    CHECK(zero_ckpt_parse_manifest(text, n) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "'copies'"),
          "copies 0: %s", zero_last_error());
}

int main(void) {
    char dir[] = "/tmp/zero-ckpt-groups-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "temporary directory");
    char d1[128], d2[128], c1[160], c2[160], st_file[160];
    snprintf(d1, sizeof d1, "%s/a", dir);
    snprintf(d2, sizeof d2, "%s/c", dir);
    snprintf(c1, sizeof c1, "%s/step-%08d", d1, STEPS);
    snprintf(c2, sizeof c2, "%s/step-%08d", d2, STEPS);
    snprintf(st_file, sizeof st_file, "%s/model.safetensors", dir);

    static rank_t A[4], B[4], C[4], D[2], E[1], F[3];
    for (int i = 0; i < 4; i++) {
        A[i] = (rank_t){
            .stage = 2, .ep = 2, .save = d1, .steps_before_save = STEPS, .steps_after = STEPS};
        B[i] = (rank_t){.stage = 2, .ep = 2, .load = c1, .steps_after = STEPS};
        C[i] = (rank_t){.stage = 3, .ep = 4, .load = c1, .save = d2};
    }
    for (int i = 0; i < 2; i++) D[i] = (rank_t){.stage = 1, .ep = 0, .load = c2};
    E[0] = (rank_t){.stage = 0, .ep = 0, .load = c1};
    for (int i = 0; i < 3; i++) F[i] = (rank_t){.stage = 2, .ep = 3, .load = c1};
    run(4, A, "A: 4 ranks, 2 copies");
    run(4, B, "B: resume at the same layout");
    for (int i = 0; i < 4; i++)
        CHECK(same_states(&A[i], &B[i]) && A[i].fp == B[i].fp && A[i].fp == A[0].fp,
              "B rank %d: the resumed run is not bitwise A's", i);
    run(4, C, "C: 4 copies at stage 3");
    for (int i = 0; i < 4; i++) same_as_ckpt(&C[i], c1, "C: 4 copies from 2");
    same_as_ckpt(&C[0], c2, "C's own save");
    run(2, D, "D: 2 ranks, world units");
    for (int i = 0; i < 2; i++) same_as_ckpt(&D[i], c2, "D: world units from 4 copies");
    /* the fingerprint hashes the logical tensors: 4 copies and world units agree */
    for (int i = 0; i < 4; i++)
        CHECK(C[i].fp == D[0].fp && D[1].fp == D[0].fp, "C rank %d: fingerprint %llx, D's %llx", i,
              (unsigned long long)C[i].fp, (unsigned long long)D[0].fp);
    run(1, E, "E: 1 rank, world units");
    same_as_ckpt(&E[0], c1, "E: world units at 1 rank from 2 copies");
    export_import(c1, st_file);
    manifest_copies(c1);

    CHECK(thread_ranks_clique(3, 30.0, rank_main, F) == ZERO_OK, "F: clique");
    for (int i = 0; i < 3; i++)
        CHECK(F[i].st == ZERO_ERR_MISMATCH && strstr(F[i].err, "fc_w") &&
                  strstr(F[i].err, "not divisible by 3"),
              "F rank %d: 3 copies of 4 experts gave %s '%s'", i, zero_status_str(F[i].st),
              F[i].err);

    rank_t *all[] = {A, B, C, D, E, F};
    const int counts[] = {4, 4, 4, 2, 1, 3};
    for (int k = 0; k < 6; k++)
        for (int i = 0; i < counts[k]; i++) free_states(&all[k][i]);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return check_report();
}
