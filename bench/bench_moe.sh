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
# held-out batches. The runs are deterministic, so the losses are the same every round (the
# weights fingerprints say so); tokens/s is not: each run's figure is tokens per step over the
# median step time (from --metrics), REPS rounds alternate the order (dense moe, moe dense, ...)
# so that the machine's drift hits both, and the summary quotes the medians over the rounds.
#
# Usage: bench/bench_moe.sh [BUILD_DIR]      (default: build)
# Environment: STEPS (1000), REPS (2), DATA (a text file; default
# $ZERO_SHARED_DIR/data/tinyshakespeare.txt or ../shared/data/tinyshakespeare.txt beside the
# project), OUT (directory for the raw reports).
set -u
name=bench_moe default_steps=1000
# shellcheck source=bench/moe_common.sh
source "$(dirname "$0")/moe_common.sh"
common=(--config "$here/configs/main.json" --ranks 1 --stage 0 --steps "$steps" --no-peak -q
        --set train.eval_interval=0 --set train.eval_batches=16 --set train.samples=0)
echo "# bench_moe: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $steps steps, $reps rounds, load $(cut -d' ' -f1-3 /proc/loadavg), data: $data_name"
echo "# dense: $zero train ${common[*]} ${data_args[*]}"
echo "# moe:   ... ${moe[*]}"

for ((r = 0; r < reps; r++)); do
    if ((r % 2 == 0)); then
        run "dense.r$r"
        run "moe.r$r" "${moe[@]}"
    else
        run "moe.r$r" "${moe[@]}"
        run "dense.r$r"
    fi
done

"$python" - "$out" "$reps" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def tok_s(tag):
    r = json.load(open(f"{out}/{tag}.json"))
    steps = [json.loads(l)["step_s"] for l in open(f"{out}/{tag}.jsonl") if l.strip()]
    return r, r["train_batch_size"] * r["model"]["seq"] / statistics.median(steps)
runs = {k: [tok_s(f"{k}.r{i}") for i in range(reps)] for k in ("dense", "moe")}
for k, rs in runs.items():
    fps = {r["weights_fingerprint"] for r, _ in rs}
    print(f"{k}: tokens/s per round {' '.join(f'{t/1e3:.1f}k' for _, t in rs)}; "
          f"fingerprints {'equal' if len(fps) == 1 else 'DIFFER'} over the rounds")
d, m = runs["dense"][0][0], runs["moe"][0][0]
dt = statistics.median(t for _, t in runs["dense"])
mt = statistics.median(t for _, t in runs["moe"])
for tag, r, t in (("dense", d, dt), ("moe", m, mt)):
    print(f"{tag:6s} params {r['params']/1e6:.3f}M, active {r['active_params']/1e6:.3f}M: "
          f"val loss {r['final_val_loss']:.4f}, train loss {r['final_train_loss']:.4f}, "
          f"{t/1e3:.1f}k tok/s (median)")
for layer in m.get("moe", []):
    print(f"moe layer {layer['layer']}: tokens per expert (last step) "
          f"{' '.join(str(int(x)) for x in layer['tokens_per_expert'])}, dropped "
          f"{int(layer['dropped'])} of {int(layer['choices'])}, aux {layer['aux_loss']:.4f}")
dv, mv = d["final_val_loss"], m["final_val_loss"]
ratio = mt / dt
print(f"val loss moe - dense: {mv - dv:+.4f} ({'lower' if mv < dv else 'NOT lower'}); "
      f"tokens/s moe / dense: {ratio:.3f} ({'>=' if ratio >= 0.75 else '<'} 0.75)")
PY
