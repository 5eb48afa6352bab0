#!/usr/bin/env bash
# bench_zero.sh — the ZeRO engine's targets side by side: `zero train` at stages 0-3 on 2 MPI
# ranks (and stage 3 without prefetch, and memory-lean: without prefetch and reduce-scatter
# overlap), the PyTorch peer's DDP and ZeRO-1 modes, and stages 0 and 3 on 4 MPI ranks (default,
# memory-lean, and with activation checkpointing), all on the same model (85M
# byte-level GPT: 12 layers, 12 heads, dim 768, seq 128, batch 4 per rank, fp32, 1 compute
# thread per rank; configs/bench-85m.json), back to back, REPS rounds (each round runs every
# configuration, so slow drift of the machine's load hits all of them alike).
#
# Prints one line per run and a summary: medians over the rounds of step time, tokens/s and peak
# RSS per rank (the largest rank), the target ratios, and the load average around each run.
# Step time: `zero train` -- the median of rank 0's per-step wall time (metrics log) after 2
# warm-up steps, the same convention as the peer (median over its measured steps after 2
# warm-ups; slowest rank per step). tokens/s = global tokens per step / median step time.
#
# Usage: bench/bench_zero.sh [BUILD_DIR]          (default: build)
# Environment: REPS (3), STEPS (7: zero 2-rank steps, incl. 2 warm-ups), PEER_STEPS (5: the
# peer's measured steps), STEPS4 (3: 4-rank steps, memory only), REPS4 (REPS: rounds that also
# run the 4-rank memory configurations), ZERO_SHARED_DIR (../shared beside the repository: holds
# peers/torch_gpt.py), PYTHON (/usr/bin/python3, Debian's, which has python3-torch),
# SKIP_PEER=1, SKIP_4=1, OUT (directory for the raw reports), CONFIG (another config, for a
# quick check of this script).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
zero=$build/zero
config=${CONFIG:-$here/configs/bench-85m.json}
shared=${ZERO_SHARED_DIR:-$here/../shared}
peer=$shared/peers/torch_gpt.py
python=${PYTHON:-/usr/bin/python3}
reps=${REPS:-3}
steps=${STEPS:-7}
peer_steps=${PEER_STEPS:-5}
steps4=${STEPS4:-3}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/bench_zero.XXXXXX")}
mpirun=(mpirun --allow-run-as-root --oversubscribe)
lean=(--set zero_optimization.stage3_prefetch_bucket_size=0 --set zero_optimization.overlap_comm=false)

[ -x "$zero" ] || { echo "bench_zero: $zero not found (build first, or pass the build dir)" >&2; exit 2; }
mkdir -p "$out"
results=$out/results.tsv
: >"$results"
echo "# bench_zero: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, reps $reps, raw output in $out"
echo "# zero: $zero train --config $config (+ --stage S --steps K --no-peak); peer: $peer"

load() { cut -d' ' -f1-3 /proc/loadavg; }

# zero NAME NP STAGE STEPS [extra args...]
run_zero() {
    local name=$1 np=$2 stage=$3 nsteps=$4 rep=$5
    shift 5
    local tag=$out/$name.r$rep l0 l1
    l0=$(load)
    "${mpirun[@]}" -np "$np" "$zero" train --config "$config" --stage "$stage" --steps "$nsteps" \
        --no-peak -q --json-report "$tag.json" --metrics "$tag.jsonl" "$@" >"$tag.log" 2>&1
    local rc=$?
    l1=$(load)
    "$python" - "$tag" "$name" "$rep" "$np" "$rc" "$l0" "$l1" >>"$results" <<'EOF'
import json, statistics, sys
tag, name, rep, np, rc, l0, l1 = sys.argv[1:]
try:
    d = json.load(open(tag + ".json"))
    steps = [json.loads(l)["step_s"] for l in open(tag + ".jsonl") if l.strip()]
    meas = steps[2:] if len(steps) > 2 else steps
    med = statistics.median(meas)
    tok = d["train_batch_size"] * d["model"]["seq"] / med
    rss = max(r["peak_rss_bytes"] for r in d["per_rank"]) / 2**20
    print(f"{name}\t{rep}\t{np}\t{med:.4f}\t{tok:.1f}\t{rss:.0f}\t{l0}\t{l1}")
except Exception as e:  # a failed run is a row, not a crash of the bench
    print(f"{name}\t{rep}\t{np}\tnan\tnan\tnan\t{l0}\t{l1}\tFAILED rc={rc}: {e}")
EOF
    tail -n 1 "$results"
}

# peer NAME MODE REP
run_peer() {
    local name=$1 mode=$2 rep=$3 tag=$out/$1.r$3 l0 l1
    l0=$(load)
    "$python" "$peer" --layers 12 --heads 12 --dim 768 --seq 128 --batch 4 --steps "$peer_steps" \
        --mode "$mode" --world 2 --threads 1 >"$tag.log" 2>&1
    local rc=$?
    l1=$(load)
    "$python" - "$tag" "$name" "$rep" "$rc" "$l0" "$l1" >>"$results" <<'EOF'
import re, sys
tag, name, rep, rc, l0, l1 = sys.argv[1:]
t = open(tag + ".log").read()
m = re.search(r"median_ms/step=([0-9.]+)", t)
k = re.search(r"tokens/s=([0-9.]+)", t)
r = re.search(r"peak_rss_MiB/rank=([0-9.,]+)", t)
if m and k and r:
    rss = max(float(x) for x in r.group(1).split(","))
    print(f"{name}\t{rep}\t2\t{float(m.group(1)) / 1e3:.3f}\t{float(k.group(1)):.1f}\t{rss:.0f}"
          f"\t{l0}\t{l1}")
else:
    print(f"{name}\t{rep}\t2\tnan\tnan\tnan\t{l0}\t{l1}\tFAILED rc={rc}")
EOF
    tail -n 1 "$results"
}

printf '%-16s %3s %3s %9s %9s %9s  %s\n' run rep np step_s tok/s rss_MiB "load before | after"
for rep in $(seq 1 "$reps"); do
    for s in 0 1 2 3; do run_zero "zero-s$s-np2" 2 "$s" "$steps" "$rep"; done
    # stage 3 without prefetch: one gathered unit less resident, gathers not overlapped
    run_zero zero-s3-np2-nopf 2 3 "$steps" "$rep" --set zero_optimization.stage3_prefetch_bucket_size=0
    # stage 3, memory-lean: no prefetch and no reduce-scatter overlap (one gathered unit and one
    # gradient buffer resident instead of two of each); what it costs in time
    run_zero zero-s3-np2-lean 2 3 "$steps" "$rep" "${lean[@]}"
    if [ "${SKIP_PEER:-0}" != 1 ]; then
        run_peer torch-ddp ddp "$rep"
        run_peer torch-zero1 zero1 "$rep"
    fi
    # 4 ranks on 2 cores: for peak RSS (deterministic), so REPS4 rounds only (default: all)
    if [ "${SKIP_4:-0}" != 1 ] && [ "$rep" -le "${REPS4:-$reps}" ]; then
        for s in 0 3; do run_zero "zero-s$s-np4" 4 "$s" "$steps4" "$rep"; done
        for s in 0 3; do run_zero "zero-s$s-np4-lean" 4 "$s" "$steps4" "$rep" "${lean[@]}"; done
        for s in 0 3; do
            run_zero "zero-s$s-np4-ckpt" 4 "$s" "$steps4" "$rep" \
                --set model.activation_checkpointing=true
        done
    fi
done

"$python" - "$results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    rows.setdefault(f[0], []).append(f)
def med(name, col):
    v = [float(r[col]) for r in rows.get(name, []) if r[col] != "nan"]
    return statistics.median(v) if v else float("nan")
print("\nmedians over rounds (step_s / tok/s: 2-rank runs; rss: largest rank)")
print(f"{'run':<18} {'n':>2} {'step_s':>8} {'tok/s':>8} {'rss_MiB':>8}   load before each run")
for name in rows:
    loads = " ".join(r[6].split()[0] for r in rows[name])
    print(f"{name:<18} {len(rows[name]):>2} {med(name, 3):>8.3f} {med(name, 4):>8.1f}"
          f" {med(name, 5):>8.0f}   {loads}")
def ratio(a, b, col, target, le=True):
    x, y = med(a, col), med(b, col)
    r = x / y if y == y and y else float("nan")
    ok = (r <= target) if le else (r >= target)
    print(f"  {a} / {b}: {r:.3f}  (target {'<=' if le else '>='} {target}: "
          f"{'met' if ok else 'NOT met'})")
print("\ntargets (ratios of medians)")
for s, t in ((1, 1.05), (2, 1.05), (3, 1.10)):
    ratio(f"zero-s{s}-np2", "zero-s0-np2", 3, t)
ratio("zero-s3-np4", "zero-s0-np4", 5, 0.40)
ratio("zero-s3-np4-lean", "zero-s0-np4-lean", 5, 0.40)
ratio("zero-s3-np2-lean", "zero-s0-np2", 3, 1.10)
ratio("zero-s3-np4-ckpt", "zero-s0-np4-ckpt", 5, 0.40)
if "torch-ddp" in rows:
    best = max(("torch-ddp", "torch-zero1"), key=lambda n: med(n, 4))
    ratio("zero-s3-np2", best, 4, 1.1, le=False)
    ratio("zero-s3-np2", "torch-zero1", 5, 0.5)
EOF
echo "# load average at the end: $(load)"
