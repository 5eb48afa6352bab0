/* test_comm_split.c — zero_comm_split on the threads backend.
 *
 * For cliques of 8, 7 and 3 ranks: groups by parity and by blocks of three, with keys that
 * reverse the parent order, with tied keys (parent order decides), with ranks that pass
 * ZERO_COMM_NO_COLOUR (they get NULL), and a split of a split. Sizes and ranks are checked
 * against membership computed here. Then collectives run on different sub-communicators at the
 * same time: the even group all-reduces while the odd group all-gathers, with a collective on
 * the parent posted at the same time (in opposite orders on even and odd ranks), and the lite
 * collective matrix runs concurrently on every group. Results are checked against the naive
 * reference of coll_cases.c; traffic statistics of the parent must not see the groups' traffic.
 */
#include "check.h"
#include "comm/coll_cases.h"
#include "thread_ranks.h"
#include "zero/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 8

typedef struct shared {
    int n;
    atomic_int parity_arrivals[2];
    atomic_int block_arrivals[3];
    coll_tally_t tally[MAX_RANKS];
} shared_t;

/* Expected group of parent rank r: members sorted by (key, parent rank). Returns the group size
 * and r's position in it, or -1 for NO_COLOUR. */
static int expected_group(int n, const int *colour, const int *key, int r, int *pos, int *members) {
    if (colour[r] < 0) return -1;
    int m = 0;
    for (int p = 0; p < n; p++)
        if (colour[p] == colour[r]) members[m++] = p;
    for (int i = 1; i < m; i++) /* insertion sort: stable, parent order breaks ties */
        for (int j = i; j > 0 && key[members[j]] < key[members[j - 1]]; j--) {
            int t = members[j];
            members[j] = members[j - 1];
            members[j - 1] = t;
        }
    for (int i = 0; i < m; i++)
        if (members[i] == r) *pos = i;
    return m;
}

static zero_comm_t *split_and_check(zero_comm_t *comm, int n, const int *colour, const int *key,
                                    const char *what) {
    int r = zero_comm_rank(comm);
    zero_comm_t *sub = (zero_comm_t *)(uintptr_t)1; /* must be overwritten */
    zero_status_t st = zero_comm_split(comm, colour[r], key[r], &sub);
    CHECK(st == ZERO_OK, "%s: split on rank %d returned %s: %s", what, r, zero_status_str(st),
          zero_last_error());
    if (st != ZERO_OK) return NULL;
    int pos = -1, members[MAX_RANKS];
    int m = expected_group(n, colour, key, r, &pos, members);
    if (m < 0) {
        CHECK(sub == NULL, "%s: rank %d passed NO_COLOUR but got a communicator", what, r);
        return NULL;
    }
    CHECK(sub != NULL && sub != (zero_comm_t *)(uintptr_t)1, "%s: rank %d got no communicator",
          what, r);
    if (!sub || sub == (zero_comm_t *)(uintptr_t)1) return NULL;
    CHECK(zero_comm_size(sub) == m, "%s: rank %d: group size %d, expected %d", what, r,
          zero_comm_size(sub), m);
    CHECK(zero_comm_rank(sub) == pos, "%s: parent rank %d has group rank %d, expected %d", what, r,
          zero_comm_rank(sub), pos);
    CHECK(zero_comm_backend(sub) == ZERO_BACKEND_THREADS, "%s: backend", what);
    return sub;
}

/* Even group all_reduce (fp32 sum) and odd group all_gather (bf16) at the same time, each with a
 * parent all_reduce (fp64 max) posted beside it. */
static void concurrent_ops(zero_comm_t *parent, zero_comm_t *sub, int n) {
    int r = zero_comm_rank(parent), sr = zero_comm_rank(sub), m = zero_comm_size(sub);
    int even = r % 2 == 0;
    const size_t cnt = 1009;
    uint64_t sub_seed = even ? 0xe0e0 : 0x0d0d, parent_seed = 0xfafa;
    zero_dtype_t sdt = even ? ZERO_DTYPE_FP32 : ZERO_DTYPE_BF16;
    size_t es = zero_dtype_size(sdt), out_count = even ? cnt : cnt * (size_t)m;
    void *s_send = malloc(cnt * es), *s_recv = malloc(out_count * es);
    void *s_ref = malloc(out_count * es);
    double *p_send = malloc(cnt * sizeof(double)), *p_recv = malloc(cnt * sizeof(double));
    double *p_ref = malloc(cnt * sizeof(double));
    coll_fill(s_send, cnt, sdt, sub_seed, sr, 0);
    coll_fill(p_send, cnt, ZERO_DTYPE_FP64, parent_seed, r, 0);
    zero_comm_reset_stats(parent);
    zero_comm_reset_stats(sub);

    zero_comm_request_t *rs = NULL, *rp = NULL;
    zero_status_t st_s, st_p;
    if (even) {
        st_s = zero_comm_all_reduce_post(s_send, s_recv, cnt, sdt, ZERO_OP_SUM, sub, &rs);
        st_p = zero_comm_all_reduce_post(p_send, p_recv, cnt, ZERO_DTYPE_FP64, ZERO_OP_MAX, parent,
                                         &rp);
    } else {
        st_p = zero_comm_all_reduce_post(p_send, p_recv, cnt, ZERO_DTYPE_FP64, ZERO_OP_MAX, parent,
                                         &rp);
        st_s = zero_comm_all_gather_post(s_send, s_recv, cnt, sdt, sub, &rs);
    }
    CHECK(st_s == ZERO_OK && st_p == ZERO_OK, "rank %d: posting failed: %s", r, zero_last_error());
    /* References while both run. */
    int members[MAX_RANKS];
    for (int k = 0; k < MAX_RANKS; k++) members[k] = k;
    if (even)
        coll_ref_reduce(s_ref, cnt, sdt, ZERO_OP_SUM, sub_seed, members, m, 0);
    else
        for (int k = 0; k < m; k++)
            coll_fill((char *)s_ref + (size_t)k * cnt * es, cnt, sdt, sub_seed, k, 0);
    coll_ref_reduce(p_ref, cnt, ZERO_DTYPE_FP64, ZERO_OP_MAX, parent_seed, members, n, 0);
    /* Wait in the order opposite to posting. */
    if (st_s == ZERO_OK && st_p == ZERO_OK) {
        if (even) {
            st_p = zero_comm_wait(rp);
            st_s = zero_comm_wait(rs);
        } else {
            st_s = zero_comm_wait(rs);
            st_p = zero_comm_wait(rp);
        }
        CHECK(st_s == ZERO_OK, "rank %d: group collective: %s", r, zero_last_error());
        CHECK(st_p == ZERO_OK, "rank %d: parent collective: %s", r, zero_last_error());
        CHECK(memcmp(s_recv, s_ref, out_count * es) == 0,
              "rank %d: %s result on the %s group differs from the reference", r,
              even ? "all_reduce" : "all_gather", even ? "even" : "odd");
        CHECK(memcmp(p_recv, p_ref, cnt * sizeof(double)) == 0,
              "rank %d: parent all_reduce result differs from the reference", r);
        /* Statistics stay with their communicator. */
        zero_comm_stats_t ps, ss;
        zero_comm_get_stats(parent, &ps);
        zero_comm_get_stats(sub, &ss);
        CHECK(ps.calls[ZERO_COLL_ALL_REDUCE] == 1 && ps.calls[ZERO_COLL_ALL_GATHER] == 0,
              "rank %d: parent stats count %llu all_reduce, %llu all_gather (expected 1, 0)", r,
              (unsigned long long)ps.calls[ZERO_COLL_ALL_REDUCE],
              (unsigned long long)ps.calls[ZERO_COLL_ALL_GATHER]);
        zero_coll_t sc = even ? ZERO_COLL_ALL_REDUCE : ZERO_COLL_ALL_GATHER;
        uint64_t want = even ? 0 : (uint64_t)(m - 1) * cnt * es;
        if (even) {
            uint64_t own =
                cnt * (uint64_t)(sr + 1) / (uint64_t)m - cnt * (uint64_t)sr / (uint64_t)m;
            /* every other member's block to it, ours to every other member */
            want = (cnt - own + (uint64_t)(m - 1) * own) * es;
        }
        CHECK(ss.calls[sc] == 1 && ss.sent_bytes[sc] == want && ss.recv_bytes[sc] == want,
              "rank %d: group stats %llu calls, %llu sent, %llu received; expected 1, %llu", r,
              (unsigned long long)ss.calls[sc], (unsigned long long)ss.sent_bytes[sc],
              (unsigned long long)ss.recv_bytes[sc], (unsigned long long)want);
    }
    free(s_send);
    free(s_recv);
    free(s_ref);
    free(p_send);
    free(p_recv);
    free(p_ref);
}

static void rank_main(zero_comm_t *comm, int r, void *arg) {
    shared_t *sh = arg;
    int n = sh->n;
    coll_tally_t *t = &sh->tally[r]; /* the lite matrix's checks */
    int colour[MAX_RANKS], key[MAX_RANKS];
    char label[64];

    zero_comm_reset_stats(comm);
    /* 1. Parity, keys reversing the order. */
    for (int p = 0; p < n; p++) colour[p] = p % 2, key[p] = -p;
    zero_comm_t *parity = split_and_check(comm, n, colour, key, "parity/reverse");
    zero_comm_stats_t s;
    zero_comm_get_stats(comm, &s);
    CHECK(s.calls[ZERO_COLL_SPLIT] == 1 && s.sent_bytes[ZERO_COLL_SPLIT] == 0,
          "rank %d: split counted %llu times with %llu bytes (expected 1, 0)", r,
          (unsigned long long)s.calls[ZERO_COLL_SPLIT],
          (unsigned long long)s.sent_bytes[ZERO_COLL_SPLIT]);

    /* 2. Blocks of three (the last one shorter), reversed. */
    for (int p = 0; p < n; p++) colour[p] = p / 3, key[p] = 100 - p;
    zero_comm_t *block = split_and_check(comm, n, colour, key, "blocks of 3/reverse");

    /* 3. Tied keys: parent order decides. */
    for (int p = 0; p < n; p++) colour[p] = p % 2, key[p] = 7;
    zero_comm_t *tied = split_and_check(comm, n, colour, key, "parity/tied keys");

    /* 4. The first and last rank opt out. */
    for (int p = 0; p < n; p++) {
        colour[p] = (p == 0 || p == n - 1) ? ZERO_COMM_NO_COLOUR : 5;
        key[p] = p;
    }
    zero_comm_t *inner = split_and_check(comm, n, colour, key, "no colour");

    /* 5. Different groups at the same time, with the parent beside them. */
    if (parity) concurrent_ops(comm, parity, n);

    /* 6. The lite matrix concurrently on every parity group, then on every block group. */
    if (parity) {
        snprintf(label, sizeof label, "split n=%d parity colour %d", n, r % 2);
        coll_opts_t o = {
            .lite = 1, .barrier_arrivals = &sh->parity_arrivals[r % 2], .label = label};
        coll_run_matrix(parity, &o, t);
    }
    if (block) {
        snprintf(label, sizeof label, "split n=%d block %d", n, r / 3);
        coll_opts_t o = {.lite = 1, .barrier_arrivals = &sh->block_arrivals[r / 3], .label = label};
        coll_run_matrix(block, &o, t);
    }

    /* 7. A split of a split: halves of the parity group, original order. */
    zero_comm_t *nested = NULL;
    if (parity) {
        int m = zero_comm_size(parity), sr = zero_comm_rank(parity);
        int c2[MAX_RANKS], k2[MAX_RANKS];
        for (int p = 0; p < m; p++) c2[p] = p / 2, k2[p] = p;
        nested = split_and_check(parity, m, c2, k2, "nested");
        if (nested) {
            int32_t in = 1000 + r, out = 0;
            zero_status_t st =
                zero_comm_all_reduce(&in, &out, 1, ZERO_DTYPE_INT32, ZERO_OP_SUM, nested);
            /* Members of the nested group: parity-group ranks 2*(sr/2) and 2*(sr/2)+1, whose
             * parent ranks follow from the reversed parity order. */
            int32_t want = 0;
            int group_parent[MAX_RANKS], gm = 0;
            for (int p = n - 1; p >= 0; p--)
                if (p % 2 == r % 2) group_parent[gm++] = p;
            for (int q = sr / 2 * 2; q < sr / 2 * 2 + 2 && q < gm; q++)
                want += 1000 + group_parent[q];
            CHECK(st == ZERO_OK && out == want, "rank %d: nested all_reduce %d (%s), expected %d",
                  r, out, zero_status_str(st), want);
        }
    }
    /* The inner group (ranks 1..n-2) is still usable after all the others ran. */
    if (inner) {
        int32_t in = r, out = -1;
        zero_status_t st = zero_comm_all_reduce(&in, &out, 1, ZERO_DTYPE_INT32, ZERO_OP_MAX, inner);
        CHECK(st == ZERO_OK && out == n - 2, "rank %d: inner max %d (%s), expected %d", r, out,
              zero_status_str(st), n - 2);
    }
    if (tied) {
        int32_t in = r, out = -1;
        zero_status_t st = zero_comm_broadcast(&in, &out, 1, ZERO_DTYPE_INT32, 0, tied);
        CHECK(st == ZERO_OK && out == r % 2, "rank %d: tied-key group root is %d, expected %d", r,
              out, r % 2);
    }
    zero_comm_free(nested);
    zero_comm_free(inner);
    zero_comm_free(tied);
    zero_comm_free(block);
    zero_comm_free(parity);
    /* The parent still works after its children are gone. */
    zero_status_t st = zero_comm_barrier(comm);
    CHECK(st == ZERO_OK, "rank %d: parent barrier after freeing the groups: %s", r,
          zero_last_error());
}

int main(void) {
    const int sizes[] = {8, 7, 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        shared_t *sh = calloc(1, sizeof *sh);
        sh->n = sizes[i];
        char label[32];
        snprintf(label, sizeof label, "split n=%d", sh->n);
        check_label = label;
        long p = atomic_load(&passed), f = atomic_load(&failed);
        double t0 = zero_time_now();
        CHECK(thread_ranks_clique(sh->n, 60.0, rank_main, sh) == ZERO_OK, "clique of %d", sh->n);
        for (int r = 0; r < sh->n; r++) check_add(sh->tally[r].passed, sh->tally[r].failed);
        printf("split n=%d: %ld checks passed, %ld failed (%.2f s)\n", sh->n,
               atomic_load(&passed) - p, atomic_load(&failed) - f, zero_time_now() - t0);
        free(sh);
    }
    return check_report();
}
