#!/usr/bin/env python3
"""A hung MPI rank must end the whole job, not hang it forever.

Usage: test_train_hang.py ZERO MPIEXEC

Runs `mpirun -np 2 zero train ... --timeout 5`, waits until training has started, then stops
rank 1 with SIGSTOP (a hung process: alive, holding its sockets, never arriving). Rank 0's next
collective times out; the job must then be aborted: mpirun ends within the timeout + 15 s with a
non-zero status, and the output names rank 1 as the rank that did not arrive. Before the fix the
error path called MPI_Finalize, which waited for the stopped rank forever.

Also checked: `--timeout` and ZERO_TIMEOUT are validated (a bad value fails naming it), and the
flag wins over the environment (`--print-config` shows the effective value).

The stopped process and mpirun are always killed at the end, also when a check fails.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import proc_checks
from proc_checks import check, rank_pids, read

TIMEOUT_S = 5
SLACK_S = 15


def test_hang(zero, mpiexec, tmp):
    out_path = os.path.join(tmp, "out.txt")
    cmd = [mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", "2", zero, "train",
           "--steps", "1000000", "--no-peak", "--timeout", str(TIMEOUT_S),
           "--set", "model.layers=1", "--set", "model.dim=32", "--set", "model.seq=32",
           "--set", "train.samples=0", "--set", "train.eval_interval=0",
           "--set", "data.builtin_bytes=65536", "--set", "steps_per_print=1000"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("ZERO_TIMEOUT", None)
    out = open(out_path, "wb")
    job = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                           start_new_session=True)
    stopped = []
    try:
        # Training has started once a progress line with a loss is out.
        deadline = time.time() + 60
        while time.time() < deadline and job.poll() is None:
            if "| loss" in read(out_path):
                break
            time.sleep(0.1)
        check("| loss" in read(out_path) and job.poll() is None, "training started under mpirun")
        if job.poll() is not None:
            return
        pids = rank_pids(job.pid, 1)
        check(len(pids) == 1, f"found the process of rank 1 ({pids})")
        if len(pids) != 1:
            return
        os.kill(pids[0], signal.SIGSTOP)
        stopped = pids
        t0 = time.time()
        try:
            status = job.wait(timeout=TIMEOUT_S + SLACK_S)
        except subprocess.TimeoutExpired:
            status = None
        elapsed = time.time() - t0
        text = read(out_path)
        print(text[-3000:])
        check(status is not None,
              f"mpirun ended {elapsed:.1f} s after rank 1 stopped "
              f"(limit: timeout {TIMEOUT_S} s + {SLACK_S} s)")
        check(status is not None and status != 0, f"mpirun's exit status is non-zero ({status})")
        check("rank(s) 1 did not arrive" in text or "with rank(s) 1 did not complete" in text,
              "the output names rank 1 as the one that did not arrive")
        check(f"timed out after {TIMEOUT_S:.1f} s" in text, "the error gives the --timeout value")
    finally:
        for p in stopped:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        if job.poll() is None:
            try:
                os.killpg(job.pid, signal.SIGKILL)
            except OSError:
                pass
            job.wait()
        out.close()


def print_config(zero, args, env_value):
    env = dict(os.environ)
    env.pop("ZERO_TIMEOUT", None)
    if env_value is not None:
        env["ZERO_TIMEOUT"] = env_value
    r = subprocess.run([zero, "train", "--backend", "threads", "--print-config"] + args,
                       capture_output=True, text=True, env=env, timeout=60)
    value = None
    if r.returncode == 0:
        value = json.loads(r.stdout)["train"]["timeout_s"]
    return r.returncode, value, r.stderr


def test_precedence(zero, tmp):
    rc, v, _ = print_config(zero, [], None)
    check(rc == 0 and v == 300, f"default timeout 300 s ({v})")
    rc, v, _ = print_config(zero, [], "42.5")
    check(rc == 0 and v == 42.5, f"ZERO_TIMEOUT=42.5 sets it ({v})")
    cfg = os.path.join(tmp, "c.json")
    with open(cfg, "w") as f:
        f.write('{"train": {"timeout_s": 7}}')
    rc, v, _ = print_config(zero, ["--config", cfg], "42.5")
    check(rc == 0 and v == 7, f"the config file wins over ZERO_TIMEOUT ({v})")
    rc, v, _ = print_config(zero, ["--config", cfg, "--timeout", "9"], "42.5")
    check(rc == 0 and v == 9, f"--timeout wins over the config file and ZERO_TIMEOUT ({v})")
    for bad in ["0", "-3", "abc", "5s", "nan", "inf"]:
        rc, _, err = print_config(zero, ["--timeout", bad], None)
        check(rc != 0 and "train.timeout_s" in err and bad in err,
              f"--timeout {bad} fails naming the key and the value ({err.strip()})")
        rc, _, err = print_config(zero, [], bad)
        check(rc != 0 and "ZERO_TIMEOUT" in err and bad in err,
              f"ZERO_TIMEOUT={bad} fails naming the variable and the value ({err.strip()})")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    zero = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        test_precedence(zero, tmp)
        if len(sys.argv) > 2:
            test_hang(zero, sys.argv[2], tmp)
    print(f"{proc_checks.failures} failed")
    return 1 if proc_checks.failures else 0


if __name__ == "__main__":
    sys.exit(main())
