#!/usr/bin/env bash
# bench_lowbit.sh — low-bit training against the bf16 baseline on tinyshakespeare: 8-bit Adam
# states (optimizer.type AdamW8bit) and FP8 GEMM inputs (fp8.enabled: delayed scaling with the
# hybrid format and an amax history of 16 steps, and DeepSeek-V3's blockwise scales), each beside
# the same baseline run (AdamW, fp32 states, no fp8). The model of configs/shakespeare.json (4
# layers, dim 128, seq 128, 0.84M parameters), 2000 steps, bf16 compute with bf16 gradient
# accumulation (ZeRO's 2 + 2 + 12 bytes per parameter), stage 3 on 2 thread ranks, the same seed
# and data for every run. Per run, from rank 0's JSON report: the final validation loss, the model
# states per rank (measured / the engine's theory, and bytes per parameter of the rank's shard),
# the activations and the fp8 scaling state per rank, the bytes the rank sent in the last step,
# the median step time and its optimizer step (rank 0's metrics, after 5 warm-up steps). Then the
# ratio of each validation loss to the baseline's (the issue's bars: 8-bit within 2%, FP8 within
# 3%) and of the model states.
#
# Closed forms beside them: ZeRO stage 3 holds 16 Psi / N bytes (bf16 parameters 2, bf16 gradients
# 2, fp32 master, m and v 12); with 8-bit m and v, 2 + 2 + 4 + 2 + 2 x 4 / 256 = 10.03 Psi / N,
# plus 8 - 2.03 bytes per element of the blocks that keep fp32 states (tensors under 4096
# elements: biases and layernorm gains, about 2% of this model). FP8 compute changes neither
# (the GEMM inputs are quantized on the fly; the weights stay bf16 between steps). fp8_wgather
# (fp8 delayed with fp8.weight_gather: the blocks' linear weights on the E4M3 grid) sends the
# blocks' stage-3 parameter gathers as codes and block scales, 1 + 4/128 bytes per element of
# those weights instead of 2; not in the default runs (RUNS="fp8_wgather" adds it).
#
# Usage: bench/bench_lowbit.sh [BUILD_DIR]     (default: build)
# Environment: STEPS (2000), RANKS (2), STAGE (3), SEED (1337), CONFIG, OUT (directory for the
# raw reports), RUNS (the runs, default "AdamW AdamW8bit fp8_delayed fp8_blockwise"; AdamW is
# the baseline and always runs).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
zero=$build/zero
config=${CONFIG:-$here/configs/shakespeare.json}
steps=${STEPS:-2000}
ranks=${RANKS:-2}
stage=${STAGE:-3}
seed=${SEED:-1337}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/bench_lowbit.XXXXXX")}
python=${PYTHON:-python3}

[ -x "$zero" ] || { echo "bench_lowbit: $zero not found (build first, or pass the build dir)" >&2; exit 2; }
mkdir -p "$out"
cd "$here" || exit 2 # the config's data path is relative to the clone
common=(train --config "$config" --ranks "$ranks" --stage "$stage" --dtype bf16 --steps "$steps"
        --seed "$seed" --no-peak -q --set data_types.grad_accum_dtype=bf16)
echo "# bench_lowbit: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, raw output in $out"
echo "# $zero ${common[*]} <run's settings>"

runs_wanted=${RUNS:-AdamW AdamW8bit fp8_delayed fp8_blockwise}
# each run's settings beside the common ones
settings() {
    case $1 in
    AdamW | AdamW8bit) echo "--set optimizer.type=$1" ;;
    fp8_delayed) echo "--set fp8.enabled=true --set fp8.recipe=delayed --set fp8.format=hybrid --set fp8.amax_history_len=16" ;;
    fp8_blockwise) echo "--set fp8.enabled=true --set fp8.recipe=blockwise --set fp8.format=hybrid" ;;
    fp8_wgather) echo "--set fp8.enabled=true --set fp8.recipe=delayed --set fp8.format=hybrid --set fp8.amax_history_len=16 --set fp8.weight_gather=true" ;;
    *) echo "bench_lowbit: unknown run '$1'" >&2; return 1 ;;
    esac
}
runs=AdamW
for k in $runs_wanted; do [ "$k" = AdamW ] || runs="$runs $k"; done
for k in $runs; do echo "# $k: $(settings "$k")"; done

rc=0
for k in $runs; do
    set_args=$(settings "$k") || exit 2
    # shellcheck disable=SC2086 # the settings are words
    "$zero" "${common[@]}" $set_args --json-report "$out/$k.json" \
        --metrics "$out/$k.jsonl" >"$out/$k.log" 2>&1 ||
        { echo "bench_lowbit: the $k run failed (see $out/$k.log)" >&2; rc=1; }
done
[ "$rc" = 0 ] || exit 1

# shellcheck disable=SC2086
"$python" - "$out" "$ranks" $runs <<'PY'
import json, statistics, sys
out, N = sys.argv[1], int(sys.argv[2])
runs = {k: json.load(open(f"{out}/{k}.json")) for k in sys.argv[3:]}
# medians over the steps after 5 warm-up steps: the step and its optimizer part
med = {}
for k in runs:
    m = [json.loads(l) for l in open(f"{out}/{k}.jsonl") if l.strip()][5:]
    med[k] = (statistics.median(x["step_s"] for x in m),
              statistics.median(x["optimizer_step_s"] for x in m))
psi = runs["AdamW"]["params"]
print(f"{'run':<14} {'val loss':>9} {'states MiB (meas/theory)':>26} {'B/param':>8} "
      f"{'opt MiB':>8} {'act MiB':>8} {'fp8 KiB':>8} {'sent MiB/step':>14} {'step s':>7} "
      f"{'opt s':>7}")
for k, d in runs.items():
    r = d["per_rank"][0]
    ms, mt = r["model_state_bytes"]["total"], r["model_state_theory_bytes"]["total"]
    S = r["padded_params"] / N
    fp8 = d.get("fp8", {}).get("state_bytes", 0)
    print(f"{k:<14} {d['final_val_loss']:>9.4f} {ms / 2**20:>12.3f} / {mt / 2**20:<11.3f} "
          f"{ms / S:>8.2f} {r['model_state_bytes']['optimizer_states'] / 2**20:>8.3f} "
          f"{r['memory_bytes']['activations'] / 2**20:>8.3f} {fp8 / 2**10:>8.1f} "
          f"{r['comm_bytes_per_step'] / 2**20:>14.3f} {med[k][0]:>7.4f} {med[k][1]:>7.4f}")
a = runs["AdamW"]
ra = a["per_rank"][0]
for k, d in runs.items():
    if k == "AdamW":
        continue
    bar = "2%" if k == "AdamW8bit" else "3%"
    print(f"val loss ratio {k} / baseline: {d['final_val_loss'] / a['final_val_loss']:.4f} "
          f"(bar: within {bar}); model states ratio: "
          f"{d['per_rank'][0]['model_state_bytes']['total'] / ra['model_state_bytes']['total']:.3f}")
print(f"closed forms: 16 Psi/N = {16 * psi / N / 2**20:.3f} MiB, 10.03 Psi/N = "
      f"{(4 + 4 + 2 + 8 / 256) * psi / N / 2**20:.3f} MiB, Psi = {psi}")
PY
