#!/usr/bin/python3
"""Hydra's arrival order while its listener is out of descriptors
(tools/apps/kvstore/order.cpp, io_loop.cpp's accept_all):

  hydra_order_backlog_test.py BUILD_DIR

A Hydra of 2 threads gets, once running, a descriptor limit (RLIMIT_NOFILE,
prlimit) a few above what it has open; the test opens connections until
the listening loop cannot accept (it says so
on stderr and pauses its listener for 100 ms at a time): the connections
left in the kernel's backlog may carry commands that arrived before any
that the loops read, so while they wait the listening loop's frontier
stays put, also while that loop is between polls or napping. Then:

  1. during the pauses, a BLPOP (always ordered) on a connection of the
     other loop cannot be placed in order: it waits the order's 100 ms and
     goes ahead, counted in INFO's hydra_arrival_order_timeouts (a build
     that let the frontier move whenever the listening loop was between
     polls ran it at once, with no timeout);
  2. once the extra connections close, the backlog is accepted, and
     ordered commands run in order again without waiting: 5 BLPOP/RPUSH
     rounds add no timeout (a pause that left its hold behind would make
     every one of them wait 100 ms and time out).
"""
import os
import resource
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_log import check, finish  # noqa: E402
from hydra_proc import free_port  # noqa: E402
from resp_client import Conn, encode, info_field, reply_within  # noqa: E402

HEADROOM = 4  # descriptors Hydra may open beyond those it has when the limit is set


def timeouts(c):
    return info_field(c, "stats", "hydra_arrival_order_timeouts")


def main():
    build = sys.argv[1]
    hydra = os.path.join(build, "tools/apps/kvstore/hydra")
    port = free_port()
    err_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"hydra-backlog-{os.getpid()}.err")
    err = open(err_path, "a")  # O_APPEND: the test reads it through a file of its own

    p = subprocess.Popen([hydra, "--threads", "2", "--port", str(port), "--bind", "127.0.0.1", "--seconds", "90"],
                         stdout=subprocess.DEVNULL, stderr=err)
    extra = []
    try:
        conns = []
        for _ in range(300):  # up
            try:
                c = Conn(("127.0.0.1", port), timeout=10)
                if c.call("PING") == ("+", "PONG"):
                    conns.append(c)
                    break
            except OSError:
                time.sleep(0.05)
        for _ in range(3):  # the k-th connection is on loop k % 2
            c = Conn(("127.0.0.1", port), timeout=10)
            c.call("PING")
            conns.append(c)
        loop1, info = conns[1], conns[3]
        pusher = conns[2]

        # Fill the descriptor table: connect until the listener pauses.
        limit = len(os.listdir(f"/proc/{p.pid}/fd")) + HEADROOM
        resource.prlimit(p.pid, resource.RLIMIT_NOFILE, (limit, limit))
        deadline = time.monotonic() + 20
        paused = False
        # The connections complete in the kernel's backlog whether or not
        # Hydra has accepted them yet: on a loaded machine it may take a
        # while to get to them, so after the last one, wait for the pause.
        while time.monotonic() < deadline:
            with open(err_path) as f:
                said = f.read()
            if "not accepting for 100 ms" in said:
                paused = True
                break
            if len(extra) < 20 * HEADROOM:
                extra.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            else:
                time.sleep(0.01)
        if not check(paused, "the listener ran out of descriptors and paused",
                     f"{len(extra)} extra connections, stderr: {open(err_path).read()[-300:]!r}"):
            return finish()
        for _ in range(5):  # more left in the backlog (each pause retries and pauses again)
            extra.append(socket.create_connection(("127.0.0.1", port), timeout=5))

        # 1. A BLPOP on loop 1 while the backlog waits: held for the order's 100 ms.
        before = timeouts(info)
        t = time.monotonic()
        loop1.send(encode("BLPOP", "backlog-q", "0.5"))
        got = reply_within(loop1, 5)
        waited = time.monotonic() - t
        after = timeouts(info)
        check(got is None and waited < 4, "the BLPOP during the pauses answered (its 0.5 s ran out)",
              f"{got!r} after {waited:.3f} s")
        check(after > before, "during the pauses the ordered BLPOP waited for the backlog and timed out",
              f"timeouts {before} -> {after}, BLPOP answered after {waited:.3f} s")

        # 2. The extra connections close: the backlog drains (a few at a
        # time: the limit leaves room for HEADROOM, and each time it is
        # full the listener pauses 100 ms), then the order needs no more
        # timeouts.
        opened = len(conns) + len(extra)
        for s in extra:
            s.close()
        extra = []
        drained = False
        for _ in range(300):
            if info_field(info, "stats", "total_connections_received") >= opened:
                drained = True
                break
            time.sleep(0.05)
        if not check(drained, "the backlog was accepted once the connections closed",
                     f"{info_field(info, 'stats', 'total_connections_received')} of {opened} connections accepted"):
            return finish()
        time.sleep(0.3)  # the last pause ends, and the loops have read their new sockets
        base = timeouts(info)
        good = 0
        for i in range(5):
            pusher.call("DEL", "backlog-q")
            loop1.send(encode("BLPOP", "backlog-q", "0"))
            for _ in range(200):
                if b"blocked_clients:1" in info.call("INFO", "clients"):
                    break
                time.sleep(0.01)
            pushed = pusher.call("RPUSH", "backlog-q", f"v{i}")
            got = reply_within(loop1, 5)
            if not check(pushed == 1 and got == [b"backlog-q", f"v{i}".encode()], f"round {i}: BLPOP served after the backlog",
                         f"RPUSH {pushed!r}, BLPOP {got!r}"):
                break
            good += 1
        now = timeouts(info)
        check(good == 5 and now == base, "with the backlog read, the order waits for nothing",
              f"timeouts {base} -> {now} over {good} rounds")
        for c in conns:
            c.close()
    finally:
        for s in extra:
            s.close()
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
        err.close()
        os.unlink(err_path)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
