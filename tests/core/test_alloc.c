/* test_alloc.c — the accounting allocator of src/core/alloc.c.
 *
 * Checked against bookkeeping done independently in the test: live and peak bytes per category
 * and in total (the total's peak is the peak of the sum, not the sum of the peaks), alignment,
 * zero-byte blocks, calloc zeroing (over an allocator that hands out dirty memory),
 * out-of-memory injection through a custom zero_allocator_t (NULL result, message, unchanged
 * accounting, and every raw block returned to the allocator that gave it), invalid arguments,
 * and concurrent use of one domain from several threads (run under TSan in the sanitizer build).
 */
#include "zero/core.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

/* ------------------------------------------------------------------------------ test allocator */

/* A raw allocator that records what it handed out, can fail on demand, and fills new memory
 * with garbage so calloc's zeroing is really tested. */
#define MAX_LIVE 64
typedef struct test_allocator {
    int fail_after;   /* allocations that succeed before every later one fails; -1: never fail */
    size_t fail_over; /* fail any request above this many bytes (0: no limit) */
    int allocs, frees, refused;
    void *live[MAX_LIVE];
    size_t last_align, last_bytes;
    int bad_free; /* frees of pointers this allocator never returned */
} test_allocator_t;

static void *t_alloc(void *user, size_t bytes, size_t align) {
    test_allocator_t *t = user;
    t->last_align = align;
    t->last_bytes = bytes;
    if ((t->fail_after >= 0 && t->allocs >= t->fail_after) ||
        (t->fail_over && bytes > t->fail_over)) {
        t->refused++;
        return NULL;
    }
    size_t rounded = (bytes + align - 1) / align * align;
    void *p = aligned_alloc(align, rounded ? rounded : align);
    if (!p) return NULL;
    memset(p, 0xcd, bytes);
    for (int i = 0; i < MAX_LIVE; i++) {
        if (!t->live[i]) {
            t->live[i] = p;
            break;
        }
    }
    t->allocs++;
    return p;
}

static void t_free(void *user, void *ptr) {
    test_allocator_t *t = user;
    int found = 0;
    for (int i = 0; i < MAX_LIVE; i++) {
        if (t->live[i] == ptr) {
            t->live[i] = NULL;
            found = 1;
            break;
        }
    }
    if (!found) t->bad_free++;
    t->frees++;
    free(ptr);
}

static zero_allocator_t make_allocator(test_allocator_t *t) {
    memset(t, 0, sizeof *t);
    t->fail_after = -1;
    return (zero_allocator_t){t_alloc, t_free, t};
}

/* ------------------------------------------------------------------------------ tests */

typedef struct expect {
    size_t live[ZERO_MEM_CATEGORY_COUNT], peak[ZERO_MEM_CATEGORY_COUNT];
    size_t live_total, peak_total;
} expect_t;

static void expect_alloc(expect_t *e, int c, size_t bytes) {
    e->live[c] += bytes;
    if (e->live[c] > e->peak[c]) e->peak[c] = e->live[c];
    e->live_total += bytes;
    if (e->live_total > e->peak_total) e->peak_total = e->live_total;
}

static void expect_free(expect_t *e, int c, size_t bytes) {
    e->live[c] -= bytes;
    e->live_total -= bytes;
}

static void check_stats(const zero_mem_t *mem, const expect_t *e, const char *when) {
    zero_mem_stats_t s;
    zero_mem_get_stats(mem, &s);
    for (int c = 0; c < ZERO_MEM_CATEGORY_COUNT; c++) {
        CHECK(s.live_bytes[c] == e->live[c], "%s: live %s = %zu, expected %zu", when,
              zero_mem_category_name((zero_mem_category_t)c), s.live_bytes[c], e->live[c]);
        CHECK(s.peak_bytes[c] == e->peak[c], "%s: peak %s = %zu, expected %zu", when,
              zero_mem_category_name((zero_mem_category_t)c), s.peak_bytes[c], e->peak[c]);
    }
    CHECK(s.live_total_bytes == e->live_total, "%s: live total %zu, expected %zu", when,
          s.live_total_bytes, e->live_total);
    CHECK(s.peak_total_bytes == e->peak_total, "%s: peak total %zu, expected %zu", when,
          s.peak_total_bytes, e->peak_total);
}

static void test_accounting(void) {
    zero_mem_t *mem = NULL;
    CHECK(zero_mem_init(&mem, NULL) == ZERO_OK && mem, "zero_mem_init");
    if (!mem) return;
    expect_t e;
    memset(&e, 0, sizeof e);
    check_stats(mem, &e, "fresh domain");

    /* A sequence where the peak of the total (300) differs from the sum of the per-category
     * peaks (100 + 250 + ...): params 100, free it, grads 250, then comm 50 on top. */
    void *a = zero_mem_alloc(mem, ZERO_MEM_PARAMS, 100, 0);
    expect_alloc(&e, ZERO_MEM_PARAMS, 100);
    check_stats(mem, &e, "after params 100");
    zero_mem_free(a);
    expect_free(&e, ZERO_MEM_PARAMS, 100);
    check_stats(mem, &e, "after freeing params");
    void *b = zero_mem_alloc(mem, ZERO_MEM_GRADS, 250, 0);
    expect_alloc(&e, ZERO_MEM_GRADS, 250);
    void *c = zero_mem_calloc(mem, ZERO_MEM_COMM, 50, 128);
    expect_alloc(&e, ZERO_MEM_COMM, 50);
    check_stats(mem, &e, "grads 250 + comm 50");
    CHECK(e.peak_total == 300, "test bookkeeping");

    /* Many blocks over every category, freed in a scrambled order. */
    enum { N = 200 };
    void *blocks[N];
    int cats[N];
    size_t sizes[N];
    for (int i = 0; i < N; i++) {
        cats[i] = i % ZERO_MEM_CATEGORY_COUNT;
        sizes[i] = (size_t)(i * 37 % 1000) + (i % 5 == 0 ? 0 : 1); /* some zero-byte blocks */
        blocks[i] = zero_mem_alloc(mem, (zero_mem_category_t)cats[i], sizes[i], 0);
        CHECK(blocks[i] != NULL, "alloc %d of %zu bytes", i, sizes[i]);
        if (blocks[i]) memset(blocks[i], i & 0xff, sizes[i]);
        expect_alloc(&e, cats[i], sizes[i]);
    }
    check_stats(mem, &e, "after 200 blocks");
    for (int k = 0; k < N; k++) {
        int i = (k * 73) % N; /* 73 is coprime with 200: a permutation */
        if (!blocks[i]) continue;
        int intact = 1;
        for (size_t j = 0; j < sizes[i]; j++)
            intact &= ((unsigned char *)blocks[i])[j] == (unsigned char)(i & 0xff);
        CHECK(intact, "block %d was overwritten by another block's header or data", i);
        zero_mem_free(blocks[i]);
        expect_free(&e, cats[i], sizes[i]);
        if (k == N / 2) check_stats(mem, &e, "half freed");
    }
    zero_mem_free(b);
    expect_free(&e, ZERO_MEM_GRADS, 250);
    zero_mem_free(c);
    expect_free(&e, ZERO_MEM_COMM, 50);
    check_stats(mem, &e, "all freed");
    zero_mem_free(NULL); /* accepted */
    zero_mem_free_domain(mem);

    /* Untracked blocks (mem == NULL) work and are freed with the same call. */
    void *u = zero_mem_alloc(NULL, ZERO_MEM_OTHER, 1000, 0);
    CHECK(u != NULL, "untracked alloc");
    if (u) memset(u, 1, 1000);
    zero_mem_free(u);
    zero_mem_stats_t s;
    zero_mem_get_stats(NULL, &s);
    CHECK(s.live_total_bytes == 0 && s.peak_total_bytes == 0, "stats of a NULL domain are zero");
}

static void test_alignment(void) {
    zero_mem_t *mem = NULL;
    zero_mem_init(&mem, NULL);
    const size_t aligns[] = {0, 8, 16, 32, 64, 128, 256, 4096, 65536};
    const size_t sizes[] = {0, 1, 7, 64, 100, 4095, 4097, 100000};
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
        size_t want = aligns[i] ? aligns[i] : 64; /* 0 means the 64-byte default */
        for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++) {
            unsigned char *p = zero_mem_alloc(mem, ZERO_MEM_PARAMS, sizes[j], aligns[i]);
            CHECK(p != NULL, "alloc %zu bytes aligned %zu", sizes[j], aligns[i]);
            if (!p) continue;
            CHECK((uintptr_t)p % want == 0, "%p is not aligned to %zu", (void *)p, want);
            memset(p, 0x5a, sizes[j]); /* the whole block is writable (ASan checks) */
            zero_mem_free(p);
        }
    }
    /* Zero-byte blocks are valid and unique. */
    void *z1 = zero_mem_alloc(mem, ZERO_MEM_OTHER, 0, 0);
    void *z2 = zero_mem_alloc(mem, ZERO_MEM_OTHER, 0, 0);
    CHECK(z1 && z2 && z1 != z2, "two zero-byte blocks are non-NULL and distinct");
    zero_mem_free(z1);
    zero_mem_free(z2);

    /* Invalid alignments and categories are refused with a message naming the value. */
    const size_t bad_aligns[] = {3, 48, 100, 4};
    for (size_t i = 0; i < sizeof bad_aligns / sizeof bad_aligns[0]; i++) {
        void *p = zero_mem_alloc(mem, ZERO_MEM_PARAMS, 16, bad_aligns[i]);
        CHECK(p == NULL, "alignment %zu must be refused", bad_aligns[i]);
        char num[32];
        snprintf(num, sizeof num, "%zu", bad_aligns[i]);
        CHECK(strstr(zero_last_error(), num) != NULL, "message names alignment %zu: '%s'",
              bad_aligns[i], zero_last_error());
        zero_mem_free(p);
    }
    void *p = zero_mem_alloc(mem, (zero_mem_category_t)ZERO_MEM_CATEGORY_COUNT, 16, 0);
    CHECK(p == NULL, "invalid category must be refused");
    CHECK(strstr(zero_last_error(), "category") != NULL, "message names the category: '%s'",
          zero_last_error());
    zero_mem_free(p);
    zero_mem_stats_t s;
    zero_mem_get_stats(mem, &s);
    CHECK(s.live_total_bytes == 0, "refused calls leave no live bytes (%zu)", s.live_total_bytes);
    zero_mem_free_domain(mem);
}

static void test_calloc_and_oom(void) {
    test_allocator_t t;
    zero_allocator_t a = make_allocator(&t);
    zero_mem_t *mem = NULL;
    CHECK(zero_mem_init(&mem, &a) == ZERO_OK, "init with a custom allocator");
    if (!mem) return;

    /* calloc zeroes what the raw allocator handed out dirty (0xcd). */
    const size_t sizes[] = {1, 63, 64, 1000, 70000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = zero_mem_calloc(mem, ZERO_MEM_OPTIM, sizes[i], 0);
        CHECK(p != NULL, "calloc %zu", sizes[i]);
        if (!p) continue;
        size_t nonzero = 0;
        for (size_t j = 0; j < sizes[i]; j++) nonzero += p[j] != 0;
        CHECK(nonzero == 0, "calloc(%zu) left %zu non-zero bytes", sizes[i], nonzero);
        CHECK(t.last_align >= 64 && t.last_bytes >= sizes[i],
              "raw allocator asked for %zu bytes aligned %zu for a %zu-byte block", t.last_bytes,
              t.last_align, sizes[i]);
        zero_mem_free(p);
    }
    CHECK(t.allocs == t.frees && t.bad_free == 0,
          "every raw block went back to its allocator (%d allocs, %d frees, %d foreign)", t.allocs,
          t.frees, t.bad_free);

    /* Out of memory: the allocator refuses everything after 3 more blocks. */
    expect_t e;
    memset(&e, 0, sizeof e);
    zero_mem_stats_t s0;
    zero_mem_get_stats(mem, &s0);
    for (int c = 0; c < ZERO_MEM_CATEGORY_COUNT; c++) e.peak[c] = s0.peak_bytes[c];
    e.peak_total = s0.peak_total_bytes;
    t.fail_after = t.allocs + 3;
    void *ok[3];
    for (int i = 0; i < 3; i++) {
        ok[i] = zero_mem_alloc(mem, ZERO_MEM_ACTIVATIONS, 1000, 0);
        CHECK(ok[i] != NULL, "allocation %d before the injected failure", i);
        expect_alloc(&e, ZERO_MEM_ACTIVATIONS, 1000);
    }
    void *bad = zero_mem_alloc(mem, ZERO_MEM_ACTIVATIONS, 123456, 0);
    CHECK(bad == NULL, "allocation after the injected failure returns NULL");
    CHECK(strstr(zero_last_error(), "123456") != NULL, "message names the size: '%s'",
          zero_last_error());
    CHECK(strstr(zero_last_error(), zero_mem_category_name(ZERO_MEM_ACTIVATIONS)) != NULL,
          "message names the category: '%s'", zero_last_error());
    void *badc = zero_mem_calloc(mem, ZERO_MEM_OFFLOAD, 64, 0);
    CHECK(badc == NULL, "calloc after the injected failure returns NULL");
    CHECK(t.refused == 2, "the allocator was asked twice more (%d)", t.refused);
    check_stats(mem, &e, "after refused allocations");
    for (int i = 0; i < 3; i++) {
        zero_mem_free(ok[i]);
        expect_free(&e, ZERO_MEM_ACTIVATIONS, 1000);
    }
    check_stats(mem, &e, "after freeing");

    /* Size-based refusal, and sizes that overflow the header arithmetic. */
    t.fail_after = -1;
    t.fail_over = 1 << 20;
    CHECK(zero_mem_alloc(mem, ZERO_MEM_PARAMS, 2 << 20, 0) == NULL, "over the size limit");
    void *small = zero_mem_alloc(mem, ZERO_MEM_PARAMS, 1 << 10, 0);
    CHECK(small != NULL, "under the size limit");
    zero_mem_free(small);
    CHECK(zero_mem_alloc(mem, ZERO_MEM_PARAMS, SIZE_MAX, 0) == NULL, "SIZE_MAX bytes");
    CHECK(zero_mem_alloc(mem, ZERO_MEM_PARAMS, SIZE_MAX - 8, 4096) == NULL, "SIZE_MAX - 8 bytes");
    CHECK(t.allocs == t.frees && t.bad_free == 0,
          "every raw block went back to its allocator (%d allocs, %d frees, %d foreign)", t.allocs,
          t.frees, t.bad_free);
    zero_mem_get_stats(mem, &s0);
    CHECK(s0.live_total_bytes == 0, "nothing live at the end (%zu)", s0.live_total_bytes);
    zero_mem_free_domain(mem);

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* Failure of the default allocator: a request no machine can satisfy (sanitizers abort on
     * such a request instead of returning NULL, so only in the normal build). */
    CHECK(zero_mem_alloc(NULL, ZERO_MEM_OTHER, SIZE_MAX / 2, 0) == NULL, "SIZE_MAX / 2 bytes");
#endif
}

/* Concurrent allocation and free on one domain: counters are atomic, so the final live count is
 * zero and the peak lies between one thread's and all threads' maximum. */
#define THREADS 4
#define ROUNDS 2000
static zero_mem_t *shared_mem;

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    void *held[8] = {0};
    for (int i = 0; i < ROUNDS; i++) {
        int slot = i % 8;
        zero_mem_free(held[slot]);
        held[slot] = zero_mem_alloc(shared_mem, (zero_mem_category_t)(id % 3), 128, 0);
    }
    for (int i = 0; i < 8; i++) zero_mem_free(held[i]);
    return NULL;
}

static void test_threads(void) {
    CHECK(zero_mem_init(&shared_mem, NULL) == ZERO_OK, "init");
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    zero_mem_stats_t s;
    zero_mem_get_stats(shared_mem, &s);
    CHECK(s.live_total_bytes == 0, "live after concurrent use: %zu", s.live_total_bytes);
    CHECK(s.peak_total_bytes >= 8 * 128 && s.peak_total_bytes <= THREADS * 8 * 128,
          "peak after concurrent use: %zu", s.peak_total_bytes);
    size_t sum = 0;
    for (int c = 0; c < ZERO_MEM_CATEGORY_COUNT; c++) sum += s.live_bytes[c];
    CHECK(sum == 0, "live per category sums to %zu", sum);
    zero_mem_free_domain(shared_mem);
}

static void test_names(void) {
    for (int c = 0; c < ZERO_MEM_CATEGORY_COUNT; c++) {
        const char *n = zero_mem_category_name((zero_mem_category_t)c);
        CHECK(n && *n && strcmp(n, "?") != 0, "category %d has a name", c);
    }
    CHECK(strcmp(zero_mem_category_name((zero_mem_category_t)99), "?") == 0, "invalid category");
}

int main(void) {
    test_accounting();
    test_alignment();
    test_calloc_and_oom();
    test_threads();
    test_names();
    return check_report();
}
