#!/usr/bin/env bash
# bench_qwz.sh — ZeRO++ qwZ (zero_optimization.zero_quantized_weights): stage 3 of the 85M model
# (configs/bench-85m.json: 12 layers, 12 heads, dim 768, seq 128, batch 4 per rank, fp32) on 2
# thread ranks as 2 simulated nodes (--ranks-per-node 1), qwZ off and on, alternating, REPS
# rounds (each round runs both, so drift of the machine's load hits them alike).
#
# Per run, from rank 0's report: the parameter bytes it sent per step (measured and the engine's
# theory), all its bytes to the other node (measured and theory), and tokens/s from the median of
# its per-step wall times after 2 warm-up steps. The summary gives the medians over the rounds
# and the ratios on / off. The parameter bytes' closed form: per unit and gather, the shard S_u
# in the compute dtype (4 S_u bytes in fp32) without qwZ, S_u + 4 ceil(S_u / 256) with it.
#
# Usage: bench/bench_qwz.sh [BUILD_DIR]     (default: build)
# Environment: REPS (3), STEPS (6, incl. 2 warm-ups), CONFIG (another config), DTYPE (fp32 or
# bf16: --dtype), OUT (directory for the raw reports), LAUNCH (a command prefix that starts
# the job instead, e.g. "bash scripts/cluster.sh run --np 4 --": then no --ranks flags are
# passed and the ranks are MPI processes).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
zero=$build/zero
config=${CONFIG:-$here/configs/bench-85m.json}
reps=${REPS:-3}
steps=${STEPS:-6}
dtype=${DTYPE:-fp32}
launch=${LAUNCH:-}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/bench_qwz.XXXXXX")}
python=${PYTHON:-python3}

[ -x "$zero" ] || { echo "bench_qwz: $zero not found (build first, or pass the build dir)" >&2; exit 2; }
mkdir -p "$out"
results=$out/results.tsv
: >"$results"
if [ -n "$launch" ]; then ranks=(); else ranks=(--ranks 2 --ranks-per-node 1); fi
echo "# bench_qwz: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, reps $reps, $steps steps, $dtype, raw output in $out"
echo "# ${launch:+$launch }$zero train --config $config ${ranks[*]} --stage 3 --dtype $dtype --steps $steps --no-peak -q --set zero_optimization.zero_quantized_weights=false|true"

load() { cut -d' ' -f1 /proc/loadavg; }

run() {
    local q=$1 rep=$2 tag=$out/qwz-$1.r$2 l0 l1 rc
    l0=$(load)
    # shellcheck disable=SC2086
    $launch "$zero" train --config "$config" "${ranks[@]}" --stage 3 --dtype "$dtype" \
        --steps "$steps" --no-peak -q --set "zero_optimization.zero_quantized_weights=$q" \
        --json-report "$tag.json" --metrics "$tag.jsonl" >"$tag.log" 2>&1
    rc=$?
    l1=$(load)
    "$python" - "$tag" "$q" "$rep" "$rc" "$l0" "$l1" >>"$results" <<'PY'
import json, statistics, sys
tag, q, rep, rc, l0, l1 = sys.argv[1:]
try:
    d = json.load(open(tag + ".json"))
    steps = [json.loads(l)["step_s"] for l in open(tag + ".jsonl") if l.strip()]
    med = statistics.median(steps[2:] if len(steps) > 2 else steps)
    tok = d["train_batch_size"] * d["model"]["seq"] / med
    r0 = d["per_rank"][0]
    p, pt = r0["comm_sent_bytes_per_step_by_kind"]["params"], r0["comm_theory_bytes_per_step_by_kind"]["params"]
    i, it = r0["comm_inter_node_bytes_per_step"], r0["comm_inter_node_theory_bytes_per_step"]
    print(f"{q}\t{rep}\t{med:.3f}\t{tok:.0f}\t{p:.0f}\t{pt:.0f}\t{i:.0f}\t{it:.0f}\t{l0}\t{l1}")
except Exception as e:  # a failed run is a row, not a crash of the bench
    print(f"{q}\t{rep}\tnan\tnan\tnan\tnan\tnan\tnan\t{l0}\t{l1}\tFAILED rc={rc}: {e}")
PY
    tail -n 1 "$results"
}

printf '# qwz\trep\tstep_s\ttok/s\tparams_B\ttheory\tinter_B\ttheory\tload0\tload1\n'
for rep in $(seq 1 "$reps"); do
    run false "$rep"
    run true "$rep"
done

"$python" - "$results" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
ok = [r for r in rows if len(r) == 10 and r[2] != "nan"]
med = {}
for q in ("false", "true"):
    rs = [r for r in ok if r[0] == q]
    if not rs:
        print(f"qwZ {q}: no successful run"); continue
    m = lambda k: statistics.median(float(r[k]) for r in rs)
    med[q] = dict(step=m(2), tok=m(3), p=m(4), pt=m(5), i=m(6), it=m(7))
    exact = all(r[4] == r[5] and r[6] == r[7] for r in rs)
    print(f"qwZ {'on ' if q == 'true' else 'off'}: step {med[q]['step']:.3f} s, {med[q]['tok']:.0f} tokens/s, "
          f"parameter bytes/step {med[q]['p'] / 2**20:.2f} MiB, to the other node {med[q]['i'] / 2**20:.2f} MiB"
          f" ({'measured == theory' if exact else 'MEASURED != THEORY'}, {len(rs)} runs)")
if len(med) == 2:
    a, b = med["false"], med["true"]
    print(f"ratio on/off: parameter bytes {b['p'] / a['p']:.4f}, bytes to the other node {b['i'] / a['i']:.4f}, "
          f"tokens/s {b['tok'] / a['tok']:.3f}, step time {b['step'] / a['step']:.3f}")
PY
