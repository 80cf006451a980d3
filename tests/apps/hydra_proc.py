"""Running Hydra servers for the tests beside this file: a free loopback
port, waiting for PING, a process's resident memory and CPU time, and a
standalone server that stops by itself (hydra_test.py and the other
hydra_*_test.py files import these)."""

import contextlib
import os
import signal
import socket
import subprocess
import time


def free_port():
    base = 16379 + os.getpid() % 1000
    for p in range(base, base + 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
                return p
            except OSError:
                continue
    raise RuntimeError("no free port")


def wait_ping(run_cli, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if run_cli("PING") == "PONG":
                return True
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.1)
    return False


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def local_hydra(hydra, port, *flags, threads=1, seconds=60):
    """A hydra of `threads` threads on 127.0.0.1:port with extra flags, that
    stops by itself after `seconds`, or on SIGTERM (then SIGKILL) when the
    block ends; yields the process."""
    p = subprocess.Popen([hydra, "--threads", str(threads), "--port", str(port), "--bind", "127.0.0.1",
                          "--seconds", str(seconds), *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield p
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
