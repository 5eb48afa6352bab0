#!/usr/bin/env python3
"""zero's weights in Hugging Face's GPT-2 and back: usage: test_hf_export.py ZERO_BINARY WORK_DIR

Oracle: Hugging Face's own GPT2LMHeadModel (transformers on Debian's torch, tests/pyvenv.py).
- A model trained 60 steps on 2 ranks, exported with `zero convert CKPT DIR/`: the directory holds
  model.safetensors and config.json; GPT2LMHeadModel.from_pretrained(DIR) loads it with no
  missing, unexpected or mismatched tensor, and its greedy continuation of a prompt is the one
  `zero generate --greedy` gives from the same file (a byte vocabulary; 24 new tokens).
- The model saved again by save_pretrained (names under "transformer.", lm_head left out as tied)
  imports with `zero train --init-from`: its weights fingerprint is that of the checkpoint.
- The same file with an untied lm_head.weight (the embedding + 1) is refused, naming both tensors.
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, exit_code  # noqa: E402
import pyvenv  # noqa: E402

ZERO, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
PROMPT = "ROMEO:"
NEW = 24


def zero(*args):
    p = subprocess.run([ZERO, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def fingerprint(out):
    m = re.search(r"weights fingerprint ([0-9a-f]{16})", out)
    return m.group(1) if m else None


HF = r"""
import json, sys, torch
from safetensors.torch import load_file, save_file
from transformers import GPT2LMHeadModel
src, resaved, untied, prompt, new = sys.argv[1:6]
m, info = GPT2LMHeadModel.from_pretrained(src, output_loading_info=True)
m.eval()
ids = torch.tensor([list(prompt.encode())])
with torch.no_grad():
    out = m.generate(ids, max_new_tokens=int(new), do_sample=False, pad_token_id=0)
m.save_pretrained(resaved, safe_serialization=True)
t = load_file(resaved + "/model.safetensors")
t["lm_head.weight"] = t["transformer.wte.weight"] + 1
save_file(t, untied, metadata={"format": "pt"})
print(json.dumps({"info": {k: [str(x) for x in v] for k, v in info.items()},
                  "tokens": out[0, ids.shape[1]:].tolist(),
                  "names": sorted(load_file(resaved + "/model.safetensors"))[:3]}))
"""


def main():
    py, why = pyvenv.python(("transformers", "torch"))
    if not py:
        print("SKIP: %s" % why)
        return pyvenv.SKIP
    cfg = os.path.join(WORK, "tiny.json")
    json.dump({"model": {"layers": 2, "heads": 2, "dim": 64, "seq": 64},
               "data": {"builtin_bytes": 262144}, "train_micro_batch_size_per_gpu": 8,
               "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
               "train": {"steps": 60, "samples": 0, "eval_interval": 0, "eval_batches": 1,
                         "ranks": 2}}, open(cfg, "w"))
    save = os.path.join(WORK, "ckpt")
    rc, out = zero("train", "--config", cfg, "--save-dir", save, "--no-peak")
    check(rc == 0, "train: exit %d\n%s" % (rc, out[-2000:]))
    trained = fingerprint(out)

    export = os.path.join(WORK, "export") + "/"
    rc, out = zero("convert", save, export)
    check(rc == 0 and "config.json written" in out, "convert: exit %d\n%s" % (rc, out))
    check(sorted(os.listdir(export)) == ["config.json", "model.safetensors"],
          "export holds %s" % os.listdir(export))
    resaved, untied = os.path.join(WORK, "resaved"), os.path.join(WORK, "untied.safetensors")
    p = subprocess.run([py, "-c", HF, export, resaved, untied, PROMPT, str(NEW)],
                       capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, "Hugging Face side: %s" % p.stderr[-3000:])
    if p.returncode:
        return 1
    hf = json.loads(p.stdout.strip().splitlines()[-1])
    check(all(not v for v in hf["info"].values()), "from_pretrained: %s" % hf["info"])
    check(hf["names"][0].startswith("transformer."), "save_pretrained names %s" % hf["names"])

    rc, out = zero("generate", "--model", export + "model.safetensors", "--prompt", PROMPT,
                   "--greedy", "--max-new-tokens", str(NEW), "--json")
    check(rc == 0, "generate: exit %d\n%s" % (rc, out[-2000:]))
    if rc == 0:
        ours = json.loads(out[out.index("{"):])["tokens"][0][-NEW:]
        check(ours == hf["tokens"], "greedy tokens: zero %s, Hugging Face %s" % (ours,
                                                                                hf["tokens"]))

    # save_pretrained's file back into zero: the checkpoint's weights, bit for bit
    rc, out = zero("train", "--config", cfg, "--init-from", resaved + "/model.safetensors",
                   "--steps", "0", "--no-peak")
    check(rc == 0 and fingerprint(out) == trained,
          "init-from save_pretrained: exit %d, fingerprint %s, trained %s\n%s" % (
              rc, fingerprint(out), trained, out[-1500:]))
    rc, out = zero("train", "--config", cfg, "--init-from", untied, "--steps", "0", "--no-peak")
    check(rc != 0 and "lm_head.weight" in out and "transformer.wte.weight" in out,
          "untied lm_head: exit %d\n%s" % (rc, out[-1500:]))
    return exit_code()


sys.exit(main())
