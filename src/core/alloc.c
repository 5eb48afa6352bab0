/* alloc.c — the accounting allocator: every engine allocation is tagged with a category and
 * counted per rank (live and peak), on top of a replaceable raw allocator.
 *
 * Each block carries a small header just before the returned pointer that records its domain,
 * category and size, so zero_mem_free needs only the pointer.
 */
#include "core_internal.h"

#include <assert.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

static const char *const category_names[] = {
    "parameters",      "gradients", "optimizer_states", "activations", "comm_buffers",
    "offload_staging", "other",
};
static_assert(ZERO_ARRAY_LEN(category_names) == ZERO_MEM_CATEGORY_COUNT, "category table");

const char *zero_mem_category_name(zero_mem_category_t category) {
    return (unsigned)category < ZERO_MEM_CATEGORY_COUNT ? category_names[category] : "?";
}

struct zero_mem {
    zero_allocator_t allocator;
    atomic_size_t live[ZERO_MEM_CATEGORY_COUNT];
    atomic_size_t peak[ZERO_MEM_CATEGORY_COUNT];
    atomic_size_t live_total;
    atomic_size_t peak_total;
};

#define BLOCK_MAGIC 0x7a65726f626c6b31ull /* "zeroblk1" */

typedef struct block_header {
    uint64_t magic;
    zero_mem_t *mem;
    size_t bytes;
    size_t pad; /* from the raw allocation to the user pointer */
    zero_mem_category_t category;
    zero_allocator_t allocator;
} block_header_t;

/* Blocks of at least this size start on a 2 MiB boundary and ask for transparent huge pages
 * (the kernel's default mode is often "madvise"): parameters, gradients, optimizer states and
 * activations are streamed through whole every step, and with 4 KiB pages an 85M-parameter
 * model takes ~470k page faults to start and TLB misses on every pass (docs/benchmarks.md,
 * "Huge pages"). Only whole huge pages inside the block are advised, so the tail of a block
 * never becomes resident beyond what is used. */
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_BLOCK (2 * HUGE_PAGE)

static void *default_alloc(void *user, size_t bytes, size_t align) {
    (void)user;
    if (bytes >= HUGE_BLOCK && align < HUGE_PAGE) align = HUGE_PAGE;
    size_t rounded = (bytes + align - 1) / align * align; /* aligned_alloc wants a multiple */
    void *p = aligned_alloc(align, rounded ? rounded : align);
    /* Advice only: a kernel without THP refuses it and the block works the same. */
    if (p && bytes >= HUGE_BLOCK) (void)madvise(p, bytes / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE);
    return p;
}

static void default_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

static const zero_allocator_t default_allocator = {default_alloc, default_free, NULL};

zero_status_t zero_mem_init(zero_mem_t **out, const zero_allocator_t *allocator) {
    if (!out) return zero__error(ZERO_ERR_INVALID_ARG, "zero_mem_init: out is NULL");
    zero_mem_t *mem = calloc(1, sizeof *mem);
    if (!mem) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "zero_mem_init: out of memory");
    mem->allocator = allocator ? *allocator : default_allocator;
    *out = mem;
    return ZERO_OK;
}

void zero_mem_free_domain(zero_mem_t *mem) { free(mem); }

/* Raise *peak to at least value (lock-free max). */
static void atomic_max(atomic_size_t *peak, size_t value) {
    size_t seen = atomic_load_explicit(peak, memory_order_relaxed);
    while (seen < value && !atomic_compare_exchange_weak_explicit(
                               peak, &seen, value, memory_order_relaxed, memory_order_relaxed)) {
    }
}

void zero__mem_track(zero_mem_t *mem, zero_mem_category_t category, size_t bytes) {
    if (!mem) return;
    size_t live = atomic_fetch_add(&mem->live[category], bytes) + bytes;
    atomic_max(&mem->peak[category], live);
    size_t total = atomic_fetch_add(&mem->live_total, bytes) + bytes;
    atomic_max(&mem->peak_total, total);
}

void zero__mem_untrack(zero_mem_t *mem, zero_mem_category_t category, size_t bytes) {
    if (!mem) return;
    atomic_fetch_sub(&mem->live[category], bytes);
    atomic_fetch_sub(&mem->live_total, bytes);
}

void *zero_mem_alloc(zero_mem_t *mem, zero_mem_category_t category, size_t bytes, size_t align) {
    if ((unsigned)category >= ZERO_MEM_CATEGORY_COUNT) {
        zero__error(ZERO_ERR_INVALID_ARG, "zero_mem_alloc: invalid category %d", (int)category);
        return NULL;
    }
    if (align == 0) align = 64;
    if (align < sizeof(void *) || (align & (align - 1))) {
        zero__error(ZERO_ERR_INVALID_ARG, "zero_mem_alloc: alignment %zu is not a power of two",
                    align);
        return NULL;
    }
    size_t pad = (sizeof(block_header_t) + align - 1) / align * align;
    if (bytes > SIZE_MAX - pad) {
        zero__error(ZERO_ERR_OUT_OF_MEMORY, "zero_mem_alloc: %zu bytes is too large", bytes);
        return NULL;
    }
    zero_allocator_t a = mem ? mem->allocator : default_allocator;
    unsigned char *raw = a.alloc(a.user, bytes + pad, align);
    if (!raw) {
        zero__error(ZERO_ERR_OUT_OF_MEMORY, "out of memory allocating %zu bytes for %s", bytes,
                    category_names[category]);
        return NULL;
    }
    unsigned char *ptr = raw + pad;
    block_header_t h = {BLOCK_MAGIC, mem, bytes, pad, category, a};
    memcpy(ptr - sizeof h, &h, sizeof h);
    zero__mem_track(mem, category, bytes);
    return ptr;
}

void *zero_mem_calloc(zero_mem_t *mem, zero_mem_category_t category, size_t bytes, size_t align) {
    void *p = zero_mem_alloc(mem, category, bytes, align);
    if (p) memset(p, 0, bytes);
    return p;
}

void zero_mem_free(void *ptr) {
    if (!ptr) return;
    block_header_t h;
    memcpy(&h, (unsigned char *)ptr - sizeof h, sizeof h);
    ZERO_ASSERT(h.magic == BLOCK_MAGIC); /* not from zero_mem_alloc, or freed twice */
    zero__mem_untrack(h.mem, h.category, h.bytes);
    uint64_t dead = 0;
    memcpy((unsigned char *)ptr - sizeof h, &dead, sizeof dead);
    h.allocator.free(h.allocator.user, (unsigned char *)ptr - h.pad);
}

void zero_mem_get_stats(const zero_mem_t *mem, zero_mem_stats_t *out) {
    memset(out, 0, sizeof *out);
    if (!mem) return;
    zero_mem_t *m = (zero_mem_t *)mem; /* atomics are read-only here */
    for (int c = 0; c < ZERO_MEM_CATEGORY_COUNT; c++) {
        out->live_bytes[c] = atomic_load(&m->live[c]);
        out->peak_bytes[c] = atomic_load(&m->peak[c]);
    }
    out->live_total_bytes = atomic_load(&m->live_total);
    out->peak_total_bytes = atomic_load(&m->peak_total);
}

size_t zero_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}
