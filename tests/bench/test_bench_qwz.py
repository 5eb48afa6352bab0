#!/usr/bin/env python3
"""test_bench_qwz.py — smoke test of bench/bench_qwz.sh on a tiny model (run by CTest).

usage: test_bench_qwz.py SCRIPT ZERO_BINARY

Runs the script (one round, 3 steps) on a 2-layer GPT (dim 64, seq 32, every unit sharded) and
checks from outside: exit 0; a row per run, qwZ off then on, each with its parameter bytes and
bytes to the other node equal to the engine's theory; the parameter bytes equal to the closed
form of the model's units over 2 ranks (per gather and rank, 4 S bytes in fp32, S + 4 ceil(S /
256) with qwZ; two gathers per unit and step, three for the tied embeddings); the summary's
ratio on / off of the parameter bytes printed as their quotient. Prints `N passed, M failed`,
exits 1 if anything failed.
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


def closed_form(qwz):
    units = [span(V * C) + span(T * C)]
    units += [2 * span(C) + span(3 * C * C) + span(3 * C) + span(C * C) + span(C) + 2 * span(C) +
              span(4 * C * C) + span(4 * C) + span(4 * C * C) + span(C)] * L
    units += [2 * span(C)]
    total = 0
    for i, p in enumerate(units):
        s = (p + 31) // 32 * 32 // 2
        total += (3 if i == 0 else 2) * (s + 4 * math.ceil(s / 256) if qwz else 4 * s)
    return total


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
        ok(code == 0, f"bench_qwz.sh exit {code}")
        rows = [l.split("\t") for l in out.splitlines() if re.match(r"^(false|true)\t", l)]
        ok([r[0] for r in rows] == ["false", "true"], f"rows {[r[0] for r in rows]}")
        for r in rows:
            if len(r) < 8:
                ok(False, f"short row {r}")
                continue
            q = r[0] == "true"
            ok(r[4] == r[5] and r[6] == r[7], f"qwZ {r[0]}: measured {r[4]}, {r[6]} != theory "
               f"{r[5]}, {r[7]}")
            ok(int(r[4]) == closed_form(q), f"qwZ {r[0]}: parameter bytes {r[4]}, closed form "
               f"{closed_form(q)}")
        m = re.search(r"ratio on/off: parameter bytes ([0-9.]+)", out)
        want = closed_form(True) / closed_form(False)
        ok(m and abs(float(m.group(1)) - want) < 1e-4, f"ratio line {m and m.group(1)}, "
           f"expected {want:.4f}")
    return report()


if __name__ == "__main__":
    sys.exit(main())
