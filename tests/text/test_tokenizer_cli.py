#!/usr/bin/env python3
"""`zero train --tokenizer` and `zero generate --tokenizer` end to end, against Hugging Face's
`tokenizers` (tests/pyvenv.py): usage: test_tokenizer_cli.py ZERO_BINARY WORK_DIR

A 600-token byte-level BPE is trained by `tokenizers` on the text (tinyshakespeare when present,
else a built-in text) and saved as vocab.json + merges.txt and as llm.c's gpt2_tokenizer.bin.
- --print-config takes model.vocab from the tokenizer (600); model.vocab set on the command line
  wins; a smaller one, a tokenizer without data, a missing tokenizer file fail naming them;
- the data are the tokens `tokenizers` gives: the run's unigram entropy of the validation part
  (the last 10% of the tokens) equals the one computed here from `tokenizers`' ids;
- the end-of-training samples are decoded: with train.prompt they start with the prompt's text,
  without one with "<|endoftext|>" (the tokenizer's end-of-text token);
- zero generate --tokenizer from the checkpoint: prompt_tokens is the length of `tokenizers`'
  encoding of the prompt, the JSON text is `tokenizers`' decoding of the tokens, and the plain
  output is the prompt followed by that text; llm.c's file decodes the same tokens alike from an
  empty prompt (its end-of-text token), and refuses a prompt it cannot encode.
"""
import json
import math
import os
import shutil
import subprocess
import sys
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, exit_code  # noqa: E402
import pyvenv  # noqa: E402

pyvenv.run_in_venv(("tokenizers",))

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

ZERO, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
TINY = ["--set", "model.layers=2", "--set", "model.dim=32", "--set", "model.heads=2",
        "--set", "model.seq=32", "--no-peak", "--threads", "1"]


def run(*args):
    p = subprocess.run([ZERO, *args], capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def main():
    text_path = os.path.join(os.environ.get("ZERO_SHARED_DIR", ""), "data", "tinyshakespeare.txt")
    if not os.path.exists(text_path):
        text_path = os.path.join(WORK, "text.txt")
        with open(text_path, "w") as f:
            f.write("".join("ROMEO: I'll say %d times, it's the %s night!\n" % (i, w)
                            for i in range(3000) for w in ("first", "last", "café")))
    text = open(text_path, encoding="utf-8", newline="").read()
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.train([text_path], trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    files = os.path.join(WORK, "tok")
    os.makedirs(files)
    hf.model.save(files)
    vocab_json = os.path.join(files, "vocab.json")
    vocab = json.load(open(vocab_json))

    # model.vocab from the tokenizer, or as set
    rc, out, err = run("train", "--data", text_path, "--tokenizer", vocab_json, "--print-config")
    cfg = json.loads(out) if rc == 0 else {}
    check(rc == 0 and cfg.get("model", {}).get("vocab") == 600,
          f"--print-config: vocab from the tokenizer: {err}")
    rc, out, err = run("train", "--data", text_path, "--tokenizer", vocab_json, "--print-config",
                       "--set", "model.vocab=640")
    check(rc == 0 and json.loads(out)["model"]["vocab"] == 640, f"model.vocab set wins: {err}")
    rc, _, err = run("train", "--data", text_path, "--tokenizer", vocab_json, "--steps", "1",
                     "--set", "model.vocab=500", *TINY)
    check(rc == 1 and "model.vocab = 500" in err and "600 tokens" in err,
          f"a model.vocab below the tokenizer's: {rc} {err}")
    rc, _, err = run("train", "--tokenizer", vocab_json, "--steps", "1", *TINY)
    check(rc == 1 and "without data.path" in err, f"a tokenizer without data: {rc} {err}")
    missing = os.path.join(WORK, "nothere.json")
    rc, _, err = run("train", "--data", text_path, "--tokenizer", missing, "--steps", "1", *TINY)
    check(rc != 0 and missing in err, f"a missing tokenizer is named: {rc} {err}")

    # train on the encoded text; samples decoded
    save = os.path.join(WORK, "ckpt")
    report = os.path.join(WORK, "report.json")
    rc, out, err = run("train", "--data", text_path, "--tokenizer", vocab_json, "--steps", "20",
                       "--save-dir", save, "--json-report", report, "--set", "train.samples=1",
                       "--set", "train.sample_tokens=12", "--set", "train.prompt=ROMEO:", *TINY)
    check(rc == 0, f"train: {err}")
    check("\n----\nROMEO:" in out, "the sample starts with the prompt's text: %s" %
          out[out.find("samples"):][:200])
    ids = hf.encode(text).ids
    val = ids[len(ids) - int(len(ids) * 0.1):]
    counts = Counter(val)
    entropy = -sum(c / len(val) * math.log(c / len(val)) for c in counts.values())
    if rc == 0:
        rep = json.load(open(report))
        check(abs(rep["unigram_entropy"] - entropy) < 1e-9,
              "the data are tokenizers' tokens: unigram entropy %.12f, tokenizers' %.12f" %
              (rep["unigram_entropy"], entropy))
    rc, out, err = run("train", "--data", text_path, "--tokenizer", vocab_json, "--steps", "2",
                       "--set", "train.samples=1", "--set", "train.sample_tokens=4", *TINY)
    check(rc == 0 and "\n----\n<|endoftext|>" in out,
          "without a prompt the sample starts at <|endoftext|>: %s" % out[-300:])

    # zero generate --tokenizer
    prompt = "ROMEO: I'll"
    rc, out, err = run("generate", "--model", save, "--tokenizer", vocab_json, "--prompt", prompt,
                       "--max-new-tokens", "12", "--greedy", "--json", "--threads", "1")
    j = json.loads(out) if rc == 0 else None
    check(j is not None, f"generate --json: {err}")
    if j:
        toks = j["tokens"][0]
        check(j["prompt_tokens"] == len(hf.encode(prompt).ids),
              "prompt_tokens %d, tokenizers: %d" % (j["prompt_tokens"], len(hf.encode(prompt).ids)))
        check(j["outputs"][0] == hf.decode(toks, skip_special_tokens=False), "JSON text %r, tokenizers' decoding %r" %
              (j["outputs"][0], hf.decode(toks, skip_special_tokens=False)))
        rc, out, err = run("generate", "--model", save, "--tokenizer", vocab_json, "--prompt",
                           prompt, "--max-new-tokens", "12", "--greedy", "--threads", "1")
        check(rc == 0 and out == prompt + hf.decode(toks, skip_special_tokens=False) + "\n",
              "plain output %r, expected the prompt and %r" % (out, hf.decode(toks, skip_special_tokens=False)))
        # llm.c's file from the same vocabulary: an empty prompt starts at its end of text
        dec = {}
        bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
              list(range(ord("®"), ord("ÿ") + 1)))
        n = 0
        for b in range(256):
            dec[chr(b if b in bs else 256 + n)] = b
            n += b not in bs
        by_id = {i: s for s, i in vocab.items()}
        binp = os.path.join(WORK, "gpt2_tokenizer.bin")
        with open(binp, "wb") as f:
            f.write(b"".join(v.to_bytes(4, "little") for v in
                             [20240328, 2, len(by_id), vocab["<|endoftext|>"]] + [0] * 252))
            for i in range(len(by_id)):
                s = by_id[i]
                b = bytes(dec[c] for c in s) if all(c in dec for c in s) else s.encode()
                f.write(bytes([len(b)]) + b)
        rc, out, err = run("generate", "--model", save, "--tokenizer", binp, "--prompt", "",
                           "--max-new-tokens", "8", "--greedy", "--json", "--threads", "1")
        j2 = json.loads(out) if rc == 0 else None
        check(j2 is not None and j2["prompt_tokens"] == 1 and
              j2["outputs"][0] == hf.decode(j2["tokens"][0], skip_special_tokens=False),
              f"llm.c's file: an empty prompt, decoded output: {err}")
        rc, out, err = run("generate", "--model", save, "--tokenizer", binp, "--prompt", "x",
                           "--threads", "1")
        check(rc == 1 and "no merges" in err and binp in err,
              f"llm.c's file cannot encode a prompt: {rc} {err}")

    return exit_code()


sys.exit(main())
