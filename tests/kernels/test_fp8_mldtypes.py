#!/usr/bin/env python3
"""zero's FP8 encode against ml_dtypes (float8_e4m3fn, float8_e5m2), an independent
implementation of the OCP formats: usage: test_fp8_mldtypes.py TEST_FP8_BINARY WORK_DIR

test_fp8 writes its million fp32 inputs (bit patterns over all 2^32 and a dense stretch over
FP8's range) with zero's codes for both formats; here ml_dtypes casts the same inputs after
clipping to the largest finite value (ml_dtypes does not saturate; zero does, fp8.h), and every
code must match; NaN inputs must give the format's NaN with their sign, and every one of the 256
codes must decode in ml_dtypes to what zero's round trip implies. Needs the test venv
(tests/pyvenv.py); skipped with one line without it.
"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pyvenv  # noqa: E402

BINARY, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)

CHECK = r"""
import struct, sys
import numpy as np, ml_dtypes
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<I", raw[:4])[0]
x = np.frombuffer(raw, dtype=np.float32, count=n, offset=4)
failures = 0
for k, (name, dt, mx) in enumerate((("e4m3", ml_dtypes.float8_e4m3fn, 448.0),
                                    ("e5m2", ml_dtypes.float8_e5m2, 57344.0))):
    ours = np.frombuffer(raw, dtype=np.uint8, count=n, offset=4 + (4 + k) * n)
    with np.errstate(invalid="ignore"):
        ref = np.clip(x, -mx, mx).astype(dt).view(np.uint8)
    nan = np.isnan(x)
    bad = np.flatnonzero((ref != ours) & ~nan)
    for i in bad[:5]:
        print("FAIL: %s: %r -> 0x%02x, ml_dtypes 0x%02x" % (name, float(x[i]), ours[i], ref[i]))
    want_nan = 0x7F | (np.signbit(x[nan]).astype(np.uint8) << 7)
    nan_bad = int((ours[nan] != want_nan).sum())
    if nan_bad:
        print("FAIL: %s: %d NaN inputs not the format's NaN with their sign" % (name, nan_bad))
    failures += len(bad) + nan_bad
    print("%s: %d inputs, %d differ from ml_dtypes" % (name, n, len(bad)))
sys.exit(1 if failures else 0)
"""


sys.exit(pyvenv.check_output_of(BINARY, os.path.join(WORK, "fp8-sample.bin"), CHECK,
                                  ("ml_dtypes",)))
