#!/usr/bin/env python3
"""`zero generate --offload nvme` end to end: usage: test_generate_stream_cli.py ZERO WORK_DIR

A model of 24 blocks (dim 256: 72.6 MiB of fp32 weights, 3.0 MiB a block) saved by
`zero train --steps 0`, then decoded greedily at batch 4:
- in RAM, and streamed from a file under --nvme-path with 2 layer buffers: the same tokens;
  the streamed run's resident weights are the embeddings, the final LayerNorm and 2 block
  regions (under a tenth of the weights), and its peak RSS (the process's, from --json) is below
  the in-RAM run's by at least the 20 blocks it never holds (L - buffers - 2 blocks, two kept as
  slack for the loader's buffers): only a few layers are resident;
- batch 4 reads the same bytes as batch 1 over the same steps (up to the reads posted ahead):
  each read is shared by the batch;
- the config's zero_optimization.offload_param (device nvme, nvme_path, buffer_count) does the
  same as the flags, and --offload none overrides it;
- the weights file is gone afterwards; bad flags exit 2, a missing --nvme-path directory exits 1
  naming it.
"""
import json
import os
import shutil
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
    rc, out, err = run("--json", "--threads", "1", "--greedy", "--max-new-tokens", "12",
                       "--prompt", "Hello", *args)
    check(rc == 0, f"{args}: exit {rc}: {err}")
    return json.loads(out) if rc == 0 else None


L, BUFFERS = 24, 2
SAVE = os.path.join(WORK, "ckpt")
NVME = os.path.join(WORK, "nvme")
os.makedirs(NVME)
rc, _, err = run("-q", "--no-peak", "--steps", "0", "--set", "train.samples=0",
                 "--set", f"model.layers={L}", "--set", "model.dim=256", "--set", "model.heads=4",
                 "--set", "model.seq=64", "--save-dir", SAVE, cmd="train")
check(rc == 0, f"train: {err}")

ram = gen_json("--model", SAVE, "--batch", "4")
disk = gen_json("--model", SAVE, "--batch", "4", "--offload", "nvme", "--nvme-path", NVME,
                "--buffer-count", str(BUFFERS))
check(ram["offload"] == "none" and disk["offload"] == "nvme" and disk["buffer_count"] == BUFFERS,
      f"offload {ram['offload']} / {disk['offload']}, buffers {disk['buffer_count']}")
check(disk["io_engine"] in ("io_uring", "threads"), disk.get("io_engine"))
check(ram["tokens"] == disk["tokens"], "streamed greedy tokens equal the in-RAM ones")
W, resident = ram["weight_bytes"], disk["resident_weight_bytes"]
block = 12 * 256 * 256 * 4 + 13 * 256 * 4  # fp32 bytes of a block's tensors (padding aside)
check(disk["weight_bytes"] == W and resident < W / 10,
      f"resident {resident} of {W} weight bytes (expected under a tenth)")
check(resident >= W - (L - BUFFERS) * (block + 4096 + 12 * 64),
      f"resident {resident}: at least the embeddings and {BUFFERS} blocks")
saved = ram["peak_rss_bytes"] - disk["peak_rss_bytes"]
check(saved >= (L - BUFFERS - 2) * block,
      f"peak RSS {disk['peak_rss_bytes']} streamed vs {ram['peak_rss_bytes']} in RAM: "
      f"{saved} bytes less (expected at least {L - BUFFERS - 2} blocks of {block})")
print(f"peak RSS {ram['peak_rss_bytes'] / 2**20:.1f} MiB in RAM, {disk['peak_rss_bytes'] / 2**20:.1f}"
      f" MiB streamed with {BUFFERS} of {L} blocks resident ({resident / 2**20:.1f} of "
      f"{W / 2**20:.1f} MiB of weights); {disk['io_bytes_read'] / 2**20:.0f} MiB read")
check(os.listdir(NVME) == [], f"weights file left behind: {os.listdir(NVME)}")

# batch 4 reads what batch 1 reads over the same steps (up to the BUFFERS reads posted ahead)
one = gen_json("--model", SAVE, "--offload", "nvme", "--nvme-path", NVME, "--buffer-count",
               str(BUFFERS))
region = (block + 12 * 64 + 4095) // 4096 * 4096
check(abs(one["io_bytes_read"] - disk["io_bytes_read"]) <= BUFFERS * region,
      f"bytes read: batch 1 {one['io_bytes_read']}, batch 4 {disk['io_bytes_read']}")
check(one["tokens"][0] == disk["tokens"][0], "batch 1 = sequence 0 of batch 4")

# the config's offload_param
cfg = os.path.join(WORK, "ds.json")
with open(cfg, "w") as f:
    json.dump({"zero_optimization": {"stage": 3, "offload_param": {
        "device": "nvme", "nvme_path": NVME, "buffer_count": 3}}}, f)
c = gen_json("--model", SAVE, "--batch", "4", "--config", cfg)
check(c["offload"] == "nvme" and c["buffer_count"] == 3 and c["tokens"] == ram["tokens"],
      f"config offload_param: {c['offload']}, {c['buffer_count']} buffers")
c = gen_json("--model", SAVE, "--config", cfg, "--buffer-count", "5")
check(c["buffer_count"] == 5, "--buffer-count overrides the config")
c = gen_json("--model", SAVE, "--config", cfg, "--offload", "none")
check(c["offload"] == "none", "--offload none overrides the config")


def bad(args, says, code):
    rc, _, err = run("--model", SAVE, "--prompt", "x", *args)
    check(rc == code and says in err, f"{args}: exit {rc} (expected {code}), {err!r}")


bad(["--offload", "nvme"], "--nvme-path", 2)
bad(["--nvme-path", NVME], "--offload nvme", 2)
bad(["--offload", "disk"], "--offload", 2)
bad(["--offload", "nvme", "--nvme-path", NVME, "--buffer-count", "1"], "--buffer-count", 2)
bad(["--offload", "nvme", "--nvme-path", os.path.join(WORK, "nowhere")], "nowhere", 1)

sys.exit(exit_code())
