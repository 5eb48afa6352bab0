#!/usr/bin/env bash
# bench_onebit.sh — 1-bit Adam (optimizer.type OneBitAdam) against the bf16 baseline (AdamW) on
# tinyshakespeare: the model of configs/shakespeare.json (4 layers, dim 128, seq 128, 0.84M
# parameters), 2000 steps, bf16 compute, stage 0 (1-bit Adam's only stage) on 2 thread ranks, the
# same seed and data for every run. Runs: the baseline; 1-bit Adam with freeze_step FREEZE (400:
# 20% of the steps, the tutorial's 15-25%); and, as a negative control, 1-bit Adam with almost no
# warm-up (freeze_step CONTROL_FREEZE, 20; with 0, v is zero and the update m / eps diverges).
# Every run uses Adam betas BETAS (0.9,0.999: DeepSpeed's OneBitAdam default and the paper's): the
# frozen v must be a long average; with the config's beta2 0.95 it reflects the last ~20 steps, and
# elements whose recent gradients were tiny get a tiny frozen v, which the 1-bit momentum's one
# scale per tensor and chunk (+-RMS for every element) turns into huge steps at the switch. Per run, from rank 0's JSON report: the final validation loss, the model states
# per rank (measured / the engine's theory), the bytes the rank sent in the last step (measured /
# theory) and the median step time (after 5 warm-up steps). Then the ratio of the validation
# losses (1-bit / baseline; the issue's bar: within 5%) and of the bytes per step.
#
# Closed forms beside them (Psi parameters, N ranks, T tensors): the baseline's stage 0 sends a
# reduce-scatter of the bf16 gradient and an all-gather of the fp32 accumulator, (N - 1) / N x
# (2 + 4) Psi bytes; 1-bit
# Adam's compressed all-reduce sends per tensor an all-to-all and an all-gather of N blocks of
# [fp32 scale][n_t / N sign bits], about 2 (N - 1) / N x Psi / 8 + 8 (N - 1) T bytes: 1/24 of the
# baseline plus the scales (1/16 of a bf16 all-reduce). Its memory adds the worker error (4 Psi, padded per tensor), the server
# error (4 Psi / N) and a scratch of the largest tensor.
#
# Usage: bench/bench_onebit.sh [BUILD_DIR]     (default: build)
# Environment: STEPS (2000), FREEZE (400), RANKS (2), SEED (1337), CONFIG, BETAS (0.9,0.999),
# CONTROL (1: run the control), CONTROL_FREEZE (20), OUT (directory for the raw reports).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
zero=$build/zero
config=${CONFIG:-$here/configs/shakespeare.json}
steps=${STEPS:-2000}
freeze=${FREEZE:-400}
ranks=${RANKS:-2}
seed=${SEED:-1337}
betas=${BETAS:-0.9,0.999}
control=${CONTROL:-1}
control_freeze=${CONTROL_FREEZE:-20}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/bench_onebit.XXXXXX")}
python=${PYTHON:-python3}

[ -x "$zero" ] || { echo "bench_onebit: $zero not found (build first, or pass the build dir)" >&2; exit 2; }
mkdir -p "$out"
cd "$here" || exit 2 # the config's data path is relative to the clone
common=(train --config "$config" --ranks "$ranks" --stage 0 --dtype bf16 --steps "$steps"
        --seed "$seed" --no-peak -q --set "optimizer.params.betas=$betas")
echo "# bench_onebit: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, raw output in $out"
echo "# $zero ${common[*]} --set optimizer.type=AdamW|OneBitAdam --set optimizer.params.freeze_step=$freeze|$control_freeze"

runs=("AdamW:AdamW:0" "OneBitAdam:OneBitAdam:$freeze")
[ "$control" = 1 ] && runs+=("OneBitAdam-control:OneBitAdam:$control_freeze")
rc=0
names=()
for r in "${runs[@]}"; do
    IFS=: read -r name opt fs <<<"$r"
    names+=("$name")
    "$zero" "${common[@]}" --set "optimizer.type=$opt" --set "optimizer.params.freeze_step=$fs" \
        --json-report "$out/$name.json" --metrics "$out/$name.jsonl" >"$out/$name.log" 2>&1 ||
        { echo "bench_onebit: the $name run failed (see $out/$name.log)" >&2; rc=1; }
done
[ "$rc" = 0 ] || exit 1

"$python" - "$out" "$ranks" "$steps" "$freeze" "${names[@]}" <<'PY'
import json, statistics, sys
out, N, T, F, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
runs = {k: json.load(open(f"{out}/{k}.json")) for k in names}
med = {}
for k in runs:
    m = [json.loads(l) for l in open(f"{out}/{k}.jsonl") if l.strip()][5:]
    med[k] = statistics.median(x["step_s"] for x in m)
psi = runs["AdamW"]["params"]
print(f"{'run':<20} {'val loss':>9} {'states MiB (meas/theory)':>26} {'sent KiB/step (meas/theory)':>28} "
      f"{'step s':>7}")
for k, d in runs.items():
    r = d["per_rank"][0]
    ms, mt = r["model_state_bytes"]["total"], r["model_state_theory_bytes"]["total"]
    cs, ct = r["comm_bytes_per_step"], r["comm_theory_bytes_per_step"]
    print(f"{k:<20} {d['final_val_loss']:>9.4f} {ms / 2**20:>12.3f} / {mt / 2**20:<11.3f} "
          f"{cs / 2**10:>13.1f} / {ct / 2**10:<12.1f} {med[k]:>7.4f}")
a, b = runs["AdamW"], runs["OneBitAdam"]
ra, rb = a["per_rank"][0], b["per_rank"][0]
print(f"val loss ratio 1-bit / baseline: {b['final_val_loss'] / a['final_val_loss']:.4f} "
      f"(bar: within 5%)")
if "OneBitAdam-control" in runs:
    c = runs["OneBitAdam-control"]
    print(f"val loss ratio control (short warm-up) / baseline: "
          f"{c['final_val_loss'] / a['final_val_loss']:.4f}")
print(f"bytes per step ratio (compression stage) 1-bit / baseline: "
      f"{rb['comm_bytes_per_step'] / ra['comm_bytes_per_step']:.4f} (closed forms: baseline "
      f"(N-1)/N 6 Psi = {(N - 1) / N * 6 * psi / 2**10:.1f} KiB, 1-bit 2 (N-1)/N Psi/8 = "
      f"{2 * (N - 1) / N * psi / 8 / 2**10:.1f} KiB + scales, Psi = {psi})")
avg = (F * ra['comm_bytes_per_step'] + (T - F) * rb['comm_bytes_per_step']) / T
print(f"bytes per step over the run ({F} warm-up steps at the baseline's): {avg / 2**10:.1f} KiB, "
      f"{avg / ra['comm_bytes_per_step']:.4f} of the baseline")
print(f"model states ratio: {rb['model_state_bytes']['total'] / ra['model_state_bytes']['total']:.3f}")
PY
