/* isa.c — the choice of the kernels' instruction-set level (isa.h), once per process.
 *
 * Detection is __builtin_cpu_supports (libgcc's table, filled before main); the choice is made
 * under pthread_once, so rank threads that call kernels at the same moment all see one level and
 * the log line is written once. The per-level tables come from src/kernels/isa/spans.c compiled
 * with each level's flags (CMakeLists.txt); ZERO_HAVE_ISA_X86 says the x86-64 ones were built.
 */
#include "isa.h"

#include "core/core_internal.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

extern const zero__isa_kernels_t zero__isa_table_baseline;
#ifdef ZERO_HAVE_ISA_X86
extern const zero__isa_kernels_t zero__isa_table_avx2;
extern const zero__isa_kernels_t zero__isa_table_avx512;
#endif

static const char *const isa_names[] = {"baseline", "avx2", "avx512"};
static_assert(ZERO_ARRAY_LEN(isa_names) == ZERO__ISA_COUNT, "isa name table");

const char *zero__isa_name(zero__isa_t isa) {
    return (unsigned)isa < ZERO__ISA_COUNT ? isa_names[isa] : "?";
}

int zero__isa_supported(zero__isa_t isa) {
    switch (isa) {
    case ZERO__ISA_BASELINE: return 1;
#ifdef ZERO_HAVE_ISA_X86
    case ZERO__ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case ZERO__ISA_AVX512:
        return zero__isa_supported(ZERO__ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#endif
    default: return 0;
    }
}

static zero__isa_t selected = ZERO__ISA_BASELINE;
static pthread_once_t select_once = PTHREAD_ONCE_INIT;

static void select_isa(void) {
    zero__isa_t cap = ZERO__ISA_COUNT - 1;
    const char *env = getenv("ZERO_ISA");
    if (env && *env) {
        zero__isa_t i = 0;
        while (i < ZERO__ISA_COUNT && strcmp(env, isa_names[i]) != 0) i++;
        if (i < ZERO__ISA_COUNT)
            cap = i;
        else
            zero__log(ZERO_LOG_WARN, -1, 0,
                      "kernels: ZERO_ISA='%s' is not baseline, avx2 or avx512; ignored", env);
    }
    zero__isa_t best = ZERO__ISA_BASELINE;
    for (zero__isa_t i = ZERO__ISA_BASELINE; i <= cap; i++)
        if (zero__isa_supported(i)) best = i;
    selected = best;
    zero__log(ZERO_LOG_DEBUG, -1, 0, "kernels: %s code paths%s", isa_names[best],
              cap < ZERO__ISA_COUNT - 1 ? " (capped by ZERO_ISA)" : "");
}

zero__isa_t zero__isa_selected(void) {
    /* pthread_once orders the write of `selected` before every return from it */
    pthread_once(&select_once, select_isa);
    return selected;
}

const zero__isa_kernels_t *zero__isa_kernels(zero__isa_t isa) {
    ZERO_ASSERT(zero__isa_supported(isa));
    switch (isa) {
#ifdef ZERO_HAVE_ISA_X86
    case ZERO__ISA_AVX2: return &zero__isa_table_avx2;
    case ZERO__ISA_AVX512: return &zero__isa_table_avx512;
#endif
    default: return &zero__isa_table_baseline;
    }
}

const zero__isa_kernels_t *zero__isa_current(void) {
    return zero__isa_kernels(zero__isa_selected());
}
