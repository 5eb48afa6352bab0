#!/usr/bin/env bash
# bench_zeropp.sh — ZeRO++ as a whole: plain stage 3 against qwZ + hpZ + qgZ
# (zero_quantized_weights, zero_hpz_partition_size = the ranks per node, zero_quantized_gradients)
# on the 85M model (configs/bench-85m.json: 12 layers, 12 heads, dim 768, seq 128, batch 4 per
# rank), 4 ranks as 2 nodes of 2, alternating, REPS rounds (each round runs both, so drift of the
# machine's load hits them alike). By default thread ranks simulated as 2 nodes
# (--ranks-per-node 2); with LAUNCH the ranks are MPI processes on real (or cluster.sh) hosts.
#
# Per run, from the report: each rank's bytes to the other node per step (measured and the
# engine's theory; the table gives rank 0's and the largest), its gradient bytes (measured and
# theory), and the median per-step wall time after 2 warm-up steps. The summary gives the
# medians over the rounds and the ratios ZeRO++ / plain. Closed form per unit u (shard S_u, c
# bytes per element), to the other node: plain stage 3 sends c S_u per gather across (two or
# three gathers per step) and its share of the hierarchical reduce-scatter; ZeRO++ sends the
# step's first gather at int8 (S_u + 4 ceil(S_u / 256)) and the int4 gradient (4 ceil(S_u / 256)
# + ceil(S_u / 2)) once each, every later gather staying inside the node.
#
# Usage: bench/bench_zeropp.sh [BUILD_DIR]     (default: build)
# Environment: REPS (3), STEPS (6, incl. 2 warm-ups), CONFIG (another config), DTYPE (fp32 or
# bf16), OUT (directory for the raw reports), LAUNCH (a command prefix that starts the job, e.g.
# "bash scripts/cluster.sh run --np 4 --": then no --ranks flags are passed), PER_NODE (ranks per
# node, 2: the hpZ group).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
zero=$build/zero
config=${CONFIG:-$here/configs/bench-85m.json}
reps=${REPS:-3}
steps=${STEPS:-6}
dtype=${DTYPE:-fp32}
launch=${LAUNCH:-}
per_node=${PER_NODE:-2}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/bench_zeropp.XXXXXX")}
python=${PYTHON:-python3}

[ -x "$zero" ] || { echo "bench_zeropp: $zero not found (build first, or pass the build dir)" >&2; exit 2; }
mkdir -p "$out"
results=$out/results.tsv
: >"$results"
if [ -n "$launch" ]; then ranks=(); else ranks=(--ranks 4 --ranks-per-node "$per_node"); fi
zpp=(--set zero_optimization.zero_quantized_weights=true
     --set "zero_optimization.zero_hpz_partition_size=$per_node"
     --set zero_optimization.zero_quantized_gradients=true)
echo "# bench_zeropp: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), reps $reps, $steps steps, $dtype, raw output in $out"
echo "# ${launch:+$launch }$zero train --config $config ${ranks[*]} --stage 3 --dtype $dtype --steps $steps --no-peak -q [${zpp[*]}]"

load() { cut -d' ' -f1 /proc/loadavg; }

run() {
    local mode=$1 rep=$2 tag=$out/$1.r$2 l0 l1 rc
    local extra=()
    [ "$mode" = zeropp ] && extra=("${zpp[@]}")
    l0=$(load)
    # shellcheck disable=SC2086
    $launch "$zero" train --config "$config" "${ranks[@]}" --stage 3 --dtype "$dtype" \
        --steps "$steps" --no-peak -q "${extra[@]}" \
        --json-report "$tag.json" --metrics "$tag.jsonl" >"$tag.log" 2>&1
    rc=$?
    l1=$(load)
    "$python" - "$tag" "$mode" "$rep" "$rc" "$l0" "$l1" >>"$results" <<'PY'
import json, statistics, sys
tag, mode, rep, rc, l0, l1 = sys.argv[1:]
try:
    d = json.load(open(tag + ".json"))
    steps = [json.loads(l)["step_s"] for l in open(tag + ".jsonl") if l.strip()]
    med = statistics.median(steps[2:] if len(steps) > 2 else steps)
    pr = d["per_rank"]
    i0, it0 = pr[0]["comm_inter_node_bytes_per_step"], pr[0]["comm_inter_node_theory_bytes_per_step"]
    imax = max(r["comm_inter_node_bytes_per_step"] for r in pr)
    itmax = max(r["comm_inter_node_theory_bytes_per_step"] for r in pr)
    exact = all(r["comm_inter_node_bytes_per_step"] == r["comm_inter_node_theory_bytes_per_step"]
                and r["comm_sent_bytes_per_step_by_kind"]["grads"]
                == r["comm_theory_bytes_per_step_by_kind"]["grads"] for r in pr)
    g0 = pr[0]["comm_sent_bytes_per_step_by_kind"]["grads"]
    print(f"{mode}\t{rep}\t{med:.3f}\t{i0:.0f}\t{it0:.0f}\t{imax:.0f}\t{itmax:.0f}\t{g0:.0f}\t{int(exact)}\t{d['final_train_loss']:.4f}\t{l0}\t{l1}")
except Exception as e:  # a failed run is a row, not a crash of the bench
    print(f"{mode}\t{rep}\tnan\tnan\tnan\tnan\tnan\tnan\t0\tnan\t{l0}\t{l1}\tFAILED rc={rc}: {e}")
PY
    tail -n 1 "$results"
}

printf '# mode\trep\tstep_s\tinter_B(r0)\ttheory\tinter_B(max)\ttheory\tgrads_B(r0)\texact\tloss\tload0\tload1\n'
for rep in $(seq 1 "$reps"); do
    run plain "$rep"
    run zeropp "$rep"
done

"$python" - "$results" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
ok = [r for r in rows if len(r) == 12 and r[2] != "nan"]
med = {}
for mode in ("plain", "zeropp"):
    rs = [r for r in ok if r[0] == mode]
    name = "plain stage 3" if mode == "plain" else "qwZ + hpZ + qgZ"
    if not rs:
        print(f"{name}: no successful run"); continue
    m = lambda k: statistics.median(float(r[k]) for r in rs)
    med[mode] = dict(step=m(2), i0=m(3), imax=m(5), g=m(7))
    exact = all(r[8] == "1" for r in rs)
    print(f"{name}: step {med[mode]['step']:.3f} s, to the other node per rank and step "
          f"{med[mode]['i0'] / 2**20:.2f} MiB (rank 0; largest {med[mode]['imax'] / 2**20:.2f} MiB), "
          f"gradient bytes {med[mode]['g'] / 2**20:.2f} MiB "
          f"({'measured == theory' if exact else 'MEASURED != THEORY'}, {len(rs)} runs)")
if len(med) == 2:
    a, b = med["plain"], med["zeropp"]
    print(f"ratio ZeRO++ / plain: bytes to the other node {b['i0'] / a['i0']:.4f} (rank 0), "
          f"{b['imax'] / a['imax']:.4f} (largest), step time {b['step'] / a['step']:.3f}")
PY
