#!/usr/bin/env python3
"""DeepSpeed's `tensorboard` and `csv_monitor` blocks through `zero train` (src/train/monitor.c):
usage: test_monitor.py ZERO_BINARY WORK_DIR

Oracles: TensorBoard's own event reader (the `tensorboard` package, tests/pyvenv.py) and the
run's --metrics log, written by other code:
- a 2-rank fp16 run with an evaluation every 5 steps: the event file holds exactly the scalars
  train_loss, lr, loss_scale, grad_norm, tokens_per_s, mfu and val_loss under Train/Samples/, at
  x = global samples (step x 8), with the metrics log's values as float32 (tokens_per_s: the
  step's own rate, tokens / step_s); the CSV files (one per scalar, DeepSpeed's names and headers)
  hold the same values;
- a 12-step run resumed from its step-6 checkpoint ends with the CSV files of one uninterrupted
  run (the rows past the checkpoint and a row cut by a crash are dropped first), and TensorBoard,
  reading both event files, shows each step once (the session-start record);
- fp32: no loss_scale; a config whose output_path is a file fails before step 1 naming the key
  and the path, and leaves no event file.
"""
import csv
import glob
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, exit_code  # noqa: E402
import pyvenv  # noqa: E402

ZERO, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
TAGS = ["train_loss", "lr", "loss_scale", "grad_norm", "tokens_per_s", "mfu", "val_loss"]
BATCH = 8  # 4 sequences x 2 ranks


def config(name, fp16=True, tb_path=None, extra=None):
    c = {
        "model": {"layers": 2, "heads": 2, "dim": 32, "seq": 32},
        "data": {"builtin_bytes": 65536},
        "train_micro_batch_size_per_gpu": 4,
        "fp16": {"enabled": fp16},
        "tensorboard": {"enabled": True, "output_path": tb_path or os.path.join(WORK, "tb"),
                        "job_name": name},
        "csv_monitor": {"enabled": True, "output_path": os.path.join(WORK, "csv"),
                        "job_name": name},
        "train": {"steps": 12, "samples": 0, "eval_interval": 5, "eval_batches": 1, "ranks": 2},
    }
    c.update(extra or {})
    path = os.path.join(WORK, name + ".json")
    json.dump(c, open(path, "w"))
    return path


def train(cfg, *args):
    p = subprocess.run([ZERO, "train", "--config", cfg, *args], capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout + p.stderr


def metrics(path):
    return [json.loads(line) for line in open(path)]


def csv_series(name):
    out = {}
    for tag in TAGS:
        path = os.path.join(WORK, "csv", name, "Train_Samples_%s.csv" % tag)
        if os.path.exists(path):
            rows = list(csv.reader(open(path)))
            check(rows[0] == ["step", tag], "%s: header %s" % (path, rows[0]))
            out[tag] = [(int(s), float(v)) for s, v in rows[1:]]
    return out


READER = r"""
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1], purge_orphaned_data=True)
ea.Reload()
print(json.dumps({t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}))
"""


def tb_series(py, name):
    p = subprocess.run([py, "-c", READER, os.path.join(WORK, "tb", name)], capture_output=True,
                       text=True, timeout=120)
    check(p.returncode == 0, "TensorBoard's reader: %s" % p.stderr[-2000:])
    if p.returncode:
        return {}
    return {t.split("/")[-1]: [(s, v) for s, v in vals] for t, vals in json.loads(p.stdout).items()
            if t.startswith("Train/Samples/")}


def expected(m, fp16):
    """The series the metrics log implies: {tag: [(samples, value)]}."""
    out = {t: [] for t in TAGS}
    for r in m:
        x = r["step"] * BATCH
        out["train_loss"].append((x, r["loss"]))
        out["lr"].append((x, r["lr"]))
        if fp16:
            out["loss_scale"].append((x, r["loss_scale"]))
        out["grad_norm"].append((x, r["grad_norm"]))
        out["tokens_per_s"].append((x, BATCH * 32 / r["step_s"]))
        out["mfu"].append((x, r["mfu"]))
        if "val_loss" in r:
            out["val_loss"].append((x, r["val_loss"]))
    return {t: v for t, v in out.items() if v}


def same(got, want, what, rel):
    check(sorted(got) == sorted(want), "%s: tags %s, expected %s" % (what, sorted(got),
                                                                     sorted(want)))
    for t in want:
        g, w = got.get(t, []), want[t]
        check([s for s, _ in g] == [s for s, _ in w], "%s %s: x %s, expected %s" % (
            what, t, [s for s, _ in g], [s for s, _ in w]))
        for (s, a), (_, b) in zip(g, w):
            # float32 in the event file; tokens_per_s from the log's rounded step_s
            # (and mfu) from the log's 6 significant digits
            tol = (1e-3 if t in ("tokens_per_s", "mfu") else rel) * max(1.0, abs(b))
            check(abs(a - b) <= tol, "%s %s at %d: %r, expected %r" % (what, t, s, a, b))


def main():
    py, why = pyvenv.python(("tensorboard",))
    if not py:
        print("SKIP: %s" % why)
        return pyvenv.SKIP

    # 1. a fresh fp16 run against its own metrics log
    m_path = os.path.join(WORK, "fresh.jsonl")
    rc, out = train(config("fresh"), "--metrics", m_path)
    check(rc == 0, "fresh run: exit %d\n%s" % (rc, out[-2000:]))
    want = expected(metrics(m_path), True)
    same(tb_series(py, "fresh"), want, "events", 1e-6)
    same(csv_series("fresh"), want, "csv", 1e-7)

    # 2. a run of 12 steps with a checkpoint at 6, a CSV row then cut by a crash, and the run
    # resumed from step 6: the points past 6 are written again
    save = os.path.join(WORK, "ckpt")
    cfg = config("resumed")
    rc, out = train(cfg, "--save-dir", save, "--set", "train.save_every=6")
    check(rc == 0, "first run: exit %d\n%s" % (rc, out[-2000:]))
    loss_csv = os.path.join(WORK, "csv", "resumed", "Train_Samples_train_loss.csv")
    with open(loss_csv, "a") as f:
        f.write("104,5.1")  # a row cut short: no newline
    at6 = [d for d in glob.glob(os.path.join(save, "*")) if os.path.basename(d).endswith("6")]
    check(len(at6) == 1, "checkpoints %s" % os.listdir(save))
    rc, out = train(cfg, "--save-dir", save, "--resume", at6[0] if at6 else "latest",
                    "--set", "train.overwrite=true")
    check(rc == 0, "resumed run: exit %d\n%s" % (rc, out[-2000:]))
    # the values of an uninterrupted run: the fresh one (same config, so the same numbers)
    fresh_csv, resumed_csv = csv_series("fresh"), csv_series("resumed")
    for t in ("train_loss", "lr", "loss_scale", "grad_norm", "val_loss"):
        check(fresh_csv.get(t) == resumed_csv.get(t),
              "resumed csv %s: %s, uninterrupted %s" % (t, resumed_csv.get(t), fresh_csv.get(t)))
    check(len(glob.glob(os.path.join(WORK, "tb", "resumed", "*tfevents*"))) == 2,
          "resumed: expected two event files")
    tb = tb_series(py, "resumed")
    xs = [s for s, _ in tb.get("train_loss", [])]
    check(xs == [8 * k for k in range(1, 13)], "resumed events: x %s" % xs)
    check(tb.get("train_loss") == tb_series(py, "fresh").get("train_loss"),
          "resumed events differ from the uninterrupted run's")

    # 3. fp32: no loss_scale; a file where the output directory should be
    rc, out = train(config("fp32", fp16=False), "--steps", "3")
    check(rc == 0 and "loss_scale" not in tb_series(py, "fp32") and
          "loss_scale" not in csv_series("fp32"), "fp32: exit %d, loss_scale written" % rc)
    blocker = os.path.join(WORK, "not-a-dir")
    open(blocker, "w").close()
    rc, out = train(config("bad", tb_path=blocker), "--steps", "3")
    check(rc != 0 and "tensorboard" in out and blocker in out and "step     1" not in out,
          "output_path a file: exit %d, output:\n%s" % (rc, out[-1500:]))
    check(not glob.glob(os.path.join(WORK, "csv", "bad", "*.csv")), "bad: CSV files written")

    return exit_code()


sys.exit(main())
