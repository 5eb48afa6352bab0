#!/usr/bin/env bash
# bench_tune.sh — `zero tune` on the 85M model (12 layers, dim 768, seq 128) with 2 thread ranks,
# from a deliberately poor base (configs/tune-85m-poor.json: stage 3, micro-batch 1 x 4
# accumulation, 1e4-element reduce and prefetch buckets, overlap_comm off) at its global batch
# of 8 sequences.
#
# 1. The exhaustive grid: gridsearch with no early stopping over the whole space (the base's
#    autotuning block: fast, so stage 0-3 x the 3 largest micro-batches). The base is one of its
#    points, so the grid measures the base too, in the same way as every other trial.
# 2. The tuner: model_based (the planner's estimated step time, fastest first), early stopping
#    after 2 trials without a better one, at most 30% of the grid's trials.
# Every trial: TRIAL_STEPS steps (default 4), the first WARMUP (default 1) left out.
#
# Usage: bench/bench_tune.sh [BUILD_DIR]     (default: build)
# Environment: OUT (raw output directory; default a new temporary directory), CONFIG (another
# base config, for a quick check of this script), TRIAL_STEPS, WARMUP.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
zero=$build/zero
config=${CONFIG:-$here/configs/tune-85m-poor.json}
steps=${TRIAL_STEPS:-4}
warmup=${WARMUP:-1}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/bench_tune.XXXXXX")}
[ -x "$zero" ] || { echo "bench_tune: $zero not found (build first, or pass the build dir)" >&2; exit 2; }
mkdir -p "$out"
echo "# bench_tune: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, base $config, $steps steps per trial ($warmup warm-up), raw output in $out"

# the base with its autotuning block changed
variant() { # variant NAME JSON-OF-AUTOTUNING-KEYS
  python3 - "$config" "$out/$1.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.setdefault("autotuning", {}).update(json.loads(sys.argv[3]))
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
}
variant grid '{"tuner_type": "gridsearch", "tuner_early_stopping": 100000, "tuner_num_trials": 100000}'
"$zero" tune --config "$out/grid.json" --out "$out/grid" --trial-steps "$steps" --warmup-steps "$warmup" --json > "$out/grid.out"
size=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['space_size'])" "$out/grid/trials.json")
budget=$(( size * 3 / 10 ))
variant tuned "{\"tuner_type\": \"model_based\", \"tuner_early_stopping\": 2, \"tuner_num_trials\": $budget}"
"$zero" tune --config "$out/tuned.json" --out "$out/tuned" --trial-steps "$steps" --warmup-steps "$warmup" --json > "$out/tuned.out"

python3 - "$out" "$config" <<'PY'
import json, sys
out, config = sys.argv[1], sys.argv[2]
grid = json.load(open(out + "/grid/trials.json"))
tuned = json.load(open(out + "/tuned/trials.json"))
base = json.load(open(config))
keys = ("stage", "micro_batch", "reduce_bucket_size", "overlap_comm")
def same(t, u):
    return all(t[k] == u[k] for k in keys) and t["stage3_prefetch_bucket_size"] == u["stage3_prefetch_bucket_size"] if t["stage"] == 3 else all(t[k] == u[k] for k in keys)
zo = base["zero_optimization"]
bt = [t for t in grid["trials"] if t["stage"] == zo["stage"] and t["micro_batch"] == base["train_micro_batch_size_per_gpu"]]
b = bt[0]
gb = grid["trials"][grid["best"]]
tb = tuned["trials"][tuned["best"]]
tg = [t for t in grid["trials"] if same(t, tb)][0]
name = lambda t: "stage %d, micro %d x %d" % (t["stage"], t["micro_batch"], t["gradient_accumulation_steps"])
print()
print("| run | trials | config | tokens/s | peak RSS MiB (largest rank; thread ranks: their process) |")
print("|---|---|---|---|---|")
print("| base (its grid trial) | - | %s | %.1f | %.0f |" % (name(b), b["tokens_per_s"], b["peak_rss_bytes"] / 2**20))
print("| exhaustive grid, best | %d | %s | %.1f | %.0f |" % (grid["trials_run"], name(gb), gb["tokens_per_s"], gb["peak_rss_bytes"] / 2**20))
print("| model_based tuner, best | %d | %s | %.1f | %.0f |" % (tuned["trials_run"], name(tb), tb["tokens_per_s"], tb["peak_rss_bytes"] / 2**20))
print("| the tuner's pick in the grid run | - | %s | %.1f | %.0f |" % (name(tg), tg["tokens_per_s"], tg["peak_rss_bytes"] / 2**20))
print()
print("tuned / base: %.2fx (target >= 1.3); tuned / grid best: %.3f (target >= 0.9), the pick's own grid trial / grid best: %.3f; trials: %d of the grid's %d = %.0f%% (target <= 30%%)" % (
    tb["tokens_per_s"] / b["tokens_per_s"], tb["tokens_per_s"] / gb["tokens_per_s"], tg["tokens_per_s"] / gb["tokens_per_s"],
    tuned["trials_run"], grid["trials_run"], 100.0 * tuned["trials_run"] / grid["trials_run"]))
PY
