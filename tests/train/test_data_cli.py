#!/usr/bin/env python3
"""`zero train --data` on data kept the way nanoGPT and llm.c users keep it.

Usage: test_data_cli.py ZERO

- A nanoGPT data directory (train.bin, val.bin, meta.pkl written here with Python's own pickle
  at every protocol from 2 to the highest): the vocabulary comes from meta.pkl, val.bin
  validates; without meta.pkl the run fails naming it unless model.vocab is given; a
  vocabulary smaller than a token of the data fails naming the file and the token.
- llm.c shards (a glob, each file with the 256-int32 header) with --val-data: the same weights
  fingerprint as one nanoGPT file holding the same tokens with the same validation file
  (windows are drawn over the concatenated stream), at data.order random and sequential; a run
  stopped after step 2 and resumed from its checkpoint ends with the uninterrupted run's
  fingerprint; data.val_fraction beside --val-data is said not to apply.
- Memory: a 1 GiB token file (sparse: no disk blocks) trains with a peak RSS far below its size
  and within a few MiB of the same run on a small file (the file is mapped, not read; before,
  the peak was about 3x the file). The file is in a temporary directory removed at the end,
  also when a check fails.
- Bad paths: a directory without train.bin, a glob matching nothing, --val-data without
  --data: a one-line error naming the path.
"""
import array
import json
import os
import pickle
import random
import struct
import subprocess
import sys
import tempfile

import proc_checks
from proc_checks import check

TINY = ["--no-peak", "--set", "model.layers=1", "--set", "model.dim=32", "--set",
        "model.heads=2", "--set", "model.seq=16", "--set", "train_micro_batch_size_per_gpu=4",
        "--set", "train.eval_batches=2", "--set", "train.samples=0"]
ENV = dict(os.environ, OMP_WAIT_POLICY="passive", OMP_NUM_THREADS="1")


def run(zero, args):
    p = subprocess.run([zero, "train"] + TINY + args, capture_output=True, text=True, env=ENV,
                       timeout=120)
    return p.returncode, p.stdout, p.stderr


def run_rss(zero, args, out_path):
    """Exit status and peak RSS (KiB) of one `zero train` run (wait4's rusage of that child)."""
    with open(out_path, "w") as out:
        p = subprocess.Popen([zero, "train", "-q"] + TINY + args, stdout=out,
                             stderr=subprocess.STDOUT, env=ENV)
        _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, usage.ru_maxrss


def fingerprint(report):
    with open(report) as f:
        return json.load(f)["weights_fingerprint"]


def write_u16(path, ids, llmc=False):
    with open(path, "wb") as f:
        if llmc:
            f.write(struct.pack("<3i", 20240520, 1, len(ids)) + bytes(1024 - 12))
        array.array("H", ids).tofile(f)


def test_nanogpt_dir(zero, tmp):
    text = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
            "All:\nSpeak, speak.\n") * 200
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = [stoi[c] for c in text]
    d = os.path.join(tmp, "shakespeare_char")
    os.mkdir(d)
    cut = len(ids) * 9 // 10
    write_u16(os.path.join(d, "train.bin"), ids[:cut])
    write_u16(os.path.join(d, "val.bin"), ids[cut:])
    meta = {"vocab_size": len(chars), "itos": {i: c for i, c in enumerate(chars)}, "stoi": stoi}
    for proto in range(2, pickle.HIGHEST_PROTOCOL + 1):
        with open(os.path.join(d, "meta.pkl"), "wb") as f:
            pickle.dump(meta, f, protocol=proto)
        rc, out, err = run(zero, ["--data", d, "--steps", "2"])
        check(rc == 0 and f"vocab {len(chars)}," in out,
              f"protocol {proto}: vocab {len(chars)} from meta.pkl ({err.strip()[-200:]})")
    p = subprocess.run([zero, "train", "--data", d, "--print-config"], capture_output=True,
                       text=True, env=ENV, timeout=60)
    check(p.returncode == 0 and json.loads(p.stdout)["model"]["vocab"] == len(chars),
          f"--print-config shows meta.pkl's vocabulary ({p.stderr.strip()[-200:]})")
    check(f"{cut} train, {len(ids) - cut} validation from '{os.path.join(d, 'val.bin')}'" in out,
          "val.bin validates: " + next((l for l in out.splitlines() if l.startswith("data:")), ""))
    os.unlink(os.path.join(d, "meta.pkl"))
    rc, out, err = run(zero, ["--data", d, "--steps", "1"])
    check(rc != 0 and os.path.join(d, "meta.pkl") in err and "model.vocab" in err,
          f"no meta.pkl and no vocab: fails naming it ({err.strip()})")
    rc, out, err = run(zero, ["--data", d, "--steps", "1", "--set", f"model.vocab={len(chars)}"])
    check(rc == 0, f"no meta.pkl, model.vocab given: trains ({err.strip()[-200:]})")
    small = max(ids) // 2 + 2
    rc, out, err = run(zero, ["--data", d, "--steps", "1", "--set", f"model.vocab={small}"])
    check(rc != 0 and os.path.join(d, "train.bin") in err and "outside the model's vocabulary"
          in err, f"vocab {small} below a token: fails naming the file ({err.strip()})")


def test_shards(zero, tmp):
    rng = random.Random(5)
    ids = [rng.randrange(50257) for _ in range(30000)]
    val = [rng.randrange(50257) for _ in range(3000)]
    cuts = [0, 7000, 7001, 19000, len(ids)]
    for s in range(4):
        write_u16(os.path.join(tmp, f"fw_train_{s:06d}.bin"), ids[cuts[s]:cuts[s + 1]], True)
    write_u16(os.path.join(tmp, "fw_val_000000.bin"), val, True)
    write_u16(os.path.join(tmp, "whole.bin"), ids)
    write_u16(os.path.join(tmp, "whole_val.bin"), val)
    write_u16(os.path.join(tmp, "other_val.bin"), val[:2000], True)
    prints = {}
    for order in ("random", "sequential"):
        common = ["--steps", "3", "--set", "model.vocab=50257", "--ranks", "2", "--set",
                  f"data.order={order}"]
        one = ["--data", os.path.join(tmp, "whole.bin"), "--val-data",
               os.path.join(tmp, "whole_val.bin")]
        shards = ["--data", os.path.join(tmp, "fw_train_*.bin"), "--val-data",
                  os.path.join(tmp, "fw_val_*.bin")]
        r1, r2, r3 = (os.path.join(tmp, f"{order}_{n}.json") for n in ("one", "shards", "resumed"))
        rc1, out1, err1 = run(zero, common + one + ["--json-report", r1])
        rc2, out2, err2 = run(zero, common + shards + ["--json-report", r2, "--set",
                                                       "data.val_fraction=0.3"])
        check(rc1 == 0 and rc2 == 0,
              f"{order}: one file and 4 shards train ({err1.strip()} {err2.strip()})")
        check("5 files" in out2, "the shards are listed: " +
              next((l for l in out2.splitlines() if l.startswith("data:")), ""))
        check("data.val_fraction" in err2 and "does not apply" in err2,
              f"val_fraction beside --val-data is said not to apply ({err2.strip()})")
        if rc1 != 0 or rc2 != 0:
            continue
        prints[order] = fingerprint(r2)
        check(fingerprint(r1) == fingerprint(r2),
              f"{order}: one file and its shards, one fingerprint ({fingerprint(r1)} "
              f"{fingerprint(r2)})")
        # stopped after step 2 and resumed: the sampler's state carries the same stream on
        ckpt = ["--save-dir", os.path.join(tmp, f"ckpt_{order}")]
        rc_a, _, err_a = run(zero, ["--steps", "2"] + common[2:] + shards + ckpt)
        rc_b, _, err_b = run(zero, common + shards + ckpt + ["--resume", "latest",
                                                             "--json-report", r3])
        check(rc_a == 0 and rc_b == 0 and fingerprint(r3) == fingerprint(r2),
              f"{order}: a resumed shard run is the uninterrupted one ({err_a.strip()} "
              f"{err_b.strip()})")
    check(len(prints) == 2 and prints["random"] != prints["sequential"],
          "data.order changes the batches")
    # the sequential checkpoint resumed at random order and on another validation file: warned
    rc, _, err = run(zero, ["--steps", "4", "--set", "model.vocab=50257", "--ranks", "2",
                            "--data", os.path.join(tmp, "fw_train_*.bin"), "--val-data",
                            os.path.join(tmp, "other_val.bin"), "--save-dir",
                            os.path.join(tmp, "ckpt_sequential"), "--resume", "latest"])
    check(rc == 0 and "data.order sequential, this run in random" in err and
          "data.val_path" in err and "other_val.bin" in err,
          f"a resume under another order and validation file warns ({err.strip()})")


def test_memory(zero, tmp):
    big = os.path.join(tmp, "big_train.bin")
    small = os.path.join(tmp, "small_train.bin")
    n = (1 << 30) // 2 - 512  # header + n uint16 = 1 GiB
    with open(big, "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, n) + bytes(1024 - 12))
        f.truncate(1024 + 2 * n)  # sparse: zeros that take no disk blocks
    write_u16(small, [0] * 100000, True)
    args = ["--steps", "3", "--set", "model.vocab=256"]
    rc_s, rss_s = run_rss(zero, args + ["--data", small], os.path.join(tmp, "small.out"))
    rc_b, rss_b = run_rss(zero, args + ["--data", big], os.path.join(tmp, "big.out"))
    print(f"peak RSS: {rss_s} KiB on a 200 KiB file, {rss_b} KiB on a 1 GiB file")
    check(rc_s == 0 and rc_b == 0, "both runs train: " + proc_checks.read(
        os.path.join(tmp, "big.out"))[-300:])
    check(rss_b < 256 * 1024 and rss_b < rss_s + 64 * 1024,
          f"1 GiB file: peak RSS {rss_b} KiB, far below the file and near the small file's")
    os.unlink(big)


def test_bad_paths(zero, tmp):
    empty_dir = os.path.join(tmp, "nothing_here")
    os.mkdir(empty_dir)
    rc, _, err = run(zero, ["--data", empty_dir, "--set", "model.vocab=256", "--steps", "1"])
    check(rc != 0 and empty_dir in err and "train.bin" in err and "9223372036854775807" not in err,
          f"a directory without train.bin ({err.strip()})")
    pattern = os.path.join(tmp, "missing_*.bin")
    rc, _, err = run(zero, ["--data", pattern, "--steps", "1"])
    check(rc != 0 and pattern in err and "matches no file" in err,
          f"a glob matching nothing ({err.strip()})")
    rc, _, err = run(zero, ["--val-data", pattern, "--steps", "1"])
    check(rc != 0 and "data.val_path" in err and "data.path" in err,
          f"--val-data without --data ({err.strip()})")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    zero = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        test_nanogpt_dir(zero, tmp)
        test_shards(zero, tmp)
        test_memory(zero, tmp)
        test_bad_paths(zero, tmp)
    print(f"{proc_checks.failures} failed")
    return 1 if proc_checks.failures else 0


if __name__ == "__main__":
    sys.exit(main())
