#!/usr/bin/env python3
"""`zero tune` end to end on a tiny model: usage: test_tune_cli.py ZERO_BINARY WORK_DIR

- gridsearch over fast mode's space (stages 0-3 x the 2 largest micro-batches of a per-rank batch
  of 2) with the stage-1 trials made to crash ($ZERO_TUNE_TEST_CRASH_STAGE): every point is
  listed, the crashed ones are recorded with their signal and the search goes on; the others have
  tokens/s and peak RSS; the best is the fastest successful trial; its ds_config has no
  autotuning block, holds the best point's keys, and `zero train` runs it;
- pruning: with --ram between the planner's smallest and largest estimates, exactly the points
  above it are pruned (never run) and the rest run;
- tuner_num_trials caps the trials; model_based starts with the planner's fastest point, then
  runs the point whose planned time, corrected by the measured / planned ratios of the trials so
  far (at its stage, else all), is smallest, among the stages not yet run while there are any;
  random runs each point once;
- bad autotuning values and bad flags fail naming the key or flag and the value; `zero train`
  accepts the block (arg_mappings included) without a warning.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, exit_code  # noqa: E402

ZERO, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)


BASE = {
    "model": {"layers": 1, "heads": 2, "dim": 32, "vocab": 256, "seq": 16},
    "train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": 2,
    "zero_optimization": {"stage": 3, "reduce_bucket_size": 1000},
    "autotuning": {"enabled": True, "fast": True, "num_tuning_micro_batch_sizes": 2,
                   "arg_mappings": {"train_micro_batch_size_per_gpu": "--micro"}},
    "data": {"builtin_bytes": 65536},
    "train": {"ranks": 2, "steps": 50, "eval_batches": 1, "samples": 0, "threads": 1},
}


def config(name, **autotuning):
    c = json.loads(json.dumps(BASE))
    c["autotuning"].update(autotuning)
    path = os.path.join(WORK, name + ".json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def tune(cfg, out, *args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([ZERO, "tune", "--config", cfg, "--out", os.path.join(WORK, out),
                        "--trial-steps", "3", "--warmup-steps", "1", *args],
                       capture_output=True, text=True, timeout=300, env=e)
    return p.returncode, p.stdout, p.stderr


def trials(out):
    with open(os.path.join(WORK, out, "trials.json")) as f:
        return json.load(f)


# gridsearch with crashing stage-1 trials
rc, out, err = tune(config("grid", tuner_early_stopping=100), "grid",
                    env={"ZERO_TUNE_TEST_CRASH_STAGE": "1"})
check(rc == 0, f"grid: exit {rc}: {err}")
check("trial 1" in out and "best of" in out, f"grid: text output: {out}")
d = trials("grid")
ts = d["trials"]
check(d["space_size"] == 4 * 2 and len(ts) == 8, f"4 stages x 2 micro-batches: {len(ts)}")
check(sorted((t["stage"], t["micro_batch"]) for t in ts) ==
      sorted((s, m) for s in range(4) for m in (1, 2)), "the points")
for t in ts:
    check(t["micro_batch"] * t["gradient_accumulation_steps"] == 2, f"fixed batch: {t}")
    if t["stage"] == 1:
        check(t["state"] == "failed" and "signal 11" in t["why"], f"crash recorded: {t}")
    else:
        check(t["state"] == "ok" and t["tokens_per_s"] > 0 and t["peak_rss_bytes"] > 2**20,
              f"trial measured: {t}")
check(d["trials_run"] == 8, f"the search went on after the crashes: {d['trials_run']}")
ok = [t for t in ts if t["state"] == "ok"]
best = max(ok, key=lambda t: t["tokens_per_s"])
check(d["best"] == best["index"], f"best {d['best']} is the fastest, {best['index']}")
with open(d["best_config"]) as f:
    bc = json.load(f)
check("autotuning" not in bc, "ds_config_optimal has no autotuning block")
check(bc["zero_optimization"]["stage"] == best["stage"] and
      bc["train_micro_batch_size_per_gpu"] == best["micro_batch"] and
      bc["gradient_accumulation_steps"] == best["gradient_accumulation_steps"],
      f"best config's keys: {bc}")
check(bc["train"]["steps"] == 50, "the base's steps, not the trials'")
p = subprocess.run([ZERO, "train", "--config", d["best_config"], "--steps", "2"],
                   capture_output=True, text=True, timeout=120)
check(p.returncode == 0, f"zero train runs the best config: {p.stderr}")
check("ignored" not in p.stderr and "unknown key" not in p.stderr, p.stderr)
p = subprocess.run([ZERO, "train", "--config", config("train"), "--steps", "1"],
                   capture_output=True, text=True, timeout=120)
check(p.returncode == 0 and "ignored" not in p.stderr and "unknown key" not in p.stderr,
      f"zero train accepts the autotuning block: {p.stderr}")

# pruning by the planner: a RAM limit between the smallest and the largest estimate
ram = sorted(t["plan_ram_bytes"] for t in ts)
check(ram[0] < ram[-1], f"the estimates differ: {ram}")
limit = [r for r in ram if r > ram[0]][0] - 1  # only the smallest estimates fit
rc, out, err = tune(config("prune", tuner_early_stopping=100), "prune",
                    "--ram", "%.12f" % (limit / 2**30))
check(rc == 0, f"prune: exit {rc}: {err}")
for t in trials("prune")["trials"]:
    fits = t["plan_ram_bytes"] <= limit
    check((t["state"] == "pruned") == (not fits), f"pruned iff over --ram: {t}")
    check((t["order"] > 0) == fits, f"run iff it fits: {t}")

# tuner_num_trials, model_based's order, random
rc, out, err = tune(config("capped", tuner_num_trials=3), "capped")
check(rc == 0 and trials("capped")["trials_run"] == 3, f"tuner_num_trials 3: {rc} {err}")
check(sum(t["why"] == "tuner_num_trials reached" for t in trials("capped")["trials"]) == 5,
      "the rest say why they did not run")
rc, out, err = tune(config("model", tuner_type="model_based", tuner_early_stopping=100), "model")
check(rc == 0, f"model_based: {err}")
run = sorted((t for t in trials("model")["trials"] if t["order"]), key=lambda t: t["order"])
check(len(run) == 8, "model_based ran every point")
check(run[0]["plan_step_s"] == min(t["plan_step_s"] for t in run),
      "model_based: the planner's fastest first")
# then, each time, the smallest estimate left (the planned step time x the mean measured /
# planned ratio of the trials so far at its stage, else of all of them), among the stages not
# yet run while there are any
for k in range(1, len(run)):
    done = [t for t in run[:k] if t["state"] == "ok"]

    def est(t):
        same = [d["step_s"] / d["plan_step_s"] for d in done if d["stage"] == t["stage"]]
        every = [d["step_s"] / d["plan_step_s"] for d in done]
        f = sum(same) / len(same) if same else sum(every) / len(every) if every else 1.0
        return t["plan_step_s"] * f
    tried = {t["stage"] for t in run[:k]}
    pool = [t for t in run[k:] if t["stage"] not in tried] or run[k:]
    left = min(est(t) for t in pool)
    check(run[k] in pool and abs(est(run[k]) - left) <= 1e-9 * left,
          f"model_based trial {k + 1}: {run[k]}")
check(sorted(t["stage"] for t in run[:4]) == [0, 1, 2, 3], "model_based: every stage first")
rc, out, err = tune(config("random", tuner_type="random", tuner_early_stopping=100), "random",
                    "--json")
check(rc == 0 and json.loads(out)["trials_run"] == 8, f"random: {rc} {err}")
check(sorted(t["order"] for t in trials("random")["trials"]) == list(range(1, 9)),
      "random: each point once")

# bad values and flags
for key, value, want in [("tuner_type", "bayes", "gridsearch"), ("metric", "speed", "latency"),
                         ("mp_size", 2, "mp_size"), ("num_tuning_micro_batch_sizes", 0, "1"),
                         ("fast", "yes", "boolean"), ("tuner_early_stopping", -1, "1")]:
    rc, out, err = tune(config("bad", **{key: value}), "bad")
    check(rc == 1 and "autotuning." + key in err and str(value).lower() in err.lower() and
          want in err, f"autotuning.{key} = {value}: exit {rc}: {err}")
for args in (["--trial-steps", "2", "--warmup-steps", "2"], ["--trial-steps", "x"],
             ["--bogus"]):
    rc, out, err = tune(config("flags"), "flags", *args)
    check(rc == 2 and err.count("\n") == 1 and "zero tune:" in err, f"{args}: {rc} {err}")
p = subprocess.run([ZERO, "tune"], capture_output=True, text=True, timeout=60)
check(p.returncode == 2 and "--config" in p.stderr, f"no --config: {p.stderr}")

sys.exit(exit_code())
