"""checks.py — the pass / fail tally of the Python tests, as check.h's CHECK is the C tests':
check() prints one FAIL line for a condition that does not hold and counts it; exit_code()
prints the count and gives the test's exit status."""
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)
    return bool(cond)


def exit_code():
    print("%d failures" % failures)
    return 1 if failures else 0
