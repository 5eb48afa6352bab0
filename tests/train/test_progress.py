#!/usr/bin/env python3
"""`zero train`'s progress output on a terminal: usage: test_progress.py ZERO_BINARY WORK_DIR

On a pseudo-terminal the progress bar is redrawn in place (carriage return and erase-line); under
a launcher (PMIX_RANK / OMPI_COMM_WORLD_SIZE set, as mpirun and srun set them; the run itself on
the threads backend) the same terminal gets plain lines, one per steps_per_print, with no control
codes. Every progress line gives the step's own loss and its running average, and the step's own
losses are those of the --metrics log.
"""
import json
import os
import pty
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, exit_code  # noqa: E402

ZERO, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)


CONFIG = os.path.join(WORK, "tiny.json")
json.dump({"model": {"layers": 1, "heads": 2, "dim": 32, "seq": 32},
           "data": {"builtin_bytes": 65536}, "train_micro_batch_size_per_gpu": 4,
           "steps_per_print": 2,
           "train": {"steps": 6, "samples": 0, "eval_interval": 0, "eval_batches": 1,
                     "ranks": 2, "backend": "threads"}}, open(CONFIG, "w"))


def on_pty(env_extra, metrics):
    """Run on a pseudo-terminal; its whole output."""
    master, slave = pty.openpty()
    env = dict(os.environ, **env_extra)
    p = subprocess.Popen([ZERO, "train", "--config", CONFIG, "--no-peak", "--metrics", metrics],
                         stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    check(p.wait(timeout=120) == 0, "exit status %s" % p.returncode)
    return out.decode(errors="replace")


def step_losses(metrics):
    return {r["step"]: r["loss"] for r in map(json.loads, open(metrics))}


tty_metrics = os.path.join(WORK, "tty.jsonl")
tty = on_pty({}, tty_metrics)
check("\r\033[K[" in tty, "terminal: no redrawn bar in %r" % tty[-500:])

mpi_metrics = os.path.join(WORK, "launcher.jsonl")
plain = on_pty({"PMIX_RANK": "0"}, mpi_metrics)
check("\033[" not in plain and "\r\n" in plain and "\r\033" not in plain,
      "under a launcher: control codes in %r" % plain[-500:])
lines = re.findall(r"step +(\d+)/6 \| loss ([0-9.]+) \(avg ([0-9.]+)\)", plain)
check([int(s) for s, _, _ in lines] == [1, 2, 4, 6],
      "under a launcher: progress lines at steps %s (expected 1, 2, 4, 6: the first, every "
      "steps_per_print, the last)" % [s for s, _, _ in lines])
losses = step_losses(mpi_metrics)
for s, loss, avg in lines:
    check(abs(float(loss) - losses[int(s)]) <= 5e-5,
          "step %s: loss %s on the line, %r in the metrics log" % (s, loss, losses[int(s)]))
if lines:
    check(lines[0][1] == lines[0][2], "step 1: the average %s is not the loss %s" % (
        lines[0][2], lines[0][1]))
sys.exit(exit_code())
