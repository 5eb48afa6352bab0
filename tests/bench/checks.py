"""checks.py — what the benchmark programs' tests share: counted checks, running a command, a
relative comparison of two measured numbers, and the closing `N passed, M failed` line."""
import subprocess

passed = 0
failed = 0


def ok(cond, what):
    """Count a check; print what failed."""
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what, flush=True)
    return cond


def run(cmd, timeout=150):
    """(exit code, stdout, stderr) of a command."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def close(a, b, rel, abs_tol=0.0):
    """a and b agree to the relative tolerance rel, or within abs_tol (a printed number's rounding);
    None never agrees."""
    return a is not None and b is not None and \
        abs(a - b) <= max(rel * max(abs(a), abs(b), 1e-12), abs_tol)


def report():
    """Print the totals; the exit code (1 if anything failed)."""
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0
