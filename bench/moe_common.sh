# moe_common.sh — what bench_moe.sh and bench_moe_ep.sh share, sourced by both: the build and
# data lookup, the MoE settings of their model and `run TAG ARGS...`, one `zero train` with its
# JSON report and metrics under $out. The caller sets `name` (for messages and the temporary
# directory), `default_steps` and, before calling run, the array `common` of its own flags.
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
zero=$build/zero
steps=${STEPS:-$default_steps}
reps=${REPS:-2}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")}
python=${PYTHON:-python3}
data=${DATA:-${ZERO_SHARED_DIR:-$here/../shared}/data/tinyshakespeare.txt}

[ -x "$zero" ] || { echo "$name: $zero not found (build first, or pass the build dir)" >&2; exit 2; }
mkdir -p "$out"
if [ -r "$data" ]; then
    data_args=(--data "$data")
    data_name="tinyshakespeare ($data)"
else
    data_args=()
    data_name="built-in corpus (tinyshakespeare not found at $data)"
fi
# 8 experts top-2 in every other layer, each of hidden 2C = 256 (configs/main.json's C = 128):
# the dense MLP's active parameters per token; DeepSpeed-MoE's usual capacity and aux settings.
moe=(--set model.moe.experts=8 --set model.moe.top_k=2 --set model.moe.every=2
     --set model.moe.hidden=256 --set model.moe.capacity_factor=1.25
     --set model.moe.eval_capacity_factor=2 --set model.moe.aux_loss_coef=0.01)

run() {
    local tag=$1
    shift
    "$zero" train "${common[@]}" "${data_args[@]}" "$@" --json-report "$out/$tag.json" \
        --metrics "$out/$tag.jsonl" >"$out/$tag.log" 2>&1 ||
        { echo "$name: the $tag run failed (see $out/$tag.log)" >&2; exit 1; }
}
