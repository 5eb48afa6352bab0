#!/usr/bin/env python3
"""Signals stop a run cleanly: `zero train` under SIGTERM, SIGINT, SIGHUP and SIGUSR1.

Usage: test_train_signals.py threads ZERO
       test_train_signals.py mpi ZERO MPIEXEC

The first SIGTERM, SIGINT or SIGHUP finishes the current step, saves a checkpoint (--save-dir),
writes the report (--json-report and the printed one) and exits with 128 + the signal; a second
signal exits at once; SIGUSR1 saves a checkpoint and training goes on.

Oracles, independent of the interrupted run's own figures:
- the report's weights_fingerprint after N steps equals that of a fresh run of exactly N steps
  (ranks as threads; the two backends are bitwise equal), so the run stopped after a complete
  step and reported the weights it had;
- a checkpoint's weights (read back by `--resume CKPT --steps S`, which trains nothing) equal a
  fresh run of S steps, so each save holds the state after its step, on every rank;
- the metrics log ends at step N.

threads: SIGTERM, SIGINT and SIGHUP to the process of 2 ranks as threads; SIGUSR1 then SIGTERM;
two signals at once (the process is stopped, both are queued, then it continues): exit at once,
no report.
mpi: `kill -TERM` to the process of rank 1 only (the ranks must agree to stop after the same
step); SIGUSR1 to mpirun itself (Open MPI 4.1's mpirun forwards it to every rank), then SIGTERM to
every rank, as Slurm's scancel does. SIGTERM to mpirun itself is not tested: mpirun 4.1 then sends
the ranks SIGCONT, waits odls_base_sigkill_timeout seconds (default 1), sends SIGTERM, waits as
long again and sends SIGKILL, and while it waits it may stop forwarding the ranks' output (a rank
blocked writing its progress cannot finish): README, "Reliability".

SIGUSR1 many times over (40 signals in 0.8 s): the run goes on unharmed. A signal handled on a
thread inside oneDNN's JIT sgemm corrupted the heap (uxlfoundation/oneDNN#4845) until zero train
took the signals on a thread of its own (src/cli/train.c).

Every process started here is killed at the end, also when a check fails.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import proc_checks
from proc_checks import check, rank_pids, read

# A tiny model: each step takes about a millisecond, so a run of a million steps is still
# training when the signal comes. The schedule's length is fixed so that runs of any
# train.steps follow the same learning rates.
MODEL = ["--no-peak", "--set", "model.layers=1", "--set", "model.dim=32", "--set", "model.seq=32",
         "--set", "train.samples=1", "--set", "train.sample_tokens=20",
         "--set", "train.eval_interval=0", "--set", "data.builtin_bytes=65536",
         "--set", "scheduler.params.total_num_steps=100000", "--stage", "2"]
MANY = "1000000"


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def env_base():
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_WAIT_POLICY="passive")
    env.pop("ZERO_TIMEOUT", None)
    return env


def last_step(text):
    steps = [int(m) for m in re.findall(r"step\s+(\d+)/", text)]
    return max(steps) if steps else 0


def wait_for(cond, limit, proc=None):
    deadline = time.time() + limit
    while time.time() < deadline:
        if cond():
            return True
        if proc is not None and proc.poll() is not None:
            return cond()
        time.sleep(0.05)
    return cond()


class Run:
    """A background `zero train` (or mpirun) writing to files in its own directory."""

    def __init__(self, tmp, name, cmd, save=True):
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        self.out_path = os.path.join(self.dir, "out.txt")
        self.err_path = os.path.join(self.dir, "err.txt")
        self.report = os.path.join(self.dir, "report.json")
        self.metrics = os.path.join(self.dir, "metrics.jsonl")
        self.ckpt = os.path.join(self.dir, "ckpt")
        self.out = open(self.out_path, "wb")
        self.err = open(self.err_path, "wb")
        full = cmd + ["--json-report", self.report, "--metrics", self.metrics]
        if save:
            full += ["--save-dir", self.ckpt]
        self.proc = subprocess.Popen(full, stdout=self.out, stderr=self.err, env=env_base(),
                                     start_new_session=True)

    def text(self):
        return read(self.out_path) + read(self.err_path)

    def started(self, limit=60, after=0):
        return wait_for(lambda: last_step(read(self.out_path)) > after, limit, self.proc)

    def wait(self, limit):
        try:
            return self.proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
        self.out.close()
        self.err.close()


def fresh_fingerprint(zero, tmp, steps, cache={}):
    """weights_fingerprint of an uninterrupted 2-rank threads run of `steps` steps."""
    if steps in cache:
        return cache[steps]
    rep = os.path.join(tmp, f"fresh-{steps}.json")
    r = subprocess.run([zero, "train", "--backend", "threads", "--ranks", "2", "--steps",
                        str(steps), "--json-report", rep, "-q"] + MODEL,
                       env=env_base(), capture_output=True, text=True, timeout=120)
    j = load_json(rep) if r.returncode == 0 else None
    cache[steps] = j["weights_fingerprint"] if j else None
    if not j:
        print(r.stdout[-2000:], r.stderr[-2000:])
    return cache[steps]


def check_requested_save(zero, tmp, run, m_step, what):
    """The checkpoint a SIGUSR1 saved at step m_step (0: none seen) holds the weights of a fresh
    run of m_step steps."""
    if not m_step:
        return
    saved = checkpoint_fingerprint(zero, tmp, step_dir(run.ckpt, m_step), m_step)
    fresh = fresh_fingerprint(zero, tmp, m_step)
    check(saved is not None and saved == fresh,
          f"{what}: the checkpoint of step {m_step} equals a fresh run ({saved} vs {fresh})")


def checkpoint_fingerprint(zero, tmp, ckpt_dir, steps):
    """The weights of a checkpoint: resume it and train nothing (--steps = its step)."""
    rep = os.path.join(tmp, f"ckpt-{steps}-{time.time_ns()}.json")
    r = subprocess.run([zero, "train", "--backend", "threads", "--ranks", "2", "--steps",
                        str(steps), "--resume", ckpt_dir, "--json-report", rep, "-q"] + MODEL,
                       env=env_base(), capture_output=True, text=True, timeout=120)
    j = load_json(rep) if r.returncode == 0 else None
    if not j:
        print(r.stdout[-2000:], r.stderr[-2000:])
    return j["weights_fingerprint"] if j else None


def step_dir(ckpt, step):
    return os.path.join(ckpt, "step-%08d" % step)


def check_stopped(zero, tmp, run, sig, status, label):
    """The run stopped for `sig` after a complete step N: exit status, report, checkpoint,
    metrics, and the weights against a fresh run of N steps."""
    text = run.text()
    check(status == 128 + sig, f"{label}: exit status {status} (expected {128 + sig})")
    rep = load_json(run.report)
    if not check(rep is not None, f"{label}: the JSON report was written"):
        print(text[-3000:])
        return None
    n = rep.get("start_step", 0) + rep.get("steps", 0)
    check(rep.get("stop_signal") == sig, f"{label}: report stop_signal {rep.get('stop_signal')}")
    check(0 < n < int(MANY), f"{label}: stopped after step {n}")
    check("stopped early by" in text and f"(signal {sig}) after step {n} " in text,
          f"{label}: the printed report says it stopped after step {n}")
    latest = read(os.path.join(run.ckpt, "latest")).strip()
    check(latest.endswith("step-%08d" % n), f"{label}: checkpoint 'latest' is {latest!r}")
    lines = read(run.metrics).strip().splitlines()
    check(lines and json.loads(lines[-1])["step"] == n, f"{label}: the metrics log ends at {n}")
    fresh = fresh_fingerprint(zero, tmp, n)
    check(fresh is not None and rep.get("weights_fingerprint") == fresh,
          f"{label}: weights after {n} steps equal a fresh {n}-step run "
          f"({rep.get('weights_fingerprint')} vs {fresh})")
    saved = checkpoint_fingerprint(zero, tmp, step_dir(run.ckpt, n), n)
    check(saved == fresh, f"{label}: the checkpoint of step {n} holds those weights ({saved})")
    return n


def threads_cmd(zero):
    return [zero, "train", "--backend", "threads", "--ranks", "2", "--steps", MANY,
            "--set", "steps_per_print=1"] + MODEL


def test_threads(zero, tmp):
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        name = signal.Signals(sig).name
        run = Run(tmp, f"threads-{name}", threads_cmd(zero))
        try:
            check(run.started(), f"threads {name}: training started")
            run.proc.send_signal(sig)
            status = run.wait(60)
            check_stopped(zero, tmp, run, sig, status, f"threads {name}")
        finally:
            run.kill()

    # SIGUSR1: a checkpoint, and training goes on; then SIGTERM.
    run = Run(tmp, "threads-USR1", threads_cmd(zero))
    try:
        check(run.started(), "threads SIGUSR1: training started")
        run.proc.send_signal(signal.SIGUSR1)
        got = wait_for(lambda: "checkpoint saved to" in read(run.out_path) and
                       "(requested)" in read(run.out_path), 60, run.proc)
        check(got, "threads SIGUSR1: a requested checkpoint was saved")
        m = re.search(r"step\s+(\d+) \| checkpoint saved to \S+ \(requested\)", read(run.out_path))
        m_step = int(m.group(1)) if m else 0
        check(run.started(after=m_step + 5), "threads SIGUSR1: training went on after it")
        check(run.proc.poll() is None, "threads SIGUSR1: the process is still running")
        run.proc.send_signal(signal.SIGTERM)
        n = check_stopped(zero, tmp, run, signal.SIGTERM, run.wait(60), "threads SIGUSR1+TERM")
        check(n is not None and n > m_step, f"threads SIGUSR1: stopped at {n} after {m_step}")
        check_requested_save(zero, tmp, run, m_step, "threads SIGUSR1")
    finally:
        run.kill()

    # A burst of SIGUSR1 (no --save-dir: each is a request that saves nothing), then SIGTERM: the
    # run must survive them all and stop cleanly.
    run = Run(tmp, "threads-burst", threads_cmd(zero), save=False)
    try:
        check(run.started(), "threads burst: training started")
        for _ in range(40):
            if run.proc.poll() is not None:
                break
            run.proc.send_signal(signal.SIGUSR1)
            time.sleep(0.02)
        alive = run.proc.poll() is None
        check(alive, f"threads burst: alive after 40 SIGUSR1 ({run.proc.poll()})")
        if alive:
            run.proc.send_signal(signal.SIGTERM)
        status = run.wait(60)
        text = run.text()
        check(status == 128 + signal.SIGTERM and "corrupted" not in text,
              f"threads burst: exit status {status} after SIGTERM (expected 143)")
        check("checkpoint requested, but train.save_dir is not set" in text,
              "threads burst: a request without --save-dir says that nothing was saved")
        if status != 128 + signal.SIGTERM:
            print(text[-3000:])
    finally:
        run.kill()

    # Two signals: the second exits at once (no report). Both are queued while the process is
    # stopped, so they are handled back to back when it continues.
    run = Run(tmp, "threads-twice", threads_cmd(zero))
    try:
        check(run.started(), "threads twice: training started")
        os.kill(run.proc.pid, signal.SIGSTOP)
        os.kill(run.proc.pid, signal.SIGTERM)
        os.kill(run.proc.pid, signal.SIGINT)
        os.kill(run.proc.pid, signal.SIGCONT)
        status = run.wait(30)
        check(status in (128 + signal.SIGTERM, 128 + signal.SIGINT),
              f"threads twice: exit status {status} (expected 130 or 143)")
        check(not os.path.exists(run.report), "threads twice: exited before writing a report")
        check("exiting at once" in run.text(), "threads twice: says it exits at once")
    finally:
        run.kill()


def test_mpi(zero, mpiexec, tmp):
    base = [mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", "2", zero, "train",
            "--steps", MANY,
            "--set", "steps_per_print=1"] + MODEL

    # SIGTERM to one rank only: both ranks stop after the same step.
    run = Run(tmp, "mpi-rank1", base)
    try:
        check(run.started(), "mpi rank 1 SIGTERM: training started")
        pids = rank_pids(run.proc.pid, 1)
        if check(len(pids) == 1, f"mpi rank 1 SIGTERM: found rank 1 ({pids})"):
            os.kill(pids[0], signal.SIGTERM)
            status = run.wait(90)
            # mpirun exits with the status of the first rank that failed: 143 here.
            check_stopped(zero, tmp, run, signal.SIGTERM, status, "mpi rank 1 SIGTERM")
            text = run.text()
            check(len(re.findall(r"checkpoint: saved", text)) >= 1 and
                  "communicator failed" not in text and "timed out" not in text,
                  "mpi rank 1 SIGTERM: no collective failed")
    finally:
        run.kill()

    # SIGUSR1 to mpirun (forwarded: a checkpoint, training goes on), then SIGTERM to every rank
    # (what Slurm's scancel does). Not SIGTERM to mpirun: see the file comment.
    run = Run(tmp, "mpi-mpirun", base)
    try:
        check(run.started(), "mpi mpirun: training started")
        run.proc.send_signal(signal.SIGUSR1)
        got = wait_for(lambda: "(requested)" in read(run.out_path), 60, run.proc)
        if not check(got, "mpi mpirun SIGUSR1: a requested checkpoint was saved"):
            print(run.text()[-3000:])
        m = re.search(r"step\s+(\d+) \| checkpoint saved to \S+ \(requested\)", read(run.out_path))
        m_step = int(m.group(1)) if m else 0
        check(run.started(after=m_step + 5), "mpi mpirun SIGUSR1: training went on after it")
        pids = rank_pids(run.proc.pid, 0) + rank_pids(run.proc.pid, 1)
        check(len(pids) == 2, f"mpi mpirun: found both ranks ({pids})")
        for p in pids:
            os.kill(p, signal.SIGTERM)
        status = run.wait(90)
        n = check_stopped(zero, tmp, run, signal.SIGTERM, status, "mpi SIGTERM to every rank")
        check(n is not None and n > m_step, f"mpi mpirun: stopped at {n} after {m_step}")
        check_requested_save(zero, tmp, run, m_step, "mpi mpirun SIGUSR1")
    finally:
        run.kill()


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("threads", "mpi"):
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        if sys.argv[1] == "threads":
            test_threads(sys.argv[2], tmp)
        else:
            test_mpi(sys.argv[2], sys.argv[3], tmp)
    print(f"{proc_checks.failures} failed")
    return 1 if proc_checks.failures else 0


if __name__ == "__main__":
    sys.exit(main())
