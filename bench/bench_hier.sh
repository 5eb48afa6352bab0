#!/usr/bin/env bash
# bench_hier.sh — the hierarchical collectives against the flat ones across the hosts of
# scripts/cluster.sh: 2 hosts x 2 MPI ranks, `zero bench comm` of all_gather, reduce_scatter and
# all_reduce at one size, hierarchical (the default) and --flat alternating, REPS rounds (each
# round runs both, so drift of the machine's load hits them alike).
#
# Per run and collective, from the JSON rows: the time per call (the median over samples of the
# slowest rank) and rank 0's bytes per call to the other host (measured by the comm statistics,
# and the closed form of bench comm). The summary gives the medians over the rounds and the
# ratios hierarchical / flat.
#
# Usage: bench/bench_hier.sh [BUILD_DIR]     (default: build; needs root for the namespaces)
# Environment: REPS (3), LINK (1gbit; "none": unshaped), SIZE (16M), DTYPE (fp32), OUT (raw
# output directory), PREFIX (the cluster's name prefix, default zh<pid>-: a cluster of its own).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
zero=$build/zero
reps=${REPS:-3}
link=${LINK:-1gbit}
size=${SIZE:-16M}
dtype=${DTYPE:-fp32}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/bench_hier.XXXXXX")}
python=${PYTHON:-python3}
prefix=${PREFIX:-zh$$-}
cluster=(bash "$here/scripts/cluster.sh")

[ -x "$zero" ] || { echo "bench_hier: $zero not found (build first, or pass the build dir)" >&2; exit 2; }
mkdir -p "$out"
linkflags=()
[ "$link" != none ] && linkflags=(--link "$link")
"${cluster[@]}" up --prefix "$prefix" --hosts 2 "${linkflags[@]}" >/dev/null || { echo "bench_hier: cluster.sh up failed" >&2; exit 2; }
trap '"${cluster[@]}" down --prefix "$prefix" >/dev/null 2>&1' EXIT
args=(bench comm --op all_gather,reduce_scatter,all_reduce --dtype "$dtype" --min-bytes "$size"
      --max-bytes "$size" --iters 5 --warmup 1 --json)
echo "# bench_hier: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, link $link, reps $reps, raw output in $out"
echo "# bash scripts/cluster.sh up --hosts 2 ${linkflags[*]}"
echo "# bash scripts/cluster.sh run --np 4 -- $zero ${args[*]} [--flat]"
for ((i = 0; i < reps; i++)); do
    for mode in hier flat; do
        flag=()
        [ "$mode" = flat ] && flag=(--flat)
        f=$out/$mode.$i.jsonl
        if ! "${cluster[@]}" run --prefix "$prefix" --np 4 -- "$zero" "${args[@]}" "${flag[@]}" >"$f" 2>"$out/$mode.$i.err"; then
            echo "bench_hier: the $mode run $i failed (see $out/$mode.$i.err)" >&2
            exit 1
        fi
        echo "# round $i $mode done, load $(cut -d' ' -f1 /proc/loadavg)"
    done
done
"$python" - "$out" "$reps" <<'EOF'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
rows = {}
for mode in ("hier", "flat"):
    for i in range(reps):
        for line in open(f"{out}/{mode}.{i}.jsonl"):
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r.get("check") != "ok":
                sys.exit(f"bench_hier: {mode} run {i}: {r['op']} output check {r.get('check')}")
            rows.setdefault((r["op"], mode), []).append(r)
print("| collective | hierarchical: time (median) | flat: time (median) | time hier / flat | rank 0 to the other host: hier (theory) | flat (theory) | bytes hier / flat |")
print("|---|---|---|---|---|---|---|")
for op in ("all_gather", "reduce_scatter", "all_reduce"):
    h, f = rows[(op, "hier")], rows[(op, "flat")]
    th = statistics.median(r["time_us"] for r in h) / 1e3
    tf = statistics.median(r["time_us"] for r in f) / 1e3
    bh, bf = h[0]["inter_node_bytes"], f[0]["inter_node_bytes"]
    print(f"| {op} | {th:.1f} ms ({', '.join('%.0f' % (r['time_us'] / 1e3) for r in h)}) "
          f"| {tf:.1f} ms ({', '.join('%.0f' % (r['time_us'] / 1e3) for r in f)}) | {th / tf:.2f} "
          f"| {bh / 2**20:.2f} MiB ({h[0]['inter_node_theory_bytes'] / 2**20:.2f}) "
          f"| {bf / 2**20:.2f} MiB ({f[0]['inter_node_theory_bytes'] / 2**20:.2f}) | {bh / bf:.2f} |")
EOF
