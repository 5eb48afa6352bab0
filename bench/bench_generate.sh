#!/bin/sh
# bench_generate.sh — batch-1 decoding of `zero generate` on the GPT-2 124M shape (configs/
# gpt2-124m.json with a context of 1024: 12 layers, 12 heads, dim 768, vocab 50257, 124.4M
# parameters) with random weights (`zero train --steps 0`: the initialisation, saved), beside
# the memory-bandwidth bound. A step reads every weight once and the cached keys and values of
# the positions before it, so tokens/s <= read bandwidth / (weight bytes + KV bytes read per
# step). The bandwidth is bench_membw's (read-only sum over 512 MiB, median of 7 passes, on the
# same threads), measured just before and just after each run and averaged (the host's memory
# bandwidth moved from 33 to 78 GB/s within minutes here). Each round runs every dtype (--dtype fp32, bf16:
# half the weight bytes, so twice the bound; int8 and int4 are --weights int8 / int4 with fp32
# activations, groups of 64: about 1.06 and 0.56 bytes per weight). Checks nothing (issue 19
# asks for >= 0.7 of the bound); prints a Markdown table with the load average before each
# round.
#
# Usage: bench/bench_generate.sh [-b BUILD_DIR] [-r RUNS] [-t THREADS] [-n NEW_TOKENS]
#                                [-m MODEL_DIR] [-d "fp32 bf16 int8"]
# -m reuses a checkpoint of that shape (made there when missing; about 1.5 GB with Adam's states).
# Needs python3 (JSON, medians) and a build with the bench programs (ZERO_BUILD_BENCH, default).
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
build="$here/build"
runs=3
threads=2
new=64
model=""
dtypes="fp32 bf16 int8"
while getopts b:r:t:n:m:d:h opt; do
    case $opt in
    b) build=$(cd "$OPTARG" && pwd) ;;
    r) runs=$OPTARG ;;
    t) threads=$OPTARG ;;
    n) new=$OPTARG ;;
    m) model=$OPTARG ;;
    d) dtypes=$OPTARG ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
    esac
done
zero="$build/zero"
membw="$build/bench/bench_membw"
for f in "$zero" "$membw"; do
    [ -x "$f" ] || { echo "bench_generate: no $f (build first, or pass -b BUILD_DIR)" >&2; exit 2; }
done
out=$(mktemp -d "${TMPDIR:-/tmp}/bench_generate.XXXXXX")
trap 'rm -rf "$out"' EXIT
[ -n "$model" ] || model="$out/gpt2-124m"
load() { cut -d' ' -f1 /proc/loadavg; }

if [ ! -e "$model/latest" ]; then
    t0=$(date +%s)
    "$zero" train --config "$here/configs/gpt2-124m.json" -q --no-peak --steps 0 --ranks 1 \
        --set model.seq=1024 --set train_micro_batch_size_per_gpu=1 --save-dir "$model" \
        >"$out/train.log" 2>&1 || { cat "$out/train.log" >&2; exit 1; }
    echo "random GPT-2 124M weights saved in $(($(date +%s) - t0)) s: $model"
fi

for r in $(seq "$runs"); do
    load >"$out/load.$r"
    for d in $dtypes; do
        case $d in
        int8 | int4) how="--weights $d" ;;
        *) how="--dtype $d" ;;
        esac
        # the bandwidth just before and just after each run: the host's moves within a minute
        "$membw" --threads "$threads" | tail -1 >"$out/bw.$d.$r.a.json"
        # shellcheck disable=SC2086 # $how is two words
        "$zero" generate --model "$model" --prompt "Hello, world." --max-new-tokens "$new" \
            --greedy $how --json --threads "$threads" >"$out/gen.$d.$r.json" \
            2>"$out/gen.$d.$r.log" || { cat "$out/gen.$d.$r.log" >&2; exit 1; }
        "$membw" --threads "$threads" | tail -1 >"$out/bw.$d.$r.b.json"
    done
done

python3 - "$out" "$runs" "$threads" $dtypes <<'PY'
import json, statistics, sys
out, runs, threads, dtypes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
print("| dtype | round | load avg | read GB/s | weights MB | bound tokens/s | decode tokens/s | "
      "of bound | TTFT ms | peak RSS MiB | threads wait |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for d in dtypes:
    rows = []
    for r in range(1, runs + 1):
        bw = statistics.mean(json.load(open(f"{out}/bw.{d}.{r}.{w}.json"))["median_gb_s"]
                             for w in "ab")
        g = json.load(open(f"{out}/gen.{d}.{r}.json"))
        # KV bytes a step reads, averaged over the decode steps: 2 L C x element bytes per
        # position held
        per_pos = 2 * g["layers"] * g["dim"] * (2 if d == "bf16" else 4)
        kv = per_pos * (g["prompt_tokens"] + g["new_tokens"] / 2)
        bound = bw * 1e9 / (g["weight_bytes"] + kv)
        load = open(f"{out}/load.{r}").read().strip()
        rows.append((g["decode_tokens_per_s"], bound, bw, g, load))
        print(f"| {d} | {r} | {load} | {bw:.1f} | {g['weight_bytes'] / 1e6:.0f} | {bound:.1f} | "
              f"{rows[-1][0]:.1f} | {rows[-1][0] / bound:.2f} | {g['ttft_s'] * 1e3:.0f} | "
              f"{g['peak_rss_bytes'] / 2**20:.0f} | {g.get('openmp_wait', '?')} |")
    med = lambda k: statistics.median(x[k] for x in rows)
    print(f"| {d} | median | | {med(2):.1f} | | {med(1):.1f} | {med(0):.1f} | "
          f"{statistics.median(x[0] / x[1] for x in rows):.2f} | | | |")
g = json.load(open(f"{out}/gen.{dtypes[0]}.1.json"))
print(f"\nGPT-2 124M shape, {g['params']} parameters, batch 1, {threads} threads, prompt "
      f"{g['prompt_tokens']} tokens, {g['new_tokens']} new (greedy)")
PY
