#!/usr/bin/env bash
# bench_moe.sh — MoE-GPT against the dense GPT with the same active parameters per token, on
# tinyshakespeare (the built-in corpus when it is absent; the script says which), 1 rank.
#
# Both start from configs/main.json (4 layers, dim 128, 4 heads, seq 128, micro-batch 16, AdamW
# lr 2e-3 with warm-up and cosine decay), stage 0, fp32, the same seed and STEPS steps. The MoE
# model makes every other layer (layers 1 and 3) an MoE MLP of 8 experts, top-2, each of hidden
# width 2C = 256 (model.moe.hidden), so a token runs through 2 x 2C = 4C hidden units as in the
# dense MLP: active parameters per token differ only by the routers' 2 x 8 x 128 weights.
# Capacity factor 1.25 in training, 2.0 in evaluation, aux loss 0.01 (DeepSpeed-MoE's usual
# settings). Validation loss = cross-entropy only (the aux terms are not in it), on the same 16
# held-out batches. tokens/s: the report's (training tokens over training time, evaluation
# excluded).
#
# Usage: bench/bench_moe.sh [BUILD_DIR]      (default: build)
# Environment: STEPS (1000), DATA (a text file; default $ZERO_SHARED_DIR/data/tinyshakespeare.txt
# or ../shared/data/tinyshakespeare.txt beside the project), OUT (directory for the raw reports).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
zero=$build/zero
steps=${STEPS:-1000}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/bench_moe.XXXXXX")}
python=${PYTHON:-python3}
data=${DATA:-${ZERO_SHARED_DIR:-$here/../shared}/data/tinyshakespeare.txt}

[ -x "$zero" ] || { echo "bench_moe: $zero not found (build first, or pass the build dir)" >&2; exit 2; }
mkdir -p "$out"
if [ -r "$data" ]; then
    data_args=(--data "$data")
    data_name="tinyshakespeare ($data)"
else
    data_args=()
    data_name="built-in corpus (tinyshakespeare not found at $data)"
fi
common=(--config "$here/configs/main.json" --ranks 1 --stage 0 --steps "$steps" --no-peak -q
        --set train.eval_interval=0 --set train.eval_batches=16 --set train.samples=0)
moe=(--set model.moe.experts=8 --set model.moe.top_k=2 --set model.moe.every=2
     --set model.moe.hidden=256 --set model.moe.capacity_factor=1.25
     --set model.moe.eval_capacity_factor=2 --set model.moe.aux_loss_coef=0.01)
echo "# bench_moe: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $steps steps, data: $data_name"
echo "# dense: $zero train ${common[*]} ${data_args[*]}"
echo "# moe:   ... ${moe[*]}"

run() {
    local tag=$1
    shift
    "$zero" train "${common[@]}" "${data_args[@]}" "$@" --json-report "$out/$tag.json" \
        >"$out/$tag.log" 2>&1 || { echo "bench_moe: the $tag run failed (see $out/$tag.log)" >&2; exit 1; }
}
run dense
run moe "${moe[@]}"

"$python" - "$out" <<'PY'
import json, sys
out = sys.argv[1]
d = json.load(open(out + "/dense.json"))
m = json.load(open(out + "/moe.json"))
for tag, r in (("dense", d), ("moe", m)):
    print(f"{tag:6s} params {r['params']/1e6:.3f}M, active {r['active_params']/1e6:.3f}M: "
          f"val loss {r['final_val_loss']:.4f}, train loss {r['final_train_loss']:.4f}, "
          f"{r['tokens_per_s']/1e3:.1f}k tok/s")
for layer in m.get("moe", []):
    print(f"moe layer {layer['layer']}: tokens per expert (last step) "
          f"{' '.join(str(int(x)) for x in layer['tokens_per_expert'])}, dropped "
          f"{int(layer['dropped'])} of {int(layer['choices'])}, aux {layer['aux_loss']:.4f}")
dv, mv = d["final_val_loss"], m["final_val_loss"]
ratio = m["tokens_per_s"] / d["tokens_per_s"]
print(f"val loss moe - dense: {mv - dv:+.4f} ({'lower' if mv < dv else 'NOT lower'}); "
      f"tokens/s moe / dense: {ratio:.3f} ({'>=' if ratio >= 0.75 else '<'} 0.75)")
PY
