#!/usr/bin/env python3
"""`zero` on a cluster of 2 hosts made by scripts/cluster.sh (network namespaces joined by a
bridge, the link shaped by tc), 2 MPI ranks per host: ranks 0, 1 on host 0 and 2, 3 on host 1.

Usage: test_cluster.py CASE CLUSTER_SH ZERO
  train     stages 0-3: `zero train` on the cluster gives the weights_fingerprint of the same
            config on 4 thread ranks (--backend threads --ranks 4), bitwise, with the
            hierarchical collectives; each rank's bytes (all, and to the other host) follow
            their closed forms.
  linkdown  host 1's link taken down while training with --timeout 10: every rank prints an
            error naming a rank of the other host within the timeout + 15 s, and no rank
            process is left afterwards; a hard limit kills everything and fails.
  script    cluster.sh itself: up --hosts 3 --link 1gbit makes the namespaces, addresses and
            shaping it says and nothing in the caller's namespace; run puts rank r on host r
            under that host's hostname; bad flags fail naming them; after a crash (the whole
            run killed with SIGKILL while ranks sleep) down kills what is left and deletes
            every namespace; down again succeeds; run without a cluster fails saying so.
  bench     `zero bench comm` (all_gather, 4 MiB) across the hosts, unshaped and with
            --link 100mbit, hierarchical and --flat: all check their outputs and count rank 0's
            bytes to the other host (1 MiB hierarchical, 2 MiB flat), the shaped run's bandwidth
            is below half the unshaped one (a 100 Mbit/s link carries at most 12.5 MB/s; the
            unshaped veth moves hundreds of MB/s even on a loaded machine), and each shaped run
            takes at least the time its bytes need on the link. Prints them.

Exits 77 (skipped) when cluster.sh cannot make network namespaces here. Every case takes its
own cluster (prefix zt<pid>-), removes it on exit, also on failure, and first removes the
clusters of earlier runs of this test whose process is gone.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import proc_checks  # noqa: E402  (tests/train: check, read)
from proc_checks import check, read  # noqa: E402

PREFIX = f"zt{os.getpid()}-"
TIMEOUT_S = 10
SLACK_S = 20  # the rank processes' exit (mpirun's SIGKILL comes 5 s after an abort)
ERR_SLACK_S = 8  # each rank's error line


def env():
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMP_WAIT_POLICY="passive")
    e.pop("ZERO_TIMEOUT", None)
    return e


class Cluster:
    def __init__(self, script):
        self.script = script

    def sh(self, *args, timeout=60, **kw):
        cmd = ["bash", self.script, args[0], "--prefix", PREFIX, *args[1:]]
        return subprocess.run(cmd, env=env(), timeout=timeout, **kw)

    def up(self, *flags):
        r = self.sh("up", "--hosts", "2", *flags, capture_output=True, text=True)
        sys.stdout.write(r.stderr)
        if r.returncode == 77:
            print(f"SKIP: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else 'cluster.sh up: 77'}")
            self.down()
            sys.exit(77)
        if not check(r.returncode == 0, f"cluster.sh up {' '.join(flags)}"):
            self.down()
            sys.exit(1)

    def down(self):
        try:
            self.sh("down", timeout=60)
        except subprocess.TimeoutExpired:
            print("FAIL cluster.sh down did not finish within 60 s")

    def run(self, argv, timeout, np=4, **kw):
        """cluster.sh run --np 4 -- argv (np=None: argv is an mpirun command), in a session of
        its own."""
        cmd = ["bash", self.script, "run", "--prefix", PREFIX,
               *(["--np", str(np)] if np else []), "--", *argv]
        print("$ " + " ".join(cmd), flush=True)
        return subprocess.Popen(cmd, env=env(), start_new_session=True, **kw)


def reap_stale(script):
    """Remove the clusters of earlier runs of this test whose process is gone."""
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    stale = set()
    for line in r.stdout.splitlines():
        m = re.match(r"^zt(\d+)-(h\d+|br)\b", line)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            stale.add(f"zt{m.group(1)}-")
    for p in sorted(stale):
        print(f"removing the stale cluster {p}")
        subprocess.run(["bash", script, "down", "--prefix", p], env=env(), timeout=60)


def kill_group(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    p.wait()


def fingerprint(path):
    try:
        with open(path) as f:
            rep = json.load(f)
    except (OSError, ValueError) as e:
        check(False, f"{path}: a JSON report ({e})")
        return None
    check(rep.get("world_size") == 4, f"{path}: world_size 4 (is {rep.get('world_size')})")
    return rep.get("weights_fingerprint")


TINY = {"model": {"layers": 2, "heads": 2, "dim": 32, "vocab": 256, "seq": 32},
        "data": {"builtin_bytes": 65536},
        "train_batch_size": 32, "gradient_accumulation_steps": 2,
        "zero_optimization": {"reduce_bucket_size": 5000},
        "train": {"steps": 5, "eval_interval": 0, "eval_batches": 2, "samples": 0}}


def case_train(cluster, zero, tmp):
    cfg = os.path.join(tmp, "tiny.json")
    with open(cfg, "w") as f:
        json.dump(TINY, f)
    cluster.up()
    for stage in range(4):
        a, b = os.path.join(tmp, f"threads-{stage}.json"), os.path.join(tmp, f"cluster-{stage}.json")
        common = ["train", "-q", "--no-peak", "--config", cfg, "--stage", str(stage)]
        r = subprocess.run([zero, *common, "--backend", "threads", "--ranks", "4",
                            "--json-report", a], env=env(), timeout=60,
                           capture_output=True, text=True)
        if not check(r.returncode == 0, f"stage {stage}: 4 thread ranks ({r.stderr.strip()})"):
            continue
        p = cluster.run([zero, *common, "--timeout", "30", "--json-report", b], timeout=60,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            out, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            kill_group(p)
            check(False, f"stage {stage}: the cluster run did not end within 60 s")
            continue
        if not check(p.returncode == 0, f"stage {stage}: 2 hosts x 2 ranks under cluster.sh run"):
            print(out.decode("utf-8", "replace"))
            continue
        fa, fb = fingerprint(a), fingerprint(b)
        print(f"stage {stage}: threads {fa}, cluster {fb}")
        check(fa is not None and fa == fb,
              f"stage {stage}: the cluster's weights_fingerprint equals 4 thread ranks'")
        inter_node_bytes(a, b, stage)


def per_rank(path):
    try:
        with open(path) as f:
            return json.load(f).get("per_rank", [])
    except (OSError, ValueError):
        return []


def inter_node_bytes(threads, cluster, stage):
    """The MPI backend sees the two hosts as two nodes of 2 ranks, so its all-gathers and (fp32)
    reduce-scatters are hierarchical. With R and A a rank's bytes of the step's reduce-scatters
    and all-gathers per peer in the flat one-node run of 4 thread ranks (its bytes by collective
    / 3): the all-gather sends A to the other host and 2 A to the host's other rank; the
    reduce-scatter, from host 0's ranks the host's partials of 2 blocks to host 1 (2 R) and their
    contributions to 2 blocks to the other rank (2 R), from host 1's the contributions (2 R) and
    one result back to host 0 (R). So host 0's ranks send 4 R + 3 A, 2 R + A of it to the other
    host; host 1's 3 R + 3 A, R + A across (flat: 2/3 of 3 R + 3 A) — measured and in theory."""
    flat, per = per_rank(threads), per_rank(cluster)
    check(len(per) == 4 and len(flat) == 4, f"stage {stage}: 4 per-rank reports")
    for pr, fr in zip(per, flat):
        by = fr.get("comm_sent_bytes_per_step_by_collective", {})
        R, A = by.get("reduce_scatter", 0) / 3, by.get("all_gather", 0) / 3
        host0 = pr.get("rank") < 2
        want_total = (4 * R + 3 * A) if host0 else (3 * R + 3 * A)
        want_inter = (2 * R + A) if host0 else (R + A)
        total = pr.get("comm_bytes_per_step", 0)
        inter = pr.get("comm_inter_node_bytes_per_step", -1)
        theory = pr.get("comm_inter_node_theory_bytes_per_step", -1)
        check(A > 0 and total == want_total and inter == theory == want_inter,
              f"stage {stage} rank {pr.get('rank')}: {total:.0f} bytes per step, closed form "
              f"{want_total:.0f}; {inter:.0f} to the other host (theory {theory:.0f}), closed "
              f"form {want_inter:.0f} (flat: {2 * (R + A):.0f})")


def case_linkdown(cluster, zero, tmp):
    cluster.up()
    host1 = f"{PREFIX}h1"
    # Each rank's stdout and stderr go to files of their own (host 1's messages cannot reach
    # mpirun once its link is down).
    wrapper = (f'r=$OMPI_COMM_WORLD_RANK; exec "$0" "$@" >"{tmp}/out.$r" 2>"{tmp}/err.$r"')
    argv = ["bash", "-c", wrapper, zero, "train", "--no-peak", "--timeout", str(TIMEOUT_S),
            "--steps", "1000000", "--stage", "3",
            "--set", "model.layers=2", "--set", "model.dim=32", "--set", "model.seq=32",
            "--set", "train.samples=0", "--set", "train.eval_interval=0",
            "--set", "data.builtin_bytes=65536", "--set", "steps_per_print=10"]
    log = open(os.path.join(tmp, "mpirun.txt"), "wb")
    # When a rank of host 0 fails first, its MPI_Abort has mpirun end the others: SIGTERM, which
    # zero train takes as "stop after this step" and so goes on waiting, then SIGKILL after
    # odls_base_sigkill_timeout (1 s). 5 s lets the other rank of host 0 reach its own timeout
    # and say so even when it entered the collective a little later (mpirun does nothing else
    # meanwhile: that rank's own MPI_Abort then waits for it, until the SIGKILL).
    argv = ["mpirun", "-np", "4", "--mca", "odls_base_sigkill_timeout", "5", *argv]
    p = cluster.run(argv, timeout=0, np=None, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None:
            if "| loss" in read(f"{tmp}/out.0"):
                break
            time.sleep(0.2)
        if not check("| loss" in read(f"{tmp}/out.0") and p.poll() is None,
                     "training runs on 2 hosts x 2 ranks"):
            print(read(os.path.join(tmp, "mpirun.txt")))
            return
        time.sleep(1)
        r = subprocess.run(["ip", "-n", host1, "link", "set", "eth0", "down"])
        t_down = time.time()
        check(r.returncode == 0, f"host 1's link taken down (ip -n {host1} link set eth0 down)")
        limit = t_down + TIMEOUT_S + SLACK_S
        errs, seen = {}, {}
        while time.time() < limit:
            errs = {r: read(f"{tmp}/err.{r}") for r in range(4)}
            for r, e in errs.items():
                if "training failed" in e and r not in seen:
                    seen[r] = time.time() - t_down
            if len(seen) == 4 and not rank_processes(zero):
                break
            time.sleep(0.2)
        elapsed = time.time() - t_down
        print("error lines after (s): " + ", ".join(f"rank {r} {t:.1f}" for r, t in sorted(seen.items())))
        check(len(seen) == 4 and max(seen.values()) <= TIMEOUT_S + ERR_SLACK_S,
              f"every rank's error within {TIMEOUT_S} + {ERR_SLACK_S} s of the link going down")
        # The hierarchical all-gather crosses hosts between same-local-index ranks, then goes
        # around inside each host: a rank may be left waiting for a rank of its own host that
        # waits for the other host. So each rank names ranks other than itself, and on each
        # host at least one rank names the other host.
        named_by = {}
        for r in range(4):
            lines = [ln for ln in errs[r].splitlines() if "training failed" in ln]
            named = re.search(r"rank\(s\) ([0-9, ]+)", lines[0]) if lines else None
            named_by[r] = {int(x) for x in named.group(1).split(",")} if named else set()
            check(bool(lines) and bool(named_by[r]) and r not in named_by[r]
                  and named_by[r] <= {0, 1, 2, 3},
                  f"rank {r}: an error naming the rank(s) it waited for "
                  f"{named_by[r] or '-'}: {lines[0] if lines else errs[r].strip()[-300:]}")
        for host, mine, other in ((0, (0, 1), {2, 3}), (1, (2, 3), {0, 1})):
            check(any(named_by[r] & other for r in mine),
                  f"host {host}: a rank names the other host's rank(s) {sorted(other)} "
                  f"(named: {[sorted(named_by[r]) for r in mine]})")
        left = rank_processes(zero)
        check(not left, f"every rank process ended within {TIMEOUT_S} + {SLACK_S} s of the link "
              f"going down (after {elapsed:.1f} s; left: {left})")
    finally:
        kill_group(p)
        log.close()


def namespaces():
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return sorted(ln.split()[0] for ln in r.stdout.splitlines() if ln.startswith(PREFIX))


def root_links():
    """The caller's interfaces and their addresses (not lifetimes or counters)."""
    a = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True).stdout
    ln = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return (sorted(tuple(x.split()[1:4]) for x in a.splitlines()),
            sorted(x.split()[1] for x in ln.splitlines()))


def case_script(cluster, zero, tmp):
    before = root_links()
    for flags, word in ((["--hosts", "0"], "--hosts"), (["--link", "fast"], "--link"),
                        (["--delay", "soon"], "--delay"), (["--bogus"], "--bogus")):
        r = cluster.sh("up", *flags, capture_output=True, text=True)
        check(r.returncode == 1 and word in r.stderr and not namespaces(),
              f"up {' '.join(flags)} fails naming {word}: {r.stderr.strip()}")
    r = cluster.sh("run", "--", "true", capture_output=True, text=True)
    check(r.returncode == 1 and "not up" in r.stderr, f"run without a cluster: {r.stderr.strip()}")
    r = cluster.sh("up", "--hosts", "3", "--link", "1gbit", capture_output=True, text=True)
    if r.returncode == 77:
        print("SKIP: " + r.stderr.strip().splitlines()[-1])
        sys.exit(77)
    check(r.returncode == 0, f"up --hosts 3 --link 1gbit ({r.stderr.strip()})")
    want = sorted([f"{PREFIX}br"] + [f"{PREFIX}h{i}" for i in range(3)])
    check(namespaces() == want, f"namespaces {namespaces()} (expected {want})")
    for i in range(3):
        ns = f"{PREFIX}h{i}"
        a = subprocess.run(["ip", "-n", ns, "-o", "addr", "show"], capture_output=True, text=True).stdout
        q = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "eth0"],
                           capture_output=True, text=True).stdout
        check(f"eth0    inet 10.231.0.{i + 1}/24" in a and "lo    inet 127.0.0.1/8" in a,
              f"{ns}: loopback and eth0 at 10.231.0.{i + 1}/24")
        check("tbf" in q and "rate 1Gbit" in q, f"{ns}: eth0 limited to 1 Gbit/s ({q.strip()})")
    check(root_links() == before, "nothing changed in the caller's namespace (links, addresses)")
    p = cluster.run(["bash", "-c", 'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname)"'], timeout=0,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        kill_group(p)
        out = b""
    lines = sorted(out.decode().split("\n"))
    print(out.decode())
    # --np 4 over 3 hosts: 2 slots each, ranks 0, 1 on h0, 2, 3 on h1
    want = [f"rank {r} on {PREFIX}h{r // 2}" for r in range(4)]
    check(all(w in lines for w in want), f"run --np 4: ranks placed on hosts by 2s, named by host")
    # a crash: the run killed outright while its ranks sleep
    p = cluster.run(["sleep", "600"], timeout=0, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline and len(sleepers()) < 4:
        time.sleep(0.2)
    check(len(sleepers()) == 4, f"4 ranks running ({len(sleepers())})")
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    print(f"left after the launcher was killed: {len(sleepers())} rank(s)")
    r = cluster.sh("down", capture_output=True, text=True)
    check(r.returncode == 0 and not namespaces() and not sleepers(),
          f"down after the crash: no namespace, no rank left ({namespaces()}, {sleepers()})")
    r = cluster.sh("down", capture_output=True, text=True)
    check(r.returncode == 0, "down again succeeds")
    check(root_links() == before, "the caller's namespace is as before")


def sleepers():
    """`sleep 600` processes in this cluster's host namespaces."""
    pids = []
    for ns in namespaces():
        r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        for pid in r.stdout.split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[:2] == [b"sleep", b"600"]:
                        pids.append(int(pid))
            except OSError:
                pass
    return pids


def rank_processes(zero):
    """PIDs of `zero` processes running in this cluster's host namespaces."""
    pids = []
    for h in ("h0", "h1"):
        r = subprocess.run(["ip", "netns", "pids", f"{PREFIX}{h}"], capture_output=True, text=True)
        for pid in r.stdout.split():
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                continue
            if os.path.basename(exe) == os.path.basename(zero):
                pids.append(int(pid))
    return pids


def bench(cluster, zero, flags, tmp, extra=()):
    cluster.up(*flags)
    argv = [zero, "bench", "comm", "--op", "all_gather", "--min-bytes", "4M", "--max-bytes", "4M",
            "--iters", "3", "--warmup", "1", "--membw-bytes", "4M", "--json", *extra]
    p = cluster.run(argv, timeout=60, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        kill_group(p)
        check(False, f"bench comm {' '.join(flags) or 'unshaped'} ended within 60 s")
        return None
    rows = [json.loads(ln) for ln in out.decode().splitlines() if ln.startswith("{")]
    label = " ".join([*flags, *extra]) or "unshaped"
    if not check(p.returncode == 0 and len(rows) == 1,
                 f"zero bench comm across 2 hosts x 2 ranks ({label})"):
        print(out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
        return None
    row = rows[0]
    check(row["ranks"] == 4 and row["backend"] == "mpi" and row["check"] == "ok",
          f"{label}: 4 MPI ranks, outputs checked ({row['check']})")
    # rank 0's block (count fp32 elements): hierarchical, to host 1 once; flat, to both its
    # ranks (the JSON numbers have 6 significant digits)
    want = (2 if "--flat" in extra else 1) * row["count"] * 4
    got, theory = row.get("inter_node_bytes", -1), row.get("inter_node_theory_bytes", -1)
    check(abs(got - want) <= 1e-5 * want and abs(theory - want) <= 1e-5 * want,
          f"{label}: rank 0 sends {row.get('inter_node_bytes')} bytes per call to the other host "
          f"(theory {row.get('inter_node_theory_bytes')}), closed form {want}")
    mbs = row["algbw_gbs"] * 1e3
    print(f"all_gather 4 MiB, {label}: {row['time_us'] / 1e3:.1f} ms, algbw {mbs:.1f} MB/s, "
          f"raw MPI_Allgather {row['raw_time_us'] / 1e3:.1f} ms (load {row['loadavg_1m']:.2f})",
          flush=True)
    return row


def case_bench(cluster, zero, tmp):
    fast = bench(cluster, zero, [], tmp)
    slow = bench(cluster, zero, ["--link", "100mbit"], tmp)
    slow_flat = bench(cluster, zero, ["--link", "100mbit"], tmp, ["--flat"])
    if fast and slow:
        check(slow["algbw_gbs"] < 0.5 * fast["algbw_gbs"],
              f"the 100mbit link's algbw ({slow['algbw_gbs'] * 1e3:.1f} MB/s) is below half the "
              f"unshaped one ({fast['algbw_gbs'] * 1e3:.1f} MB/s)")
    # Each host sends its 2 ranks' 1 MiB blocks to the other host: hierarchical, once each (2 MiB
    # through one 100 Mbit/s link: at least 0.17 s); flat, to both of its ranks (4 MiB: 0.34 s).
    for row, mib, label in ((slow, 2, "hierarchical"), (slow_flat, 4, "flat")):
        if not row:
            continue
        need = mib * 2**20 * 8 / 100e6 * 1e6
        check(row["time_us"] >= 0.9 * need,
              f"the shaped {label} all_gather takes at least the time the link needs for its "
              f"bytes ({row['time_us'] / 1e3:.0f} ms >= {0.9 * need / 1e3:.0f} ms)")


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("train", "linkdown", "bench", "script"):
        print(__doc__)
        return 2
    case, script, zero = sys.argv[1:]
    zero = os.path.abspath(zero)
    if shutil.which("ip") is None:
        print("SKIP: no 'ip' command (iproute2): cannot make network namespaces")
        return 77
    reap_stale(script)
    cluster = Cluster(script)

    def on_signal(signum, frame):
        cluster.down()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    tmp = tempfile.mkdtemp(prefix="zero-test-cluster-")
    try:
        {"train": case_train, "linkdown": case_linkdown, "bench": case_bench,
         "script": case_script}[case](
            cluster, zero, tmp)
    finally:
        cluster.down()
        shutil.rmtree(tmp, ignore_errors=True)
    failures = proc_checks.failures
    print(f"{'FAILED' if failures else 'passed'} ({failures} failure(s))")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
