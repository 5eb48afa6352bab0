#!/usr/bin/env python3
"""test_bench_zeropp.py — smoke test of bench/bench_zeropp.sh on a tiny model (run by CTest).

usage: test_bench_zeropp.py SCRIPT ZERO_BINARY

Runs the script (one round, 3 steps) on a 2-layer GPT (dim 64, seq 32, every unit sharded) over
4 thread ranks as 2 nodes of 2 and checks from outside: exit 0; a row per run, plain then
qwZ + hpZ + qgZ, each measured equal to the engine's theory; ZeRO++'s bytes to the other node
per rank and step equal to the closed form sum_u (S_u + 4 ceil(S_u / 256)) + (4 ceil(S_u / 256)
+ ceil(S_u / 2)) + 32 (the step's first gather at int8, the int4 gradient, the control record;
S_u = P_u / 4) and at most 0.25x plain stage 3's; its gradient bytes 3 x the int4 wire bytes
(1 peer in the node gets 2 blocks, 1 across gets one); the summary's ratio line. Prints
`N passed, M failed`, exits 1 if anything failed.
"""
import math
import os
import re
import subprocess
import sys
import tempfile

from checks import ok, report

L, C, T, V = 2, 64, 32, 256


def span(n):
    return (n + 15) // 16 * 16


def shards():
    units = [span(V * C) + span(T * C)]
    units += [2 * span(C) + span(3 * C * C) + span(3 * C) + span(C * C) + span(C) + 2 * span(C) +
              span(4 * C * C) + span(4 * C) + span(4 * C * C) + span(C)] * L
    units += [2 * span(C)]
    return [(p + 63) // 64 * 64 // 4 for p in units]


def q4(s):
    return 4 * math.ceil(s / 256) + (s + 1) // 2


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    script, zero = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        cfg = os.path.join(tmp, "tiny.json")
        with open(cfg, "w") as f:
            f.write('{"model": {"layers": %d, "heads": 2, "dim": %d, "seq": %d},\n'
                    ' "data": {"builtin_bytes": 65536}, "train_micro_batch_size_per_gpu": 2,\n'
                    ' "zero_optimization": {"stage3_param_persistence_threshold": 0},\n'
                    ' "train": {"eval_interval": 0, "eval_batches": 1, "samples": 0, "threads": 1}}\n'
                    % (L, C, T))
        env = dict(os.environ, CONFIG=cfg, REPS="1", STEPS="3", OUT=os.path.join(tmp, "out"))
        p = subprocess.run(["bash", script, os.path.dirname(zero)], env=env,
                           capture_output=True, text=True, timeout=200)
        code, out, err = p.returncode, p.stdout, p.stderr
        print(out, err, sep="\n", flush=True)
        ok(code == 0, f"bench_zeropp.sh exit {code}")
        rows = [l.split("\t") for l in out.splitlines() if re.match(r"^(plain|zeropp)\t", l)]
        ok([r[0] for r in rows] == ["plain", "zeropp"], f"rows {[r[0] for r in rows]}")
        inter = sum(s + 4 * math.ceil(s / 256) + q4(s) for s in shards()) + 32
        grads = 3 * sum(q4(s) for s in shards())
        got = {}
        for r in rows:
            if len(r) < 12:
                ok(False, f"short row {r}")
                continue
            ok(r[3] == r[4] and r[5] == r[6] and r[8] == "1",
               f"{r[0]}: measured {r[3]}, {r[5]} != theory {r[4]}, {r[6]} (exact {r[8]})")
            got[r[0]] = int(r[3])
            if r[0] == "zeropp":
                ok(int(r[3]) == inter and int(r[5]) == inter,
                   f"zeropp: to the other node {r[3]} (largest {r[5]}), closed form {inter}")
                ok(int(r[7]) == grads, f"zeropp: gradient bytes {r[7]}, closed form {grads}")
        if len(got) == 2:
            ok(got["zeropp"] <= 0.25 * got["plain"],
               f"zeropp sends {got['zeropp']} to the other node, plain {got['plain']}: > 0.25x")
        m = re.search(r"ratio ZeRO\+\+ / plain: bytes to the other node ([0-9.]+)", out)
        want = got.get("zeropp", 0) / got["plain"] if got.get("plain") else -1
        ok(m and abs(float(m.group(1)) - want) < 1e-4, f"ratio line {m and m.group(1)}, "
           f"expected {want:.4f}")
    return report()


if __name__ == "__main__":
    sys.exit(main())
