#!/usr/bin/python3
"""Hydra's folding (tools/apps/kvstore/fold.cpp): on one host, while other
processes want the cores, the I/O loops run on fewer CPUs, and spread out
again when they stop.

  hydra_fold_test.py BUILD_DIR
      1. idle: a Hydra of one thread per CPU keeps every CPU
         (INFO's hydra_fold_cpus, each thread's Cpus_allowed_list);
      2. with one busy process fewer than CPUs, bounded in time, its loops
         move onto one CPU, the same for all, while commands across its
         shards are answered and read back;
      3. once those processes end, the loops have every CPU again;
      4. --no-fold: the same busy processes leave the loops where they were.
Exits 77 (skip) on a machine of one CPU, or when this process may not run
on every online CPU (Hydra then does not fold).
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_log import check, finish  # noqa: E402
from hydra_proc import free_port, local_hydra  # noqa: E402
from resp_client import Conn  # noqa: E402

WAIT = 15  # seconds for a move; it takes about 0.1 s on an idle machine


def info_cpu(conn):
    text = conn.call("INFO", "cpu").decode()
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


def cpu_list(text):
    """A Cpus_allowed_list ("0-3,8") as a set of CPU numbers."""
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def thread_cpus(pid):
    """Each thread's allowed CPUs among the online ones (a VM may list
    possible CPUs that are offline; Hydra moves among the online ones)."""
    online = os.sched_getaffinity(0)
    out = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task")):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                out += [frozenset(cpu_list(line.split()[1]) & online) for line in f
                        if line.startswith("Cpus_allowed_list:")]
        except FileNotFoundError:
            pass  # a thread that ended
    return out


def spread(cpus, every):
    """Every thread may run on every online CPU."""
    return bool(cpus) and all(c == every for c in cpus)


def folded(cpus):
    """Every thread on one CPU, the same."""
    return bool(cpus) and len(set(cpus)) == 1 and len(cpus[0]) == 1


def wait_for(what, fn, timeout=WAIT):
    end = time.time() + timeout
    while True:
        value = fn()
        if what(value) or time.time() > end:
            return value
        time.sleep(0.1)


def busy(count, seconds):
    """`count` processes that spin for at most `seconds`."""
    code = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]


def stop(procs):
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    hydra = os.path.join(build, "tools/apps/kvstore/hydra")
    online = os.sysconf("SC_NPROCESSORS_ONLN")
    if online < 2 or len(os.sched_getaffinity(0)) != online:
        print(f"SKIP: {online} online CPUs, this process may run on {len(os.sched_getaffinity(0))}: "
              "Hydra folds only with several CPUs, all of them allowed")
        sys.exit(77)
    every = frozenset(os.sched_getaffinity(0))
    port = free_port()
    with local_hydra(hydra, port, threads=online, seconds=120) as p:
        conn = wait_for(lambda c: c is not None, lambda: _connect(port), timeout=30)
        if not check(conn is not None, "hydra answers"):
            return finish()
        # Idle, nothing moves them (waited for: another process's burst just
        # before would fold them for a moment).
        info = wait_for(lambda i: i.get("hydra_fold_cpus") == str(online), lambda: info_cpu(conn))
        cpus = wait_for(lambda c: spread(c, every), lambda: thread_cpus(p.pid))
        check(info.get("hydra_fold_cpus") == str(online) and spread(cpus, every),
              f"idle: {online} loops on all {online} CPUs", f"{info} {cpus}")
        hogs = busy(online - 1, 60)
        try:
            info = wait_for(lambda i: i.get("hydra_fold_cpus") == "1", lambda: info_cpu(conn))
            cpus = wait_for(folded, lambda: thread_cpus(p.pid))
            check(info.get("hydra_fold_cpus") == "1" and folded(cpus),
                  f"{online - 1} busy processes: the loops fold onto one CPU, the same for all", f"{info} {cpus}")
            for i in range(200):
                conn.call("SET", f"fold:{i}", f"v{i}")
            got = [conn.call("GET", f"fold:{i}") for i in range(200)]
            check(got == [f"v{i}".encode() for i in range(200)], "folded: 200 keys over every shard written and read")
        finally:
            stop(hogs)
        info = wait_for(lambda i: i.get("hydra_fold_cpus") == str(online), lambda: info_cpu(conn))
        cpus = wait_for(lambda c: spread(c, every), lambda: thread_cpus(p.pid))
        check(info.get("hydra_fold_cpus") == str(online) and spread(cpus, every),
              "the busy processes gone: the loops on every CPU again", f"{info} {cpus}")
        check(int(info.get("hydra_fold_changes", "0")) >= 2, "INFO counts the moves",
              info.get("hydra_fold_changes"))
    port = free_port()
    with local_hydra(hydra, port, "--no-fold", threads=online, seconds=60) as p:
        conn = wait_for(lambda c: c is not None, lambda: _connect(port), timeout=30)
        if not check(conn is not None, "--no-fold: hydra answers"):
            return finish()
        hogs = busy(online - 1, 30)
        try:
            time.sleep(2)
            info = info_cpu(conn)
            check(info.get("hydra_fold_cpus") == "0" and spread(thread_cpus(p.pid), every),
                  "--no-fold: the loops stay on every CPU", f"{info} {thread_cpus(p.pid)}")
        finally:
            stop(hogs)
    return finish()


def _connect(port):
    try:
        c = Conn(("127.0.0.1", port))
        return c if c.call("PING") == ("+", "PONG") else None
    except OSError:
        return None


if __name__ == "__main__":
    sys.exit(main())
