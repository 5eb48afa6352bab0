/* zero/core.h — status codes, errors, logging, dtypes and the accounting allocator.
 *
 * Everything else in the library stands on these. Nothing here knows about ranks beyond the
 * "[rank r/n]" prefix that log lines carry.
 */
#ifndef ZERO_CORE_H
#define ZERO_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(ZERO_BUILDING_LIBRARY)
#define ZERO_API __attribute__((visibility("default")))
#else
#define ZERO_API
#endif

#define ZERO_VERSION_MAJOR 0
#define ZERO_VERSION_MINOR 1
#define ZERO_VERSION_PATCH 0
#define ZERO_VERSION_STRING "0.1.0"

/* ------------------------------------------------------------------------------ status */

/* Fallible functions return 0 on success or one of these negative codes. The message of the
 * most recent failure on the calling thread is in zero_last_error(). */
typedef enum {
    ZERO_OK = 0,
    ZERO_ERR_INVALID_ARG = -1,   /* a bad argument: null buffer, negative count, bad enum */
    ZERO_ERR_OUT_OF_MEMORY = -2, /* an allocation failed */
    ZERO_ERR_TIMEOUT = -3,       /* a collective did not complete within its timeout */
    ZERO_ERR_MISMATCH = -4,      /* ranks disagree (counts, dtypes, operation order) */
    ZERO_ERR_UNSUPPORTED = -5,   /* not built in (MPI missing) or not implemented for a dtype */
    ZERO_ERR_IO = -6,            /* a read, write, open or fsync failed */
    ZERO_ERR_FORMAT = -7,        /* a file's content is not what was expected */
    ZERO_ERR_CONFIG = -8,        /* a configuration key or value is invalid */
    ZERO_ERR_COMM_FAILED = -9,   /* the communicator failed earlier and can no longer be used */
    ZERO_ERR_INTERNAL = -10,     /* a bug in zero */
    ZERO_STATUS_COUNT = 11       /* number of codes (not a code) */
} zero_status_t;

/* Static name of a status ("ok", "invalid argument", ...). Never NULL. */
ZERO_API const char *zero_status_str(zero_status_t status);

/* Message of the last failure on the calling thread (thread-local; "" if none). The pointer is
 * valid until the next failing call on this thread. */
ZERO_API const char *zero_last_error(void);

/* ------------------------------------------------------------------------------ logging */

typedef enum {
    ZERO_LOG_DEBUG,
    ZERO_LOG_INFO,
    ZERO_LOG_WARN,
    ZERO_LOG_ERROR,
    ZERO_LOG_LEVEL_COUNT
} zero_log_level_t;

/* Receives each log line (without trailing newline). rank < 0 when the line is not rank-bound. */
typedef void (*zero_log_fn)(zero_log_level_t level, int rank, int world, const char *message,
                            void *user);

/* Replace the log sink (NULL restores the default: stderr, "[rank r/n] level: message") and the
 * minimum level shown. Not thread-safe against concurrent logging: call at start-up. */
ZERO_API void zero_log_set_callback(zero_log_fn fn, void *user);
ZERO_API void zero_log_set_level(zero_log_level_t min_level);

/* ------------------------------------------------------------------------------ dtypes */

typedef enum {
    ZERO_DTYPE_FP32,
    ZERO_DTYPE_FP64,
    ZERO_DTYPE_FP16,
    ZERO_DTYPE_BF16,
    ZERO_DTYPE_INT8,
    ZERO_DTYPE_UINT8,
    ZERO_DTYPE_INT32,
    ZERO_DTYPE_COUNT
} zero_dtype_t;

/* Bytes per element (0 for an invalid dtype) and a static name ("fp32", ...; "?" if invalid). */
ZERO_API size_t zero_dtype_size(zero_dtype_t dtype);
ZERO_API const char *zero_dtype_name(zero_dtype_t dtype);
/* Parse a name as printed by zero_dtype_name; returns ZERO_ERR_INVALID_ARG if unknown. */
ZERO_API zero_status_t zero_dtype_parse(const char *name, zero_dtype_t *out);

/* IEEE half and bfloat16 conversions, round-to-nearest-even; infinities and signed zeros are
 * kept, fp16 subnormals are produced and read exactly. Narrowing (fp32 -> 16-bit) turns any NaN
 * into a quiet NaN of the same sign; widening is exact and keeps a NaN's payload. */
ZERO_API uint16_t zero_fp32_to_fp16(float x);
ZERO_API float zero_fp16_to_fp32(uint16_t h);
ZERO_API uint16_t zero_fp32_to_bf16(float x);
ZERO_API float zero_bf16_to_fp32(uint16_t h);

/* ------------------------------------------------------------------------------ memory */

/* What an allocation is for. The engine reports bytes per category per rank. */
typedef enum {
    ZERO_MEM_PARAMS,
    ZERO_MEM_GRADS,
    ZERO_MEM_OPTIM,
    ZERO_MEM_ACTIVATIONS,
    ZERO_MEM_COMM,
    ZERO_MEM_OFFLOAD,
    ZERO_MEM_OTHER,
    ZERO_MEM_CATEGORY_COUNT
} zero_mem_category_t;

ZERO_API const char *zero_mem_category_name(zero_mem_category_t category);

/* A replaceable raw allocator (tests use it to inject out-of-memory). alloc returns memory
 * aligned to `align` (a power of two >= sizeof(void *)) or NULL. */
typedef struct zero_allocator {
    void *(*alloc)(void *user, size_t bytes, size_t align);
    void (*free)(void *user, void *ptr);
    void *user;
} zero_allocator_t;

/* Per-rank accounting of live and peak bytes by category. Thread-safe: counters are atomic, so
 * a rank's compute and progress threads may share one. */
typedef struct zero_mem zero_mem_t;

typedef struct zero_mem_stats {
    size_t live_bytes[ZERO_MEM_CATEGORY_COUNT];
    size_t peak_bytes[ZERO_MEM_CATEGORY_COUNT];
    size_t live_total_bytes;
    size_t peak_total_bytes; /* peak of the sum, not the sum of peaks */
} zero_mem_stats_t;

/* Create an accounting domain. allocator may be NULL (aligned_alloc/free). *out is owned by the
 * caller; free it with zero_mem_free_domain after every block is freed. */
ZERO_API zero_status_t zero_mem_init(zero_mem_t **out, const zero_allocator_t *allocator);
ZERO_API void zero_mem_free_domain(zero_mem_t *mem);

/* Allocate `bytes` aligned to `align` (0 = 64) under `category`. mem may be NULL: the block is
 * then untracked (still freed with zero_mem_free). Returns NULL on failure with
 * zero_last_error() set; bytes == 0 returns a valid unique pointer. */
ZERO_API void *zero_mem_alloc(zero_mem_t *mem, zero_mem_category_t category, size_t bytes,
                              size_t align);
/* Same, zero-filled. */
ZERO_API void *zero_mem_calloc(zero_mem_t *mem, zero_mem_category_t category, size_t bytes,
                               size_t align);
/* Free a block from zero_mem_alloc (NULL is accepted). */
ZERO_API void zero_mem_free(void *ptr);
ZERO_API void zero_mem_get_stats(const zero_mem_t *mem, zero_mem_stats_t *out);

/* Peak resident set size of the process in bytes (getrusage), 0 if unknown. */
ZERO_API size_t zero_peak_rss_bytes(void);

/* Monotonic wall-clock seconds. */
ZERO_API double zero_time_now(void);

/* ------------------------------------------------------------------------------ conversions */

/* Convert `count` elements, out and in as for memcpy (they must not overlap). Bitwise identical
 * to the scalar conversions above for every input (round-to-nearest-even, NaN handling,
 * subnormals), vectorised with AVX-512 / AVX512-BF16 / F16C where the CPU has them (chosen once,
 * at run time) and portable C elsewhere. Thread-safe; pointers borrowed for the call. */
ZERO_API void zero_fp32_to_bf16_array(uint16_t *out, const float *in, size_t count);
ZERO_API void zero_bf16_to_fp32_array(float *out, const uint16_t *in, size_t count);
ZERO_API void zero_fp32_to_fp16_array(uint16_t *out, const float *in, size_t count);
ZERO_API void zero_fp16_to_fp32_array(float *out, const uint16_t *in, size_t count);
/* Name of the implementation the array conversions use ("avx512bf16", "avx512", "f16c",
 * "scalar"). Static string. */
ZERO_API const char *zero_convert_impl(void);
/* Force an implementation by name (for tests and benchmarks), NULL for the automatic choice.
 * Returns ZERO_ERR_UNSUPPORTED if this CPU lacks it, ZERO_ERR_INVALID_ARG for an unknown name.
 * Takes effect for later calls on every thread. */
ZERO_API zero_status_t zero_convert_set_impl(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* ZERO_CORE_H */
