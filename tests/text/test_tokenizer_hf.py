#!/usr/bin/env python3
"""zero's GPT-2 BPE tokenizer against Hugging Face's `tokenizers`, byte for byte:
usage: test_tokenizer_hf.py TOKENIZE_TOOL WORK_DIR

Oracle: the `tokenizers` package (PyPI, tests/pyvenv.py), its ByteLevel pre-tokenizer and BPE
model. The tokenizer files are written here: a byte-level BPE of 1000 tokens (500 without
tinyshakespeare) trained by `tokenizers` on the test text, saved as vocab.json + merges.txt and
as tokenizer.json (merges as
"a b" strings, and rewritten as ["a", "b"] pairs), and the same vocabulary with its merges in a
shuffled order (ranks whose parts come later: `tokenizers`' merge loop, not GPT-2's textbook one,
decides). The text: tinyshakespeare when present (ZERO_SHARED_DIR/data) and a built-in string of
contractions, digits, punctuation runs, runs of spaces, tabs and newlines, non-ASCII letters and
numbers, emoji, and each Unicode space (and near-space) where its being a space or not changes
the pieces (NEL, NBSP, U+3000, U+2028, ZWSP, U+180E, the ASCII separators, ...).

- zero's ids equal `tokenizers`' for every text, through vocab.json, the directory, both
  tokenizer.json forms and the shuffled merges;
- decode(encode(text)) is the text's bytes, and so is decoding through an llm.c
  gpt2_tokenizer.bin (versions 1 and 2) written here from the vocabulary as llm.c's script does;
- the encoding time per MB of tinyshakespeare is printed (not asserted).
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, exit_code  # noqa: E402
import pyvenv  # noqa: E402

pyvenv.run_in_venv(("tokenizers",))

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

TOOL, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

BUILTIN = ("It's 2024: we'll say \"hello, world!!!\" -- isn't it?  You're   right;\n\n"
           "they've 3.14159 apples, I'd pay $1,000,000... don't\tstop\t\tnow\r\n"
           "naïve café, Größe, ἀρχή, Привет мир, 東京タワー 123４５, ١٢٣ and ½ ⅓\n"
           "emoji 🙂🙂 👩‍👩‍👧 🇫🇷!?  \u00a0nbsp\u3000ideographic\u2028line\u0085nel   \n"
           "'S 'T 'RE 'll've  ''s   ' m\n   \n\t \n" + "x" * 300 + "   " + " " * 200 + "end "
           # whether each of these is a space decides the pieces: x, " \x85", y or x, " ", ...
           + "".join("x %sy !%s! %s%sz\n" % (c, c, c, c) for c in
                     "\u0085\u00a0\u1680\u2000\u2007\u200b\u2028\u2029\u202f\u205f\u3000"
                     "\u180e\u000b\u000c\u001c\u001f\ufeff"))


def tool(*args):
    p = subprocess.run([TOOL, *args], capture_output=True, timeout=120)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def zero_ids(tok_path, text_path):
    rc, out, err = tool("encode", tok_path, text_path)
    check(rc == 0, f"encode {tok_path} {text_path}: {err}")
    seconds = float(err.split()[0]) if rc == 0 else 0.0
    return ([int(t) for t in out.split()] if rc == 0 else None), seconds


def zero_decode(tok_path, ids, name):
    p = os.path.join(WORK, name + ".ids")
    with open(p, "w") as f:
        f.write(" ".join(map(str, ids)))
    rc, out, err = tool("decode", tok_path, p)
    check(rc == 0, f"decode {tok_path}: {err}")
    return out


def byte_decoder():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def write_llmc(path, vocab, version):
    """llm.c's gpt2_tokenizer.bin: 256 int32 (magic, version, count, eot), then length + bytes."""
    dec = byte_decoder()
    by_id = {i: s for s, i in vocab.items()}
    header = [0] * 256
    header[0:4] = [20240328, version, len(by_id), vocab["<|endoftext|>"]]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        for i in range(len(by_id)):
            s = by_id[i]
            b = bytes(dec[c] for c in s) if all(c in dec for c in s) else s.encode()
            f.write(struct.pack("<B", len(b)) + b)


def hf_byte_level(model):
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def main():
    texts = {"builtin": BUILTIN}
    shakespeare = os.path.join(os.environ.get("ZERO_SHARED_DIR", ""), "data",
                               "tinyshakespeare.txt")
    if os.path.exists(shakespeare):
        texts["tinyshakespeare"] = open(shakespeare, encoding="utf-8").read()
    else:
        print("note: %s not found, the built-in text only" % shakespeare)
    paths = {}
    for name, text in texts.items():
        paths[name] = os.path.join(WORK, name + ".txt")
        with open(paths[name], "wb") as f:
            f.write(text.encode())

    # train a byte-level BPE of 1000 tokens (500 on the built-in text alone, which has merges
    # for about 530) on the texts and save it in Hugging Face's layouts; tokens of at most 255
    # bytes: llm.c's file stores each token's length in one byte
    size = 1000 if "tinyshakespeare" in texts else 500
    hf = hf_byte_level(models.BPE())
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  max_token_length=255, show_progress=False)
    hf.train([paths[n] for n in texts], trainer)
    files = os.path.join(WORK, "files")
    os.makedirs(files)
    hf.model.save(files)  # vocab.json, merges.txt
    tok_json = os.path.join(WORK, "tokenizer.json")
    hf.save(tok_json)
    doc = json.load(open(tok_json))
    merges = doc["model"]["merges"]
    doc["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in merges]
    pairs_json = os.path.join(WORK, "tokenizer-pairs.json")
    json.dump(doc, open(pairs_json, "w"))
    vocab = json.load(open(os.path.join(files, "vocab.json")))
    check(len(vocab) == size, "trained vocabulary of %d tokens, expected %d" % (len(vocab),
                                                                                size))

    # the same vocabulary, merges shuffled
    shuffled = os.path.join(WORK, "shuffled")
    os.makedirs(shuffled)
    shutil.copy(os.path.join(files, "vocab.json"), shuffled)
    lines = [l for l in open(os.path.join(files, "merges.txt"), encoding="utf-8").read()
             .splitlines() if l and not l.startswith("#version")]
    random.Random(7).shuffle(lines)
    with open(os.path.join(shuffled, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(lines) + "\n")
    hf_shuffled = hf_byte_level(models.BPE.from_file(os.path.join(shuffled, "vocab.json"),
                                                     os.path.join(shuffled, "merges.txt")))

    # trained on the built-in text alone to the end: every piece `tokenizers` cuts becomes one
    # token, so the ids show any piece boundary where zero's pre-tokenizer differs
    whole = hf_byte_level(models.BPE())
    whole.train([paths["builtin"]], trainers.BpeTrainer(
        vocab_size=20000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    whole_json = os.path.join(WORK, "whole.json")
    whole.save(whole_json)
    ref = whole.encode(BUILTIN).ids
    check(len(ref) < len(BUILTIN) / 3, "the whole-piece tokenizer merges too little")
    ours, _ = zero_ids(whole_json, paths["builtin"])
    check(ours == ref, "builtin, whole pieces: ids differ from tokenizers' (pieces cut "
          "elsewhere: %s)" % [whole.decode([t]) for t in set(ref) ^ set(ours or [])][:12])

    bins = {}
    for version in (1, 2):
        bins[version] = os.path.join(WORK, "gpt2_tokenizer_v%d.bin" % version)
        write_llmc(bins[version], vocab, version)
    rc, out, err = tool("info", bins[2])
    check(rc == 0 and out.decode().split() == ["vocab", str(size), "eot",
                                               str(vocab["<|endoftext|>"])],
          f"llm.c v2 info: {out} {err}")

    for name, text in texts.items():
        ref = hf.encode(text).ids
        check(hf.decode(ref) == text, f"{name}: the reference does not round-trip")
        ours, seconds = zero_ids(os.path.join(files, "vocab.json"), paths[name])
        check(ours == ref, f"{name}: vocab.json + merges.txt ids differ from tokenizers' "
              f"({len(ours or [])} against {len(ref)} tokens; first difference at "
              f"{next((i for i, (a, b) in enumerate(zip(ours or [], ref)) if a != b), '-')})")
        if name == "tinyshakespeare":
            mb = len(text.encode()) / 1e6
            print("encoded %.2f MB into %d tokens in %.3f s: %.3f s per MB" %
                  (mb, len(ref), seconds, seconds / mb))
        for path in (files, tok_json, pairs_json):
            other, _ = zero_ids(path, paths[name])
            check(other == ref, f"{name}: {os.path.basename(path)} ids differ from tokenizers'")
        want = text.encode()
        if ours:
            check(zero_decode(os.path.join(files, "vocab.json"), ours, name) == want,
                  f"{name}: decode(encode(text)) != text")
            for version, path in bins.items():
                check(zero_decode(path, ours, name) == want,
                      f"{name}: llm.c v{version} decode != text")
        sref = hf_shuffled.encode(text).ids
        sours, _ = zero_ids(shuffled, paths[name])
        check(sours == sref, f"{name}: shuffled merges: ids differ from tokenizers'")
        check(sref != ref, f"{name}: shuffling the merges changed nothing (a weak test)")

    return exit_code()


sys.exit(main())
