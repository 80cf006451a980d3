#!/usr/bin/python3
"""Hydra's transactions (MULTI/EXEC/DISCARD/WATCH/UNWATCH) and its commands
that are atomic across shards (MSET, MSETNX, MGET, RENAME, COPY, SINTERSTORE
with keys on different shards), next to redis-server 7.0:

  hydra_txn_test.py BUILD_DIR

1. Replies and error texts, byte for byte over a raw socket (EXECABORT,
   nested MULTI, WATCH inside MULTI, EXEC/DISCARD without MULTI, errors
   inside EXEC's array, a failed WATCH as *-1 and, under RESP3, _).
2. redis-py transactions (pipeline(transaction=True), WATCH with a
   conflicting writer) and the cross-shard commands, values compared.
3. Atomicity under concurrency, on Hydra with 4 shards: writers set keys
   that live on 4 different shards to one value per round (MULTI/EXEC,
   MSET); readers read them together (MGET, MULTI of GETs); any reader that
   sees two values at once (a torn read) fails the test. Also RENAME ping-pong
   between shards with a reader that must always see exactly one of the keys,
   and clients that close in the middle of their transactions.
Exits 77 (skip) without redis-py or redis-server.
"""
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hydra_pair import (both, check, clients, encode, finish, keys_on_distinct_shards, outcome, pair,  # noqa: E402
                        raw_both, redis)


def raw_checks(ports, shards):
    a, b = keys_on_distinct_shards("t", shards)[:2]
    raw_both(ports, [("FLUSHALL",), ("EXEC",), ("DISCARD",), ("MULTI",), ("MULTI",), ("WATCH", a),
                     ("SET", a, "1"), ("INCR", a), ("LPUSH", a, "x"), ("GET", b), ("EXEC",)],
             "MULTI with a runtime error inside EXEC")
    raw_both(ports, [("MULTI",), ("SET", a), ("NOSUCH", "x"), ("SET", b, "2"), ("EXEC",), ("GET", b)],
             "EXECABORT after a wrong arity and an unknown command")
    raw_both(ports, [("MULTI",), ("SET", a, "4"), ("SHUTDOWN",), ("EXEC",), ("GET", a)],
             "SHUTDOWN inside MULTI: not allowed, the EXEC aborted")
    raw_both(ports, [("MULTI",), ("SET", a, "3"), ("DISCARD",), ("GET", a), ("MULTI", "x"), ("EXEC", "x"),
                     ("WATCH",), ("UNWATCH",), ("MULTI",), ("EXEC",)], "DISCARD, arity of MULTI/EXEC/WATCH")
    raw_both(ports, [("MULTI",), ("PING",), ("ECHO", "hi"), ("SET", a, "v", "NX", "XX"), ("MSET", a, "1", b, "2"),
                     ("MGET", a, b), ("RENAME", a, "nosuch-dst"), ("RENAME", "nosuch", b), ("EXEC",)],
             "EXEC's array: PING, ECHO, a syntax error, MSET/MGET/RENAME across shards")


def watch_raw(ports, shards):
    """A WATCHed key changed by another connection: EXEC answers a null array
    (RESP2 *-1, RESP3 _), and nothing of the transaction happens."""
    a, b = keys_on_distinct_shards("w", shards)[:2]
    for proto in ("2", "3"):
        got = []
        for port in ports:
            r = redis.Redis(port=port, socket_timeout=20)
            r.flushall()
            r.set(a, "0")
            s = socket.create_connection(("127.0.0.1", port), timeout=10)

            def call(*args):
                s.sendall(encode(*args))
                time.sleep(0.05)
                return s.recv(65536)
            out = [call("HELLO", proto)[:1], call("WATCH", a, b), call("GET", a)]
            r.set(a, "changed")  # another connection
            out += [call("MULTI"), call("SET", b, "1"), call("EXEC"), call("EXEC"), call("GET", b)]
            s.close()
            got.append(out)
        check(got[0] == got[1], f"WATCH, a write by another client, EXEC under RESP{proto}: as redis-server",
              f"hydra {got[0]!r}, redis-server {got[1]!r}")
        check(got[0][5] == (b"*-1\r\n" if proto == "2" else b"_\r\n"), f"the failed EXEC's null under RESP{proto}",
              repr(got[0][5]))


def client_checks(servers, shards):
    a, b, c, d = keys_on_distinct_shards("k", shards)[:4]
    for r in servers:
        r.flushall()

    def tx(r):
        p = r.pipeline(transaction=True)
        p.set(a, "1").incr(a).mset({b: "x", c: "y"}).mget(a, b, c, d).rename(b, d).exists(b, d).get(d)
        return p.execute()
    both(servers, "pipeline(transaction=True) over 4 shards", tx)

    def watched(r):
        r.set(a, "5")
        out = []
        with r.pipeline() as p:  # the optimistic-lock recipe redis-py documents
            p.watch(a)
            v = int(p.get(a))
            r.set(a, "6")  # a conflicting write from another connection (redis-py's own pool)
            p.multi()
            p.set(a, v + 1)
            try:
                out.append(p.execute())
            except redis.WatchError:
                out.append("watch error")
        with r.pipeline() as p:  # and without a conflict
            p.watch(a)
            v = int(p.get(a))
            p.multi()
            p.set(a, v + 1)
            out.append(p.execute())
        out.append(r.get(a))
        return out
    both(servers, "WATCH: a conflicting write fails the EXEC, none succeeds", watched)
    both(servers, "MSETNX over shards", lambda r: [r.msetnx({a: "1", c: "2"}), r.delete(a, b, c, d),
                                                      r.msetnx({a: "1", c: "2"}), r.mget(a, c)])
    both(servers, "RENAME/RENAMENX/COPY over shards, with TTL and types",
         lambda r: [r.set(a, "v", ex=100), r.rename(a, b), r.exists(a), r.ttl(b), r.renamenx(b, c),
                    r.set(d, "w"), r.renamenx(c, d), r.copy(c, d), r.copy(c, d, replace=True), r.get(d), r.ttl(d),
                    r.hset(a, "f", "1"), r.rename(a, c), r.type(c), r.hgetall(c), r.copy(c, a), r.hgetall(a),
                    outcome(lambda: r.rename("nosuch", a)), r.rename(a, a), r.renamenx(a, a),
                    outcome(lambda: r.copy(a, a))])
    both(servers, "SINTERSTORE/SUNIONSTORE/SDIFFSTORE over shards",
         lambda r: [r.delete(a, b, c, d), r.sadd(a, 1, 2, 3), r.sadd(b, 2, 3, 4), r.sinterstore(c, [a, b]),
                    sorted(r.smembers(c)), r.sunionstore(d, [a, b]), sorted(r.smembers(d)),
                    r.sdiffstore(c, [a, b]), sorted(r.smembers(c)), r.sinterstore(c, [a, "nosuch"]), r.exists(c),
                    sorted(r.sinter(a, b)), sorted(r.sunion(a, b)), sorted(r.sdiff(b, a)),
                    outcome(lambda: (r.set(d, "s"), r.sinter(a, d)))])


def atomicity(port, shards, seconds=3.0, host="127.0.0.1"):
    """Writers keep keys on `shards` different shards equal; readers must
    never see them differ."""
    keys = keys_on_distinct_shards("atom", shards)
    redis.Redis(host=host, port=port).mset({k: "0" for k in keys})
    stop = time.time() + seconds
    torn, reads, writes, errors = [], [0], [0], []

    def writer(wid, use_multi):
        r = redis.Redis(host=host, port=port, socket_timeout=20)
        i = 0
        while time.time() < stop:
            i += 1
            v = f"{wid}-{i}"
            try:
                if use_multi:
                    p = r.pipeline(transaction=True)
                    for k in keys:
                        p.set(k, v)
                    p.execute()
                else:
                    r.mset({k: v for k in keys})
                writes[0] += 1
            except Exception as e:  # noqa: BLE001 (reported as a failure)
                errors.append(repr(e))
                return

    def reader(use_multi):
        r = redis.Redis(host=host, port=port, socket_timeout=20)
        while time.time() < stop:
            try:
                if use_multi:
                    p = r.pipeline(transaction=True)
                    for k in keys:
                        p.get(k)
                    got = p.execute()
                else:
                    got = r.mget(keys)
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
                return
            reads[0] += 1
            if len(set(got)) != 1:
                torn.append(got)

    threads = [threading.Thread(target=writer, args=(0, True)), threading.Thread(target=writer, args=(1, False)),
               threading.Thread(target=reader, args=(True,)), threading.Thread(target=reader, args=(False,)),
               threading.Thread(target=reader, args=(False,))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 60)
    check(not errors, "atomicity: no client errors", "; ".join(errors[:3]))
    check(writes[0] > 20 and reads[0] > 20, f"atomicity: {writes[0]} writes and {reads[0]} reads done")
    check(not torn, f"atomicity: no torn read of {shards} keys on {shards} shards (MULTI/MSET writers, "
          "MGET/MULTI readers)", f"{len(torn)} torn, e.g. {torn[:2]!r}")

    # RENAME back and forth between two shards: a reader checking both keys
    # at once sees exactly one of them, always.
    a, b = keys[:2]
    r0 = redis.Redis(host=host, port=port)
    r0.delete(a, b)
    r0.set(a, "token")
    stop = time.time() + seconds / 2
    seen_bad = []

    def mover():
        r = redis.Redis(host=host, port=port, socket_timeout=20)
        src, dst = a, b
        while time.time() < stop:
            r.rename(src, dst)
            src, dst = dst, src

    def watcher():
        r = redis.Redis(host=host, port=port, socket_timeout=20)
        while time.time() < stop:
            got = r.mget(a, b)
            if sorted(x is None for x in got) != [False, True]:
                seen_bad.append(got)
    ts = [threading.Thread(target=mover), threading.Thread(target=watcher)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=seconds + 60)
    check(not seen_bad, "atomicity: RENAME between shards, MGET sees exactly one of the two keys",
          f"{len(seen_bad)} bad, e.g. {seen_bad[:2]!r}")


def abandoned(port, shards):
    """Clients that send MULTI ... EXEC (or a cross-shard MSET) and close at
    once, without reading: their transactions still end and release their
    shards, so a later cross-shard MSET/MGET completes (within redis-py's
    10 s timeout; a transaction over shards held by others waits in their
    queues)."""
    keys = keys_on_distinct_shards("gone", shards)
    for i in range(200):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        cmds = [("MULTI",)] + [("SET", k, str(i)) for k in keys] + [("EXEC",)] if i % 2 else \
            [("MSET", *[x for k in keys for x in (k, str(i))])]
        s.sendall(b"".join(encode(*c) for c in cmds))
        s.close()
    r = redis.Redis(port=port, socket_timeout=10)
    try:
        # Equal values (abandoned transactions that Hydra read after this
        # MSET may still win: they are other clients), and no wait.
        ok = r.mset({k: "after" for k in keys}) and len(set(r.mget(keys))) == 1
    except redis.exceptions.RedisError as e:
        ok = False
        print(repr(e))
    check(ok, "200 clients closing during their transactions: the shards are free again")


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    shards = 4
    with pair(build, threads=shards) as ports:
        raw_checks(ports, shards)
        watch_raw(ports, shards)
        client_checks(clients(ports), shards)
        abandoned(ports[0], shards)
        atomicity(ports[0], shards)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
