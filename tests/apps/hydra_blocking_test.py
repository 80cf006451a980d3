#!/usr/bin/python3
"""Hydra's blocking list commands (tools/apps/kvstore/blocking.cpp):

  hydra_blocking_test.py BUILD_DIR
      1. next to redis-server 7.0: BLPOP, BRPOP, BLMPOP, LMPOP, BLMOVE,
         BRPOPLPUSH on lists that have elements, their timeouts, their
         errors (byte for byte, RESP2 and RESP3), and inside MULTI (where
         they never block);
      2. on 4 shards with redis-py: a client blocked on keys of three shards
         is woken by a push to any of them from another connection; clients
         blocked on one key are served in the order they blocked; a timeout
         answers a null after about its time; a blocked client that closes
         is forgotten (the next push stays in the list); CLIENT UNBLOCK;
         BLMOVE across shards; the blocked count in INFO;
         wake order (wake.cpp), each case repeated: a push's reply comes
         after the BLMOVEs it serves have pushed, across shards and in
         chains (so a read right after it sees them); BLMOVE within a shard
         (onto itself too, and WRONGTYPE for a destination of another
         type, the element left for the next in line); a client blocked on
         keys of two shards that one EXEC pushes to both gets one element,
         the other stays; BLMPOP clients served in the order they blocked,
         the EXEC's keys in order (Redis's test of that name);
      3. 6 consumers (BLPOP with short timeouts on two keys of different
         shards) against 3 producers: every element pushed is popped exactly
         once or still in a list.
  hydra_blocking_test.py rack HOST0:PORT HOST1:PORT
      On a running rack (4 shards, 2 per host): clients blocked through
      either host on keys of every shard are woken by pushes through the
      other host, and consumers on both hosts against producers on both pop
      every element exactly once (hydra_test.py's rack part runs it inside
      host 0's namespace).
Exits 77 (skip) without redis-py or redis-server.
"""
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hydra_pair import both, check, clients, finish, host_ports, keys_on_distinct_shards, pair, raw_both, redis  # noqa: E402
from hydra_pair import shard_of  # noqa: E402


def blocked_count(r):
    return int(r.info("clients")["blocked_clients"])


def wait_blocked(r, n, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        if blocked_count(r) == n:
            return True
        time.sleep(0.01)
    return False


def compared(ports):
    servers = clients(ports)
    for r in servers:
        r.flushall()
        r.rpush("l", "a", "b", "c", "d", "e")
        r.rpush("m", "1", "2")
        r.set("str", "x")
    both(servers, "BLPOP/BRPOP/BLMPOP/LMPOP/BLMOVE/BRPOPLPUSH on lists with elements",
         lambda r: [r.blpop(["nosuch", "l"], 1), r.brpop(["l", "m"], 1),
                    r.execute_command("BLMPOP", "1", "2", "nosuch", "l", "LEFT", "COUNT", "2"),
                    r.execute_command("LMPOP", "1", "m", "RIGHT", "COUNT", "5"),
                    r.execute_command("LMPOP", "2", "nosuch", "m", "LEFT"),
                    r.execute_command("BLMOVE", "l", "dst", "LEFT", "RIGHT", "1"),
                    r.brpoplpush("dst", "l", 1), r.lrange("l", 0, -1), r.exists("m", "dst")])
    both(servers, "timeouts: a null after 0.1 s", lambda r: [r.blpop("nosuch", 0.1), r.brpop(["x", "y"], 0.1),
                                                            r.execute_command("BLMPOP", "0.1", "1", "x", "LEFT"),
                                                            r.brpoplpush("x", "y", 0.1),
                                                            r.execute_command("BLMOVE", "x", "y", "LEFT", "LEFT", "0.1")])
    bad = [("BLPOP", "l", "-1"), ("BLPOP", "l", "abc"), ("BLPOP", "l", " 1"), ("BLPOP", "l"),
           ("BLPOP", "str", "0"), ("BRPOPLPUSH", "str", "l", "0"), ("BLMOVE", "l", "x", "UP", "LEFT", "0"),
           ("BLMOVE", "l", "x", "LEFT", "LEFT", "-0.5"), ("BLMPOP", "0", "0", "l", "LEFT"),
           ("BLMPOP", "0", "x", "l", "LEFT"), ("BLMPOP", "0", "3", "l", "LEFT"), ("BLMPOP", "0", "1", "l", "MIDDLE"),
           ("BLMPOP", "0", "1", "l", "LEFT", "COUNT", "0"), ("BLMPOP", "0", "1", "l", "LEFT", "COUNT"),
           ("BLMPOP", "0", "1", "l", "LEFT", "FOO", "1"), ("LMPOP", "1", "l", "LEFT", "COUNT", "-1"),
           ("BLMPOP", "x", "1", "l", "LEFT"), ("BRPOP", "l", "0x10")]
    for args in bad:
        both(servers, "error: " + " ".join(args), lambda r: r.execute_command(*args))
    # Inside MULTI nothing blocks: an empty list answers a null at once.
    def in_multi(r):
        p = r.pipeline(transaction=True)
        p.blpop("nosuch", 0)
        p.execute_command("BLMOVE", "nosuch", "d", "LEFT", "LEFT", "0")
        p.execute_command("BLMPOP", "0", "1", "nosuch", "LEFT")
        p.rpush("q", "v1", "v2")
        p.brpoplpush("q", "q2", 0)
        p.lrange("q2", 0, -1)
        return p.execute()
    both(servers, "MULTI: BLPOP/BLMOVE/BLMPOP of empty lists a null, BRPOPLPUSH sees the push before it", in_multi)
    raw_both(ports, [("DEL", "n"), ("BLPOP", "n", "0.05"), ("BLMPOP", "0.05", "1", "n", "LEFT"),
                     ("MULTI",), ("BLMOVE", "n", "m", "LEFT", "LEFT", "0"), ("BLPOP", "n", "0"), ("EXEC",),
                     ("HELLO", "3"), ("BLPOP", "n", "0.05"), ("RPUSH", "n", "a", "b"), ("BLMPOP", "0", "1", "n", "LEFT", "COUNT", "5"),
                     ("BLPOP", "n", "x"), ("HELLO", "2")], "raw")


def blocker(port, results, i, *args):
    r = redis.Redis(port=port, socket_timeout=30)
    results[i] = r.execute_command(*args)


def cross_shard(port, shards):
    r = redis.Redis(port=port, socket_timeout=30)
    r.flushall()
    k = keys_on_distinct_shards("bk", shards)
    results = {}
    t = threading.Thread(target=blocker, args=(port, results, 0, "BLPOP", k[0], k[1], k[2], "0"))
    t.start()
    check(wait_blocked(r, 1), "INFO blocked_clients counts a client blocked on three shards")
    r.rpush(k[2], "woke")
    t.join(10)
    check(results.get(0) == (k[2].encode(), b"woke"), "a push to the third key's shard wakes it", repr(results))
    check(wait_blocked(r, 0) and r.exists(k[0], k[1], k[2]) == 0, "blocked_clients back to 0, nothing left behind")

    # FIFO: three clients on one key, then one push of three elements.
    threads = []
    for i in range(3):
        threads.append(threading.Thread(target=blocker, args=(port, results, 10 + i, "BRPOP", k[1], "0")))
        threads[-1].start()
        check(wait_blocked(r, i + 1), f"client {i} blocked on {k[1]}")
    r.rpush(k[1], "x", "y", "z")
    for t in threads:
        t.join(10)
    got = [results.get(10 + i) for i in range(3)]
    check(got == [(k[1].encode(), b"z"), (k[1].encode(), b"y"), (k[1].encode(), b"x")],
          "served in the order they blocked (BRPOP: z, y, x)", repr(got))

    # A timeout: a null after about its time.
    t0 = time.time()
    v = r.blpop([k[0], k[3]], 0.3)
    dt = time.time() - t0
    check(v is None and 0.25 <= dt < 5, f"BLPOP over two shards times out with a null after 0.3 s ({dt:.2f} s)")

    # A blocked client that closes is forgotten: the next push stays.
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"*3\r\n$5\r\nBLPOP\r\n$%d\r\n%s\r\n$1\r\n0\r\n" % (len(k[3]), k[3].encode()))
    check(wait_blocked(r, 1), "raw client blocked")
    s.close()
    check(wait_blocked(r, 0), "closing it unblocks it")
    r.rpush(k[3], "kept")
    time.sleep(0.2)
    check(r.lrange(k[3], 0, -1) == [b"kept"], "a push after the close stays in the list")

    # CLIENT UNBLOCK id ERROR / TIMEOUT from another connection.
    for reason, want in (("ERROR", b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"), ("TIMEOUT", b"*-1\r\n")):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n")
        cid = int(s.recv(100)[1:].strip())
        s.sendall(b"*3\r\n$5\r\nBLPOP\r\n$%d\r\n%s\r\n$1\r\n0\r\n" % (len(k[0]), k[0].encode()))
        check(wait_blocked(r, 1), f"raw client {cid} blocked")
        n = r.client_unblock(cid, error=reason == "ERROR")
        got = s.recv(100)
        check(n == 1 and got == want, f"CLIENT UNBLOCK {reason}: 1, and the blocked client gets {want!r}", f"{n} {got!r}")
        s.close()
    check(r.client_unblock(999999) == 0, "CLIENT UNBLOCK of no blocked client: 0")

    # BLMOVE across shards, woken by a push.
    t = threading.Thread(target=blocker, args=(port, results, 20, "BLMOVE", k[0], k[2], "RIGHT", "LEFT", "5"))
    t.start()
    check(wait_blocked(r, 1), "BLMOVE blocked")
    r.rpush(k[0], "m1", "m2")
    t.join(10)
    time.sleep(0.1)
    check(results.get(20) == b"m2" and r.lrange(k[2], 0, -1) == [b"m2"] and r.lrange(k[0], 0, -1) == [b"m1"],
          "BLMOVE pops the source's tail and pushes it on the destination (another shard)",
          f"{results.get(20)} {r.lrange(k[2], 0, -1)} {r.lrange(k[0], 0, -1)}")


def send(s, *args):
    s.sendall(b"".join([b"*%d\r\n" % len(args)] + [b"$%d\r\n%s\r\n" % (len(a), a.encode()) for a in args]))


def recv_reply(s):
    s.settimeout(10)
    return s.recv(1000)


def blocked_raw(port, r, n, *args):
    """A raw connection sending `args`, once INFO counts `n` blocked clients."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    send(s, *args)
    if not wait_blocked(r, n):
        check(False, f"blocked: {' '.join(args)}")
    return s


def same_shard(prefix, shards, n):
    """`n` keys on one shard."""
    keys, i = [], 0
    while len(keys) < n:
        k = f"{prefix}{i}"
        if shard_of(k, shards) == shard_of(prefix + "0", shards):
            keys.append(k)
        i += 1
    return keys


def wake_order(port, shards, rounds=10):
    r = redis.Redis(port=port, socket_timeout=30)
    r.flushall()
    k = keys_on_distinct_shards("wo", shards)
    ok_circ = ok_chain = ok_self = ok_wrong = ok_multi = ok_mpop = 0
    for _ in range(rounds):
        # Circular BRPOPLPUSH across two shards (Redis's test of that name).
        r.delete(k[0], k[1])
        a = blocked_raw(port, r, 1, "BRPOPLPUSH", k[0], k[1], "0")
        b = blocked_raw(port, r, 2, "BRPOPLPUSH", k[1], k[0], "0")
        r.rpush(k[0], "foo")
        got = (r.lrange(k[0], 0, -1), r.lrange(k[1], 0, -1))
        ok_circ += got == ([b"foo"], []) and recv_reply(a) == b"$3\r\nfoo\r\n" and recv_reply(b) == b"$3\r\nfoo\r\n"
        a.close(), b.close()
        # A chain over three shards: k0 -> k1 -> k2; the push's reply after both moves.
        r.delete(k[0], k[1], k[2])
        a = blocked_raw(port, r, 1, "BLMOVE", k[0], k[1], "RIGHT", "LEFT", "0")
        b = blocked_raw(port, r, 2, "BLMOVE", k[1], k[2], "RIGHT", "LEFT", "0")
        r.lpush(k[0], "x")
        ok_chain += r.lrange(k[2], 0, -1) == [b"x"] and r.exists(k[0], k[1]) == 0
        a.close(), b.close()
        # Within one shard: onto itself, and a chain s0 -> s1.
        s = same_shard("ws", shards, 3)
        r.delete(*s)
        a = blocked_raw(port, r, 1, "BRPOPLPUSH", s[0], s[0], "0")
        r.rpush(s[0], "me")
        self_ok = r.lrange(s[0], 0, -1) == [b"me"]
        self_ok = self_ok and recv_reply(a) == b"$2\r\nme\r\n"
        a.close()
        r.delete(s[0])
        a = blocked_raw(port, r, 1, "BLMOVE", s[0], s[1], "LEFT", "RIGHT", "0")
        b = blocked_raw(port, r, 2, "BLMOVE", s[1], s[2], "LEFT", "RIGHT", "0")
        r.rpush(s[0], "c")
        ok_self += self_ok and r.lrange(s[2], 0, -1) == [b"c"] and r.exists(s[0], s[1]) == 0
        a.close(), b.close()
        # WRONGTYPE destination within the shard: nothing popped for it, the next in line served.
        r.delete(*s)
        r.set(s[1], "str")
        a = blocked_raw(port, r, 1, "BRPOPLPUSH", s[0], s[1], "0")
        b = blocked_raw(port, r, 2, "BRPOPLPUSH", s[0], s[2], "0")
        r.lpush(s[0], "w")
        ok_wrong += recv_reply(a).startswith(b"-WRONGTYPE") and r.lrange(s[2], 0, -1) == [b"w"] and r.exists(s[0]) == 0
        a.close(), b.close()
        check(wait_blocked(r, 0), "nobody left blocked")
        # One client blocked on two shards, one EXEC pushing to both: one element popped, the other stays.
        r.delete(k[0], k[1])
        a = blocked_raw(port, r, 1, "BLPOP", k[0], k[1], "0")
        p = r.pipeline(transaction=True)
        p.rpush(k[0], "e0")
        p.rpush(k[1], "e1")
        p.execute()
        reply = recv_reply(a)
        time.sleep(0.05)
        left = r.lrange(k[0], 0, -1) + r.lrange(k[1], 0, -1)
        ok_multi += (reply.endswith(b"e0\r\n") and left == [b"e1"]) or (reply.endswith(b"e1\r\n") and left == [b"e0"])
        a.close()
        # Redis's "BLMPOP with multiple blocked clients", its keys on two shards.
        r.delete(k[0], k[1])
        c = [blocked_raw(port, r, i + 1, "BLMPOP", "0", "2", k[0], k[1], side, "COUNT", n)
             for i, (side, n) in enumerate((("LEFT", "1"), ("RIGHT", "10"), ("LEFT", "10"), ("RIGHT", "1")))]
        p = r.pipeline(transaction=True)
        p.lpush(k[0], "a", "b", "c", "d", "e")
        p.lpush(k[1], "1", "2", "3", "4", "5")
        p.execute()
        got = [recv_reply(x) for x in c[:3]]
        r.lpush(k[1], "1", "2", "3")
        got.append(recv_reply(c[3]))
        def mp(key, *vals):
            return (b"*2\r\n$%d\r\n%s\r\n*%d\r\n" % (len(key), key.encode(), len(vals)) +
                    b"".join(b"$%d\r\n%s\r\n" % (len(v), v.encode()) for v in vals))
        ok_mpop += got == [mp(k[0], "e"), mp(k[0], "a", "b", "c", "d"), mp(k[1], "5", "4", "3", "2", "1"), mp(k[1], "1")]
        for x in c:
            x.close()
        check(wait_blocked(r, 0), "nobody left blocked")
    check(ok_circ == rounds, f"circular BRPOPLPUSH across shards: the lists as Redis has them right after the push "
          f"({ok_circ} of {rounds})")
    check(ok_chain == rounds, f"a chain of BLMOVEs over three shards done before the push's reply ({ok_chain} of {rounds})")
    check(ok_self == rounds, f"BRPOPLPUSH onto itself, and a chain of BLMOVEs within one shard ({ok_self} of {rounds})")
    check(ok_wrong == rounds, f"WRONGTYPE destination within a shard: nothing popped, the next in line served "
          f"({ok_wrong} of {rounds})")
    check(ok_multi == rounds, f"blocked on two shards, one EXEC pushes to both: one popped, one left ({ok_multi} of {rounds})")
    check(ok_mpop == rounds, f"BLMPOP with multiple blocked clients, keys on two shards ({ok_mpop} of {rounds})")


def rack(h0, h1):
    hosts = [h0, h1]
    r = [redis.Redis(host=h, port=p, socket_timeout=30) for h, p in hosts]
    k = keys_on_distinct_shards("rk", 4)
    results = {}
    threads = []
    for i, key in enumerate(k):  # blocked through host i % 2 on shard i's key (shards 0, 1 on host 0)
        h, p = hosts[i % 2]

        def block(i=i, h=h, p=p, key=key):
            results[i] = redis.Redis(host=h, port=p, socket_timeout=30).blpop([key, "rack-never"], 20)
        threads.append(threading.Thread(target=block))
        threads[-1].start()
    end = time.time() + 10
    while time.time() < end and sum(blocked_count(c) for c in r) < 4:
        time.sleep(0.02)
    check(sum(blocked_count(c) for c in r) == 4, "rack: 4 clients blocked, 2 through each host")
    for i, key in enumerate(k):
        r[1 - i % 2].rpush(key, f"v{i}")  # through the other host
    for t in threads:
        t.join(25)
    check(all(results.get(i) == (k[i].encode(), f"v{i}".encode()) for i in range(4)),
          "rack: each woken by a push through the other host, on every shard", repr(results))
    conservation(hosts, k[1:3])


def conservation(hosts, keys):
    """6 consumers (BLPOP on `keys`, short timeouts) against 3 producers,
    spread over `hosts`: every element popped exactly once or left."""
    r = redis.Redis(host=hosts[0][0], port=hosts[0][1], socket_timeout=30)
    k = keys
    r.delete(*k)
    n_producers, per_producer, stop = 3, 400, threading.Event()
    popped, lock = [], threading.Lock()

    def consumer(h, p):
        c = redis.Redis(host=h, port=p, socket_timeout=30)
        mine = []
        while not stop.is_set():
            v = c.blpop(k, 0.05)
            if v:
                mine.append(v[1])
        with lock:
            popped.extend(mine)

    def producer(n, h, p):
        c = redis.Redis(host=h, port=p, socket_timeout=30)
        for i in range(per_producer):
            c.rpush(k[i % 2], f"p{n}-{i}")

    consumers = [threading.Thread(target=consumer, args=hosts[i % len(hosts)]) for i in range(6)]
    producers = [threading.Thread(target=producer, args=(n, *hosts[(n + 1) % len(hosts)])) for n in range(n_producers)]
    for t in consumers + producers:
        t.start()
    for t in producers:
        t.join(60)
    time.sleep(0.5)
    stop.set()
    for t in consumers:
        t.join(30)
    left = r.lrange(k[0], 0, -1) + r.lrange(k[1], 0, -1)
    everything = sorted(popped + left)
    want = sorted(f"p{p}-{i}".encode() for p in range(n_producers) for i in range(per_producer))
    check(everything == want and len(set(popped)) == len(popped),
          f"6 consumers, 3 producers: {len(popped)} popped, {len(left)} left, each element exactly once",
          f"{len(everything)} of {len(want)}")
    check(all(wait_blocked(redis.Redis(host=h, port=p), 0) for h, p in hosts), "no client left blocked")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "rack":
        rack(*host_ports(sys.argv[2:4]))
        return finish()
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    with pair(build, threads=4) as ports:
        compared(ports)
        cross_shard(ports[0], 4)
        wake_order(ports[0], 4)
        conservation([("127.0.0.1", ports[0])], keys_on_distinct_shards("ck", 4)[:2])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
