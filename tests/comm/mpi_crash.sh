#!/bin/bash
# mpi_crash.sh — a rank that dies in the middle of a collective must not hang the job.
#
# Usage: mpi_crash.sh MPIEXEC TEST_BINARY [LIMIT_SECONDS]
# Launches 3 ranks of TEST_BINARY --crash (rank 2 calls abort() while an all_reduce is in
# flight). Passes when mpirun ends within LIMIT_SECONDS with a non-zero status and its output
# names the failed rank. A hang is cut off by `timeout` and reported as a failure.
set -u
mpiexec=$1
binary=$2
limit=${3:-40}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

start=$(date +%s)
timeout --kill-after=5 "$limit" "$mpiexec" --allow-run-as-root --oversubscribe -np 3 \
    "$binary" --crash >"$out" 2>&1
status=$?
elapsed=$(( $(date +%s) - start ))
cat "$out"
echo "mpi_crash.sh: mpirun ended with status $status after ${elapsed} s (limit ${limit} s)"

passed=0
failed=0
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "FAIL: mpirun did not end within ${limit} s"
    failed=$((failed + 1))
elif [ "$status" -eq 0 ]; then
    echo "FAIL: mpirun reported success although rank 2 aborted"
    failed=$((failed + 1))
else
    passed=$((passed + 1))
fi
# Open MPI: "mpirun noticed that process rank 2 with PID ... exited on signal 6 (Aborted)".
if grep -Eiq 'rank 2' "$out" && grep -Eiq 'signal|abort' "$out"; then
    passed=$((passed + 1))
else
    echo "FAIL: the output does not name the failed rank 2"
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
