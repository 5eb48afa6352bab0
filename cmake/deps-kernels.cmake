# deps-kernels.cmake — the matmul library and OpenMP for src/kernels/.
#
# oneDNN (Debian libdnnl-dev) is the chosen GEMM (see docs/kernels-matmul.md): it was the fastest
# and steadiest on 2 threads, and its OpenMP runtime lets each rank thread pick its own thread
# count. Fallback order when it is missing: OpenBLAS cblas (thread count is process-global
# there), then plain loops. BLIS (libblis-dev) is only loaded by bench/bench_matmul.c, at run
# time, for the comparison.
# OpenMP is required: the kernels' threading is OpenMP pragmas (GCC ships libgomp). Without it
# they would build single-threaded but -Wunknown-pragmas breaks the -Werror build, so fail early.
find_package(OpenMP REQUIRED COMPONENTS C)
list(APPEND ZERO_DEP_LIBS OpenMP::OpenMP_C)

find_path(ZERO_DNNL_INCLUDE_DIR dnnl.h PATH_SUFFIXES oneapi/dnnl)
find_library(ZERO_DNNL_LIBRARY dnnl)
find_path(ZERO_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
find_library(ZERO_OPENBLAS_LIBRARY openblas)

if(ZERO_DNNL_INCLUDE_DIR AND ZERO_DNNL_LIBRARY)
  zero_dep_import(dnnl ${ZERO_DNNL_LIBRARY} ${ZERO_DNNL_INCLUDE_DIR})
  list(APPEND ZERO_DEP_DEFS ZERO_HAVE_DNNL=1)
  message(STATUS "zero: kernels matmul on oneDNN (${ZERO_DNNL_LIBRARY})")
elseif(ZERO_CBLAS_INCLUDE_DIR AND ZERO_OPENBLAS_LIBRARY)
  zero_dep_import(openblas ${ZERO_OPENBLAS_LIBRARY} ${ZERO_CBLAS_INCLUDE_DIR})
  list(APPEND ZERO_DEP_DEFS ZERO_HAVE_CBLAS=1)
  message(WARNING "zero: oneDNN (libdnnl-dev) not found: kernels matmul on OpenBLAS, whose thread "
                  "count is process-global (ranks as threads may oversubscribe)")
else()
  message(WARNING "zero: neither oneDNN nor OpenBLAS found: kernels matmul on plain loops (slow)")
endif()

# The kernels do not read errno: without it GCC vectorises sqrtf (AdamW, layernorm). This is
# not -ffast-math; IEEE semantics (NaN, Inf, rounding, order) are unchanged.
# GCC prefers 256-bit vectors on AVX-512 targets; the compute-bound loops (GELU, softmax exp)
# run ~30% faster with 512-bit ones (bench/bench_matmul_kernels.c). Only a preference: no effect
# on CPUs without AVX-512.
set(ZERO_KERNEL_COPTS -fno-math-errno)
if(ZERO_NATIVE AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  list(APPEND ZERO_KERNEL_COPTS -mprefer-vector-width=512)
endif()
file(GLOB ZERO_KERNEL_SOURCES ${PROJECT_SOURCE_DIR}/src/kernels/*.c)
set_source_files_properties(${ZERO_KERNEL_SOURCES} PROPERTIES COMPILE_OPTIONS "${ZERO_KERNEL_COPTS}")
