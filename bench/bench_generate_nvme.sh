#!/usr/bin/env bash
# bench_generate_nvme.sh — ZeRO-Inference "beyond memory": a GPT whose fp32 weights are RATIO
# times a memory cap decodes at batch B inside a cgroup v1 memory cgroup limited to that cap,
# its blocks streamed from a file on disk (`zero generate --offload nvme`), beside the disk
# bound. A step reads every block once for the whole batch, so tokens/s <= B x read bandwidth /
# block bytes per step; the read bandwidth is `zero bench io`'s (O_DIRECT, io_uring, 1 MiB
# pieces, queue depth 8: the generator's aio settings), median of three, measured just before.
# The same decode at batch 1 shows what the batch amortises. Printed: the weights, the cap and
# the ratio, the cgroup's peak usage (memory.max_usage_in_bytes, page cache included), limit
# hits (memory.failcnt), OOM kills, the run's peak RSS and resident weights, decode tokens/s,
# the bound and their ratio (issue 19 asks for >= 0.7 at batch 32), the seconds the forward
# waited for reads.
# The model: Hugging Face GPT-2 names in a safetensors file written here (F32; every matrix the
# same N(0, 0.02) pattern of 2^20 values, LayerNorm gains 1, biases 0: the values do not matter
# for speed), vocab 256, context 64.
#
# Usage: bench/bench_generate_nvme.sh [-b BUILD_DIR] [-p DIR] [-l LAYERS] [-d DIM] [-B BATCH]
#                                     [-n NEW_TOKENS] [-x RATIO] [-c BUFFERS] [-t THREADS]
#                                     [-S SIZE]
#   -p DIR      where the model and the weights file go (the disk to measure; default build/):
#               a temporary directory is made there and removed at the end, also on failure
#   -l, -d      layers (40) and dim (1280; heads dim / 64): 787M parameters, 3.15 GB of fp32
#               weights (a block 78.6 MB); the cap must hold the layer buffers, the KV cache
#               (2 x layers x batch x positions x dim x 4 bytes) and the working buffers
#   -B BATCH    sequences decoded side by side (32)
#   -n          new tokens per sequence (12; the prompt is 7 bytes)
#   -x RATIO    weight bytes / cap (4)
#   -c BUFFERS  layer buffers, --buffer-count (4)
#   -S SIZE     the file of `zero bench io` (1G; bytes or with K, M, G)
# Exit status 77 (one SKIP line) without a cgroup v1 memory controller or the right to make a
# cgroup. Needs python3.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build="$here/build" dir="" layers=40 dim=1280 batch=32 new=12 ratio=4 buffers=4 threads=2
io_size=1G
while getopts b:p:l:d:B:n:x:c:t:S:h opt; do
    case $opt in
    b) build=$(cd "$OPTARG" && pwd) ;;
    p) dir=$OPTARG ;;
    l) layers=$OPTARG ;;
    d) dim=$OPTARG ;;
    B) batch=$OPTARG ;;
    n) new=$OPTARG ;;
    x) ratio=$OPTARG ;;
    c) buffers=$OPTARG ;;
    t) threads=$OPTARG ;;
    S) io_size=$OPTARG ;;
    *) sed -n '2,31p' "$0"; exit 2 ;;
    esac
done
zero="$build/zero"
[ -x "$zero" ] || { echo "bench_generate_nvme: no $zero (build first, or pass -b)" >&2; exit 2; }
[ -n "$dir" ] || dir="$build"

cg="" work="" pid=""
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    if [ -n "$cg" ] && [ -d "$cg" ]; then
        # a cgroup with no task left can still be busy for a moment while the kernel frees it
        for _ in 1 2 3 4 5; do rmdir "$cg" 2>/dev/null && break; sleep 1; done
        [ -d "$cg" ] && echo "bench_generate_nvme: warning: cannot remove the cgroup $cg" >&2
    fi
    [ -n "$work" ] && rm -rf "$work"
    cg="" work="" pid=""
}
trap cleanup EXIT
trap 'echo "bench_generate_nvme: interrupted; removing the cgroup and the files" >&2; exit 130' INT
trap 'echo "bench_generate_nvme: terminated; removing the cgroup and the files" >&2; exit 143' TERM

work=$(mktemp -d "$dir/bench_generate_nvme.XXXXXX")
mkdir "$work/nvme"
load() { cut -d' ' -f1 /proc/loadavg; }

# The model, written tensor by tensor (never whole in memory).
python3 - "$work/model.safetensors" "$layers" "$dim" <<'EOF'
import json, random, struct, sys
path, L, C = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
V, T = 256, 64
random.seed(1)
pattern = struct.pack(f"<{1 << 20}f", *(random.gauss(0, 0.02) for _ in range(1 << 20)))
shapes = {"wte.weight": [V, C], "wpe.weight": [T, C]}
for l in range(L):
    p = f"h.{l}."
    shapes.update({p + "ln_1.weight": [C], p + "ln_1.bias": [C],
                   p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
                   p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
                   p + "ln_2.weight": [C], p + "ln_2.bias": [C],
                   p + "mlp.c_fc.weight": [C, 4 * C], p + "mlp.c_fc.bias": [4 * C],
                   p + "mlp.c_proj.weight": [4 * C, C], p + "mlp.c_proj.bias": [C]})
shapes.update({"ln_f.weight": [C], "ln_f.bias": [C]})
hdr, off = {"__metadata__": {"zero_model": json.dumps({"heads": C // 64})}}, 0
for name, shape in shapes.items():
    n = 1
    for s in shape:
        n *= s
    hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + 4 * n]}
    off += 4 * n
text = json.dumps(hdr).encode()
text += b" " * (-len(text) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for name, shape in shapes.items():
        n = hdr[name]["data_offsets"][1] // 4 - hdr[name]["data_offsets"][0] // 4
        if len(shape) == 2:
            for i in range(0, n, 1 << 20):
                f.write(pattern[:4 * min(1 << 20, n - i)])
        else:
            f.write(struct.pack("<f", 1.0 if "ln" in name and "weight" in name else 0.0) * n)
EOF
weights=$(stat -c %s "$work/model.safetensors")
cap=$(python3 -c "print(int($weights / $ratio) // 4096 * 4096)")
echo "model: $layers layers x dim $dim, vocab 256, $(python3 -c "print(f'{$weights / 1e9:.2f}')") GB" \
    "of fp32 weights; cap $(python3 -c "print(f'{$cap / 2**20:.0f}')") MiB (weights / $ratio)"

# The disk's read bandwidth with the generator's aio settings: three times, the median.
echo "load average before zero bench io: $(load)"
: >"$work/io.jsonl"
for _ in 1 2 3; do
    "$zero" bench io --path "$work/nvme" --size "$io_size" --block-sizes 1M --queue-depths 8 \
        --engine io_uring --json >>"$work/io.jsonl"
done
rd_bw=$(python3 - "$work/io.jsonl" <<'EOF'
import json, statistics, sys
print(statistics.median(x["gbps"] for x in map(json.loads, open(sys.argv[1])) if x.get("op") == "read") * 1e9)
EOF
)

# The memory cgroup (v1), as bench_infinity.sh makes it.
if [ ! -e /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
    echo "SKIP: no cgroup v1 memory controller at /sys/fs/cgroup/memory"
    exit 77
fi
cg=/sys/fs/cgroup/memory/zero-generate-bench-$$
if ! mkdir "$cg" 2>"$work/err"; then
    echo "SKIP: cannot make the memory cgroup $cg: $(cat "$work/err")"
    cg=""
    exit 77
fi
if ! echo "$cap" >"$cg/memory.limit_in_bytes" 2>"$work/err"; then
    echo "SKIP: cannot set the limit of $cg: $(cat "$work/err")"
    exit 77
fi

echo "cgroup: $cg, memory.limit_in_bytes $(cat "$cg/memory.limit_in_bytes")"

# Batch B, then batch 1, in the cgroup (a fresh peak for each).
for b in "$batch" 1; do
    echo 0 >"$cg/memory.max_usage_in_bytes" 2>/dev/null || true
    echo "load average before batch $b: $(load)"
    # The child joins the cgroup before exec: sh writes its own pid, then execs zero.
    sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$cg" "$zero" generate \
        --model "$work/model.safetensors" --prompt "ROMEO: " --batch "$b" \
        --max-new-tokens "$new" --greedy --offload nvme --nvme-path "$work/nvme" \
        --buffer-count "$buffers" --threads "$threads" --json >"$work/gen.$b.json" \
        2>"$work/gen.$b.log" &
    pid=$!
    rc=0
    wait "$pid" || rc=$?
    pid=""
    echo "batch $b: exit status $rc; cgroup peak usage $(($(cat "$cg/memory.max_usage_in_bytes") / 1048576)) MiB," \
        "limit hits $(cat "$cg/memory.failcnt"), $(grep "^oom_kill " "$cg/memory.oom_control" || echo "oom_kill ?")"
    [ "$rc" = 0 ] || { cat "$work/gen.$b.log" >&2; exit 1; }
done

python3 - "$work" "$batch" "$rd_bw" "$cap" "$weights" <<'EOF'
import json, sys
work, batch, bw, cap, weights = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
print(f"read bandwidth (zero bench io, io_uring, 1 MiB pieces, depth 8, median of 3): {bw / 1e9:.2f} GB/s")
print("| batch | weights GB | cap MiB | weights / cap | streamed per step GB | bound tokens/s | "
      "decode tokens/s | of bound | waited for reads s | peak RSS MiB | resident weights MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for b in (batch, 1):
    g = json.load(open(f"{work}/gen.{b}.json"))
    C, L = g["dim"], g["layers"]
    # a block as the generator stores it (fp32 tensors, each rounded up to 64 bytes), its file
    # region rounded up to 4 KiB: a step reads L regions
    sizes = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
    block = sum((4 * n + 63) // 64 * 64 for n in sizes)
    streamed = L * ((block + 4095) // 4096 * 4096)
    bound = b * bw / streamed
    tps = g["decode_tokens_per_s"]
    print(f"| {b} | {weights / 1e9:.3g} | {cap / 2**20:.0f} | {weights / cap:.1f} | "
          f"{streamed / 1e9:.3g} | {bound:.1f} | {tps:.1f} | {tps / bound:.2f} | "
          f"{g['io_wait_s']:.2f} | {g['peak_rss_bytes'] / 2**20:.0f} | "
          f"{g['resident_weight_bytes'] / 2**20:.0f} |")
print(f"\n{g['layers']} layers x dim {g['dim']}, {g['params']} parameters, prompt "
      f"{g['prompt_tokens']} tokens, {g['new_tokens']} new (greedy), {g['threads']} threads, "
      f"{g['buffer_count']} layer buffers, {g.get('io_engine')}")
EOF
