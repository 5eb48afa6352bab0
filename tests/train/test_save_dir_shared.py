#!/usr/bin/env python3
"""A save directory that is not the same directory on every MPI rank fails before step 1:
usage: test_save_dir_shared.py ZERO_BINARY MPIRUN WORK_DIR

Real processes under mpirun -np 2. Rank 1 runs in a mount namespace of its own with a tmpfs
mounted over the save directory, as a node with a local disk at the same path would see it: the
run fails before training, every rank naming the save directory (rank 1: its rank and the probe
file it does not see), leaving no probe file behind and no checkpoint. The same run without the
private mount trains and saves. Needs root and unshare(1) to make the namespace; skipped with
one line otherwise.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, exit_code  # noqa: E402

ZERO, MPIRUN, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


WRAP = os.path.join(WORK, "private_save_dir.sh")
with open(WRAP, "w") as f:
    f.write('#!/bin/sh\n'
            '# rank 1 sees a directory of its own at $SAVE (a tmpfs in a private mount namespace)\n'
            'if [ "$PRIVATE" = 1 ] && [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then\n'
            '  exec unshare -m sh -c \'mount --make-rprivate / && mount -t tmpfs none "$SAVE" '
            '&& exec "$@"\' sh "$@"\n'
            'fi\n'
            'exec "$@"\n')
os.chmod(WRAP, 0o755)

probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
if os.geteuid() != 0 or probe.returncode != 0:
    print("SKIP: a private mount namespace cannot be made here (needs root and unshare)")
    sys.exit(77)

CONFIG = os.path.join(WORK, "tiny.json")
json.dump({"model": {"layers": 1, "heads": 2, "dim": 32, "seq": 32},
           "data": {"builtin_bytes": 65536}, "train_micro_batch_size_per_gpu": 4,
           "train": {"steps": 2, "samples": 0, "eval_interval": 0, "eval_batches": 1}},
          open(CONFIG, "w"))
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_WAIT_POLICY="passive")


def run(private):
    save = os.path.join(WORK, "save-private" if private else "save-shared")
    os.makedirs(save, exist_ok=True)
    p = subprocess.run([MPIRUN, "-np", "2", "--oversubscribe", "-x", "SAVE=" + save,
                        "-x", "PRIVATE=%d" % private, WRAP, ZERO, "train", "--config", CONFIG,
                        "--no-peak", "--save-dir", save], capture_output=True, text=True,
                       timeout=120, env=env)
    return p.returncode, p.stdout + p.stderr, save


rc, out, save = run(1)
check(rc != 0, "private save dir: the run succeeded\n" + out[-2000:])
check("rank 1 does not see rank 0's probe file" in out and save in out,
      "private save dir: rank 1's message missing:\n" + out[-3000:])
check("see train.save_dir as rank 0 does" in out, "rank 0's message missing:\n" + out[-3000:])
check("step     1" not in out, "private save dir: it trained before failing")
check(os.listdir(save) == [], "private save dir: left %s" % os.listdir(save))

rc, out, save = run(0)
check(rc == 0 and os.path.exists(os.path.join(save, "latest")),
      "shared save dir: exit %d\n%s" % (rc, out[-2000:]))
check(not [f for f in os.listdir(save) if f.startswith(".shared-probe")],
      "shared save dir: probe left behind: %s" % os.listdir(save))
sys.exit(exit_code())
