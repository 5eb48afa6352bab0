#!/usr/bin/env python3
"""test_bench_infinity.py — smoke test of bench/bench_infinity.sh on a tiny model (run by CTest).

usage: test_bench_infinity.py SCRIPT ZERO_BINARY

Runs the script with a 2-layer model (0.44M parameters, a 190 MiB cap: the plumbing, not the
4x ratio) and swap files in a temporary directory of the working directory (the build tree).
Checks, from outside the script: exit 0; the cgroup line names a cgroup that no longer exists
afterwards and the swap directory is empty; the parameter count printed equals the closed form
of the GPT's tensors (wte, wpe, 12 C^2 + 13 C per block, final layernorm); the run was not
OOM-killed; the capped and the in-RAM runs' weights fingerprints are printed and equal; the
at-disk-speed ratio is printed. Then a second run is sent SIGTERM while the capped run trains:
exit 143, its cgroup and swap directory gone, no process of it left. Without a cgroup v1 memory
controller (or the right to make a cgroup) the script prints one SKIP line and exits 77, and so
does this test. Prints `N passed, M failed`, exits 1 if anything failed.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from checks import ok, report

L, C, T, V = 2, 128, 64, 256
ARGS = ["-l", str(L), "-d", str(C), "-H", "2", "-s", str(T), "-n", "2", "-x", "0.035", "-g",
        "65536", "-b", "2", "-f", "100000", "-S", "16M"]


def cgroup_of(out):
    m = re.search(r"^cgroup: (\S+),", out, re.M)
    return m.group(1) if m else None


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    script, zero = sys.argv[1], os.path.abspath(sys.argv[2])
    d = tempfile.mkdtemp(prefix="zero-bench-infinity-", dir=os.getcwd())
    try:
        p = subprocess.run([script, "-p", d, "-z", zero] + ARGS, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=240)
        out = p.stdout
        if p.returncode == 77:
            skip = [line for line in out.splitlines() if line.startswith("SKIP")]
            print(skip[0] if skip else out)
            return 77
        ok(p.returncode == 0, "exit %d: %s" % (p.returncode, out))
        cg = cgroup_of(out)
        ok(cg is not None and not os.path.exists(cg), "cgroup %s removed" % cg)
        ok(os.listdir(d) == [], "swap directory left: %s" % os.listdir(d))
        params = 256 * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
        ok(re.search(r"^model: .*: %d parameters" % params, out, re.M) is not None,
           "parameter count %d not printed: %s" % (params, out))
        ok(re.search(r"OOM kills \(memory.oom_control oom_kill\) 0,.* exit status 0", out),
           "no OOM kill and exit 0: %s" % out)
        fps = re.search(r"weights fingerprint (\w+), the capped run's (\w+): (\w+)", out)
        ok(fps is not None and fps.group(1) == fps.group(2) and fps.group(3) == "equal",
           "fingerprints: %s" % (fps.groups() if fps else out,))
        ok(re.search(r"step / max\(RAM step, bytes / bandwidth\) = .* = \d+\.\d+", out),
           "ratio printed: %s" % out)

        # SIGTERM while the capped run trains (it has steps enough to be still training a second
        # later on any machine): everything it made is removed.
        q = subprocess.Popen([script, "-p", d, "-z", zero] + ARGS + ["-n", "1000000"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seen = ""
        deadline = time.time() + 120
        while time.time() < deadline:
            line = q.stdout.readline()
            if not line:
                break
            seen += line
            if line.startswith("load average before the capped run"):
                break
        time.sleep(1.0)
        q.send_signal(signal.SIGTERM)
        rest, _ = q.communicate(timeout=60)
        seen += rest
        ok(q.returncode == 143, "SIGTERM: exit %s: %s" % (q.returncode, seen))
        cg = cgroup_of(seen)
        ok(cg is not None and not os.path.exists(cg), "SIGTERM: cgroup %s removed" % cg)
        ok(os.listdir(d) == [], "SIGTERM: swap directory left: %s" % os.listdir(d))
        left = subprocess.run(["pgrep", "-f", d], stdout=subprocess.PIPE, text=True).stdout
        ok(left.strip() == "", "SIGTERM: processes left: %s" % left)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return report()


if __name__ == "__main__":
    sys.exit(main())
