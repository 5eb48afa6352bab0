#!/usr/bin/env python3
"""test_bench_comm.py — end-to-end test of `zero bench comm` (run by CTest).

usage: test_bench_comm.py threads|flags|mpi ZERO_BINARY [MPIEXEC]

Runs the benchmark with tiny sizes and checks, independently of the program: exit status, that
every --json line parses, that the rows are the expected sizes and counts (nccl-tests
convention, recomputed here), that algbw = S / time and busbw = algbw x 2(n-1)/n or (n-1)/n,
that the benchmark's own comparison of every output against its closed-form reference passed,
and that bad flags exit 2 with a message naming the flag and the value. Prints `N passed, M
failed` and exits 1 if anything failed.
"""
import json
import math
import os
import subprocess
import sys

from checks import close, ok, report, run

OPS = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"]
ELEM = {"fp32": 4, "fp64": 8, "fp16": 2, "bf16": 2, "int8": 1, "uint8": 1, "int32": 4}
TINY = ["--max-bytes", "64K", "--iters", "2", "--membw-bytes", "8M"]


def expected_rows(op, n, dtype, min_bytes, max_bytes, factor):
    """(size_bytes, count) per row, recomputed from the nccl-tests convention."""
    es = ELEM[dtype]
    rows = []
    s = min_bytes
    while s <= max_bytes:
        count = s // es if op == "all_reduce" else s // es // n
        if count > 0:
            rows.append((count * es if op == "all_reduce" else count * es * n, count))
        s *= factor
    return rows


def json_rows(out):
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def check_json(out, backend, n, dtype, ops, min_bytes, max_bytes, factor, want_raw):
    rows = []
    for i, line in enumerate(out.splitlines()):
        try:
            rows.append(json.loads(line))
        except ValueError as e:
            ok(False, "--json line %d does not parse (%s): %r" % (i + 1, e, line[:200]))
            return
    ok(len(rows) > 0, "--json printed rows")
    for op in ops:
        mine = [r for r in rows if r.get("op") == op]
        want = expected_rows(op, n, dtype, min_bytes, max_bytes, factor)
        got = [(r.get("size_bytes"), r.get("count")) for r in mine]
        ok(got == want, "%s %s: sizes/counts %s, expected %s" % (backend, op, got, want))
        f = 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
        for r in mine:
            tag = "%s %s %s S=%s" % (backend, op, dtype, r.get("size_bytes"))
            ok(r.get("backend") == backend and r.get("ranks") == n and r.get("dtype") == dtype,
               tag + ": backend/ranks/dtype fields " + str((r.get("backend"), r.get("ranks"),
                                                            r.get("dtype"))))
            t = r.get("time_us")
            ok(t is not None and t > 0 and math.isfinite(t), tag + ": time_us > 0")
            if not t:
                continue
            algbw = r["size_bytes"] / (t * 1e3)  # bytes/us -> GB/s
            ok(close(r.get("algbw_gbs"), algbw, 1e-4), tag + ": algbw_gbs = size / time")
            ok(close(r.get("busbw_gbs"), algbw * f, 1e-4) or (f == 0 and r.get("busbw_gbs") == 0),
               tag + ": busbw_gbs = algbw x %.4f" % f)
            ok(r.get("check") == "ok" and r.get("check_errors") == 0,
               tag + ": output matches the reference (check=%s, errors=%s)"
               % (r.get("check"), r.get("check_errors")))
            ok(r.get("memcpy_gbs", 0) > 0 and close(r.get("mem_traffic_gbs"),
                                                    2 * r.get("memcpy_gbs", 0), 1e-4),
               tag + ": memcpy bandwidth present, traffic = 2 x copied")
            b = r.get("bound_busbw_gbs")
            ok(b is not None and (b > 0 or f == 0), tag + ": bound present")
            if want_raw:
                ok(r.get("raw") is not None and r.get("raw_time_us", 0) > 0
                   and r.get("raw_check") == "ok"
                   and close(r.get("ours_over_raw"), r["raw_time_us"] / t, 1e-3),
                   tag + ": raw MPI timed, checked, ratio = raw time / our time")
            else:
                ok(r.get("raw") is None, tag + ": no raw column on this backend")


def mode_threads(zero):
    n = 3
    base = [zero, "bench", "comm", "--backend", "threads", "--ranks", str(n)]
    rc, out, err = run(base + TINY + ["--json"])
    ok(rc == 0, "threads json run exit %d: %s" % (rc, err.strip()))
    check_json(out, "threads", n, "fp32", OPS, 1024, 64 << 10, 2, False)

    # One node: nothing to other nodes. Nodes of 2 + 1 ranks (rank 2 alone): rank 0's bytes per
    # call to the other node. Flat: count elements to rank 2 (all_reduce: rank 2's block of the
    # reduce-scatter split in 3, and rank 0's own block of the all-gather). Hierarchical: the
    # all-gather sends rank 0's block to one rank of the other node, rank 2, which is what flat
    # does too on this layout; the reduce-scatter stays flat (carrying partials would cross 6
    # blocks here, not 4). So both give the same closed form, and --flat must not change it.
    for r in json_rows(out):
        ok(r.get("inter_node_bytes") == 0 and r.get("inter_node_theory_bytes") == 0,
           "one node: %s S=%s sends nothing to other nodes" % (r.get("op"), r.get("size_bytes")))
    for flat in ([], ["--flat"]):
        rc, out, err = run(base + TINY + ["--ranks-per-node", "2", "--json"] + flat)
        ok(rc == 0, "threads --ranks-per-node 2 %s run exit %d: %s" % (flat, rc, err.strip()))
        for r in json_rows(out):
            count, es = r["count"], 4
            own, rank2 = count // 3, count - count * 2 // 3
            want = (own + rank2) * es if r["op"] == "all_reduce" else count * es
            ok(r.get("inter_node_bytes") == want and r.get("inter_node_theory_bytes") == want,
               "nodes 2 + 1 %s: %s S=%s: rank 0 sends %s bytes per call to the other node "
               "(theory %s), closed form %d" % (flat, r["op"], r["size_bytes"],
                                                 r.get("inter_node_bytes"),
                                                 r.get("inter_node_theory_bytes"), want))
    # Nodes of 2 + 2: hierarchical, rank 0 (node 0) sends 1 block of every all-gather to the
    # other node instead of 2, and the partial of its 2 blocks of every reduce-scatter (2, as
    # flat); all_reduce: the partials of blocks 0 and 2 and its own block once.
    base4 = [zero, "bench", "comm", "--backend", "threads", "--ranks", "4"]
    for flat in ([], ["--flat"]):
        rc, out, err = run(base4 + TINY + ["--ranks-per-node", "2", "--json"] + flat)
        ok(rc == 0, "threads 4 ranks --ranks-per-node 2 %s exit %d: %s" % (flat, rc, err.strip()))
        for r in json_rows(out):
            c, es = r["count"], 4
            blk = [c * (k + 1) // 4 - c * k // 4 for k in range(4)]
            if flat:
                want = {"all_gather": 2 * c, "reduce_scatter": 2 * c, "all_to_all": 2 * c,
                        "all_reduce": blk[2] + blk[3] + 2 * blk[0]}[r["op"]] * es
            else:
                want = {"all_gather": c, "reduce_scatter": 2 * c, "all_to_all": 2 * c,
                        "all_reduce": blk[0] + blk[2] + blk[0]}[r["op"]] * es
            ok(r.get("inter_node_bytes") == want and r.get("inter_node_theory_bytes") == want,
               "nodes 2 + 2 %s: %s S=%s: rank 0 sends %s bytes per call to the other node "
               "(theory %s), closed form %d" % (flat, r["op"], r["size_bytes"],
                                                 r.get("inter_node_bytes"),
                                                 r.get("inter_node_theory_bytes"), want))

    # Other dtypes through the reductions (bf16 is summed in fp32; int8 wraps).
    for dtype in ("bf16", "int8"):
        rc, out, err = run(base + ["--dtype", dtype, "--max-bytes", "16K", "--step-factor", "4",
                                   "--iters", "2", "--membw-bytes", "1M", "--json"])
        ok(rc == 0, "threads %s run exit %d: %s" % (dtype, rc, err.strip()))
        check_json(out, "threads", n, dtype, OPS, 1024, 16 << 10, 4, False)

    # Text mode: comment header with the memcpy bandwidth, one row per size.
    rc, out, err = run(base + ["--op", "reduce_scatter", "--max-bytes", "4K", "--iters", "2",
                               "--membw-bytes", "1M"])
    ok(rc == 0, "threads text run exit %d: %s" % (rc, err.strip()))
    ok("memcpy" in out and "GB/s" in out, "text output states the memcpy bandwidth")
    data = [l for l in out.splitlines() if l.strip() and not l.startswith("#")]
    ok(len(data) == 3 and all(l.split()[-1] == "ok" for l in data),
       "text output: 3 checked rows (1K, 2K, 4K), got %r" % data)


def mode_flags(zero):
    bad = [
        (["--ranks", "0"], "--ranks", "0"),
        (["--op", "all_sum"], "--op", "all_sum"),
        (["--dtype", "fp8"], "--dtype", "fp8"),
        (["--min-bytes", "1Q"], "--min-bytes", "1Q"),
        (["--max-bytes=-5"], "--max-bytes", "-5"),
        (["--step-factor", "1"], "--step-factor", "1"),
        (["--backend", "nccl"], "--backend", "nccl"),
        (["--iters", "x"], "--iters", "x"),
        (["--bogus"], "--bogus", ""),
        (["--min-bytes", "1M", "--max-bytes", "1K"], "--min-bytes", "1048576"),
        (["--warmup"], "--warmup", ""),
    ]
    for args, flag, value in bad:
        rc, out, err = run([zero, "bench", "comm"] + args, timeout=30)
        ok(rc == 2, "%s: exit %d, expected 2" % (args, rc))
        ok(flag in err and value in err, "%s: message names %s and '%s': %r"
           % (args, flag, value, err.strip()))
        ok(out == "", "%s: nothing on stdout" % args)
    rc, out, err = run([zero, "bench", "comm", "--help"], timeout=30)
    ok(rc == 0 and "usage: zero bench comm" in out and "--step-factor" in out,
       "--help exits 0 and lists the options")
    rc, out, err = run([zero, "bench", "nope"], timeout=30)
    ok(rc == 2 and "nope" in err and "comm" in err,
       "unknown benchmark exits 2 naming it and the known ones")
    # the dispatcher `zero` and `zero bench` share (src/cli/main.c)
    rc, out, err = run([zero, "bench"], timeout=30)
    ok(rc == 2 and out == "" and "usage: zero bench <benchmark>" in err,
       "zero bench alone: usage on stderr, exit 2")
    rc, out, err = run([zero, "bench", "--help"], timeout=30)
    ok(rc == 0 and "comm" in out and err == "", "zero bench --help lists the benchmarks")
    rc, out, err = run([zero], timeout=30)
    ok(rc == 2 and out == "" and "usage: zero <command>" in err, "zero alone: usage, exit 2")
    rc, out, err = run([zero, "-h"], timeout=30)
    ok(rc == 0 and all(c in out for c in ("train", "bench", "convert", "--version")),
       "zero -h lists the commands: %r" % out)
    rc, out, err = run([zero, "trian"], timeout=30)
    ok(rc == 2 and "'trian'" in err and "train" in err.split("'trian'")[1],
       "unknown command exits 2 naming it and the known ones: %r" % err.strip())
    rc, out, err = run([zero, "--version"], timeout=30)
    ok(rc == 0 and out.startswith("zero "), "zero --version: %r" % out)


def mode_mpi(zero, mpiexec):
    n = 2
    mpirun = [mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", str(n)]
    if "ASAN_OPTIONS" in os.environ:
        mpirun += ["-x", "ASAN_OPTIONS"]
    rc, out, err = run(mpirun + [zero, "bench", "comm"] + TINY + ["--json"])
    ok(rc == 0, "mpi json run exit %d: %s" % (rc, err.strip()))
    check_json(out, "mpi", n, "fp32", OPS, 1024, 64 << 10, 2, True)
    # bf16: no MPI reduction for it, so raw columns only for the data movers.
    rc, out, err = run(mpirun + [zero, "bench", "comm", "--dtype", "bf16", "--op",
                                 "reduce_scatter", "--max-bytes", "4K", "--iters", "2",
                                 "--membw-bytes", "1M", "--json"])
    ok(rc == 0, "mpi bf16 run exit %d: %s" % (rc, err.strip()))
    check_json(out, "mpi", n, "bf16", ["reduce_scatter"], 1024, 4 << 10, 2, False)
    rc, out, err = run(mpirun + [zero, "bench", "comm", "--step-factor", "0"], timeout=60)
    ok(rc == 2, "bad flag under mpirun: exit %d, expected 2" % rc)
    ok(err.count("--step-factor '0'") == 1, "bad flag under mpirun: one message, from rank 0: %r"
       % err.strip())


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("threads", "flags", "mpi"):
        print(__doc__)
        return 2
    mode, zero = sys.argv[1], sys.argv[2]
    try:
        if mode == "threads":
            mode_threads(zero)
        elif mode == "flags":
            mode_flags(zero)
        else:
            mode_mpi(zero, sys.argv[3])
    except subprocess.TimeoutExpired as e:
        ok(False, "timed out: %s" % e)
    return report()


if __name__ == "__main__":
    sys.exit(main())
