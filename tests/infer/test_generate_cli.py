#!/usr/bin/env python3
"""`zero generate` end to end: usage: test_generate_cli.py ZERO_BINARY WORK_DIR

- a tiny model trained for 40 steps on 2 ranks and saved, then exported by `zero convert`;
- --json parses, holds how threads waited (passive, with a short spin where the cores were idle
  at start; the caller's OMP_WAIT_POLICY or GOMP_SPINCOUNT kept), the model's shape, the sampling settings, positive timings and memory
  figures, and the KV-cache bytes in closed form (2 x layers x batch x positions x dim x 4);
  --dtype bf16 halves the weight and KV bytes and decodes the checkpoint and its export alike;
  --weights int8 / int4 store fewer bytes (int4 < int8 < half of fp32) and decode the checkpoint
  and its export alike;
- --greedy from the checkpoint, from SAVE_DIR/latest and from the safetensors file: the same
  tokens; twice: the same; --top-k 1 equals --greedy; --seed repeats and --batch 3 gives each
  sequence its own stream (sequence 0 of a batch equals the batch-1 run with the same seed);
- --stream prints the prompt and then the same text as the plain run; the figures go to stderr;
- the new tokens stop at --max-new-tokens, or at the context (stopped: "context");
- a safetensors file zero did not write (Hugging Face's names under "transformer.", BF16
  tensors, extra tensors, no metadata) is refused without heads (dim 32 is no multiple of 64),
  then generates with --heads, or with a config.json (n_head) beside it;
- bad input exits 1 with one message naming the thing: an empty prompt, a prompt longer than the
  context, a byte outside a 128-token vocabulary, a missing model, a truncated file, a missing
  tensor, a misshapen tensor; bad flags exit 2.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, exit_code  # noqa: E402

ZERO, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


def run(*args, cmd="generate"):
    p = subprocess.run([ZERO, cmd, *args], capture_output=True, timeout=120)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def gen_json(*args):
    rc, out, err = run("--json", "--threads", "1", *args)
    check(rc == 0, f"{args}: exit {rc}: {err}")
    return json.loads(out) if rc == 0 else None


SAVE = os.path.join(WORK, "ckpt")
ST = os.path.join(WORK, "model.safetensors")
TINY = ["--set", "model.layers=2", "--set", "model.dim=32", "--set", "model.heads=2",
        "--set", "model.seq=48"]
rc, _, err = run("-q", "--no-peak", "--ranks", "2", "--steps", "40", "--set", "train.samples=0",
                 *TINY, "--save-dir", SAVE, cmd="train")
check(rc == 0, f"train: {err}")
rc, _, err = run(SAVE, ST, cmd="convert")
check(rc == 0, f"convert: {err}")

# --json: shape, settings, figures
d = gen_json("--model", SAVE, "--prompt", "The cat", "--greedy", "--max-new-tokens", "20")
check(d["format"] == "checkpoint" and d["layers"] == 2 and d["heads"] == 2 and d["dim"] == 32
      and d["vocab"] == 256 and d["context"] == 48, f"shape: {d}")
check(d["prompt_tokens"] == 7 and d["new_tokens"] == 20 and d["batch"] == 1, f"counts: {d}")
check(d["stopped"] == "max_new_tokens", d["stopped"])
check(d["sampling"]["greedy"] is True and d["sampling"]["seed"] == 1337, d["sampling"])
for k in ("ttft_s", "decode_s", "decode_tokens_per_s", "prefill_tokens_per_s", "peak_rss_bytes",
          "weight_bytes", "kv_cache_bytes", "activation_bytes", "params"):
    check(d[k] > 0, f"{k} = {d[k]}")
# the cache holds the prompt and all new tokens but the last: 7 + 19 positions
check(d["kv_cache_bytes"] == 2 * 2 * 1 * 26 * 32 * 4, f"KV bytes {d['kv_cache_bytes']}")
# weights: at least 4 bytes per parameter, padding at most 16 floats per tensor (2 + 12 L + 2)
check(4 * d["params"] <= d["weight_bytes"] <= 4 * d["params"] + 64 * (4 + 12 * 2),
      f"weight bytes {d['weight_bytes']} for {d['params']} parameters")
# how threads waited between parallel regions: chosen at start unless the environment says
# (passive, after a short spin where the cores were idle), and the caller's variables win
def wait_with(**env):
    e = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    p = subprocess.run([ZERO, "generate", "--json", "--threads", "1", "--model", SAVE, "--prompt",
                        "The", "--max-new-tokens", "2"], capture_output=True, timeout=120,
                       env={**e, **env})
    check(p.returncode == 0, f"{env}: exit {p.returncode}")
    return json.loads(p.stdout)["openmp_wait"] if p.returncode == 0 else None


chosen = wait_with()
check(chosen in ("passive", "passive, GOMP_SPINCOUNT 3000"), f"openmp_wait {chosen!r}")
check(wait_with(GOMP_SPINCOUNT="7") == "passive, GOMP_SPINCOUNT 7", "the user's GOMP_SPINCOUNT")
check(wait_with(OMP_WAIT_POLICY="active") == "active", "the user's OMP_WAIT_POLICY")
greedy = d["tokens"][0]
check(len(greedy) == 20 and all(0 <= t < 256 for t in greedy), greedy)
check(d["outputs"][0] == "".join(chr(t) for t in greedy), "outputs: the tokens as text")

# the same tokens from SAVE/latest, from the safetensors export, twice, and with --top-k 1
for args in (["--model", os.path.join(SAVE, "latest")], ["--model", ST], ["--model", SAVE],
             ["--model", SAVE, "--top-k", "1", "--seed", "9"]):
    e = gen_json(*args, "--prompt", "The cat", "--max-new-tokens", "20",
                 *([] if "--top-k" in args else ["--greedy"]))
    check(e["tokens"][0] == greedy, f"{args}: {e['tokens'][0]} vs greedy {greedy}")
check(gen_json("--model", ST, "--prompt", "x", "--greedy")["format"] == "safetensors", "format")

# bf16: half the weight and KV bytes; checkpoint and safetensors alike
h1 = gen_json("--model", SAVE, "--prompt", "The cat", "--greedy", "--max-new-tokens", "20",
              "--dtype", "bf16")
h2 = gen_json("--model", ST, "--prompt", "The cat", "--greedy", "--max-new-tokens", "20",
              "--dtype", "bf16")
check(h1["dtype"] == "bf16" and d["dtype"] == "fp32", f"dtype {h1['dtype']} / {d['dtype']}")
check(h1["tokens"] == h2["tokens"], "bf16 greedy: checkpoint and safetensors alike")
check(2 * h1["kv_cache_bytes"] == d["kv_cache_bytes"], "bf16 KV bytes: half")
check(2 * h1["weight_bytes"] == d["weight_bytes"], "bf16 weight bytes: half")

# int8 / int4 weights: fewer bytes, the checkpoint and its export alike, group size reported
q8 = gen_json("--model", SAVE, "--prompt", "The cat", "--greedy", "--max-new-tokens", "20",
              "--weights", "int8")
q8s = gen_json("--model", ST, "--prompt", "The cat", "--greedy", "--max-new-tokens", "20",
               "--weights", "int8")
q4 = gen_json("--model", SAVE, "--prompt", "The cat", "--greedy", "--max-new-tokens", "20",
              "--weights", "int4", "--group-size", "32")
check(q8["weights"] == "int8" and q8["group_size"] == 64 and q4["weights"] == "int4" and
      q4["group_size"] == 32 and d["weights"] == "fp32", "weights and group_size in the JSON")
check(q8["tokens"] == q8s["tokens"], "int8 greedy: checkpoint and safetensors alike")
check(q4["weight_bytes"] < q8["weight_bytes"] < d["weight_bytes"] / 2,
      f"weight bytes int4 {q4['weight_bytes']} < int8 {q8['weight_bytes']} < fp32 / 2")

# seeds: reproducible; batch sequences draw from seed + b
s1 = gen_json("--model", SAVE, "--prompt", "The", "--seed", "5", "--temperature", "1.2")
s2 = gen_json("--model", ST, "--prompt", "The", "--seed", "5", "--temperature", "1.2")
check(s1["tokens"] == s2["tokens"], "seed 5 repeats (checkpoint and safetensors)")
b3 = gen_json("--model", SAVE, "--prompt", "The", "--seed", "5", "--temperature", "1.2",
              "--batch", "3")
check(len(b3["tokens"]) == 3 and b3["tokens"][0] == s1["tokens"][0], "batch 3, sequence 0")
b1 = gen_json("--model", SAVE, "--prompt", "The", "--seed", "6", "--temperature", "1.2")
check(b3["tokens"][1] == b1["tokens"][0], "batch sequence 1 draws from seed + 1")
check(b3["kv_cache_bytes"] == 3 * s1["kv_cache_bytes"], "KV bytes scale with the batch")

# --stream: the prompt, then the same text as the plain run; figures on stderr
rc, out_s, err_s = run("--model", SAVE, "--prompt", "The cat", "--greedy", "--max-new-tokens",
                       "20", "--stream", "--threads", "1")
rc2, out_p, err_p = run("--model", SAVE, "--prompt", "The cat", "--greedy", "--max-new-tokens",
                        "20", "--threads", "1")
check(rc == 0 and rc2 == 0, f"stream / plain: {err_s} {err_p}")
check(out_s == out_p == b"The cat" + bytes(greedy) + b"\n", f"stream {out_s!r}, plain {out_p!r}")
for e in (err_s, err_p):
    check("time to first token" in e and "tokens/s" in e and "peak RSS" in e
          and "KV cache" in e, f"figures on stderr: {e}")

# the context stops generation: 40-byte prompt, context 48 -> 9 new tokens
d = gen_json("--model", SAVE, "--prompt", "a" * 40, "--max-new-tokens", "100")
check(d["new_tokens"] == 9 and d["stopped"] == "context", f"{d['new_tokens']} {d['stopped']}")


# a file zero did not write: "transformer." names, BF16, an extra tensor, no metadata
def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(path, header, tensors):
    """tensors: name -> (dtype, shape, bytes); header extras (metadata) from `header`."""
    hdr, blob, off = dict(header), b"", 0
    for name, (dt, shape, data) in tensors.items():
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        blob += data
        off += len(data)
    text = json.dumps(hdr).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob)


hdr, data = read_st(ST)
tensors = {}
for name, e in hdr.items():
    if name != "__metadata__":
        b, en = e["data_offsets"]
        tensors[name] = (e["dtype"], e["shape"], data[b:en])


def to_bf16(raw):  # truncate fp32 to bf16 (an exact input: the reader widens it)
    return b"".join(raw[i + 2:i + 4] for i in range(0, len(raw), 4))


foreign = {"transformer." + k: ("BF16", s, to_bf16(v)) for k, (_, s, v) in tensors.items()}
foreign["lm_head.weight"] = foreign["transformer.wte.weight"]
foreign["transformer.h.0.attn.masked_bias"] = ("F32", [], struct.pack("<f", -1e4))
# in a directory of its own: zero convert wrote a config.json beside model.safetensors
os.makedirs(os.path.join(WORK, "foreign"), exist_ok=True)
FOREIGN = os.path.join(WORK, "foreign", "model.safetensors")
write_st(FOREIGN, {}, foreign)
rc, out, err = run("--model", FOREIGN, "--prompt", "The cat", "--greedy", "--json")
check(rc == 1 and "heads" in err, f"no heads anywhere, dim 32: named: {err}")
f = gen_json("--model", FOREIGN, "--prompt", "The cat", "--greedy", "--heads", "2")
# 7 prompt tokens and the default 64 new ones stop at the context of 48: 42 new tokens
check(f and f["heads"] == 2 and f["new_tokens"] == 42 and f["stopped"] == "context",
      "a foreign bf16 file generates")
with open(os.path.join(WORK, "foreign", "config.json"), "w") as cf:
    json.dump({"n_head": 2, "n_embd": 32}, cf)
f = gen_json("--model", FOREIGN, "--prompt", "The cat", "--greedy", "--max-new-tokens", "5")
check(f and f["heads"] == 2, "heads from config.json beside the file")


# bad input: exit 1 and a message naming the thing
def bad(args, needle, code=1):
    rc, out, err = run(*args)
    check(rc == code and needle in err, f"{args}: exit {rc} (expected {code}), stderr {err!r} "
                                        f"(expected to name {needle!r})")


bad(["--model", SAVE, "--prompt", ""], "empty")
bad(["--model", SAVE, "--prompt", "x" * 49], "longer than the model's context of 48")
bad(["--model", os.path.join(WORK, "nope"), "--prompt", "x"], "nope")
cut = os.path.join(WORK, "cut.safetensors")
with open(ST, "rb") as f:
    whole = f.read()
with open(cut, "wb") as f:
    f.write(whole[:len(whole) // 2])
bad(["--model", cut, "--prompt", "x"], "cut.safetensors")
missing = dict(tensors)
del missing["h.1.mlp.c_fc.bias"]
write_st(os.path.join(WORK, "missing.safetensors"), {}, missing)
bad(["--model", os.path.join(WORK, "missing.safetensors"), "--prompt", "x", "--heads", "2"],
    "h.1.mlp.c_fc.bias is missing")
wrong = dict(tensors)
dt, shape, raw = wrong["h.0.attn.c_proj.weight"]
wrong["h.0.attn.c_proj.weight"] = (dt, [shape[0] // 2, shape[1] * 2], raw)
write_st(os.path.join(WORK, "wrong.safetensors"), {}, wrong)
bad(["--model", os.path.join(WORK, "wrong.safetensors"), "--prompt", "x", "--heads", "2"],
    "h.0.attn.c_proj.weight has shape [16, 64], expected [32, 32]")
# a 128-token vocabulary: bytes >= 128 are not tokens
SMALL, ASCII = os.path.join(WORK, "small"), os.path.join(WORK, "ascii.txt")
with open(ASCII, "w") as f:
    f.write("the quick brown fox jumps over the lazy dog.\n" * 200)
rc, _, err = run("-q", "--no-peak", "--steps", "1", "--set", "train.samples=0", "--data", ASCII,
                 "--set", "model.vocab=128", *TINY, "--save-dir", SMALL, cmd="train")
check(rc == 0, f"train vocab 128: {err}")
bad(["--model", SMALL, "--prompt", "caf\u00e9"], "0xc3 at offset 3")
# flags
bad(["--model", SAVE], "--prompt", 2)
bad(["--model", SAVE, "--prompt", "x", "--top-p", "0"], "--top-p", 2)
bad(["--model", SAVE, "--prompt", "x", "--max-new-tokens", "0"], "--max-new-tokens", 2)
bad(["--model", SAVE, "--prompt", "x", "--stream", "--json"], "exclude", 2)
bad(["--model", SAVE, "--prompt", "x", "--bogus"], "--bogus", 2)
bad(["--model", SAVE, "--prompt", "x", "--dtype", "fp16"], "--dtype", 2)
bad(["--model", SAVE, "--prompt", "x", "--weights", "int2"], "--weights", 2)
bad(["--model", SAVE, "--prompt", "x", "--weights", "int8", "--group-size", "7"], "--group-size", 2)
bad(["--model", SAVE, "--prompt", "x", "--weights", "int8", "--dtype", "bf16"], "fp32", 2)

sys.exit(exit_code())
