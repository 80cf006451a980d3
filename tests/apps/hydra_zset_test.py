#!/usr/bin/python3
"""Hydra's sorted sets and SORT next to redis-server 7.0:

  hydra_zset_test.py BUILD_DIR [HOST:PORT HOST:PORT]

1. Replies and error texts byte for byte, RESP2 and RESP3 (HELLO 3: scores
   are doubles, WITHSCORES pairs), of every sorted-set command and of SORT,
   with the keys of the multi-key ones on different shards (Hydra, 4 shards).
2. BZPOPMIN/BZPOPMAX/BZMPOP: at once, timed out, woken by ZADD and ZUNIONSTORE.
   TYPE, OBJECT ENCODING (listpack / skiplist by size), SCAN ... TYPE zset,
   MEMORY USAGE, EXPIRE and RENAME of a sorted set.
3. Atomicity under concurrency: writers change two sorted sets on two shards
   (MULTI/EXEC) to the same score, and weight and value keys on four shards
   (MSET) for one round; readers run ZUNION/ZUNIONSTORE with WEIGHTS 1 -1
   (the score must be 0) and SORT ... BY w_* GET v_* [STORE] (every value of
   one round, in that round's order). Any mixed read fails the test.
4. `hydra_zset_test.py rack HOST:PORT HOST:PORT` (a 2-host rack; hydra_test.py's
   rack part runs it): the concurrency check again, through both hosts.
Exits 77 (skip) without redis-py or redis-server.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hydra_pair import (check, clients, finish, host_ports, keys_on_distinct_shards, pair, raw_both,  # noqa: E402
                        redis)


def single_key(ports):
    setup = [("FLUSHALL",), ("ZADD", "z", "1", "a", "2", "b", "3", "c", "1.5", "d", "-inf", "lo", "+inf", "hi")]
    cmds = setup + [
        ("ZADD", "z", "NX", "9", "a", "9", "new"), ("ZADD", "z", "XX", "CH", "7", "a", "7", "nosuch"),
        ("ZADD", "z", "GT", "CH", "1", "a", "8", "b"), ("ZADD", "z", "LT", "0.5", "c"), ("ZADD", "z", "INCR", "2", "d"),
        ("ZADD", "z", "NX", "INCR", "2", "d"), ("ZADD", "z", "XX", "NX", "1", "a"), ("ZADD", "z", "GT", "LT", "1", "a"),
        ("ZADD", "z", "INCR", "1", "a", "2", "b"), ("ZADD", "z", "1"), ("ZADD", "z", "x", "a"), ("ZADD", "z", "nan", "a"),
        ("ZADD", "nokey", "XX", "1", "a"), ("ZADD", "nokey", "XX", "INCR", "1", "a"), ("ZADD", "z", "INCR", "-inf", "hi"),
        ("ZINCRBY", "z", "2.5", "a"), ("ZINCRBY", "z", "x", "a"), ("ZINCRBY", "z", "1", "fresh"),
        ("ZCARD", "z"), ("ZCARD", "nokey"), ("ZSCORE", "z", "a"), ("ZSCORE", "z", "nosuch"), ("ZSCORE", "z", "lo"),
        ("ZMSCORE", "z", "a", "nosuch", "hi"), ("ZMSCORE", "nokey", "a"), ("ZRANK", "z", "b"), ("ZREVRANK", "z", "b"),
        ("ZRANK", "z", "nosuch"), ("ZCOUNT", "z", "-inf", "+inf"), ("ZCOUNT", "z", "(1", "3"), ("ZCOUNT", "z", "x", "1"),
        ("ZRANGE", "z", "0", "-1"), ("ZRANGE", "z", "0", "-1", "WITHSCORES"), ("ZRANGE", "z", "-3", "100"),
        ("ZRANGE", "z", "5", "1"), ("ZRANGE", "z", "0", "1", "REV", "WITHSCORES"), ("ZRANGE", "z", "x", "1"),
        ("ZRANGE", "z", "(1", "+inf", "BYSCORE", "LIMIT", "1", "2", "WITHSCORES"), ("ZRANGE", "z", "0", "1", "LIMIT", "0", "1"),
        ("ZRANGE", "z", "+inf", "(2", "BYSCORE", "REV"), ("ZRANGE", "z", "-", "+", "BYLEX", "WITHSCORES"),
        ("ZRANGE", "z", "0", "1", "FOO"), ("ZREVRANGE", "z", "0", "2", "WITHSCORES"),
        ("ZRANGEBYSCORE", "z", "-inf", "+inf", "WITHSCORES"), ("ZRANGEBYSCORE", "z", "2", "(10", "LIMIT", "0", "-1"),
        ("ZRANGEBYSCORE", "z", "a", "b"), ("ZREVRANGEBYSCORE", "z", "+inf", "-inf", "LIMIT", "1", "3", "WITHSCORES"),
        ("ZRANGEBYSCORE", "nokey", "0", "1"), ("ZRANGE", "nokey", "0", "-1"),
        # an exclusive +inf minimum is empty (nothing is above +inf)
        ("ZADD", "zinf", "inf", "a", "1", "b"), ("ZRANGEBYSCORE", "zinf", "(inf", "+inf"),
        ("ZCOUNT", "zinf", "(inf", "+inf"), ("ZREMRANGEBYSCORE", "zinf", "(inf", "+inf"), ("ZCARD", "zinf"),
        ("ZRANGEBYSCORE", "zinf", "-inf", "(-inf"), ("ZCOUNT", "zinf", "(1", "inf"),
        ("ZADD", "lex", "0", "a", "0", "b", "0", "c", "0", "d", "0", "e"), ("ZRANGEBYLEX", "lex", "-", "+"),
        ("ZRANGEBYLEX", "lex", "[b", "(d"), ("ZRANGEBYLEX", "lex", "(a", "[z", "LIMIT", "1", "2"),
        ("ZREVRANGEBYLEX", "lex", "+", "[c"), ("ZRANGEBYLEX", "lex", "b", "d"), ("ZLEXCOUNT", "lex", "[b", "+"),
        ("ZLEXCOUNT", "lex", "-", "-"), ("ZLEXCOUNT", "lex", "+", "-"), ("ZRANGEBYLEX", "lex", "-", "+", "WITHSCORES"),
        ("ZREMRANGEBYLEX", "lex", "[a", "[b"), ("ZREMRANGEBYRANK", "lex", "-1", "-1"), ("ZRANGE", "lex", "0", "-1"),
        ("ZREMRANGEBYSCORE", "z", "(2", "3"), ("ZREMRANGEBYSCORE", "z", "x", "1"), ("ZREMRANGEBYRANK", "z", "a", "1"),
        ("ZRANGE", "z", "0", "-1", "WITHSCORES"), ("ZREM", "z", "a", "nosuch", "b"), ("ZREM", "nokey", "a"),
        ("ZPOPMIN", "z"), ("ZPOPMAX", "z", "2"), ("ZPOPMIN", "z", "0"), ("ZPOPMIN", "z", "-1"), ("ZPOPMIN", "nokey"),
        ("ZPOPMIN", "nokey", "3"), ("ZPOPMAX", "z", "1", "2"), ("ZADD", "one", "5", "m"), ("ZRANDMEMBER", "one"),
        ("ZRANDMEMBER", "one", "3", "WITHSCORES"), ("ZRANDMEMBER", "one", "-2"), ("ZRANDMEMBER", "one", "0"),
        ("ZRANDMEMBER", "one", "x"), ("ZRANDMEMBER", "one", "1", "FOO"), ("ZRANDMEMBER", "nokey"),
        ("ZRANDMEMBER", "nokey", "2"), ("ZSCAN", "one", "0"), ("ZSCAN", "one", "0", "MATCH", "x*"),
        ("ZSCAN", "one", "x"), ("ZSCAN", "nokey", "0"), ("ZPOPMIN", "one", "5"), ("EXISTS", "one"),
        ("SET", "str", "v"), ("ZADD", "str", "1", "a"), ("ZRANGE", "str", "0", "1"), ("ZSCORE", "str", "a"),
        ("ZADD", "z", "1"), ("ZRANGE", "z", "0"), ("ZINCRBY", "z", "1"), ("ZADD", "f", "1e300", "big", "0.1", "tenth",
                                                                          "-0", "negzero", "3.0", "three"),
        ("ZRANGE", "f", "0", "-1", "WITHSCORES"), ("ZINCRBY", "f", "1e300", "big"), ("ZINCRBY", "f", "-inf", "big"),
        ("ZADD", "f", "INCR", "+inf", "big"), ("TYPE", "f"), ("OBJECT", "ENCODING", "f"),
    ]
    raw_both(ports, cmds, "sorted sets, RESP2")
    raw_both(ports, [("HELLO", "3")] + cmds, "sorted sets, RESP3")


def multi_key(ports, shards):
    a, b, c, d = keys_on_distinct_shards("m", shards)[:4]
    setup = [("FLUSHALL",), ("ZADD", a, "1", "x", "2", "y", "3", "z"), ("ZADD", b, "10", "y", "20", "z", "30", "w"),
             ("SADD", c, "x", "w", "q"), ("SET", "str", "v")]
    cmds = setup + [
        ("ZUNIONSTORE", d, "3", a, b, c), ("ZRANGE", d, "0", "-1", "WITHSCORES"),
        ("ZUNIONSTORE", d, "2", a, b, "WEIGHTS", "2", "-1", "AGGREGATE", "MAX"), ("ZRANGE", d, "0", "-1", "WITHSCORES"),
        ("ZINTERSTORE", d, "2", a, b, "AGGREGATE", "MIN"), ("ZRANGE", d, "0", "-1", "WITHSCORES"),
        ("ZINTERSTORE", d, "2", a, c), ("ZDIFFSTORE", d, "2", a, b), ("ZRANGE", d, "0", "-1", "WITHSCORES"),
        ("ZDIFFSTORE", d, "1", "nokey"), ("EXISTS", d), ("ZUNION", "2", a, b, "WITHSCORES"), ("ZINTER", "2", a, b),
        ("ZDIFF", "2", b, a, "WITHSCORES"), ("ZINTERCARD", "2", a, b), ("ZINTERCARD", "2", a, b, "LIMIT", "1"),
        ("ZINTERCARD", "2", a, b, "LIMIT", "-1"), ("ZINTERCARD", "0", a), ("ZUNION", "3", a, b),
        ("ZUNION", "x", a), ("ZUNIONSTORE", d, "1", a, "WEIGHTS", "x"), ("ZUNIONSTORE", d, "1", a, "AGGREGATE", "avg"),
        # weights read as scores are (getDoubleFromObject): out of range, leading space, exponents
        ("ZUNION", "1", a, "WEIGHTS", "1e999", "WITHSCORES"), ("ZUNION", "1", a, "WEIGHTS", " 1"),
        ("ZUNION", "1", a, "WEIGHTS", "2e0", "WITHSCORES"),
        ("ZUNIONSTORE", d, "1", a, "WITHSCORES"), ("ZDIFF", "1", a, "WEIGHTS", "2"), ("ZUNION", "2", a, "str"),
        ("ZUNION", "2", "str", a, "FOO"), ("ZRANGESTORE", d, a, "1", "-1"), ("ZRANGE", d, "0", "-1", "WITHSCORES"),
        ("ZRANGESTORE", d, b, "(10", "+inf", "BYSCORE", "LIMIT", "0", "1"), ("ZRANGE", d, "0", "-1", "WITHSCORES"),
        ("ZRANGESTORE", d, a, "0", "-1", "WITHSCORES"), ("ZRANGESTORE", d, "nokey", "0", "-1"), ("EXISTS", d),
        ("ZRANGESTORE", d, "str", "0", "-1"), ("ZMPOP", "2", "nokey", a, "MIN"), ("ZMPOP", "2", a, b, "MAX", "COUNT", "10"),
        ("ZMPOP", "1", "nokey", "MIN"), ("ZMPOP", "0", a, "MIN"), ("ZMPOP", "1", a, "FOO"), ("ZMPOP", "3", a, "MIN"),
        ("ZMPOP", "1", a, "MIN", "COUNT", "0"), ("ZMPOP", "2", "str", a, "MIN"),
        ("SADD", d, "x", "w"), ("SINTERCARD", "2", c, d), ("SINTERCARD", "2", c, d, "LIMIT", "1"),
        ("SINTERCARD", "0", c), ("SINTERCARD", "3", c, d), ("SINTERCARD", "1", c, "LIMIT", "-1"),
        ("SINTERCARD", "2", c, a), ("SINTERCARD", "1", c, "FOO"),
    ]
    raw_both(ports, cmds, "multi-key sorted-set commands across shards, RESP2")
    raw_both(ports, [("HELLO", "3")] + cmds, "multi-key sorted-set commands across shards, RESP3")


def sort_checks(ports, shards):
    w = keys_on_distinct_shards("w_", shards)
    cmds = [("FLUSHALL",), ("RPUSH", "l", "3", "1", "2", "10"), ("ZADD", "zs", "3", "c", "1", "a", "2", "b"),
            ("SADD", "s", "5"), ("MSET", "w_1", "30", "w_2", "20", "w_3", "10", "w_10", "40"),
            ("HSET", "h_1", "f", "x1"), ("HSET", "h_3", "f", "x3"), ("MSET", "v_1", "one", "v_2", "two"),
            ("SORT", "l"), ("SORT", "l", "DESC"), ("SORT", "l", "ALPHA"), ("SORT", "l", "LIMIT", "1", "2"),
            ("SORT", "l", "LIMIT", "5", "2"), ("SORT", "l", "BY", "w_*"), ("SORT", "l", "BY", "nosort", "DESC"),
            ("SORT", "l", "BY", "w_*", "GET", "#", "GET", "v_*", "GET", "h_*->f"), ("SORT", "l", "GET", "nostar"),
            ("SORT", "zs"), ("SORT", "zs", "BY", "nosort", "DESC", "LIMIT", "0", "2"), ("SORT", "zs", "ALPHA", "DESC"),
            ("SORT", "zs"), ("SORT", "s"), ("SORT", "nokey"), ("SORT", "l", "STORE", "dst"), ("LRANGE", "dst", "0", "-1"),
            ("SORT", "l", "BY", "w_*", "GET", "v_*", "STORE", "dst"), ("LRANGE", "dst", "0", "-1"),
            ("SORT", "nokey", "STORE", "dst"), ("EXISTS", "dst"), ("SORT_RO", "l", "DESC"), ("SORT_RO", "l", "STORE", "x"),
            ("SORT", "l", "FOO"), ("SORT", "l", "LIMIT", "x", "1"), ("SET", "str", "v"), ("SORT", "str"),
            ("RPUSH", "bad", "a", "1"), ("SORT", "bad"), ("SORT", "bad", "ALPHA"), ("SORT", "l", "BY", "h_*->f", "ALPHA"),
            # LIMIT's start and count near LLONG_MAX: clamped, no overflow
            ("SORT", "l", "LIMIT", "1", "9223372036854775807"), ("SORT", "l", "LIMIT", "9223372036854775807", "1"),
            ("SORT", "l", "LIMIT", "2", "9223372036854775807", "STORE", "dst"), ("LRANGE", "dst", "0", "-1")]
    assert len(w) >= 2
    raw_both(ports, cmds, "SORT, RESP2")
    raw_both(ports, [("HELLO", "3")] + cmds, "SORT, RESP3")


def blocking(ports, servers, shards):
    """BZPOPMIN/BZPOPMAX/BZMPOP: served at once, timeouts, errors, inside
    MULTI (never blocks), and woken by a ZADD or a ZUNIONSTORE from another
    connection (the key on another shard than the command's connection
    happens to use)."""
    a, b = keys_on_distinct_shards("bz", shards)[:2]
    cmds = [("FLUSHALL",), ("ZADD", a, "1", "x", "2", "y", "3", "z"), ("BZPOPMIN", "nokey", a, "0"),
            ("BZPOPMAX", a, "0"), ("BZPOPMIN", "nokey", "0.01"), ("BZMPOP", "0.01", "1", "nokey", "MIN"),
            ("BZMPOP", "0", "2", "nokey", a, "MAX", "COUNT", "5"), ("BZPOPMIN", a, "x"), ("BZPOPMIN", a, "-1"),
            ("BZMPOP", "0", "0", a, "MIN"), ("BZMPOP", "0", "1", a, "FOO"), ("BZMPOP", "0", "1", a, "MIN", "COUNT", "0"),
            ("SET", "str", "v"), ("BZPOPMIN", "str", "0"), ("MULTI",), ("BZPOPMIN", "nokey", "0"),
            ("BZMPOP", "0", "1", "nokey", "MIN"), ("EXEC",)]
    raw_both(ports, cmds, "BZPOPMIN/BZPOPMAX/BZMPOP, RESP2")
    raw_both(ports, [("HELLO", "3")] + cmds, "BZPOPMIN/BZPOPMAX/BZMPOP, RESP3")
    for what, block, wake in (
            ("BZPOPMIN woken by ZADD", ("BZPOPMIN", "nokey", a, "5"), lambda r: r.zadd(a, {"m": 7})),
            ("BZMPOP woken by ZUNIONSTORE", ("BZMPOP", "5", "1", b, "MAX", "COUNT", "2"),
             lambda r: (r.zadd(a, {"p": 1, "q": 2}), r.zunionstore(b, [a])))):
        got = []
        for r in servers:
            r.delete(a, b)
            out = []
            t = threading.Thread(target=lambda: out.append(redis.Redis(port=r.connection_pool.connection_kwargs["port"],
                                                                       socket_timeout=20).execute_command(*block)))
            t.start()
            time.sleep(0.3)
            wake(r)
            t.join(10)
            got.append(out)
        check(got[0] == got[1] and len(got[0]) == 1 and got[0][0] is not None, f"{what}: hydra as redis-server",
              f"hydra {got[0]!r}, redis-server {got[1]!r}")


def mixed_waiters(servers, shards):
    """A BLPOP first in line on a key does not hold back a BZPOPMIN behind
    it once the key holds a sorted set: Redis serves the waiters whose kind
    matches the key's type, in order, and the BLPOP just times out."""
    a = keys_on_distinct_shards("mx", shards)[0]
    got = []
    for r in servers:
        r.delete(a)
        port = r.connection_pool.connection_kwargs["port"]
        outs = {}

        def run(name, *cmd):
            outs[name] = redis.Redis(port=port, socket_timeout=20).execute_command(*cmd)

        t1 = threading.Thread(target=run, args=("blpop", "BLPOP", a, "2"))
        t1.start()
        time.sleep(0.3)
        t2 = threading.Thread(target=run, args=("bz", "BZPOPMIN", a, "5"))
        t2.start()
        time.sleep(0.3)
        t0 = time.time()
        r.zadd(a, {"m": 3})
        t2.join(10)
        waited = time.time() - t0
        t1.join(10)
        got.append((outs.get("bz"), outs.get("blpop"), waited < 1.5))
    check(got[0] == got[1] and got[0][0] is not None and got[0][2],
          "a BZPOPMIN behind a BLPOP on the same key is served by ZADD at once, as on redis-server",
          f"hydra {got[0]!r}, redis-server {got[1]!r}")


def keyspace(servers):
    got = []
    for r in servers:
        r.flushall()
        r.zadd("small", {"a": 1, "b": 2})
        r.zadd("big", {f"m{i}": i for i in range(200)})
        r.zadd("long", {"x" * 100: 1})
        r.set("s", "v")
        cursor, found = 0, set()
        while True:
            cursor, keys = r.scan(cursor, _type="zset")
            found.update(keys)
            if cursor == 0:
                break
        r.expire("small", 100)
        r.rename("big", "moved")
        usage = r.memory_usage("moved")
        got.append([r.type("small"), r.object("encoding", "small"), r.object("encoding", "moved"),
                    r.object("encoding", "long"), sorted(found), r.ttl("small"), r.zcard("moved"),
                    r.zrange("moved", 0, 2), isinstance(usage, int) and usage > 200 * 16])
        r.pexpire("small", 1)
    check(got[0] == got[1], "TYPE, OBJECT ENCODING, SCAN TYPE zset, EXPIRE, RENAME, MEMORY USAGE of sorted sets",
          f"hydra {got[0]!r}, redis-server {got[1]!r}")
    time.sleep(0.1)
    check([r.exists("small") for r in servers] == [0, 0], "an expired sorted set is gone")


def concurrency(addrs, shards, seconds=3.0):
    """Torn reads of ZUNION/ZUNIONSTORE and SORT ... BY/GET [STORE] while
    writers change their inputs on several shards at once."""
    a, b = keys_on_distinct_shards("ca", shards)[:2]
    cl = [redis.Redis(host=h, port=p, socket_timeout=30) for h, p in addrs]
    cl[0].flushall()
    cl[0].rpush("L", "1", "2", "3", "4")
    cl[0].zadd(a, {"m": 0})
    cl[0].zadd(b, {"m": 0})
    cl[0].mset({f"w_{i}": i for i in range(1, 5)} | {f"v_{i}": 0 for i in range(1, 5)})
    stop = time.monotonic() + seconds
    torn, counts, errors = [], {"writes": 0, "reads": 0}, []
    lock = threading.Lock()

    def expected_order(rnd):  # round r: w_i = 10 * r + (i + r) % 4
        return sorted(range(1, 5), key=lambda i: (i + rnd) % 4)

    def writer(r):
        rnd = 0
        while time.monotonic() < stop:
            rnd += 1
            p = r.pipeline(transaction=True)
            p.zadd(a, {"m": rnd})
            p.zadd(b, {"m": rnd})
            p.execute()
            r.mset({f"w_{i}": 10 * rnd + (i + rnd) % 4 for i in range(1, 5)} | {f"v_{i}": rnd for i in range(1, 5)})
            with lock:
                counts["writes"] += 2

    def reader(r, n):
        dst, out = f"dst{n}", f"out{n}"
        while time.monotonic() < stop:
            u = r.execute_command("ZUNION", "2", a, b, "WEIGHTS", "1", "-1", "WITHSCORES")
            r.execute_command("ZUNIONSTORE", dst, "2", a, b, "WEIGHTS", "1", "-1")
            s = r.zscore(dst, "m")
            got = r.sort("L", by="w_*", get=["#", "v_*"])
            stored = r.sort("L", by="w_*", get=["#", "v_*"], store=out)
            listed = r.lrange(out, 0, -1)
            with lock:
                counts["reads"] += 3
            for name, pairs in (("SORT", got), ("SORT STORE", listed if stored == 8 else [])):
                elems = [int(x) for x in pairs[0::2]]
                vals = {int(x) for x in pairs[1::2]}
                if len(vals) != 1 or elems != expected_order(next(iter(vals))):
                    torn.append((name, pairs))
            if float(u[1]) != 0 or s != 0:
                torn.append(("ZUNION", u, s))

    def guarded(fn, *args):
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=guarded, args=(writer, cl[i % len(cl)])) for i in range(2)]
    threads += [threading.Thread(target=guarded, args=(reader, redis.Redis(host=addrs[i % len(addrs)][0],
                port=addrs[i % len(addrs)][1], socket_timeout=30), i)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
    where = "rack" if len(addrs) > 1 else "standalone"
    print(f"{where}: {counts['writes']} writes, {counts['reads']} reads in {seconds} s, {len(torn)} torn")
    check(not errors, f"{where}: concurrency run without errors", "; ".join(errors[:3]))
    check(counts["reads"] > 0 and counts["writes"] > 0, f"{where}: readers and writers both ran", repr(counts))
    check(not torn, f"{where}: no torn ZUNION/ZUNIONSTORE/SORT read under concurrent writers", repr(torn[:3]))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    rack = host_ports(sys.argv[2:])
    if rack:  # hydra_test.py's rack part: the rack is up, its shard count known from INFO
        shards = int(redis.Redis(host=rack[0][0], port=rack[0][1]).info("server").get("gossamer_shards", 4))
        concurrency(rack, shards)
        return finish()
    with pair(build, threads=4) as ports:
        single_key(ports)
        multi_key(ports, 4)
        sort_checks(ports, 4)
        blocking(ports, clients(ports), 4)
        mixed_waiters(clients(ports), 4)
        keyspace(clients(ports))
        concurrency([("127.0.0.1", ports[0])], 4)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
