#!/usr/bin/env python3
"""test_bench_io.py — end-to-end test of `zero bench io` (run by CTest).

usage: test_bench_io.py ZERO_BINARY

Runs the benchmark on a tiny file in a temporary directory of the working directory (the build
tree, a real disk) and checks, independently of the program: exit status; that every --json line
parses; that the rows are exactly the requested engines x queue depths x block sizes x
{write, read, first_write}, each for the requested byte count, with gbps = bytes / seconds; that
--tune's aio block is the first io_uring point (queue depth, then block size, ascending) whose
harmonic mean of read and write bandwidth is within 5% of the best, recomputed here from the rows;
that the test file is gone afterwards; that the table mode prints the io_uring / threads ratios;
and that bad flags exit 2 naming the flag and value, a missing directory or too little free
space exit 1 with a message naming them. Prints `N passed, M failed`, exits 1 if anything failed.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from checks import close, ok, report, run


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    zero = sys.argv[1]
    d = tempfile.mkdtemp(prefix="zero-bench-io-", dir=os.getcwd())
    try:
        size = 8 << 20
        blocks = [128 << 10, 1 << 20]
        depths = [1, 4]
        rc, out, err = run([zero, "bench", "io", "--path", d, "--size", "8M", "--block-sizes",
                            "128K,1M", "--queue-depths", "1,4", "--repeat", "2", "--json",
                            "--tune"])
        ok(rc == 0, "json run exit %d: %s" % (rc, err.strip()))
        rows, tune, crc = [], None, []
        for line in out.splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                ok(False, "not JSON: %r" % line)
                continue
            if "aio" in obj:
                tune = obj["aio"]
            elif obj.get("op") == "crc32c":
                crc.append(obj)
            else:
                rows.append(obj)
        engines = ["io_uring", "threads"]
        if "only the threads engine" in err:
            print("io_uring unavailable here: threads rows only")
            engines = ["threads"]
        want = sorted((e, op, b, q) for e in engines for q in depths for b in blocks
                      for op in ("write", "read", "first_write"))
        got = sorted((r.get("engine"), r.get("op"), r.get("block_size"), r.get("queue_depth"))
                     for r in rows)
        ok(got == want, "rows: %r, expected %r" % (got, want))
        # the checksum alone: one row, over the whole (8 MiB) buffer, 2 + 2 passes, one thread
        ok(len(crc) == 1 and crc[0].get("bytes") == size and crc[0].get("passes") == 4 and
           crc[0].get("threads") == 1 and crc[0].get("seconds", 0) > 0 and
           close(crc[0]["gbps"], size / crc[0]["seconds"] / 1e9, 2e-3, 0.5e-4),
           "crc32c row: %r" % crc)
        for r in rows:
            ok(r.get("bench") == "io" and r.get("bytes") == size and r.get("path") == d and
               r.get("passes") == (1 if r.get("op") == "first_write" else 2),
               "row fields: %r" % r)
            ok(r["seconds"] > 0 and close(r["gbps"], size / r["seconds"] / 1e9, 2e-3, 0.5e-4),
               "gbps = bytes / seconds: %r" % r)
            ok(r["threads"] == (r["queue_depth"] if r["engine"] == "threads" else 1),
               "threads of the pool = queue depth, io_uring 1: %r" % r)
        # --tune: recomputed from the rows (from seconds, not the rounded gbps)
        tune_engine = engines[0]
        bw = {}
        for r in rows:
            if r["engine"] == tune_engine and r["op"] in ("read", "write"):
                bw.setdefault((r["queue_depth"], r["block_size"]), {})[r["op"]] = \
                    size / r["seconds"] / 1e9
        score = {k: 2 / (1 / v["read"] + 1 / v["write"]) for k, v in bw.items()}
        ok(tune is not None, "--tune printed an aio block")
        if tune is not None and score:
            best = max(score.values())
            order = [(q, b) for q in depths for b in blocks]
            # rounding of the printed seconds: accept the pick if it is within 5% (+0.5% slack)
            # and no earlier point is clearly within 5%
            key = (tune.get("queue_depth") if tune_engine == "io_uring"
                   else tune.get("intra_op_parallelism"), tune.get("block_size"))
            ok(key in score and score[key] >= 0.945 * best,
               "tuned point %r scores %.3f of best %.3f" % (key, score.get(key, 0), best))
            if key in score:
                earlier = [k for k in order[:order.index(key)] if score[k] >= 0.955 * best]
                ok(not earlier, "an earlier point within 5%% of the best: %r" % earlier)
            ok(tune.get("single_submit") is False and tune.get("overlap_events") is True and
               set(tune) == {"block_size", "queue_depth", "intra_op_parallelism",
                             "single_submit", "overlap_events"},
               "aio block keys: %r" % tune)
        ok(os.listdir(d) == [], "test file removed: %r" % os.listdir(d))

        # table mode, both engines: rows and the side-by-side ratios
        rc, out, err = run([zero, "bench", "io", "--path", d, "--size", "4M", "--block-sizes",
                            "256K", "--queue-depths", "2"])
        ok(rc == 0, "table run exit %d: %s" % (rc, err.strip()))
        lines = [l for l in out.splitlines() if l.strip() and not l.startswith("#")]
        ok(len(lines) == (3 if len(engines) == 2 else 1),
           "table: a row per engine and a ratio row: %r" % lines)
        if len(engines) == 2:
            ok("io_uring / threads" in out, "ratio section present")
        # --fallback: the pool only
        rc, out, err = run([zero, "bench", "io", "--path", d, "--size", "4M", "--block-sizes",
                            "256K", "--queue-depths", "2", "--fallback", "--json"])
        ok(rc == 0 and out.count('"engine":"threads"') == 3 and "io_uring" not in out,
           "--fallback measures the pool only: %r %r" % (out, err))
        ok(os.listdir(d) == [], "test files removed")
        # --threads: io_uring threads, reported in the rows and the tuned block
        if "io_uring" in engines:
            rc, out, err = run([zero, "bench", "io", "--path", d, "--size", "4M", "--block-sizes",
                                "256K", "--queue-depths", "2", "--engine", "io_uring",
                                "--threads", "3", "--repeat", "1", "--json", "--tune"])
            objs = [json.loads(l) for l in out.splitlines() if l.startswith("{")] if rc == 0 else []
            objs = [o for o in objs if o.get("op") != "crc32c"]
            ok(rc == 0 and len(objs) == 4 and all(o.get("threads") == 3 for o in objs[:3]) and
               objs[3].get("aio", {}).get("intra_op_parallelism") == 3,
               "--threads 3: %r %r" % (out, err))

        # errors
        bad = [
            (["--path", d, "--block-sizes", "1000"], "--block-sizes", "1000"),
            (["--path", d, "--queue-depths", "0"], "--queue-depths", "0"),
            (["--path", d, "--size", "12345"], "--size", "12345"),
            (["--path", d, "--engine", "aio"], "--engine", "aio"),
            (["--path", d, "--repeat", "0"], "--repeat", "0"),
            (["--path", d, "--threads", "x"], "--threads", "x"),
            (["--path", d, "--bogus"], "--bogus", ""),
            (["--size", "8M"], "--path", ""),
            (["--path"], "--path", ""),
        ]
        for args, flag, value in bad:
            rc, out, err = run([zero, "bench", "io"] + args, timeout=30)
            ok(rc == 2 and flag in err and value in err and out == "",
               "%r: exit %d (expected 2), message %r" % (args, rc, err.strip()))
        missing = os.path.join(d, "missing")
        rc, out, err = run([zero, "bench", "io", "--path", missing], timeout=30)
        ok(rc == 1 and missing in err and "No such file" in err,
           "missing directory: %d %r" % (rc, err.strip()))
        free = shutil.disk_usage(d).free
        rc, out, err = run([zero, "bench", "io", "--path", d, "--size", "%dG" % (free // 2**30 + 64)],
                           timeout=30)
        ok(rc == 1 and "bytes free" in err and d in err and "--size" in err,
           "too little space refused: %d %r" % (rc, err.strip()))
        ok(os.listdir(d) == [], "nothing created when refused")
        rc, out, err = run([zero, "bench", "io", "--help"], timeout=30)
        ok(rc == 0 and "usage: zero bench io" in out and "--tune" in out, "--help")
        rc, out, err = run([zero, "bench", "--help"], timeout=30)
        ok(rc == 0 and "io" in out and "comm" in out, "zero bench --help lists io")
    except subprocess.TimeoutExpired as e:
        ok(False, "timed out: %s" % e)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return report()


if __name__ == "__main__":
    sys.exit(main())
