#!/usr/bin/env python3
"""`zero plan` end to end: usage: test_plan_cli.py ZERO_BINARY WORK_DIR

- --json parses; every row has its categories summing to its per-rank RSS, a known offload, a
  micro-batch times accumulation equal to the per-rank batch; best and smallest index rows;
- the text output names the fastest configuration and prints the time model's assumptions;
- without a calibration file: one warning line naming the path, the defaults used;
- --calibrate writes a file (small disk test) whose figures are positive and which a later plan
  reads (figures.measured); a calibration file with a bad figure fails naming the key;
- --params alone picks GPT-3's shape (175e9 -> 96 layers of dim 12288);
- ZeRO-Infinity's 1T and 10T GPTs over 512 / 1024 ranks print with no nan or inf and pick a
  configuration;
- bad input exits 1 (or 2 for bad flags) with one sentence naming what to change, never a crash:
  heads that do not divide dim, a world size that does not divide the batch, an empty batch,
  ranks per node that do not divide the world, a model that fits nowhere, a bad flag value, an
  unknown flag.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, exit_code  # noqa: E402

ZERO, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
NO_CAL = os.path.join(WORK, "no-such-calibration.json")


def run(*args):
    p = subprocess.run([ZERO, "plan", *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


SMALL = ["--layers", "2", "--dim", "64", "--heads", "2", "--seq", "32", "--vocab", "256"]

# --json
rc, out, err = run("--json", "--world", "4", "--micro-batch", "4", "--calibration", NO_CAL, *SMALL)
check(rc == 0, f"--json: exit {rc}: {err}")
d = json.loads(out)
check(d["machine"]["world"] == 4 and d["global_batch"] == 16, f"machine / batch: {d['machine']}")
check(not d["figures"]["measured"], "figures without a file: the defaults")
check(len(d["assumptions"]) >= 5, "assumptions listed")
rows = d["rows"]
# stages 0-2 x offload {none, optimizer} + stage 3 x {none, optimizer, optimizer+params} x
# ZeRO++ {off, on}; x checkpointing {off, on}; x micro-batches {1, 2, 4}
check(len(rows) == (3 * 2 + 3 * 2) * 2 * 3, f"{len(rows)} rows")
for r in rows:
    ram = r["ram_bytes_per_rank"]
    check(sum(ram.values()) == r["peak_rss_bytes_per_rank"], f"categories sum: {r}")
    check(r["offload"] in ("none", "optimizer", "optimizer+params"), r["offload"])
    check(r["micro_batch"] * r["gradient_accumulation_steps"] == 4, "micro x accumulation")
    check((r["disk_bytes_per_rank"]["optimizer_states"] > 0) == (r["offload"] != "none"),
          f"disk iff offload: {r}")
    check(r["wire_inter_node_bytes_per_step"] == 0, "one node: nothing between nodes")
    check(r["seconds_per_step"]["step"] > 0, "positive step time")
check(0 <= d["best"] < len(rows) and 0 <= d["smallest"] < len(rows), "best and smallest")
check(min(r["ram_bytes_per_node"] for r in rows) == rows[d["smallest"]]["ram_bytes_per_node"],
      "smallest")

# text, and the missing calibration's warning
rc, out, err = run("--world", "2", "--calibration", NO_CAL, *SMALL)
check(rc == 0 and "fastest that fits: stage" in out and "time model:" in out, f"text: {out}")
check(err.count("warning: no calibration file at " + NO_CAL) == 1, f"warning: {err}")

# --calibrate, then a plan that reads it
cal = os.path.join(WORK, "calibration.json")
rc, out, err = run("--calibrate", "--calibration", cal, "--calibrate-dir", WORK,
                   "--calibrate-disk", "16", "--threads", "1")
check(rc == 0 and os.path.exists(cal), f"--calibrate: exit {rc}: {err}")
if os.path.exists(cal):
    c = json.load(open(cal))
    for k in ("gemm_fp32_flops", "gemm_bf16_flops", "memory_bytes_per_s",
              "disk_read_bytes_per_s", "disk_write_bytes_per_s"):
        check(c.get(k, 0) > 0, f"calibration {k}: {c.get(k)}")
    rc, out, err = run("--json", "--calibration", cal, *SMALL)
    check(rc == 0 and json.loads(out)["figures"]["measured"] and "warning" not in err,
          f"plan with the calibration: {err}")
bad_cal = os.path.join(WORK, "bad-calibration.json")
with open(bad_cal, "w") as f:
    f.write('{"gemm_fp32_flops": -1}\n')
rc, out, err = run("--calibration", bad_cal, *SMALL)
check(rc == 1 and "gemm_fp32_flops is not a positive number" in err, f"bad calibration: {err}")

# --params alone
rc, out, err = run("--params", "175e9", "--world", "1024", "--ranks-per-node", "8", "--ram",
                   "1024", "--calibration", NO_CAL)
check("taken as 96 layers of dim 12288 with 96 heads" in out, f"--params: {out[:300]}")

# 1T and 10T (ZeRO-Infinity's shapes)
for layers, dim, world, per_node in ((128, 25600, 512, 16), (195, 65536, 1024, 1)):
    args = ["--layers", str(layers), "--dim", str(dim), "--heads", str(dim // 128), "--seq",
            "1024", "--vocab", "50257", "--dtype", "bf16", "--world", str(world),
            "--ranks-per-node", str(per_node), "--ram", "1536", "--disk", "27940", "--batch",
            str(world), "--calibration", NO_CAL]
    rc, out, err = run(*args)
    low = out.lower()
    check(rc == 0 and "fastest that fits: stage" in out, f"{layers}x{dim}: exit {rc}: {err}")
    check("nan" not in low and "inf " not in low and "-0.0" not in out, f"{layers}x{dim}: {out}")
    rc, out, err = run("--json", *args)
    d = json.loads(out)
    check(d["best"] >= 0 and d["model"]["params"] > 1e12 * (1 if layers == 128 else 10),
          f"{layers}x{dim} JSON: best {d['best']} params {d['model']['params']}")

# bad input: one sentence naming what to change, exit 1; bad flags exit 2
cases = [
    (["--heads", "3", "--dim", "64"], 1, "model.heads = 3 does not divide model.dim = 64"),
    (["--world", "3", "--batch", "32"], 1,
     "--world 3 does not divide train_batch_size = 32: choose a world size that divides 32"),
    (["--world", "4", "--ranks-per-node", "3"], 1, "--ranks-per-node 3 does not divide --world 4"),
    (["--params", "175e9", "--world", "8", "--ram", "1", "--disk", "1"], 1,
     "no way to run this model fits: the smallest"),
    (["--batch", "0"], 1, "train_batch_size = 0 is invalid: set it (or --batch) to 1 or more"),
    (["--world", "abc"], 2, "--world 'abc' is invalid (expected a positive number)"),
    (["--world", "2.5"], 2, "--world 2.5 is invalid (expected a whole number"),
    (["--frobnicate"], 2, "unknown option '--frobnicate'"),
    (["--backend", "nccl"], 2, "--backend 'nccl' is invalid (expected threads or mpi)"),
]
for args, want_rc, want in cases:
    rc, out, err = run(*args, "--calibration", NO_CAL)
    check(rc == want_rc and want in err, f"{args}: exit {rc} (expected {want_rc}), stderr: {err}")
    check("Traceback" not in err and rc >= 0, f"{args}: crashed: {rc}")

sys.exit(exit_code())
