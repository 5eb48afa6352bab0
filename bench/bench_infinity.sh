#!/usr/bin/env bash
# bench_infinity.sh — ZeRO-Infinity's two benchmarks: a GPT whose model states (16 bytes per
# parameter: fp32 parameters, gradients, Adam's m and v) are RATIO times a memory cap trains for
# STEPS steps inside a cgroup v1 memory cgroup limited to that cap ("beyond memory"), at stage 3
# on one rank with the parameters and the optimizer's states on NVMe (offload_param and
# offload_optimizer, device nvme); then `zero bench io` measures the swap directory's read and
# write bandwidth with the run's aio settings (three times: the medians), and the same model
# trains in RAM without a cap and without offload ("at disk speed"). Printed: the parameters, model-state bytes, the cap and
# the ratio; the cgroup's peak usage (memory.max_usage_in_bytes, page cache included), the
# run's peak RSS and its memory by category; limit hits (memory.failcnt), OOM kills
# (memory.oom_control) and the exit status; the step losses and the validation loss before and
# after; the weights fingerprints of both runs (offload changes no bit); the capped and the
# in-RAM step time (medians over the steps from step 4 on, when the engine's recorded fetch
# schedule drives prefetch and read-ahead; with fewer steps, after the first), the bytes moved
# per step (the last step's) over the measured
# bandwidth, and step / max(RAM step, bytes / bandwidth) against the bar 1.25.
# Both runs train with gradient_clipping 0, so that the capped run's optimizer updates run during
# backward (zero_optimization.offload_optimizer.overlap_step, on by default where exact; its
# log line is printed) and its swap I/O overlaps backward's compute; the fingerprints must still
# be equal.
#
# Usage: bench/bench_infinity.sh [-p DIR] [-l LAYERS] [-d DIM] [-H HEADS] [-s SEQ] [-n STEPS]
#                                [-x RATIO] [-g SUB_GROUP] [-b BUFFERS] [-o STAGING] [-f PREFETCH]
#                                [-r LR]
#                                [-S SIZE] [-z PROGRAM] [-R] [-i] [-O]
#   -p DIR        where the swap files go (the disk to measure; default build/): a temporary
#                 directory is made there and removed at the end, also on failure or Ctrl-C
#   -l, -d, -H, -s  the model: layers (30), dim (1536), heads (12), seq (256); vocab 256 and
#                 micro-batch 1, activation checkpointing on: 0.85B parameters, 12.7 GiB of
#                 model states and a 3.2 GiB cap by default; the swap files (the trainer's
#                 --print-config estimate, ~10-14 GB) and the I/O benchmark's file must fit
#                 the free space of DIR (df), else the script stops before anything runs
#   -n STEPS      optimizer steps of each run (5: two in the steady state)
#   -x RATIO      model states / cap (4)
#   -g SUB_GROUP  zero_optimization.sub_group_size (10000000 elements)
#   -b BUFFERS    zero_optimization.offload_param.buffer_count (5)
#   -o STAGING    zero_optimization.offload_optimizer.buffer_count (4, DeepSpeed's default):
#                 staging buffers of one sub-group's m and v each (80 MB with the default
#                 sub-group); after each step this many sub-groups of the next step are read
#                 while forward and backward run (16 measured no faster, at 0.75 of the cap)
#   -f PREFETCH   zero_optimization.stage3_prefetch_bucket_size (default 50000000 elements: one
#                 block of the default model ahead; a small model needs a smaller one, else the
#                 prefetch gathers all of it)
#   -r LR         the learning rate (1e-5; one warm-up step, then the cosine of
#                 configs/gpt-85m.json): a fresh model this deep and wide, trained on 256 tokens
#                 a step, is thrown off by the first Adam steps of gpt-85m's 3e-4 schedule
#   -S SIZE       the file of `zero bench io` (1G; bytes or with K, M, G)
#   -z PROGRAM    the zero program (build/zero)
#   -R            the capped run only (no `zero bench io`, no run in RAM)
#   -i            pass --ignore-memory-check to the capped run (the script says so)
#   -O            the capped run with offload_optimizer.overlap_step false (the optimizer step
#                 updates every unit after backward: the serial reference)
# Exit status: 0 done (the bars are printed, not enforced), 1 a run failed, 2 bad usage or not
# enough disk, 77 no cgroup v1 memory controller or no right to make a cgroup (one SKIP line).
# Small (a minute; 51M parameters at 4 x the cap):
#   bench/bench_infinity.sh -l 16 -d 512 -H 8 -g 1000000 -b 2 -f 4000000 -S 256M
set -euo pipefail
cd "$(dirname "$0")/.."
base=build layers=30 dim=1536 heads=12 seq=256 steps=5 ratio=4 subgroup=10000000 pbuf=5
obuf=4 ram=1 ignore="" prefetch=50000000 io_size=1G zero=build/zero lr=1e-5 overlap=()
while getopts "p:l:d:H:s:n:x:g:b:o:f:r:S:z:RiOh" o; do
    case $o in
    p) base=$OPTARG ;;
    l) layers=$OPTARG ;;
    d) dim=$OPTARG ;;
    H) heads=$OPTARG ;;
    s) seq=$OPTARG ;;
    n) steps=$OPTARG ;;
    x) ratio=$OPTARG ;;
    g) subgroup=$OPTARG ;;
    b) pbuf=$OPTARG ;;
    o) obuf=$OPTARG ;;
    f) prefetch=$OPTARG ;;
    r) lr=$OPTARG ;;
    S) io_size=$OPTARG ;;
    z) zero=$OPTARG ;;
    R) ram=0 ;;
    i) ignore=--ignore-memory-check ;;
    O) overlap=(--set zero_optimization.offload_optimizer.overlap_step=false) ;;
    *) sed -n '2,/^set /p' "$0" | sed '$d'; exit 2 ;;
    esac
done
[ -x "$zero" ] || { echo "bench_infinity: $zero is missing (bash scripts/setup.sh builds it)" >&2; exit 2; }
[ "$steps" -ge 2 ] || { echo "bench_infinity: -n $steps: expected >= 2 (the first step is the warm-up)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}

cg="" swap="" tmp="" pid="" sampler=""
cleanup() {
    for p in $pid $sampler; do
        if kill -0 "$p" 2>/dev/null; then
            kill -TERM "$p" 2>/dev/null || true
            sleep 1
            kill -KILL "$p" 2>/dev/null || true
        fi
        wait "$p" 2>/dev/null || true
    done
    pid="" sampler=""
    if [ -n "$cg" ] && [ -d "$cg" ]; then
        # a cgroup with no task left can still be busy for a moment while the kernel frees it
        for _ in 1 2 3 4 5; do rmdir "$cg" 2>/dev/null && break; sleep 1; done
        [ -d "$cg" ] && echo "bench_infinity: warning: cannot remove the cgroup $cg" >&2
    fi
    cg=""
    [ -n "$swap" ] && rm -rf "$swap"
    [ -n "$tmp" ] && rm -rf "$tmp"
    swap="" tmp=""
}
trap cleanup EXIT
trap 'echo "bench_infinity: interrupted; removing the cgroup and the swap files" >&2; exit 130' INT
trap 'echo "bench_infinity: terminated; removing the cgroup and the swap files" >&2; exit 143' TERM
tmp=$(mktemp -d)

load() { cut -d' ' -f1-3 /proc/loadavg; }
model=(--config configs/gpt-85m.json --stage 3 --steps "$steps" --no-peak
    --set "model.layers=$layers" --set "model.dim=$dim" --set "model.heads=$heads"
    --set "model.seq=$seq" --set model.vocab=256 --set train_micro_batch_size_per_gpu=1
    --set gradient_accumulation_steps=1 --set model.activation_checkpointing=true
    --set train.eval_interval=0 --set train.eval_batches=1 --set train.samples=0
    --set "zero_optimization.stage3_prefetch_bucket_size=$prefetch"
    --set "optimizer.params.lr=$lr" --set scheduler.params.warmup_num_steps=1
    --set gradient_clipping=0)

# The model's parameters (zero__gpt_param_count in src/model/gpt.c: embeddings, blocks, final
# layernorm), its model states at 16 bytes each, and the cap.
read -r params states cap < <(python3 - "$layers" "$dim" "$seq" "$ratio" <<'EOF'
import sys
L, C, T, r = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
P = 256 * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
S = 16 * P
print(P, S, int(S / r) // 4096 * 4096)
EOF
)
gib() { python3 -c "print(f'{$1 / 2**30:.2f} GiB')"; }
echo "model: $layers layers, dim $dim, $heads heads, seq $seq, vocab 256: $params parameters," \
    "model states $states bytes ($(gib "$states")); cap $cap bytes ($(gib "$cap")): states / cap" \
    "= $(python3 -c "print(f'{$states / $cap:.2f}')")"

# Disk: the swap files (the trainer's own estimate) and the I/O benchmark's file.
mkdir -p "$base"
swap=$(mktemp -d "$base/zero-infinity-bench.XXXXXX")
offload=(--set zero_optimization.offload_param.device=nvme
    --set "zero_optimization.offload_param.nvme_path=$swap"
    --set "zero_optimization.offload_param.buffer_count=$pbuf"
    --set "zero_optimization.offload_optimizer.buffer_count=$obuf"
    --set zero_optimization.offload_optimizer.device=nvme
    --set "zero_optimization.offload_optimizer.nvme_path=$swap"
    --set "zero_optimization.sub_group_size=$subgroup" ${overlap[@]+"${overlap[@]}"})
"$zero" train "${model[@]}" "${offload[@]}" --print-config >"$tmp/config.json" 2>"$tmp/needs.txt" || {
    cat "$tmp/needs.txt" >&2; exit 1; }
read -r swap_need need < <(python3 - "$tmp/needs.txt" "$io_size" <<'EOF'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"([0-9.]+) MiB of swap files", t)
s = int(float(m.group(1)) * 2**20) if m else 0
z = sys.argv[2].upper()
io = int(z[:-1]) << {"K": 10, "M": 20, "G": 30}[z[-1]] if z[-1] in "KMG" else int(z)
print(s, s + io + (64 << 20))
EOF
)
free=$(df --output=avail -B1 "$base" | tail -1)
echo "disk: $base ($(df --output=source,fstype "$base" | tail -1 | tr -s ' ')): $free bytes free;" \
    "the swap files need $swap_need, with the I/O benchmark's file $need"
if [ "$free" -lt "$need" ]; then
    echo "bench_infinity: $base has $free bytes free but this needs $need; free some space," \
        "choose another disk with -p or a smaller model (-l, -d)" >&2
    exit 2
fi
echo "trainer's estimate, $(sed 's/^estimate //' "$tmp/needs.txt")"

# The memory cgroup (v1), as tests/train/test_train_memcheck.c makes it.
if [ ! -e /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
    echo "SKIP: no cgroup v1 memory controller at /sys/fs/cgroup/memory"
    exit 77
fi
cg=/sys/fs/cgroup/memory/zero-infinity-bench-$$
if ! mkdir "$cg" 2>"$tmp/err"; then
    echo "SKIP: cannot make the memory cgroup $cg: $(cat "$tmp/err")"
    cg=""
    exit 77
fi
if ! echo "$cap" >"$cg/memory.limit_in_bytes" 2>"$tmp/err"; then
    echo "SKIP: cannot set the limit of $cg: $(cat "$tmp/err")"
    exit 77
fi
echo "cgroup: $cg, memory.limit_in_bytes $(cat "$cg/memory.limit_in_bytes")"

# Every second: the cgroup's usage split into anonymous memory and page cache, kept at its
# largest (memory.max_usage_in_bytes keeps only the sum).
sample() {
    local max_rss=0 max_cache=0 rss cache
    while [ -e "$cg/memory.stat" ]; do
        rss=$(awk '$1 == "total_rss" {print $2}' "$cg/memory.stat" 2>/dev/null || echo 0)
        cache=$(awk '$1 == "total_cache" {print $2}' "$cg/memory.stat" 2>/dev/null || echo 0)
        [ "${rss:-0}" -gt "$max_rss" ] && max_rss=$rss
        [ "${cache:-0}" -gt "$max_cache" ] && max_cache=$cache
        echo "$max_rss $max_cache" >"$tmp/sampled"
        sleep 1
    done
}

run_capped() {
    echo "load average before the capped run: $(load)"
    sample &
    sampler=$!
    # The child joins the cgroup before exec: sh writes its own pid, then execs zero.
    sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$cg" "$zero" train \
        "${model[@]}" "${offload[@]}" $ignore --metrics "$tmp/capped.jsonl" \
        --json-report "$tmp/capped.json" >"$tmp/capped.log" 2>&1 &
    pid=$!
    rc=0
    wait "$pid" || rc=$?
    pid=""
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    sampler=""
}
[ -n "$ignore" ] && echo "note: the capped run is given --ignore-memory-check (-i)"
run_capped
failcnt=$(cat "$cg/memory.failcnt")
oom_kill=$(awk '$1 == "oom_kill" {print $2}' "$cg/memory.oom_control")
under_oom=$(awk '$1 == "under_oom" {print $2}' "$cg/memory.oom_control")
max_usage=$(cat "$cg/memory.max_usage_in_bytes")
sampled=$(cat "$tmp/sampled" 2>/dev/null || echo "0 0")
rmdir "$cg" 2>/dev/null && cg=""
engine=$(grep -o 'optimizer states on NVMe under [^ ]* ([a-z_]*' "$tmp/capped.log" | sed 's/.*(//' || true)
echo "capped run: exit status $rc; load average after: $(load)"
grep -o 'offload_optimizer.overlap_step [a-z]*[^:]*' "$tmp/capped.log" | head -1 | sed 's/^/capped run: /' || true
if [ "$rc" -ne 0 ]; then
    echo "--- the capped run's output (last 25 lines) ---"
    tail -25 "$tmp/capped.log"
fi
python3 - "$tmp/capped.json" "$tmp/capped.jsonl" "$rc" "$cap" "$states" "$params" \
    "$max_usage" "$failcnt" "${oom_kill:-n/a}" "$under_oom" $sampled <<'EOF' | tee "$tmp/capped.txt"
import json, os, statistics, sys
rep_path, met_path = sys.argv[1], sys.argv[2]
rc, cap, states, params, max_usage = (int(x) for x in sys.argv[3:8])
failcnt, oom_kill, under_oom = sys.argv[8], sys.argv[9], sys.argv[10]
s_rss, s_cache = int(sys.argv[11]), int(sys.argv[12])
G = 2**30
print(f"beyond memory: cap {cap / G:.2f} GiB, model states {states / G:.2f} GiB "
      f"= {states / cap:.2f} x the cap")
print(f"  cgroup peak usage (memory.max_usage_in_bytes, page cache included) {max_usage / G:.3f} GiB"
      f" = {max_usage / cap:.3f} of the cap; sampled each second: anonymous <= {s_rss / G:.3f}"
      f" GiB, page cache <= {s_cache / G:.3f} GiB")
print(f"  limit hits (memory.failcnt) {failcnt}, OOM kills (memory.oom_control oom_kill) "
      f"{oom_kill}, under_oom {under_oom}, exit status {rc}")
if not (os.path.exists(rep_path) and os.path.exists(met_path)):
    print("  no report: the run did not finish")
    sys.exit(0)
rep = json.load(open(rep_path))
r0 = rep["per_rank"][0]
recs = [json.loads(l) for l in open(met_path)]
if rep["params"] != params:
    print(f"  NOTE: the run reports {rep['params']} parameters, the script computed {params}")
print(f"  parameters {rep['params']}; weights fingerprint {rep['weights_fingerprint']}; peak RSS (report) {r0['peak_rss_bytes'] / G:.3f} GiB "
      f"= {r0['peak_rss_bytes'] / cap:.3f} of the cap")
mem = r0["memory_peak_bytes"]
print("  accounted peak by category (MiB): " +
      ", ".join(f"{k} {v / 2**20:.1f}" for k, v in mem.items()) +
      f"; of which gather pool {r0['gather_pool_bytes'] / 2**20:.1f}, gradient pool "
      f"{r0['grad_pool_bytes'] / 2**20:.1f}")
print(f"  swap files {r0['swap_disk_bytes'] / G:.2f} GiB; per step read "
      f"{r0['swap_read_bytes_per_step'] / G:.2f} GiB, written "
      f"{r0['swap_written_bytes_per_step'] / G:.2f} GiB, waited {r0['swap_wait_s_per_step']:.2f} s")
losses = [r["loss"] for r in recs]
falling = all(b < a for a, b in zip(losses, losses[1:]))
print("  losses of the steps (each on its own batch) " + " ".join(f"{x:.4f}" for x in losses) +
      (": falling" if falling else
       (": last < first" if losses[-1] < losses[0] else ": NOT falling")))
v0, v1 = rep["initial_val_loss"], rep["final_val_loss"]
print(f"  validation loss (the same held-out batch) before step 1 {v0:.4f}, after step "
      f"{len(recs)} {v1:.4f}: {'falling' if v1 < v0 else 'NOT falling'}")
# The engine records its stage-3 fetch schedule when two steps in a row fetch alike (step 1
# also evaluates), so prefetch and read-ahead run from step 4 on: the steady state.
steady, which = (recs[3:], "from step 4 on") if len(recs) > 3 else (recs[1:], "after the first")
step = statistics.median(r["step_s"] for r in steady)
print("  step times (s) " + " ".join(f"{r['step_s']:.2f}" for r in recs) +
      f"; median {which} {step:.2f}, of which the optimizer step "
      f"{statistics.median(r['optimizer_step_s'] for r in steady):.2f}")
if "units_in_backward" in recs[-1]:
    print("  units updated during backward (overlap_step) per step: " +
          " ".join(str(r["units_in_backward"]) for r in recs))
ok = rc == 0 and oom_kill in ("0", "n/a") and r0["peak_rss_bytes"] < cap and \
    max_usage <= cap and v1 < v0 and states >= 4 * cap
print(f"  beyond-memory bar (states >= 4 x cap, no OOM kill, exit 0, peak RSS < cap, "
      f"validation loss falling): {'met' if ok else 'NOT met'}")
with open(os.path.join(os.path.dirname(rep_path), "capped.vals"), "w") as f:
    print(step, r0["swap_read_bytes_per_step"], r0["swap_written_bytes_per_step"],
          rep["weights_fingerprint"], file=f)
EOF
[ "$rc" -eq 0 ] || exit 1
[ "$ram" -eq 1 ] || exit 0

# At disk speed: the swap directory's bandwidth with the run's aio settings (the config's aio
# block, defaults unless the config sets it), then the same model in RAM.
read -r bs qd par < <(python3 - "$tmp/config.json" <<'EOF'
import json, sys
a = json.load(open(sys.argv[1])).get("aio", {})
print(a.get("block_size", 1048576), a.get("queue_depth", 8), a.get("intra_op_parallelism", 1))
EOF
)
# The disk's bandwidth moves 10-30% from one measurement to the next: three, and their medians.
echo "load average before zero bench io: $(load)"
: >"$tmp/io.jsonl"
for _ in 1 2 3; do
    "$zero" bench io --path "$swap" --size "$io_size" --block-sizes "$bs" --queue-depths "$qd" \
        --engine "${engine:-io_uring}" --json >>"$tmp/io.jsonl"
done
read -r rd_bw wr_bw rd_all wr_all < <(python3 - "$tmp/io.jsonl" <<'EOF'
import json, statistics, sys
recs = list(map(json.loads, open(sys.argv[1])))
rd = [x["gbps"] for x in recs if x["op"] == "read"]
wr = [x["gbps"] for x in recs if x["op"] == "write"]
print(statistics.median(rd) * 1e9, statistics.median(wr) * 1e9,
      ",".join(f"{x:.2f}" for x in rd), ",".join(f"{x:.2f}" for x in wr))
EOF
)
echo "zero bench io ($engine, block $bs, depth $qd, $io_size file, 3 times): read $rd_all GB/s," \
    "write $wr_all GB/s; medians read $(python3 -c "print(f'{$rd_bw / 1e9:.2f}')") GB/s," \
    "write $(python3 -c "print(f'{$wr_bw / 1e9:.2f}')") GB/s"
rm -rf "${swap:?}"/*

"$zero" train "${model[@]}" --print-config >/dev/null 2>"$tmp/ram_needs.txt"
read -r ram_need avail < <(python3 - "$tmp/ram_needs.txt" <<'EOF'
import re, sys
m = re.search(r"([0-9.]+) MiB of memory", open(sys.argv[1]).read())
avail = [int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemAvailable:")][0]
print(int(float(m.group(1)) * 2**20), avail)
EOF
)
echo "in RAM: the trainer's estimate $(gib "$ram_need") per rank, MemAvailable $(gib "$avail")"
if [ "$ram_need" -gt "$avail" ]; then
    echo "at disk speed: NOT measured: the run in RAM needs $(gib "$ram_need") but only" \
        "$(gib "$avail") is available now"
    exit 0
fi
echo "load average before the run in RAM: $(load)"
rc=0
"$zero" train "${model[@]}" --metrics "$tmp/ram.jsonl" --json-report "$tmp/ram.json" \
    >"$tmp/ram.log" 2>&1 || rc=$?
echo "run in RAM: exit status $rc; load average after: $(load)"
if [ "$rc" -ne 0 ]; then tail -25 "$tmp/ram.log"; exit 1; fi
python3 - "$tmp/ram.jsonl" "$tmp/ram.json" "$tmp/capped.vals" "$rd_bw" "$wr_bw" <<'EOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
rep = json.load(open(sys.argv[2]))
v = open(sys.argv[3]).read().split()
step_cap, rd, wr, fp_cap = float(v[0]), float(v[1]), float(v[2]), v[3]
rd_bw, wr_bw = float(sys.argv[4]), float(sys.argv[5])
steady, which = (recs[3:], "from step 4 on") if len(recs) > 3 else (recs[1:], "after the first")
ram = statistics.median(r["step_s"] for r in steady)
disk = rd / rd_bw + wr / wr_bw
print(f"  in RAM: step times (s) " + " ".join(f"{r['step_s']:.2f}" for r in recs) +
      f"; median {which} {ram:.2f}, of which the optimizer step "
      f"{statistics.median(r['optimizer_step_s'] for r in steady):.2f}; peak RSS "
      f"{rep['per_rank'][0]['peak_rss_bytes'] / 2**30:.2f} GiB")
fp = rep["weights_fingerprint"]
print("  in RAM: losses " + " ".join(f"{r['loss']:.4f}" for r in recs) + f"; weights fingerprint "
      f"{fp}, the capped run's {fp_cap}: {'equal' if fp == fp_cap else 'DIFFERENT'}")
print(f"at disk speed: capped step {step_cap:.2f} s; in RAM {ram:.2f} s; bytes per step "
      f"{rd / 1e9:.2f} GB read / {rd_bw / 1e9:.2f} GB/s + {wr / 1e9:.2f} GB written / "
      f"{wr_bw / 1e9:.2f} GB/s = {disk:.2f} s")
ratio = step_cap / max(ram, disk)
print(f"  step / max(RAM step, bytes / bandwidth) = {step_cap:.2f} / {max(ram, disk):.2f} = "
      f"{ratio:.3f} (bar <= 1.25: {'met' if ratio <= 1.25 else 'NOT met'})")
EOF
