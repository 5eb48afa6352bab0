#!/usr/bin/env bash
# bench_offload.sh — tokens/s with the optimizer states on NVMe beside the same run in RAM: the
# 85M model (configs/gpt-85m.json) at stage 2 on 2 thread ranks, side A in RAM, side B with
# zero_optimization.offload_optimizer.device nvme, alternated by bench/bench_ab.sh (medians,
# B / A, and the weights fingerprints, which must be equal).
#
# Usage: bench/bench_offload.sh [-p DIR] [-r ROUNDS] [-s STEPS]
#   -p DIR  where the swap files go (a directory on the disk to measure; default: build/); a
#           temporary directory is made there and removed at the end, also on failure
# The swap files need 8 bytes per parameter (Adam's m and v): 0.7 GB for the 85M model; the script
# checks the free space first.
set -euo pipefail
cd "$(dirname "$0")/.."
base=build rounds=3 steps=12
while getopts "p:r:s:h" o; do
    case $o in
    p) base=$OPTARG ;;
    r) rounds=$OPTARG ;;
    s) steps=$OPTARG ;;
    *) sed -n '2,/^set /p' "$0" | sed '$d'; exit 0 ;;
    esac
done
need=$((1 << 30))
free=$(df --output=avail -B1 "$base" | tail -1)
if [ "$free" -lt "$need" ]; then
    echo "bench_offload: $base has $free bytes free, the swap files need about $need" >&2
    exit 2
fi
swap=$(mktemp -d "$base/zero-offload-bench.XXXXXX")
trap 'rm -rf "$swap"' EXIT
echo "swap files under $swap ($(df -h --output=source,fstype "$base" | tail -1))"
bench/bench_ab.sh -a build/zero -b build/zero -r "$rounds" \
    -c "gpt-85m,--stage,2,--ranks,2,--steps,$steps" \
    -B "--set,zero_optimization.offload_optimizer.device=nvme,--set,zero_optimization.offload_optimizer.nvme_path=$swap"
