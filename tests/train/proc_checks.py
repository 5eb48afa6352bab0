"""proc_checks.py — what the Python drivers of `zero train` (test_train_hang.py,
test_train_signals.py, tests/cluster/test_cluster.py) share: a check that counts failures, a tolerant file read, and finding an
MPI rank's process under mpirun through /proc.
"""
import os

failures = 0


def check(cond, what):
    """Print ok/FAIL for one expectation and count a failure; returns cond."""
    global failures
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures += 1
    return cond


def read(path):
    """The file's text, or "" if it cannot be read (yet)."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def rank_pids(root_pid, rank):
    """`zero train` processes under root_pid (any depth) whose environment says
    OMPI_COMM_WORLD_RANK=rank."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    found, todo = [], [root_pid]
    while todo:
        for c in children.get(todo.pop(), []):
            todo.append(c)
            try:
                with open(f"/proc/{c}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{c}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env and b"train" in cmd:
                found.append(c)
    return found
