#!/usr/bin/env python3
"""zero's dynamic quantization maps against bitsandbytes' create_dynamic_map, replayed with
torch (its float32 linspace, as bitsandbytes builds them): usage: test_q8dyn_bnb.py
TEST_Q8DYN_BINARY WORK_DIR

Every one of the 512 entries (signed and unsigned map) within 2 fp32 ulp of torch's: zero takes
each midpoint exactly and rounds once, torch's linspace rounds its steps in float32 (src/kernels/
q8dyn.h). Needs the test venv with torch (tests/pyvenv.py); skipped with one line without it.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pyvenv  # noqa: E402

BINARY, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)

CHECK = r"""
import sys
import numpy as np, torch
def create_dynamic_map(signed):  # bitsandbytes' defaults: 7 exponent bits, 8 bits in all
    data = []
    for i in range(7):
        items = 2 ** i + 1 if signed else 2 ** (i + 1) + 1
        b = torch.linspace(0.1, 1, items, dtype=torch.float32)
        means = (b[:-1] + b[1:]) / 2.0
        data += ((10 ** (-6 + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-6 + i)) * means).tolist()
    data += [0, 1.0]
    data.sort()
    return np.array(data, dtype=np.float32)
ours = np.fromfile(sys.argv[1], dtype=np.float32)
failures = 0
for k, signed in enumerate((True, False)):
    ref = create_dynamic_map(signed).view(np.int32).astype(np.int64)
    got = ours[256 * k:256 * (k + 1)].view(np.int32).astype(np.int64)
    ulps = np.abs(ref - got)
    print("%s map: %d entries differ from torch's, at most %d ulp" % (
        "signed" if signed else "unsigned", int((ulps > 0).sum()), int(ulps.max())))
    failures += int((ulps > 2).sum())
sys.exit(1 if failures else 0)
"""


sys.exit(pyvenv.check_output_of(BINARY, os.path.join(WORK, "q8dyn-maps.bin"), CHECK,
                                  ("torch",)))
