"""pyvenv.py — a Python with the packages of tests/requirements.txt, for tests that check zero's
files with an independent reader (TensorBoard's event reader, ...).

The virtual environment is made on first use, under $ZERO_TEST_VENV or ~/.cache/zero/test-venv
(shared by every build directory), and made again when requirements.txt changes. A lock keeps two
tests running at once from building it together. When it cannot be made (no network for pip, no
venv module) python() returns None and the reason, and the test skips with one line.
"""
import fcntl
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REQUIREMENTS = os.path.join(HERE, "requirements.txt")
SKIP = 77  # CTest's SKIP_RETURN_CODE for these tests


def python():
    root = os.environ.get("ZERO_TEST_VENV") or os.path.join(
        os.path.expanduser("~"), ".cache", "zero", "test-venv")
    py = os.path.join(root, "bin", "python")
    stamp = os.path.join(root, "zero-requirements.txt")
    want = open(REQUIREMENTS).read()
    os.makedirs(os.path.dirname(root) or ".", exist_ok=True)
    with open(root + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(py) and os.path.exists(stamp) and open(stamp).read() == want:
            return py, None
        steps = ([sys.executable, "-m", "venv", "--clear", root],
                 [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r",
                  REQUIREMENTS])
        for cmd in steps:
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                last = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["(no output)"]
                return None, "cannot make the test venv %s (%s): %s" % (root, " ".join(cmd[:4]),
                                                                        last[0])
        with open(stamp, "w") as f:
            f.write(want)
    return py, None
