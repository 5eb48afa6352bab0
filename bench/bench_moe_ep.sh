#!/usr/bin/env bash
# bench_moe_ep.sh — expert parallelism: the MoE-GPT of bench_moe.sh (configs/main.json, 8 experts
# top-2 every other layer, expert hidden 2C) on 4 thread ranks, ep 1 against ep 4, at stage 1
# (parameters resident: each rank holds every parameter it computes with) and stage 3 (every unit
# sharded), fp32, gradient clipping off, tinyshakespeare (the built-in corpus when absent).
#
# Per run: the weights fingerprint (the same at ep 1 and 4 and both stages), the expert
# parameter bytes of rank 0 (ep 4: the report's expert split; ep 1, where the experts are units of
# the world: the parameters less the dense units', which are ep 4's dense split), the MoE
# all-to-all bytes per rank per step measured on the expert-parallel communicator and their
# theory from the routed counts (0 at ep 1), and tokens/s (tokens per step over the median step
# time from --metrics). REPS rounds alternate the order of ep 1 and ep 4; the summary quotes the
# medians of tokens/s.
#
# Usage: bench/bench_moe_ep.sh [BUILD_DIR]      (default: build)
# Environment: STEPS (30), REPS (2), DATA (a text file; default
# $ZERO_SHARED_DIR/data/tinyshakespeare.txt or ../shared/data/tinyshakespeare.txt beside the
# project), OUT (directory for the raw reports).
set -u
name=bench_moe_ep default_steps=30
# shellcheck source=bench/moe_common.sh
source "$(dirname "$0")/moe_common.sh"
common=(--config "$here/configs/main.json" --ranks 4 --steps "$steps" --no-peak -q
        --set train.eval_interval=0 --set train.eval_batches=4 --set train.samples=0
        --set gradient_clipping=0 --set train.threads=1 "${moe[@]}")
echo "# bench_moe_ep: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $steps steps, $reps rounds, load $(cut -d' ' -f1-3 /proc/loadavg), data: $data_name"
echo "# $zero train ${common[*]} ${data_args[*]} --stage {1,3} --ep-size {1,4}"

for stage in 1 3; do
    for ((r = 0; r < reps; r++)); do
        order="1 4"
        ((r % 2 == 1)) && order="4 1"
        for ep in $order; do run "s$stage.ep$ep.r$r" --stage "$stage" --ep-size "$ep"; done
    done
done

"$python" - "$out" "$reps" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
MiB = 1048576.0
def load(tag):
    r = json.load(open(f"{out}/{tag}.json"))
    steps = [json.loads(l)["step_s"] for l in open(f"{out}/{tag}.jsonl") if l.strip()]
    return r, r["train_batch_size"] * r["model"]["seq"] / statistics.median(steps)
fps = set()
for stage in (1, 3):
    runs = {ep: [load(f"s{stage}.ep{ep}.r{i}") for i in range(reps)] for ep in (1, 4)}
    r1, r4 = runs[1][0][0]["per_rank"][0], runs[4][0][0]["per_rank"][0]
    dense = r4["model_state_dense_bytes"]["parameters"]
    x4 = r4["model_state_expert_bytes"]["parameters"]
    x1 = r1["model_state_bytes"]["parameters"] - dense
    print(f"stage {stage}: expert parameters per rank (rank 0) ep 1 {x1 / MiB:.3f} MiB, ep 4 "
          f"{x4 / MiB:.3f} MiB (theory {r4['model_state_expert_theory_bytes']['parameters'] / MiB:.3f}): "
          f"ep4/ep1 = {x4 / x1:.3f}; dense parameters {dense / MiB:.3f} MiB at both")
    for ep in (1, 4):
        fps |= {r["weights_fingerprint"] for r, _ in runs[ep]}
        pr = runs[ep][0][0]["per_rank"]
        meas = [p["moe_a2a_bytes_per_step"] for p in pr]
        theo = [p["moe_a2a_theory_bytes_per_step"] for p in pr]
        tok = statistics.median(t for _, t in runs[ep])
        print(f"  ep {ep}: tokens/s {tok / 1e3:.2f}k (rounds {' '.join(f'{t / 1e3:.2f}k' for _, t in runs[ep])}); "
              f"all-to-all per rank per step {' '.join(f'{m / MiB:.4f}' for m in meas)} MiB measured, "
              f"{' '.join(f'{t / MiB:.4f}' for t in theo)} theory: "
              f"{'equal' if meas == theo else 'DIFFER'}; "
              f"engine communication rank 0 {pr[0]['comm_bytes_per_step'] / MiB:.3f} MiB per step")
print(f"weights fingerprints over ep 1, 4, stages 1, 3 and the rounds: "
      f"{'one: ' + next(iter(fps)) if len(fps) == 1 else 'DIFFER: ' + ' '.join(sorted(fps))}")
PY
