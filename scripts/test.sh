#!/usr/bin/env bash
# The full test suite: set up and build, then run every test in three builds:
#   build/       optimised (all tests, both backends)
#   build-asan/  AddressSanitizer + UndefinedBehaviorSanitizer (all tests)
#   build-tsan/  ThreadSanitizer (tests labelled comm, core or tsan: our own threaded code;
#                OpenMP and MPI runtimes are not instrumented, so their tests stay out)
# plus a clang-format check. Exits non-zero on the first failing stage.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
jobs=$(nproc)

echo "== format check (clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -1))"
mapfile -t sources < <(git ls-files '*.c' '*.h' 2>/dev/null || find src include tests bench examples -name '*.[ch]')
clang-format --dry-run --Werror "${sources[@]}"

echo "== optimised build"
bash scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build"
ZERO_BUILD_DIR=build-asan ZERO_CMAKE_ARGS="-DZERO_SANITIZE=address -DCMAKE_BUILD_TYPE=RelWithDebInfo" \
  bash scripts/setup.sh
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE slow

echo "== ThreadSanitizer build (threads backend and threaded code)"
ZERO_BUILD_DIR=build-tsan ZERO_CMAKE_ARGS="-DZERO_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo" \
  bash scripts/setup.sh
ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L 'comm|core|tsan' -LE mpi
