#!/usr/bin/env python3
"""Fair heartbeat verdicts (controlplane/README.md, "Heartbeats"): a
gossamerd that did not run for a while (SIGSTOP here; descheduled by a
loaded machine, or its loop held up, in real life) does not declare its
peers down when it runs again, because their heartbeats were waiting,
unread, in its sockets. Before, its heartbeat timer fired before the
io_context read them, and at load ~20 both gossamerds of a rack in a box
declared each other down at once ("stopped answering heartbeats (last one
~3000 ms ago)").

Real processes on a loopback rack of 2 (cp_harness), every step bounded:
- one stopped: host 1 (timeout HB_TIMEOUT) is stopped for twice its timeout
  while host 0 (a long timeout, so that it keeps the link) keeps sending;
  resumed, host 1 declares nobody down;
- a real failure is still seen in time: host 0 stopped, host 1 declares it
  down within its timeout (plus slack), saying it stopped answering;
- both stopped at once (the CI failure): with the same timeout on both,
  both are stopped for twice the timeout and resumed: nobody is down.

usage: heartbeat_test.py GOSSAMERD GOSSAMERCTL [BULK_PEER]
"""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.argv += [""] * (4 - len(sys.argv))  # cp_harness reads GOSSAMERD GOSSAMERCTL BULK_PEER
from cp_harness import HB_TIMEOUT, Rack, check, run  # noqa: E402

STOP = 2 * HB_TIMEOUT / 1000  # seconds a gossamerd stays stopped
LONG_TIMEOUT = 30000  # ms: host 0's in the first rack; it never times out there


def set_timeout(rack, i, ms):
    with open(rack.cfg(i)) as f:
        text = f.read()
    with open(rack.cfg(i), "w") as f:
        f.write(text.replace(f"heartbeat_timeout_ms: {HB_TIMEOUT}\n", f"heartbeat_timeout_ms: {ms}\n"))


def all_up(rack, timeout=15):
    """True once both gossamerds see both hosts up (gossamerctl status exits 0)."""
    end = time.time() + timeout
    while time.time() < end:
        if all(rack.ctl(i, "status", timeout=5).returncode == 0 for i in range(rack.n)):
            return True
        time.sleep(0.1)
    return False


def downs(rack, i, since):
    """The 'is down' lines host i logged after byte `since` of its log."""
    return [line for line in rack.log(i)[since:].splitlines() if " is down: " in line]


def start(rack):
    for i in range(rack.n):
        rack.start(i)
    ok = all(rack.wait_up(i) for i in range(rack.n)) and all_up(rack)
    check(ok, "both gossamerds up and seeing each other")
    return ok


def one_stopped(d):
    rack = Rack(2, d)
    set_timeout(rack, 0, LONG_TIMEOUT)
    if not start(rack):
        return
    mark = [len(rack.log(i)) for i in range(2)]
    rack.procs[1].send_signal(signal.SIGSTOP)
    time.sleep(STOP)
    rack.procs[1].send_signal(signal.SIGCONT)
    time.sleep(1.0)  # time to run its late tick and read what waited
    check(rack.ctl(1, "status").returncode == 0, f"host 1, stopped for {STOP:.1f} s and resumed, sees host 0 up")
    check(not downs(rack, 1, mark[1]),
          f"host 1 (timeout {HB_TIMEOUT} ms) stopped for {STOP:.1f} s declares nobody down on waking: "
          f"{downs(rack, 1, mark[1])}")
    check(not downs(rack, 0, mark[0]),
          f"host 0 (timeout {LONG_TIMEOUT} ms) kept host 1 up meanwhile: {downs(rack, 0, mark[0])}")

    # The grace host 1 gave its peer for its own absence is spent: a peer
    # that really stops is still seen down within the timeout.
    mark = len(rack.log(1))
    rack.procs[0].send_signal(signal.SIGSTOP)
    t0 = time.time()
    seen = None
    while time.time() - t0 < HB_TIMEOUT / 1000 + 3:
        if rack.ctl(1, "status", timeout=5).returncode == 3:
            seen = time.time() - t0
            break
        time.sleep(0.05)
    rack.procs[0].send_signal(signal.SIGCONT)
    check(seen is not None and seen < HB_TIMEOUT / 1000 + 0.5
          and any("stopped answering heartbeats" in line for line in downs(rack, 1, mark)),
          f"then host 0 stopped: host 1 declares it down within its timeout ({HB_TIMEOUT} ms): "
          f"{seen if seen is None else round(seen, 2)} s, {downs(rack, 1, mark)}")
    check(all_up(rack), "host 0 resumed: both up again")
    for i in range(2):
        rack.stop(i)


def both_stopped(d):
    rack = Rack(2, d)
    if not start(rack):
        return
    mark = [len(rack.log(i)) for i in range(2)]
    for p in rack.procs:
        p.send_signal(signal.SIGSTOP)
    time.sleep(STOP)
    for p in rack.procs:
        p.send_signal(signal.SIGCONT)
    time.sleep(1.0)
    found = downs(rack, 0, mark[0]) + downs(rack, 1, mark[1])
    check(not found, f"both stopped for {STOP:.1f} s (timeout {HB_TIMEOUT} ms) and resumed: nobody is down: {found}")
    check(all(rack.ctl(i, "status").returncode == 0 for i in range(2)), "and both status views say all up")
    for i in range(2):
        rack.stop(i)


def main():
    one_stopped(tempfile.mkdtemp(prefix="gossamer-hb-one-"))
    both_stopped(tempfile.mkdtemp(prefix="gossamer-hb-both-"))


run(main, "heartbeat fairness")
