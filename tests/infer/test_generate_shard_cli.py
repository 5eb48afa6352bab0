#!/usr/bin/env python3
"""`zero generate --ranks N` end to end: usage: test_generate_shard_cli.py ZERO MPIRUN|- WORK_DIR

A tiny model (8 layers: more than the two layer buffers and the 1/N slices) trained for 40 steps
and saved; then greedy and sampled (top-k, seed) generation of
its checkpoint on one rank, on 2 and 3 thread ranks (--ranks) and on 2 MPI ranks (mpirun -np 2;
skipped with MPIRUN "-"):
- every run gives the same tokens as the one-rank run (each rank holds 1/N of the blocks and
  all-gathers them, so the logits are bitwise one rank's);
- --json reports the ranks, bytes gathered > 0, and on rank 0 fewer resident weight bytes than
  the one-rank run's (which holds them all), the same weight bytes;
- bad input: --ranks with --offload nvme exits 1 naming both; --ranks 3 under mpirun -np 2 exits
  2 naming both counts; --ranks 0 exits 2.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, exit_code  # noqa: E402

ZERO, MPIRUN, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(*args, cmd="generate", launch=()):
    p = subprocess.run([*launch, ZERO, cmd, *args], capture_output=True, timeout=300, env=ENV)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


SAVE = os.path.join(WORK, "ckpt")
rc, _, err = run("-q", "--no-peak", "--steps", "40", "--set", "train.samples=0",
                 "--set", "model.layers=8", "--set", "model.dim=32", "--set", "model.heads=2",
                 "--set", "model.seq=48", "--save-dir", SAVE, cmd="train")
check(rc == 0, f"train: {err}")

SETTINGS = {"greedy": ["--greedy"], "top-k 5, seed 7": ["--top-k", "5", "--seed", "7"]}
MPI = [MPIRUN, "--oversubscribe", "-np", "2"] if MPIRUN != "-" else None
if MPI and "ASAN_OPTIONS" in os.environ:  # the sanitizer's settings reach the MPI ranks
    MPI += ["-x", "ASAN_OPTIONS"]
for name, flags in SETTINGS.items():
    base = ["--json", "--threads", "1", "--model", SAVE, "--prompt", "ROMEO:",
            "--max-new-tokens", "24", *flags]
    rc, out, err = run(*base)
    check(rc == 0, f"{name}, one rank: {err}")
    one = json.loads(out) if rc == 0 else None
    runs = {f"--ranks {n}": (["--ranks", str(n)], ()) for n in (2, 3)}
    if MPI:
        runs["mpirun -np 2"] = ([], MPI)
    for what, (extra, launch) in runs.items():
        rc, out, err = run(*base, *extra, launch=launch)
        check(rc == 0, f"{name}, {what}: exit {rc}: {err}")
        if rc or not one:
            continue
        d = json.loads(out)  # rank 0 alone prints
        n = 2 if "2" in what else 3
        check(d["tokens"] == one["tokens"] and d["outputs"] == one["outputs"],
              f"{name}, {what}: tokens {d['tokens']} differ from one rank's {one['tokens']}")
        check(d["ranks"] == n and d["gather_bytes"] > 0 and one["ranks"] == 1
              and one["gather_bytes"] == 0, f"{name}, {what}: ranks {d['ranks']}, "
              f"gathered {d['gather_bytes']}")
        check(d["weight_bytes"] == one["weight_bytes"]
              and d["resident_weight_bytes"] < one["resident_weight_bytes"]
              == one["weight_bytes"], f"{name}, {what}: resident {d['resident_weight_bytes']} "
              f"of {d['weight_bytes']}, one rank {one['resident_weight_bytes']}")
        print(f"{name}, {what}: the one-rank tokens; {d['resident_weight_bytes']} of "
              f"{d['weight_bytes']} weight bytes resident on rank 0")

# bad input
rc, _, err = run("--model", SAVE, "--prompt", "x", "--ranks", "2", "--offload", "nvme",
                 "--nvme-path", WORK)
check(rc == 1 and "nvme_path" in err and "sharded over 2 ranks" in err,
      f"--ranks 2 with --offload nvme: exit {rc}: {err}")
rc, _, err = run("--model", SAVE, "--prompt", "x", "--ranks", "0")
check(rc == 2 and "--ranks" in err, f"--ranks 0: exit {rc}: {err}")
if MPI:
    rc, _, err = run("--model", SAVE, "--prompt", "x", "--ranks", "3", launch=MPI)
    check(rc == 2 and "--ranks 3" in err and "2 ranks" in err,
          f"--ranks 3 under mpirun -np 2: exit {rc}: {err}")
shutil.rmtree(WORK, ignore_errors=True)
sys.exit(exit_code())
