#!/usr/bin/env bash
# The full test suite: set up and build, then run every test in three builds:
#   build/       optimised (all tests, both backends)
#   build-asan/  AddressSanitizer + UndefinedBehaviorSanitizer (all tests)
#   build-tsan/  ThreadSanitizer (tests labelled comm, core or tsan: our own threaded code;
#                OpenMP and MPI runtimes are not instrumented, so their tests stay out)
# plus a clang-format check and an install check: a portable build (ZERO_NATIVE=OFF, no tests)
# installed to a temporary prefix, examples/ built out of tree against it with pkg-config and with
# find_package(zero), both run, and a short `zero train` from the installed program. Exits non-zero on the first failing stage.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
jobs=$(nproc)

echo "== format check (clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -1))"
mapfile -t sources < <(git ls-files '*.c' '*.h' 2>/dev/null || find src include tests bench examples -name '*.[ch]')
clang-format --dry-run --Werror "${sources[@]}"

echo "== optimised build"
bash scripts/setup.sh
# Test tooling only (the product needs neither): venv for the independent readers of
# tests/pyvenv.py, and Debian's torch under Hugging Face's GPT-2 (test_hf_export).
missing=()
for p in python3-torch; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "test.sh: installing test tools ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== install check (portable build, installed, examples built against it)"
ZERO_BUILD_DIR=build-install \
  ZERO_CMAKE_ARGS="-DZERO_NATIVE=OFF -DZERO_BUILD_TESTS=OFF -DZERO_BUILD_BENCH=OFF" \
  bash scripts/setup.sh
# The portable library may use AVX/AVX2/AVX-512 (and SSE4.2's crc32) only in functions chosen at
# run time: the per-level kernel tables and the target-attribute functions of attention, convert,
# nonfinite and crc32c, recognised by their names. A vector instruction anywhere else fails.
objdump -d --no-show-raw-insn build-install/libzero.a | python3 -c '
import re, sys
allowed = re.compile(r"_avx2|_avx512|avx512bf16|_f16c|_sse42|^tile_avx512|^transpose16|^hmax8|^hsum8|^exp_nonpos8|^lanes_below|^bf16_round16")
isa_objects = re.compile(r"^spans\.c\.o$")
insn = re.compile(r"^\s+[0-9a-f]+:\s+(\S+)\s*(.*)$")
obj = fn = None
bad, checked = {}, 0
for line in sys.stdin:
    m = re.match(r"^(\S+\.o):\s+file format", line)
    if m: obj = m.group(1); continue
    m = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
    if m: fn = m.group(1); continue
    m = insn.match(line)
    if not m or obj is None: continue
    op, args = m.groups()
    checked += 1
    vector = (op.startswith("v") and op != "verw") or re.search(r"%[yz]mm|%k[0-7]", args) \
        or op.split(".")[0] in ("crc32b", "crc32q", "crc32l", "crc32w", "popcnt", "lzcnt", "tzcnt",
                                "andn", "bzhi", "shlx", "shrx", "sarx", "pdep", "pext", "movbe")
    if vector and not isa_objects.match(obj) and not allowed.search(fn or ""):
        bad.setdefault(f"{obj}: {fn}", op)
for k, op in sorted(bad.items()):
    print(f"not dispatched: {k} uses {op}")
print(f"ISA scan: {checked} instructions, {len(bad)} functions with instructions beyond x86-64 outside the run-time choices")
sys.exit(1 if bad else 0)
'
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install build-install --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name zero.pc)")/..
# pkg-config, shared library
PKG_CONFIG_PATH=$libdir/pkgconfig
export PKG_CONFIG_PATH
# shellcheck disable=SC2046
cc -std=c11 -O2 -Wall -Werror -o "$prefix/mlp_pkgconfig" examples/mlp.c \
  $(pkg-config --cflags --libs zero) -lm -Wl,-rpath,"$(pkg-config --variable=libdir zero)"
"$prefix/mlp_pkgconfig"
"$prefix/mlp_pkgconfig" bf16
"$prefix/mlp_pkgconfig" --config examples/ds_config.json
# find_package(zero), static library
cmake -S examples -B "$prefix/examples" -DCMAKE_PREFIX_PATH="$prefix" -DZERO_EXAMPLES_STATIC=ON \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$prefix/examples" >/dev/null
"$prefix/examples/example_mlp"
# add_subdirectory(zero) from another project configures, with zero's tests and benchmarks off
mkdir -p "$prefix/outer"
printf 'cmake_minimum_required(VERSION 3.20)\nproject(outer C)\nadd_subdirectory("%s" zero)\nadd_executable(mlp "%s/examples/mlp.c")\ntarget_link_libraries(mlp PRIVATE zero::zero)\n' \
  "$PWD" "$PWD" > "$prefix/outer/CMakeLists.txt"
cmake -S "$prefix/outer" -B "$prefix/outer/build" -DZERO_NATIVE=OFF >/dev/null
[ ! -e "$prefix/outer/build/zero/tests" ] && [ ! -e "$prefix/outer/build/zero/bench" ]
echo "add_subdirectory(zero): configured, tests and benchmarks off"
# the installed program: 20 steps must bring the validation loss well below its start (ln 256)
"$prefix/bin/zero" train --config configs/main.json --steps 20 --set train.eval_interval=0 \
  --set train.samples=0 --no-peak -q --json-report "$prefix/report.json"
python3 - "$prefix/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
first, last = r["initial_val_loss"], r["final_val_loss"]
print(f"installed zero train: val loss {first:.3f} -> {last:.3f}")
sys.exit(0 if last < 0.8 * first else 1)
PY

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build"
ZERO_BUILD_DIR=build-asan ZERO_CMAKE_ARGS="-DZERO_SANITIZE=address -DCMAKE_BUILD_TYPE=RelWithDebInfo" \
  bash scripts/setup.sh
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE slow

echo "== ThreadSanitizer build (threads backend and threaded code)"
ZERO_BUILD_DIR=build-tsan ZERO_CMAKE_ARGS="-DZERO_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo" \
  bash scripts/setup.sh
ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L 'comm|core|tsan' -LE mpi
