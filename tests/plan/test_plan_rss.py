#!/usr/bin/env python3
"""`zero plan`'s predicted peak RSS against measured runs: usage: test_plan_rss.py ZERO WORK_DIR

Twelve small runs of `zero train` (a 10.8M-parameter GPT: 6 layers, dim 384, seq 64, micro-batch
2), stages 0-3 x ranks {1, 2, 4} x fp32 / bf16, four of them with offload_optimizer nvme (swap
files under WORK_DIR). Each run is its own process of thread ranks, so its peak RSS (the report's
peak_rss_bytes, getrusage's maximum resident set) is the whole process's; the prediction is the
row of `zero plan --json --backend threads --world R` with the run's stage, offload, micro-batch
and checkpointing, its peak_rss_bytes_per_process (R x the per-rank RSS, the program and data
counted once). Per rank both are that divided by R: the ratio is the same. The runs train 4
steps: stage 3 prefetches from the third step on (two agreeing steps first), so its gather pool
reaches its steady size.

Must hold: |predicted - measured| <= 10% of measured for every case.
"""
import json
import os
import subprocess
import sys
import time

ZERO, WORK = sys.argv[1], sys.argv[2]
SWAP = os.path.join(WORK, "rss-swap")
os.makedirs(SWAP, exist_ok=True)
MODEL = ["--set", "model.layers=6", "--set", "model.dim=384", "--set", "model.heads=6",
         "--set", "model.seq=64", "--set", "model.vocab=256", "--set", "train.threads=1",
         "--set", "train_micro_batch_size_per_gpu=2", "--set", "gradient_accumulation_steps=1",
         "--set", "zero_optimization.offload_optimizer.nvme_path=" + SWAP]
# (stage, ranks, dtype, offload_optimizer nvme)
CASES = [(0, 1, "fp32", 0), (1, 2, "fp32", 0), (2, 4, "fp32", 0), (3, 4, "fp32", 0),
         (0, 2, "bf16", 0), (1, 4, "bf16", 0), (2, 1, "bf16", 0), (3, 2, "bf16", 0),
         (1, 1, "fp32", 1), (2, 2, "bf16", 1), (3, 4, "fp32", 1), (3, 1, "bf16", 1)]
TOLERANCE = 0.10
failures = 0
print(f"{'stage':>5} {'ranks':>5} {'dtype':>5} {'offload':>9} {'predicted MiB':>14} "
      f"{'measured MiB':>13} {'error':>7}")
for stage, ranks, dtype, off in CASES:
    common = MODEL + ["--stage", str(stage), "--dtype", dtype]
    if off:
        common += ["--set", "zero_optimization.offload_optimizer.device=nvme"]
    p = subprocess.run([ZERO, "plan", "--json", "--backend", "threads", "--world", str(ranks),
                        "--calibration", os.path.join(WORK, "none.json")] + common,
                       capture_output=True, text=True, timeout=60)
    if p.returncode:
        print("FAIL: zero plan:", p.stderr)
        failures += 1
        continue
    want = "optimizer" if off else "none"
    rows = [r for r in json.loads(p.stdout)["rows"]
            if r["stage"] == stage and r["offload"] == want and not r["zeropp"]
            and not r["activation_checkpointing"] and r["micro_batch"] == 2]
    if len(rows) != 1:
        print(f"FAIL: {len(rows)} matching rows")
        failures += 1
        continue
    predicted = rows[0]["peak_rss_bytes_per_process"]
    report = os.path.join(WORK, "rss-report.json")
    t0 = time.time()
    p = subprocess.run([ZERO, "train", "-q", "--no-peak", "--steps", "4", "--ranks", str(ranks),
                        "--set", "train.samples=0", "--set", "train.eval_interval=0",
                        "--json-report", report] + common, capture_output=True, text=True,
                       timeout=120)
    if p.returncode:
        print("FAIL: zero train:", p.stderr)
        failures += 1
        continue
    measured = json.load(open(report))["per_rank"][0]["peak_rss_bytes"]
    err = (predicted - measured) / measured
    ok = abs(err) <= TOLERANCE
    failures += not ok
    print(f"{stage:>5} {ranks:>5} {dtype:>5} {'nvme' if off else 'none':>9} "
          f"{predicted / 2**20:>14.1f} {measured / 2**20:>13.1f} {100 * err:>+6.1f}%"
          f"{'' if ok else '  FAIL (tolerance 10%)'}  ({time.time() - t0:.1f} s)", flush=True)
print("FAILED" if failures else "OK", failures)
sys.exit(1 if failures else 0)
