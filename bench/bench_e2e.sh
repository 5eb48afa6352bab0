#!/bin/sh
# bench_e2e.sh — GPT training throughput of `zero train` against issue 3's targets and the
# PyTorch peer (../shared/peers/torch_gpt.py), side by side, printed as a Markdown table.
#
# What it runs (one rank, fp32, stage 0, --threads T), RUNS times, cases interleaved so that a
# change in the machine's load hits every case alike:
#   85m       configs/gpt-85m.json   (12 layers, 12 heads, dim 768, V 256, seq 128, batch 4)
#   85m-bf16  configs/gpt-85m-bf16.json, the same with bf16 compute (issue 6)
#   torch85m  the peer, --mode single, same model and batch
#   124m      configs/gpt2-124m.json (GPT-2 124M shape: V 50257, seq 64, batch 4)
#   124m-ckpt the same with model.activation_checkpointing=true
# and prints each run's tokens/s (the report's, over all steps; and the peer's statistic,
# tokens per step / median step time after 2 warm-up steps, from --metrics: the peer ratio
# uses it), MFU (ours: the report's mfu, against the 2048^3 peak of the GEMMs' dtype measured
# at start-up: bf16's for 85m-bf16) and the load average before it, then the medians and the
# targets:
# 85m mfu >= 0.80 and >= 1.1x the peer; 124m mfu >= 0.75; ckpt >= 0.70x of off; 85m-bf16 >=
# 1.6x our 85m and >= 1.8x the peer's fp32 (tokens per step / median step time, both sides).
# With -g, the MFU budget of 85m and 124m too: after each of their runs,
# `bench_matmul_kernels --gemms M` times every GEMM of one step at the model's shapes with warm
# operands (the fastest they run, so the ceilings are upper bounds), and a table splits the
# median step into those GEMMs, the optimizer step (`optimizer_step_s`: gradient norm + fused
# AdamW) and the rest (attention, GELU, LayerNorm, residuals, loss, embedding, serial code, the
# step's cache misses), with the MFU a step of the GEMMs alone, and of GEMMs + optimizer, would
# score, and the time the rest may take for the target: FLOPs / (target x peak) - GEMMs - opt.
# Not here: multi-rank cases (the comm section of docs/benchmarks.md).
#
# Usage: bench/bench_e2e.sh [-b BUILD_DIR] [-r RUNS] [-t THREADS] [-g]
#                           [-c "85m 85m-bf16 torch85m 124m 124m-ckpt"]
# Needs: python3 (JSON, medians); Debian's python3-torch for the peer (skipped if missing).
# Environment: ZERO_SHARED_DIR (default: ../shared next to the repository) finds the peer.
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
build="$here/build"
runs=3
threads=2
cases="85m 85m-bf16 torch85m 124m 124m-ckpt"
budget=0
while getopts b:r:t:c:gh opt; do
    case $opt in
    b) build=$(cd "$OPTARG" && pwd) ;;
    r) runs=$OPTARG ;;
    t) threads=$OPTARG ;;
    c) cases=$OPTARG ;;
    g) budget=1 ;;
    *) sed -n '2,31p' "$0"; exit 2 ;;
    esac
done
shared=${ZERO_SHARED_DIR:-"$here/../shared"}
peer="$shared/peers/torch_gpt.py"
py=/usr/bin/python3
zero="$build/zero"
gemms="$build/bench/bench_matmul_kernels"
for f in "$zero" $([ "$budget" = 1 ] && echo "$gemms"); do
    [ -x "$f" ] || { echo "bench_e2e: no $f (build first, or pass -b BUILD_DIR)" >&2; exit 2; }
done
out=$(mktemp -d "${TMPDIR:-/tmp}/bench_e2e.XXXXXX")
trap 'rm -rf "$out"' EXIT
# Each side runs with its own default OpenMP wait policy: the peer fixes OMP_WAIT_POLICY=PASSIVE
# itself; `zero train` picks active when its threads fit the cores (docs/config.md).
unset OMP_WAIT_POLICY

load() { cut -d' ' -f1 /proc/loadavg; }

run_case() { # case run -> appends "case run tok_s mtok_s mfu peak_gflops act_mib load" to
    # $out/rows, and with -g "case step_s opt_s flops_per_step peak gemm_ms" to $out/budget
    c=$1 i=$2 l=$(load)
    case $c in
    85m | 85m-bf16 | 124m | 124m-ckpt)
        cfg=gpt-85m.json set=""
        [ "$c" = 85m-bf16 ] && cfg=gpt-85m-bf16.json
        case $c in 124m*) cfg=gpt2-124m.json ;; esac
        [ "$c" = 124m-ckpt ] && set="--set model.activation_checkpointing=true"
        # shellcheck disable=SC2086
        "$zero" train --config "$here/configs/$cfg" --threads "$threads" $set -q \
            --json-report "$out/$c.$i.json" --metrics "$out/$c.$i.jsonl" >"$out/$c.$i.log" 2>&1 ||
            { echo "bench_e2e: $c run $i failed:" >&2; tail -5 "$out/$c.$i.log" >&2; return 1; }
        "$py" - "$out/$c.$i.json" "$out/$c.$i.jsonl" "$c" "$i" "$l" "$out/$c.$i.step" \
            >>"$out/rows" <<'EOF'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
act = d["memory_peak_bytes"]["activations"] / 2**20
# the peer's statistic: tokens per step / median step time, after 2 warm-up steps
steps = [json.loads(line) for line in open(sys.argv[2])]
tok_step = d["tokens"] / d["steps"]
med = tok_step / statistics.median(s["step_s"] for s in steps[2:] or steps)
print(sys.argv[3], sys.argv[4], d["tokens_per_s"], med, d["mfu"],
      d["matmul_peak_flops_per_s"] / 1e9, act, sys.argv[5])
# the budget's figures: median step and optimizer step after 2 warm-up steps, FLOPs per step
rest = steps[2:] or steps
with open(sys.argv[6], "w") as f:
    print(statistics.median(s["step_s"] for s in rest),
          statistics.median(s["optimizer_step_s"] for s in rest),
          d["flops_per_token"] * tok_step, d["matmul_peak_flops_per_s"], file=f)
EOF
        if [ "$budget" = 1 ] && { [ "$c" = 85m ] || [ "$c" = 124m ]; }; then
            "$gemms" --threads "$threads" --gemms "$c" >"$out/$c.$i.gemms" 2>&1 ||
                { echo "bench_e2e: GEMMs of $c run $i failed:" >&2; tail -5 "$out/$c.$i.gemms" >&2; return 1; }
            g=$(sed -n 's/.*GEMM ms per step.*; zero \([0-9.]*\);.*/\1/p' "$out/$c.$i.gemms")
            [ -n "$g" ] || { echo "bench_e2e: no GEMM total for $c run $i" >&2; return 1; }
            echo "$c $(cat "$out/$c.$i.step") $g" >>"$out/budget"
        fi
        ;;
    torch85m)
        if ! "$py" -c "import torch" 2>/dev/null || [ ! -f "$peer" ]; then
            echo "bench_e2e: skipping the peer (no python3-torch or no $peer)" >&2
            return 0
        fi
        "$py" "$peer" --layers 12 --heads 12 --dim 768 --seq 128 --batch 4 --steps 10 \
            --mode single --threads "$threads" >"$out/$c.$i.log" 2>&1 ||
            { echo "bench_e2e: peer run $i failed:" >&2; tail -5 "$out/$c.$i.log" >&2; return 1; }
        tok=$(sed -n 's/.*tokens\/s=\([0-9.]*\).*/\1/p' "$out/$c.$i.log" | tail -1)
        echo "$c $i $tok $tok nan nan nan $l" >>"$out/rows"
        ;;
    *) echo "bench_e2e: unknown case $c" >&2; return 2 ;;
    esac
}

date -u "+bench_e2e: %Y-%m-%d %H:%M UTC, $(nproc) CPUs, threads $threads, runs $runs"
echo "zero: $zero ($(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?') + working tree)"
i=1
while [ "$i" -le "$runs" ]; do
    for c in $cases; do run_case "$c" "$i"; done
    i=$((i + 1))
done
"$py" - "$out/rows" <<'EOF'
import math, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    c, i, tok, mtok, mfu, peak, act, load = line.split()
    rows.setdefault(c, []).append((float(tok), float(mtok), float(mfu), float(peak), float(act),
                                   float(load)))
print("| case | run | tokens/s | tokens/s, median step | MFU | matmul peak GFLOP/s | "
      "activations MiB | load avg |")
print("|---|---|---|---|---|---|---|---|")
fmt = lambda x, f: "-" if math.isnan(x) else f % x
for c, rs in rows.items():
    for k, (tok, mtok, mfu, peak, act, load) in enumerate(rs):
        print(f"| {c} | {k + 1} | {fmt(tok, '%.1f') if c[0] != 't' else '-'} | {mtok:.1f} | "
              f"{fmt(mfu, '%.3f')} | {fmt(peak, '%.0f')} | {fmt(act, '%.1f')} | {load:.2f} |")
# tokens/s: the report's (all steps) for ours, and the median-step statistic for the peer ratio
med = {c: (statistics.median(r[0] for r in rs), statistics.median(r[2] for r in rs),
           statistics.median(r[1] for r in rs)) for c, rs in rows.items()}
print()
print("| case | median tokens/s | median MFU | target | met |")
print("|---|---|---|---|---|")
def line(c, target, ok):
    tok, mfu, _ = med[c]
    print(f"| {c} | {tok:.1f} | {fmt(mfu, '%.3f')} | {target} | {'yes' if ok else 'NO'} |")
if "85m" in med:
    line("85m", "MFU >= 0.80", med["85m"][1] >= 0.80)
if "85m" in med and "torch85m" in med:
    # like for like: both sides' tokens per step / median step time after 2 warm-up steps
    r = med["85m"][2] / med["torch85m"][2]
    line("torch85m", "-", True)
    print(f"| 85m / torch85m (median step) | {r:.2f}x | | >= 1.10x | {'yes' if r >= 1.1 else 'NO'} |")
if "85m-bf16" in med and "85m" in med:
    r = med["85m-bf16"][2] / med["85m"][2]
    line("85m-bf16", "-", True)
    print(f"| 85m-bf16 / 85m (median step) | {r:.2f}x | | >= 1.60x | {'yes' if r >= 1.6 else 'NO'} |")
if "85m-bf16" in med and "torch85m" in med:
    r = med["85m-bf16"][2] / med["torch85m"][2]
    print(f"| 85m-bf16 / torch85m (median step) | {r:.2f}x | | >= 1.80x | "
          f"{'yes' if r >= 1.8 else 'NO'} |")
if "124m" in med:
    line("124m", "MFU >= 0.75", med["124m"][1] >= 0.75)
if "124m" in med and "124m-ckpt" in med:
    r = med["124m-ckpt"][0] / med["124m"][0]
    line("124m-ckpt", "-", True)
    print(f"| 124m-ckpt / 124m | {r:.2f}x | | >= 0.70x | {'yes' if r >= 0.7 else 'NO'} |")
EOF
[ "$budget" = 1 ] && [ -f "$out/budget" ] || exit 0
echo
"$py" - "$out/budget" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    c, *v = line.split()
    runs.setdefault(c, []).append([float(x) for x in v])
target = {"85m": 0.80, "124m": 0.75}
print("| model | step ms | GEMMs ms | optimizer ms | rest ms | peak GFLOP/s | MFU | ceiling: "
      "GEMMs only | ceiling: GEMMs + optimizer | target | rest allowed for it, ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for c, rs in runs.items():
    S, O, F, P, G = (statistics.median(r[k] for r in rs) for k in range(5))
    G /= 1e3
    t = target[c]
    print(f"| {c} | {S*1e3:.0f} | {G*1e3:.0f} | {O*1e3:.0f} | {(S-G-O)*1e3:.0f} | {P/1e9:.0f} | "
          f"{F/S/P:.3f} | {F/G/P:.3f} | {F/(G+O)/P:.3f} | {t:.2f} | {(F/(t*P)-G-O)*1e3:.0f} |")
EOF
