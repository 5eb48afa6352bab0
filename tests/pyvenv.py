"""pyvenv.py — a Python with the packages of tests/requirements.txt, for tests that check zero's
files with an independent reader (TensorBoard's event reader, Hugging Face's GPT-2, ...).

The virtual environment is made on first use, under $ZERO_TEST_VENV or ~/.cache/zero/ (shared by
every build directory), in a directory named by a hash of requirements.txt and the base Python:
a changed requirements file gets a new one, and checkouts with different files do not rebuild
each other's. It is built on
Debian's /usr/bin/python3 with its system packages visible, so that Debian's python3-torch (which
scripts/test.sh installs; PyPI's torch wheels are CUDA builds of gigabytes) serves transformers.
A lock keeps two tests running at once from building it together. When it cannot be made (no
network for pip, no venv module) or a module a test needs does not import, python() returns None
and the reason, and the test skips with one line.
"""
import fcntl
import hashlib
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REQUIREMENTS = os.path.join(HERE, "requirements.txt")
SKIP = 77  # CTest's SKIP_RETURN_CODE for these tests
BASE = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def _make(root, py, stamp, want):
    steps = ([BASE, "-m", "venv", "--clear", "--system-site-packages", root],
             [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r",
              REQUIREMENTS])
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            last = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["(no output)"]
            return "cannot make the test venv %s (%s): %s" % (root, " ".join(cmd[:4]), last[0])
    with open(stamp, "w") as f:
        f.write(want)
    return None


def python(modules=()):
    """(path of the venv's python, None), or (None, why not) when it cannot be made or one of
    `modules` does not import in it."""
    want = "%s\n%s" % (BASE, open(REQUIREMENTS).read())
    base = os.environ.get("ZERO_TEST_VENV") or os.path.join(
        os.path.expanduser("~"), ".cache", "zero")
    root = os.path.join(base, "test-venv-" + hashlib.sha1(want.encode()).hexdigest()[:12])
    py = os.path.join(root, "bin", "python")
    stamp = os.path.join(root, "zero-requirements.txt")  # written once pip has succeeded
    os.makedirs(base, exist_ok=True)
    with open(root + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (os.path.exists(py) and os.path.exists(stamp)):
            why = _make(root, py, stamp, want)
            if why:
                return None, why
    for m in modules:
        p = subprocess.run([py, "-c", "import " + m], capture_output=True, text=True)
        if p.returncode != 0:
            last = p.stderr.strip().splitlines()[-1:] or ["(no output)"]
            hint = " (install Debian's python3-torch)" if m in ("torch", "transformers") else ""
            return None, "module %s does not import in %s: %s%s" % (m, root, last[0], hint)
    return py, None


def check_output_of(binary, path, script, modules):
    """For a test whose C side writes a file (`binary path`) that `script` checks in the venv
    (`script path`): the script's exit status, its output printed; SKIP without the venv or one
    of `modules`, 1 when the binary itself fails. The file is removed afterwards."""
    py, why = python(modules)
    if not py:
        print("SKIP: %s" % why)
        return SKIP
    p = subprocess.run([binary, path], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        print("FAIL: %s itself failed:\n%s" % (os.path.basename(binary),
                                                (p.stdout + p.stderr)[-2000:]))
        return 1
    p = subprocess.run([py, "-c", script, path], capture_output=True, text=True, timeout=300)
    print(p.stdout + p.stderr)
    if os.path.exists(path):
        os.remove(path)
    return p.returncode


def run_in_venv(modules):
    """Make the calling test script run where `modules` import: return at once when they do
    here, else re-execute it under the venv's python (same arguments), or exit with SKIP and one
    line when the venv cannot give them."""
    try:
        for m in modules:
            __import__(m)
        return
    except ImportError:
        pass
    py, why = python(modules)
    if not py:
        print("SKIP: %s" % why)
        sys.exit(SKIP)
    script = os.path.abspath(sys.argv[0])
    os.execv(py, [py, script, *sys.argv[1:]])
