#!/usr/bin/env bash
# bench_plan.sh — `zero plan`'s predicted peak RSS per rank against measured runs of the 85M
# model (configs/bench-85m.json: 12 layers, dim 768, seq 128, micro-batch 4, 1 compute thread
# per rank), for a handful of configurations: one rank as a process of its own, and 2 or 4 MPI
# ranks (one process per rank, so each rank's peak RSS is its own; the largest is taken), fp32
# and bf16, stages 0-3, with and without offload_optimizer nvme.
#
# Prediction: the row of `zero plan --json --config C --world R --backend mpi|threads` with the
# run's stage, offload, micro-batch and checkpointing: peak_rss_bytes_per_rank. Measurement:
# `zero train ... --json-report`, per_rank[*].peak_rss_bytes (getrusage's maximum resident set
# of each rank's process). STEPS (default 4) steps: stage 3 prefetches from the third step on.
#
# Usage: bench/bench_plan.sh [BUILD_DIR]     (default: build)
# Environment: STEPS (4), OUT (directory for the raw reports and swap files; default a new
# temporary directory), CONFIG (another config, for a quick check of this script).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
zero=$build/zero
config=${CONFIG:-$here/configs/bench-85m.json}
steps=${STEPS:-4}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/bench_plan.XXXXXX")}
mpirun=(mpirun --allow-run-as-root --oversubscribe)

[ -x "$zero" ] || { echo "bench_plan: $zero not found (build first, or pass the build dir)" >&2; exit 2; }
mkdir -p "$out/swap"
echo "# bench_plan: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, config $config, $steps steps, raw output in $out"
echo
echo "| ranks | launch | stage | dtype | offload | predicted MiB/rank | measured MiB/rank | error |"
echo "|---|---|---|---|---|---|---|---|"

# case RANKS LAUNCH(threads|mpi) STAGE DTYPE OFFLOAD(none|nvme)
run_case() {
    local ranks=$1 launch=$2 stage=$3 dtype=$4 off=$5
    local tag=$out/r$ranks-$launch-s$stage-$dtype-$off
    local args=(--config "$config" --stage "$stage" --dtype "$dtype"
                --set "zero_optimization.offload_optimizer.nvme_path=$out/swap")
    [ "$off" = nvme ] && args+=(--set zero_optimization.offload_optimizer.device=nvme)
    "$zero" plan --json --world "$ranks" --backend "$launch" --calibration "$out/none.json" \
        "${args[@]}" >"$tag.plan.json" 2>"$tag.plan.err" || { echo "plan failed: $tag" >&2; return; }
    if [ "$launch" = mpi ]; then
        "${mpirun[@]}" -np "$ranks" "$zero" train -q --no-peak --steps "$steps" \
            --json-report "$tag.json" "${args[@]}" >"$tag.log" 2>&1
    else
        "$zero" train -q --no-peak --steps "$steps" --ranks "$ranks" --json-report "$tag.json" \
            "${args[@]}" >"$tag.log" 2>&1
    fi || { echo "train failed: $tag (see $tag.log)" >&2; return; }
    python3 - "$tag" "$ranks" "$launch" "$stage" "$dtype" "$off" <<'EOF'
import json, sys
tag, ranks, launch, stage, dtype, off = sys.argv[1:]
plan = json.load(open(tag + ".plan.json"))
rep = json.load(open(tag + ".json"))
rows = [r for r in plan["rows"] if r["stage"] == int(stage) and not r["zeropp"]
        and r["offload"] == ("optimizer" if off == "nvme" else "none")
        and not r["activation_checkpointing"] and r["micro_batch"] == rep["micro_batch"]]
pred = rows[0]["peak_rss_bytes_per_rank"]
meas = max(r["peak_rss_bytes"] for r in rep["per_rank"])
if launch == "threads":  # one process of all ranks: its RSS over its ranks
    meas /= int(ranks)
print(f"| {ranks} | {launch} | {stage} | {dtype} | {off} | {pred / 2**20:.0f} | "
      f"{meas / 2**20:.0f} | {100 * (pred - meas) / meas:+.1f}% |", flush=True)
EOF
}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run_case 1 threads 0 fp32 none
run_case 1 threads 3 bf16 nvme
run_case 2 mpi 1 fp32 none
run_case 2 mpi 3 fp32 none
run_case 2 mpi 2 bf16 nvme
run_case 4 mpi 0 bf16 none
run_case 4 mpi 2 fp32 none
run_case 4 mpi 3 fp32 nvme
