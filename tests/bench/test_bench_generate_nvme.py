#!/usr/bin/env python3
"""test_bench_generate_nvme.py — smoke test of bench/bench_generate_nvme.sh on a tiny model (run by
CTest).

usage: test_bench_generate_nvme.py SCRIPT ZERO_BINARY

Runs the script with a 4-layer model (dim 64: the plumbing, not the 4x ratio: the cap is 100x
the weights) at batch 2 and 1, with its files in a temporary directory of the working directory
(the build tree). Checks, from outside the script: exit 0; the cgroup line names a cgroup that
no longer exists afterwards and the directory is empty; both runs exited 0 without an OOM kill;
the table has a row per batch whose bound is batch x the printed bandwidth / the streamed bytes
and whose ratio is tokens/s over that bound. Without a cgroup v1 memory controller (or the right
to make a cgroup) the script prints one SKIP line and exits 77, and so does this test. Prints
`N passed, M failed`, exits 1 if anything failed.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

from checks import close, ok, report


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    script, zero = sys.argv[1], os.path.abspath(sys.argv[2])
    d = tempfile.mkdtemp(prefix="zero-bench-generate-nvme-", dir=os.getcwd())
    try:
        p = subprocess.run([script, "-b", os.path.dirname(zero), "-p", d, "-l", "4", "-d", "64",
                            "-B", "2", "-n", "3", "-x", "0.01", "-c", "2", "-S", "16M"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=240)
        out = p.stdout
        if p.returncode == 77:
            skip = [line for line in out.splitlines() if line.startswith("SKIP")]
            print(skip[0] if skip else out)
            return 77
        ok(p.returncode == 0, "exit %d: %s" % (p.returncode, out))
        m = re.search(r"^cgroup: (\S+),", out, re.M)
        ok(m is not None and not os.path.exists(m.group(1)), "cgroup removed: %s" % out)
        ok(os.listdir(d) == [], "files left: %s" % os.listdir(d))
        for b in (2, 1):
            ok(re.search(r"^batch %d: exit status 0;.*oom_kill 0$" % b, out, re.M) is not None,
               "batch %d: exit 0, no OOM kill: %s" % (b, out))
        bw = re.search(r"median of 3\): ([0-9.]+) GB/s", out)
        ok(bw is not None, "bandwidth printed: %s" % out)
        rows = re.findall(r"^\| (\d+) \| [0-9.]+ \| \d+ \| [0-9.]+ \| ([0-9.]+) \| ([0-9.]+) \| "
                          r"([0-9.]+) \| ([0-9.]+) \|", out, re.M)
        ok([int(r[0]) for r in rows] == [2, 1], "a row per batch: %s" % out)
        for b, streamed, bound, tps, ratio in rows:
            if bw:
                # the printed numbers are rounded: compare with their precision
                want = int(b) * float(bw.group(1)) / float(streamed)
                ok(close(float(bound), want, 0.05, 0.06), "bound %s vs %g" % (bound, want))
            ok(float(tps) > 0 and close(float(ratio), float(tps) / float(bound), 0.05, 0.006),
               "ratio %s vs %s / %s" % (ratio, tps, bound))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return report()


if __name__ == "__main__":
    sys.exit(main())
