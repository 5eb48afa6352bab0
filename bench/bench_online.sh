#!/usr/bin/env bash
# bench_online.sh — online tuning (`zero train --tune-online`) on the 85M model (12 layers, dim
# 768, seq 128) with 2 thread ranks from the poor base of configs/tune-85m-poor.json (stage 3,
# micro-batch 1 x 4 accumulation, 1e4-element buckets, overlap_comm off).
#
# Runs of STEPS steps (default 120), no evaluation or samples: untuned, tuned (trials of
# 2 x INTERVAL steps, default 6) and, with ABA=1, untuned again, so that the tuned run sits
# between two untuned ones on a machine whose speed drifts. Prints the fingerprints (the tuned
# one must equal the untuned), the tuner's decisions, its closing check against the start
# settings (both in the same steps, so drift cancels: the figure that answers "no slower than
# the start"), and each run's median step time over the first INTERVAL steps and the last 16,
# with the tuned run's last 16 over the untuned runs' mean.
#
# Usage: bench/bench_online.sh [BUILD_DIR]     (default: build)
# Environment: STEPS, INTERVAL, ABA, CONFIG (another base config), OUT (raw output directory;
# default a new temporary directory).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
zero=$build/zero
config=${CONFIG:-$here/configs/tune-85m-poor.json}
steps=${STEPS:-120}
interval=${INTERVAL:-6}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/bench_online.XXXXXX")}
[ -x "$zero" ] || { echo "bench_online: $zero not found (build first, or pass the build dir)" >&2; exit 2; }
mkdir -p "$out"
echo "# bench_online: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, base $config, $steps steps, trials of 2 x $interval, raw output in $out"

run() { # run NAME [ARGS...]
  local name=$1; shift
  "$zero" train --config "$config" --steps "$steps" --no-peak --set train.eval_interval=0 \
    --set train.samples=0 --metrics "$out/$name.jsonl" "$@" > "$out/$name.out" 2>&1
}
runs="untuned1 tuned"
[ "${ABA:-0}" = 1 ] && runs="$runs untuned2"
run untuned1
run tuned --tune-online --set autotuning.online_interval="$interval"
[ "${ABA:-0}" = 1 ] && run untuned2

grep 'tune-online' "$out/tuned.out" || true
python3 - "$out" "$interval" $runs <<'PY'
import json, re, statistics, sys
out, interval, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def times(name):
    return [json.loads(l)["step_s"] for l in open(f"{out}/{name}.jsonl")]
def fingerprint(name):
    m = re.search(r"weights fingerprint ([0-9a-f]+)", open(f"{out}/{name}.out").read())
    return m.group(1) if m else "missing"
med = {}
print("| run | weights fingerprint | first %d steps (median) | last 16 steps (median) |" % interval)
print("|---|---|---|---|")
for name in runs:
    t = times(name)
    med[name] = statistics.median(t[-16:])
    print(f"| {name} | {fingerprint(name)} | {statistics.median(t[:interval]):.3f} s | {med[name]:.3f} s |")
fp = {fingerprint(n) for n in runs}
print("fingerprints equal:", "yes" if len(fp) == 1 else "NO")
untuned = [med[n] for n in runs if n != "tuned"]
ref = sum(untuned) / len(untuned)
print(f"tuned last 16 / untuned mean: {med['tuned'] / ref:.3f}")
PY
