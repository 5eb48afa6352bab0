#!/ usr / bin / env python3
"""safetensors_check.py — an independent reader of safetensors files (zero's export included).

Uses nothing but the public format (https://github.com/huggingface/safetensors): an 8-byte
little-endian header length N, N bytes of UTF-8 JSON mapping tensor names to
{"dtype", "shape", "data_offsets": [begin, end]} (plus an optional "__metadata__" of strings),
then the raw little-endian data, offsets relative to the end of the header.

Checks: header length within the file, JSON object, known dtypes, shapes of non-negative
integers, end - begin == elements * dtype size, tensors back to back from offset 0 without gaps
or overlaps up to the end of the file. With --gpt2 L,C,V,T it also checks that the names and
shapes are exactly those of a Hugging Face GPT-2 model (Conv1D weights [in, out]); with
--tensor NAME:D0,D1,... (repeated) that the names and shapes are exactly the ones given (any
other model's export). With --finite it reads every F32/BF16 value and checks it is finite.

Exit status 0 when every check passes, 1 otherwise (each problem printed on stderr).
Usage: safetensors_check.py FILE [--gpt2 L,C,V,T | --tensor NAME:SHAPE ...] [--dtype F32|BF16]
                            [--finite]
"""
import argparse
import array
import json
import math
import os
import struct
import sys

DTYPE_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


def gpt2_shapes(layers, dim, vocab, seq):
    s = {
    "wte.weight" : [ vocab, dim ], "wpe.weight" : [ seq, dim ]}
    for i in range(layers):
        p = "h.%d." % i
        s[p + "ln_1.weight"] = [dim]
        s[p + "ln_1.bias"] = [dim]
        s[p + "attn.c_attn.weight"] = [dim, 3 * dim]
        s[p + "attn.c_attn.bias"] = [3 * dim]
        s[p + "attn.c_proj.weight"] = [dim, dim]
        s[p + "attn.c_proj.bias"] = [dim]
        s[p + "ln_2.weight"] = [dim]
        s[p + "ln_2.bias"] = [dim]
        s[p + "mlp.c_fc.weight"] = [dim, 4 * dim]
        s[p + "mlp.c_fc.bias"] = [4 * dim]
        s[p + "mlp.c_proj.weight"] = [4 * dim, dim]
        s[p + "mlp.c_proj.bias"] = [dim]
    s["ln_f.weight"] = [dim]
    s["ln_f.bias"] = [dim]
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--gpt2", help="L,C,V,T: expect exactly GPT-2's names and shapes")
    ap.add_argument("--tensor", action="append", default=[],
                    help="NAME:D0,D1,...: expect exactly the tensors given (repeat the option)")
    ap.add_argument("--dtype", help="expect every tensor to have this dtype (F32, BF16, ...)")
    ap.add_argument("--finite", action="store_true", help="check every F32/BF16 value is finite")
    a = ap.parse_args()
    errors = []

    size = os.path.getsize(a.file)
    with open(a.file, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            print("%s: %d bytes, expected at least 8" % (a.file, size), file=sys.stderr)
            return 1
        (n,) = struct.unpack("<Q", raw)
        if n > size - 8:
            print("%s: header length %d exceeds the file (%d bytes)" % (a.file, n, size),
                  file=sys.stderr)
            return 1
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            print("%s: header is not UTF-8 JSON: %s" % (a.file, e), file=sys.stderr)
            return 1
    if not isinstance(header, dict):
        print("%s: header is not a JSON object" % a.file, file=sys.stderr)
        return 1
    data_bytes = size - 8 - n
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and
                                 all(isinstance(v, str) for v in meta.values())):
        errors.append("__metadata__ is not an object of strings")

    spans = []
    for name, e in header.items():
        if not isinstance(e, dict):
            errors.append("%s: entry is not an object" % name)
            continue
        dt, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if dt not in DTYPE_SIZES:
            errors.append("%s: unknown dtype %r" % (name, dt))
            continue
        if a.dtype and dt != a.dtype:
            errors.append("%s: dtype %s, expected %s" % (name, dt, a.dtype))
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            errors.append("%s: shape %r is not a list of non-negative integers" % (name, shape))
            continue
        if not (isinstance(offs, list) and len(offs) == 2 and
                all(isinstance(o, int) and o >= 0 for o in offs) and offs[0] <= offs[1]):
            errors.append("%s: data_offsets %r is not [begin, end]" % (name, offs))
            continue
        want = math.prod(shape) * DTYPE_SIZES[dt]
        if offs[1] - offs[0] != want:
            errors.append("%s: data_offsets %r hold %d bytes, expected %d (%s x %s)" %
                          (name, offs, offs[1] - offs[0], want, shape, dt))
        spans.append((offs[0], offs[1], name))

    spans.sort()
    pos = 0
    for b, e, name in spans:
        if b != pos:
            errors.append("%s: starts at byte %d, expected %d (%s)" %
                          (name, b, pos, "gap" if b > pos else "overlap"))
        pos = max(pos, e)
    if pos != data_bytes:
        errors.append("tensors end at byte %d of the data, the file holds %d" % (pos, data_bytes))

    want, model = None, None
    if a.gpt2:
        L, C, V, T = (int(x) for x in a.gpt2.split(","))
        want, model = gpt2_shapes(L, C, V, T), "a GPT-2 tensor of this configuration"
    elif a.tensor:
        want, model = {}, "one of the --tensor names"
        for t in a.tensor:
            name, _, dims = t.rpartition(":")
            want[name] = [int(d) for d in dims.split(",") if d]
    if want is not None:
        for name in sorted(set(want) - set(header)):
            errors.append("%s: missing (expected shape %s)" % (name, want[name]))
        for name in sorted(set(header) - set(want)):
            errors.append("%s: not %s" % (name, model))
        for name in sorted(set(want) & set(header)):
            if header[name].get("shape") != want[name]:
                errors.append("%s: shape %s, expected %s" %
                              (name, header[name].get("shape"), want[name]))

    if a.finite and not errors:
        with open(a.file, "rb") as f:
            for b, e, name in spans:
                dt = header[name]["dtype"]
                if dt not in ("F32", "BF16"):
                    continue
                f.seek(8 + n + b)
                left, bad = e - b, 0
                while left:
                    chunk = f.read(min(left, 1 << 22))
                    left -= len(chunk)
                    if dt == "F32":
                        vals = array.array("f", chunk)
                    else:  # BF16: the upper half of an fp32
                        u16 = array.array("H", chunk)
                        vals = array.array("f", struct.pack("<%dI" % len(u16),
                                                            *(x << 16 for x in u16)))
                    if sys.byteorder != "little":
                        vals.byteswap()
                    bad += sum(1 for v in vals if not math.isfinite(v))
                if bad:
                    errors.append("%s: %d non-finite values" % (name, bad))

    for msg in errors:
        print("%s: %s" % (a.file, msg), file=sys.stderr)
    if errors:
        print("FAILED: %d problems" % len(errors), file=sys.stderr)
        return 1
    largest = max((e - b for b, e, _ in spans), default=0)
    print("OK: %s: %d tensors, %d data bytes, largest tensor %d bytes" %
          (a.file, len(spans), data_bytes, largest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
