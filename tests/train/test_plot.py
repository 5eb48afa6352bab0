#!/usr/bin/env python3
"""`zero plot` (src/cli/plot.c): usage: test_plot.py ZERO_BINARY WORK_DIR

Oracle: the data the test writes itself, two metrics logs of known curves. In the SVG every
curve is a path whose vertices are an affine image of (step, value) — log10 of the value for the
gradient norm — found by a least-squares fit with residuals below 0.01 pt, y growing upwards;
the validation loss has only its evaluation steps. The PNG has the requested size, valid chunk
CRCs, and both runs' legend colours among its pixels (decoded here with zlib); the PDF is a PDF.
A log cut short by a crash plots without its last line; bad input exits non-zero naming the file
and line, the format or the flag, and leaves no file behind.
"""
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, exit_code  # noqa: E402

ZERO, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


def curves(k):
    """Run k's records: steps 1..60, evaluations every 10."""
    out = []
    for s in range(1, 61):
        r = {"step": s, "loss": 5.5 - 0.03 * s * (1 + k) + 0.05 * math.sin(s),
             "lr": 1e-3 * (1 + 2 * k) * min(1.0, s / 10), "grad_norm": 30.0 / s ** (1 + 0.2 * k),
             "tokens_per_s": 9e4 + 2e4 * k - 3e4 / s}
        if s % 10 == 0:
            r["val_loss"] = 5.4 - 0.03 * s * (1 + k)
        out.append(r)
    return out


runs = [curves(0), curves(1)]
logs = []
for k, recs in enumerate(runs):
    p = os.path.join(WORK, "run%d.jsonl" % k)
    with open(p, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    logs.append(p)


def plot(*args):
    p = subprocess.run([ZERO, "plot", *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def svg_paths(path):
    """Vertex lists of the SVG's paths made of moves and lines only."""
    out = []
    for d in re.findall(r' d="([^"]*)"', open(path).read()):
        if re.fullmatch(r"[ML0-9. eE+-]*", d):
            nums = [float(v) for v in re.findall(r"-?[0-9.]+(?:e[+-]?[0-9]+)?", d)]
            pts = list(zip(nums[0::2], nums[1::2]))
            if len(pts) >= 3:
                out.append(pts)
    return out


def affine(xs, ys):
    """Least-squares ys = a xs + b: (a, largest residual)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    b = my - a * mx
    return a, max(abs(a * x + b - y) for x, y in zip(xs, ys))


def drawn(paths, steps, values):
    """A path whose vertices are an affine image of (steps, values), y up. Cairo merges a line
    segment into the one before when both go the same way, so a path may hold a subsequence of
    the points: its first and last, and each vertex at one of the steps."""
    for pts in paths:
        if len(pts) > len(steps) or pts[0][0] >= pts[-1][0]:
            continue
        x0, x1 = pts[0][0], pts[-1][0]
        at = [steps[0] + (x - x0) / (x1 - x0) * (steps[-1] - steps[0]) for x, _ in pts]
        idx = [steps.index(round(s)) if round(s) in steps and abs(s - round(s)) < 1e-3 else None
               for s in at]
        if None in idx or idx != sorted(set(idx)) or idx[0] != 0 or idx[-1] != len(steps) - 1:
            continue
        ay, ry = affine([values[i] for i in idx], [p[1] for p in pts])
        if ay < 0 and ry < 0.01:
            return True
    return False


def series(recs, key, log=False):
    pts = [(r["step"], r[key]) for r in recs if key in r]
    return [s for s, _ in pts], [math.log10(v) if log else v for _, v in pts]


# 1. SVG: every curve of both runs
svg = os.path.join(WORK, "runs.svg")
rc, out = plot(*logs, "-o", svg)
check(rc == 0 and os.path.exists(svg), "svg: exit %d\n%s" % (rc, out))
paths = svg_paths(svg) if rc == 0 else []
for k, recs in enumerate(runs):
    for key in ("loss", "val_loss", "lr", "grad_norm", "tokens_per_s"):
        steps, values = series(recs, key, log=key == "grad_norm")
        check(drawn(paths, steps, values), "svg: run %d's %s is not drawn" % (k, key))

# 2. PNG of a given size, both legend colours present; PDF
png = os.path.join(WORK, "runs.png")
rc, out = plot(*logs, "-o", png, "--width", "900", "--height", "600")
check(rc == 0, "png: exit %d\n%s" % (rc, out))
if rc == 0:
    data = open(png, "rb").read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", "png signature")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        crc = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]
        check(zlib.crc32(kind + body) == crc, "png chunk %s crc" % kind)
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype = ihdr[:4]
    check((w, h, depth) == (900, 600, 8) and ctype in (2, 6), "png header %s" % (ihdr,))
    bpp = 3 if ctype == 2 else 4
    raw, stride, prev, colours = zlib.decompress(idat), w * bpp, bytearray(w * bpp), set()
    for y in range(h):
        f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = row[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            pred = {0: 0, 1: a, 2: b, 3: (a + b) // 2}.get(f)
            if pred is None:  # Paeth
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
            row[i] = (row[i] + pred) & 255
        colours.update(bytes(row[i:i + 3]) for i in range(0, stride, bpp))
        prev = row
    # the first two legend colours (plot.c's palette), each channel to within cairo's rounding
    for k, rgb in enumerate(((0.12, 0.47, 0.71), (0.84, 0.15, 0.16))):
        want = [c * 255 for c in rgb]
        check(any(all(abs(p[i] - want[i]) <= 1 for i in range(3)) for p in colours),
              "png: run %d's colour %s not drawn" % (k, rgb))
pdf = os.path.join(WORK, "runs.pdf")
rc, out = plot(logs[0], "-o", pdf)
check(rc == 0 and open(pdf, "rb").read(5) == b"%PDF-", "pdf: exit %d\n%s" % (rc, out))

# 3. a log cut short by a crash: its last line left out
cut = os.path.join(WORK, "cut.jsonl")
with open(cut, "w") as f:
    for r in runs[0][:20]:
        f.write(json.dumps(r) + "\n")
    f.write('{"step": 21, "loss": 4.')
rc, out = plot(cut, "-o", os.path.join(WORK, "cut.svg"))
steps, values = series(runs[0][:20], "loss")
check(rc == 0 and drawn(svg_paths(os.path.join(WORK, "cut.svg")), steps, values),
      "cut log: exit %d, 20 points not drawn\n%s" % (rc, out))

# 4. bad input
bad = os.path.join(WORK, "bad.jsonl")
with open(bad, "w") as f:
    f.write(json.dumps(runs[0][0]) + "\nnot json\n")
cases = [((os.path.join(WORK, "missing.jsonl"), "-o", svg), 1, "missing.jsonl"),
         ((bad, "-o", svg), 1, "bad.jsonl:2 is not a metrics record"),
         ((logs[0], "-o", os.path.join(WORK, "x.gif")), 2, "x.gif: unknown format"),
         ((logs[0],), 2, "usage"),
         ((logs[0], "-o", svg, "--width", "0"), 2, "--width"),
         ((logs[0], "-o", os.path.join(WORK, "no", "dir", "x.svg")), 1, "cannot write")]
for args, want_rc, want in cases:
    rc, out = plot(*args)
    check(rc == want_rc and want in out, "%s: exit %d (expected %d), '%s' not in:\n%s" % (
        args, rc, want_rc, want, out))
check(not [f for f in os.listdir(WORK) if f.endswith(".tmp")], "temporary files left: %s" %
      os.listdir(WORK))
sys.exit(exit_code())
