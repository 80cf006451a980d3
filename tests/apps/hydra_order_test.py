#!/usr/bin/python3
"""Hydra's arrival order across its I/O loops (tools/apps/kvstore/order.cpp):

  hydra_order_test.py BUILD_DIR

A Hydra of 2 threads deals its connections to its 2 loops in turn, so the
k-th connection this test opens (each after the previous one answered a
PING) is on loop k % 2; the test checks that first (DEBUG SLEEP stops one
loop's thread: a PING on the other loop answers at once, one on the same
loop only after the sleep). Then, with loop 0 asleep for 30 ms (DEBUG
SLEEP), commands are sent on several connections one after the other
without waiting for replies, the earlier ones to loop 0 and the later ones
to loop 1, whose keys live on shard 1 (thread 1, awake). Loop 1 reads
its commands first; they must still take effect after loop 0's:

  1. registrations: BLPOP on loop 0, then BLPOP on loop 1, then RPUSH on
     loop 1: the first BLPOP gets the element, the second the next push
     (Redis's "BRPOPLPUSH with multiple blocked clients"); then the same
     with the first BLPOP on keys of both shards (registered on two);
  2. EXEC against a push: a BRPOPLPUSH is blocked onto a key that a MULTI
     on loop 0 WATCHes; EXEC on loop 0, then LPUSH on loop 1 (which serves
     the BRPOPLPUSH, touching the WATCHed key): EXEC must run first and
     succeed (Redis's "BRPOPLPUSH does not affect WATCH while still
     blocked").

Each case must pass 5 rounds in which INFO's hydra_arrival_order_timeouts
stayed put (the order held by waiting, not by giving up). A round in which
a held command waited its 100 ms and went ahead anyway proves nothing
either way (a loaded machine, e.g. CI's sanitizer builds beside other
tests, can keep loop 0 off a core that long): it is reported and run
again, up to 15 rounds in all. A round that goes wrong without a timeout
fails the test. Without the order, loop 1 runs its commands before loop 0
wakes, nothing times out, and both cases fail in their first round.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_log import check, finish  # noqa: E402
from hydra_pair import shard_of  # noqa: E402
from hydra_proc import free_port, local_hydra  # noqa: E402
from resp_client import Conn, encode, info_field, reply_within  # noqa: E402

SLEEP = 0.03  # loop 0's DEBUG SLEEP, well under the order's 100 ms wait
ROUNDS, ATTEMPTS = 5, 15


def key_on(shard, prefix):
    i = 0
    while shard_of(f"{prefix}{i}", 2) != shard:
        i += 1
    return f"{prefix}{i}"


def connect(port, n):
    """n connections, opened one after the other: the k-th on loop k % 2."""
    conns = []
    for _ in range(n):
        c = Conn(("127.0.0.1", port), timeout=10)
        for _ in range(300):
            try:
                if c.call("PING") == ("+", "PONG"):
                    break
            except OSError:
                pass
            time.sleep(0.01)
        conns.append(c)
    return conns


def elapsed(c, *cmd):
    t = time.monotonic()
    r = c.call(*cmd)
    return r, time.monotonic() - t


def timeouts(info):
    return info_field(info, "stats", "hydra_arrival_order_timeouts")


def rounds(info, what, one_round):
    """Runs one_round() (-> (ok, detail)) until ROUNDS of them ran with no
    timeout of the order; a wrong result without a timeout fails at once."""
    good = 0
    for i in range(ATTEMPTS):
        before = timeouts(info)
        ok, detail = one_round()
        gave_up = timeouts(info) - before
        if gave_up:
            print(f"note: round {i}: {what}: the order gave up waiting {gave_up} time(s) (a loaded machine); "
                  f"{'right' if ok else 'wrong'} anyway, not counted: {detail}")
            continue
        if not check(ok, f"round {i}: {what}", detail):
            return
        good += 1
        if good == ROUNDS:
            return
    check(False, f"{what}: {ROUNDS} rounds without a timeout of the order", f"only {good} in {ATTEMPTS}")


def main():
    build = sys.argv[1]
    hydra = os.path.join(build, "tools/apps/kvstore/hydra")
    port = free_port()
    with local_hydra(hydra, port, threads=2, seconds=120):
        for _ in range(300):  # up: a first connection that answers (loop 0)
            try:
                first = Conn(("127.0.0.1", port), timeout=10)
                if first.call("PING") == ("+", "PONG"):
                    break
            except OSError:
                time.sleep(0.05)
        conns = [first] + connect(port, 7)
        loop0, loop1 = conns[0::2], conns[1::2]

        # The dealing: loop 0 asleep, loop 1 answers at once, loop 0 not.
        loop0[0].send(encode("DEBUG", "SLEEP", "0.3"))
        time.sleep(0.02)
        _, fast = elapsed(loop1[0], "PING")
        _, slow = elapsed(loop0[1], "PING")
        loop0[0].reply()
        if not check(fast < 0.15 and slow > 0.15, "connections alternate between the 2 loops",
                     f"PING on loop 1 took {fast:.3f} s, on loop 0 {slow:.3f} s during loop 0's 0.3 s sleep"):
            return finish()

        sleeper, a, w = loop0[0], loop0[1], loop0[2]
        b, p, info = loop1[0], loop1[1], loop1[2]
        q, src, dst, k = key_on(1, "q"), key_on(1, "src"), key_on(1, "dst"), key_on(1, "k")

        # The first client blocked on q alone, then on keys of both shards
        # (its registration goes to shard 0, whose thread is the sleeping
        # one, and to shard 1: it is in place only once both have answered).
        q0 = key_on(0, "r")

        def blocked_first(first_keys):
            def one_round():
                p.call("DEL", q, q0)
                sleeper.send(encode("DEBUG", "SLEEP", str(SLEEP)))
                time.sleep(0.005)
                a.send(encode("BLPOP", *first_keys, "0"))  # arrives first, read only after the sleep
                time.sleep(0.002)
                b.send(encode("BLPOP", q, "0"))
                time.sleep(0.002)
                pushed = p.call("RPUSH", q, "x")
                sleeper.reply()
                got_a = reply_within(a)
                p.call("RPUSH", q, "y")
                got_b = reply_within(b)
                if got_a is None:  # the order failed: the second push went to it
                    got_a = reply_within(a)
                return (pushed == 1 and got_a == [q.encode(), b"x"] and got_b == [q.encode(), b"y"],
                        f"RPUSH {pushed!r}; first BLPOP {got_a!r}, second {got_b!r}")
            return one_round

        rounds(info, "the client that blocked first is served first", blocked_first([q]))
        rounds(info, "blocked on two shards first, served first", blocked_first([q0, q]))

        def exec_first():
            p.call("DEL", src, dst)
            p.call("SET", k, "v")
            b.send(encode("BRPOPLPUSH", src, dst, "0"))
            for _ in range(500):
                if b"blocked_clients:1" in info.call("INFO", "clients"):
                    break
                time.sleep(0.01)
            ok = [w.call("WATCH", dst), w.call("MULTI"), w.call("GET", k)]
            sleeper.send(encode("DEBUG", "SLEEP", str(SLEEP)))
            time.sleep(0.005)
            w.send(encode("EXEC"))  # arrives first, read only after the sleep
            time.sleep(0.002)
            pushed = p.call("LPUSH", src, "e")
            sleeper.reply()
            executed = reply_within(w)
            moved = reply_within(b)
            return (ok == [("+", "OK"), ("+", "OK"), ("+", "QUEUED")] and pushed == 1 and executed == [b"v"]
                    and moved == b"e",
                    f"WATCH/MULTI/GET {ok!r}, LPUSH {pushed!r}, EXEC {executed!r}, BRPOPLPUSH {moved!r}")

        rounds(info, "EXEC runs before a push that arrived after it", exec_first)
        for c in conns:
            c.close()
    return finish()


if __name__ == "__main__":
    sys.exit(main())
