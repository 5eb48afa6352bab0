#!/usr/bin/env bash
# bench_ab.sh — tokens/s of two `zero` programs side by side: the same `zero train` arguments run
# by program A (e.g. a build of the commit before a change) and program B (the change), ROUNDS
# times, alternating A B then B A so that a drift of the machine's load hits both alike.
#
# Each run's figure is tokens per step / median step_s of its --metrics log after the first step
# (the warm-up); the table gives each run's figure, the medians and the ratio B / A of the medians
# per case. A quiet machine is assumed: the load average before each run is printed beside it.
# Weights fingerprints are printed too: a refactor that claims "no change" shows equal ones.
#
# Usage: bench/bench_ab.sh -a PROGRAM_A -b PROGRAM_B [-r ROUNDS] [-c "CASE ..."] [-A ARGS] [-B ARGS]
#   a CASE is a config file name under configs/ (without .json), optionally with train flags
#   joined by commas: "gpt-85m" "main" "main,--steps,30" (default: "gpt-85m main,--steps,30");
#   -A / -B: train flags joined by commas that only side A / B adds (the same program on both
#   sides then compares two settings, e.g. -B "--set,zero_optimization.offload_optimizer.device=nvme")
# Example (the commit before a change, built apart, against this build):
#   old=$(mktemp -d) && git archive REV | tar -x -C "$old" && cmake -S "$old" -B "$old/build" &&
#   cmake --build "$old/build" --target zero_cli && bench/bench_ab.sh -a "$old/build/zero" -b build/zero
set -euo pipefail
cd "$(dirname "$0")/.."
a="" b="" rounds=3 cases="gpt-85m main,--steps,30" extra_a="" extra_b=""
while getopts "a:b:r:c:A:B:h" o; do
    case $o in
    a) a=$OPTARG ;;
    b) b=$OPTARG ;;
    A) extra_a=$OPTARG ;;
    B) extra_b=$OPTARG ;;
    r) rounds=$OPTARG ;;
    c) cases=$OPTARG ;;
    *) sed -n '2,/^set /p' "$0" | sed '$d'; exit 0 ;;
    esac
done
[ -x "$a" ] && [ -x "$b" ] || { echo "bench_ab: -a and -b must name zero programs" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() { # program case round side -> one line: case side round tokens/s fingerprint load
    local prog=$1 case=$2 round=$3 side=$4 extra
    IFS=, read -r -a parts <<<"$case"
    extra=$extra_a; [ "$side" = B ] && extra=$extra_b
    IFS=, read -r -a more <<<"$extra"
    local cfg=configs/${parts[0]}.json
    local load
    load=$(cut -d' ' -f1 /proc/loadavg)
    "$prog" train --config "$cfg" "${parts[@]:1}" "${more[@]}" -q --no-peak \
        --metrics "$tmp/m.jsonl" --json-report "$tmp/r.json" >/dev/null
    python3 - "$tmp/m.jsonl" "$tmp/r.json" "$case" "$side" "$round" "$load" <<'EOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r["step_s"] for r in recs[1:]] or [recs[0]["step_s"]]
tok_per_step = recs[0]["tokens"]
rep = json.load(open(sys.argv[2]))
print(sys.argv[3], sys.argv[4], sys.argv[5], tok_per_step / statistics.median(steps),
      rep["weights_fingerprint"], sys.argv[6])
EOF
}

for ((i = 1; i <= rounds; i++)); do
    for c in $cases; do
        if ((i % 2)); then order="A B"; else order="B A"; fi
        for side in $order; do
            prog=$a; [ "$side" = B ] && prog=$b
            run "$prog" "$c" "$i" "$side" | tee -a "$tmp/all.txt"
        done
    done
done
python3 - "$tmp/all.txt" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print("\n| case | A tokens/s (median) | B tokens/s (median) | B / A | fingerprints A = B |")
print("|---|---|---|---|---|")
for case in dict.fromkeys(r[0] for r in rows):
    med = {s: statistics.median(float(r[3]) for r in rows if r[0] == case and r[1] == s)
           for s in "AB"}
    fp = {s: {r[4] for r in rows if r[0] == case and r[1] == s} for s in "AB"}
    print(f"| {case} | {med['A']:.0f} | {med['B']:.0f} | {med['B'] / med['A']:.3f} | "
          f"{'yes' if fp['A'] == fp['B'] and len(fp['A']) == 1 else 'NO'} |")
EOF
