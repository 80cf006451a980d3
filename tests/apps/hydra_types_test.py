#!/usr/bin/python3
"""Hydra's hashes, lists and sets, TYPE and WRONGTYPE, next to redis-server
7.0 (redis-py's decoded values, and raw bytes for RESP3's maps and sets):

  hydra_types_test.py BUILD_DIR

Hashes, lists and sets are unordered in Hydra where Redis keeps small ones
in insertion order (listpacks), so HKEYS/HVALS/SMEMBERS are compared sorted
and the raw RESP3 checks use one-element collections. Exits 77 (skip)
without redis-py or redis-server.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hydra_pair import both, check, clients, finish, pair, raw_both  # noqa: E402


def errors_as_text(v):
    return [str(x) if isinstance(x, Exception) else x for x in v]


def hashes(servers):
    def run(r):
        return [r.hset("h", "a", "1"), r.hset("h", mapping={"b": "2", "c": "3"}), r.hset("h", "a", "9"),
                r.hget("h", "a"), r.hget("h", "nosuch"), r.hget("nosuch", "a"), r.hmget("h", "a", "x", "c"),
                r.hmget("nosuch", "a"), r.hgetall("h"), r.hgetall("nosuch"), r.hlen("h"), r.hlen("nosuch"),
                r.hexists("h", "b"), r.hexists("h", "x"), sorted(r.hkeys("h")), sorted(r.hvals("h")),
                r.hincrby("h", "n", 5), r.hincrby("h", "n", -7), r.hsetnx("h", "n", "1"), r.hsetnx("h", "m", "1"),
                r.hdel("h", "a", "x", "b"), r.hgetall("h"), r.hdel("h", "c", "n", "m"), r.exists("h"),
                r.execute_command("HMSET", "h2", "f", "v"), r.hscan("h2", 0), r.hscan("h2", 0, match="g*"),
                r.hscan("h2", 0, count=10), r.type("h2"), r.type("nosuch")]
    both(servers, "HSET/HGET/HMGET/HGETALL/HLEN/HEXISTS/HKEYS/HVALS/HINCRBY/HSETNX/HDEL/HMSET/HSCAN", run)
    for r in servers:
        r.hset("h", "s", "abc")
        r.hset("h", "big", str(2**63 - 1))
    bad = [("HSET", "h", "a"), ("HSET", "h", "a", "1", "b"), ("HGET", "h"), ("HINCRBY", "h", "s", "1"),
           ("HINCRBY", "h", "big", "1"), ("HINCRBY", "h", "x", "1.5"), ("HSCAN", "h", "x"),
           ("HSCAN", "h", "0", "COUNT", "0"), ("HSCAN", "h", "0", "FOO", "1"), ("HSCAN", "h", "0", "COUNT"),
           ("HMGET", "h"), ("HDEL", "h")]
    for args in bad:
        both(servers, " ".join(args), lambda r: r.execute_command(*args))


def lists(servers):
    def run(r):
        return [r.rpush("l", "a", "b", "c"), r.lpush("l", "z", "y"), r.lrange("l", 0, -1), r.lrange("l", 1, 2),
                r.lrange("l", -2, 100), r.lrange("l", 5, 1), r.lrange("nosuch", 0, -1), r.llen("l"),
                r.llen("nosuch"), r.lindex("l", 0), r.lindex("l", -1), r.lindex("l", 99), r.lindex("nosuch", 0),
                r.lset("l", 1, "Y"), r.lrange("l", 0, -1), r.rpush("l", "a", "b", "a"), r.lrem("l", 1, "a"),
                r.lrange("l", 0, -1), r.lrem("l", -1, "a"), r.lrem("l", 0, "b"), r.lrange("l", 0, -1),
                r.ltrim("l", 1, -2), r.lrange("l", 0, -1), r.lpop("l"), r.rpop("l"), r.lpop("l", 2),
                r.lpop("nosuch"), r.lpop("nosuch", 2), r.rpush("l", "1", "2", "3"), r.rpop("l", 0),
                r.rpop("l", 5), r.exists("l"), r.ltrim("nosuch", 0, 1), r.rpush("l", "x"), r.ltrim("l", 5, 10),
                r.exists("l"), r.type("l")]
    both(servers, "RPUSH/LPUSH/LRANGE/LLEN/LINDEX/LSET/LREM/LTRIM/LPOP/RPOP (with counts)", run)
    for r in servers:
        r.rpush("l", "a")
    bad = [("LSET", "nosuch", "0", "x"), ("LSET", "l", "5", "x"), ("LSET", "l", "x", "y"), ("LSET", "nosuch", "x", "y"),
           ("LINDEX", "l", "x"), ("LINDEX", "nosuch", "x"), ("LRANGE", "l", "a", "1"), ("LPOP", "l", "-1"),
           ("LPOP", "l", "x"), ("LPOP", "l", "1", "2"), ("LREM", "l", "x", "a"), ("LTRIM", "l", "0", "x"),
           ("LPUSH", "l")]
    for args in bad:
        both(servers, " ".join(args), lambda r: r.execute_command(*args))


def sets(servers):
    def run(r):
        return [r.sadd("s", "a", "b", "c", "a"), r.sadd("s", "a"), sorted(r.smembers("s")), r.smembers("nosuch"),
                r.sismember("s", "a"), r.sismember("s", "x"), r.sismember("nosuch", "a"), r.scard("s"),
                r.scard("nosuch"), r.srem("s", "a", "x"), r.scard("s"), r.sadd("t", "b", "z"),
                sorted(r.sinter("s", "t")), sorted(r.sunion("s", "t")), sorted(r.sdiff("s", "t")),
                sorted(r.sinter("s", "nosuch")), r.sinterstore("u", ["s", "t"]), sorted(r.smembers("u")),
                r.sscan("u", 0), r.sscan("u", 0, match="x*"), r.srem("s", "b", "c"), r.exists("s"), r.type("t")]
    both(servers, "SADD/SMEMBERS/SISMEMBER/SCARD/SREM/SINTER/SUNION/SDIFF/SINTERSTORE/SSCAN", run)
    bad = [("SADD", "s"), ("SISMEMBER", "s"), ("SSCAN", "s", "-1"), ("SINTERSTORE", "d")]
    for args in bad:
        both(servers, " ".join(args), lambda r: r.execute_command(*args))


def wrongtype(servers):
    for r in servers:
        r.flushall()
        r.set("str", "v")
        r.hset("hash", "f", "v")
        r.rpush("list", "x")
        r.sadd("set", "m")
    cmds = [("GET", "hash"), ("INCR", "list"), ("HGET", "str", "f"), ("HSET", "list", "f", "v"),
            ("LPUSH", "hash", "x"), ("LRANGE", "set", "0", "1"), ("SADD", "str", "m"), ("SMEMBERS", "hash"),
            ("SINTER", "set", "list"), ("SINTERSTORE", "d", "set", "str"), ("SET", "hash", "v", "GET"),
            ("HLEN", "set"), ("LLEN", "str"), ("SCARD", "list"), ("MGET", "str", "hash", "list")]
    for args in cmds:
        both(servers, f"WRONGTYPE: {' '.join(args)}", lambda r: r.execute_command(*args))
    both(servers, "TYPE of each, SET over a hash, DEL of each type, DBSIZE",
         lambda r: [r.type("str"), r.type("hash"), r.type("list"), r.type("set"), r.set("hash", "now a string"),
                    r.type("hash"), r.get("hash"), r.expire("list", 100), r.ttl("list"), r.persist("list"),
                    r.dbsize(), r.delete("str", "hash", "list", "set", "nosuch"), r.dbsize(),
                    r.hset("x", "f", "v"), r.set("x", "v", nx=True), r.type("x")])


def resp3(ports):
    commands = [("FLUSHALL",), ("HELLO", "3"), ("HSET", "h", "f", "v"), ("HGETALL", "h"), ("HGETALL", "nosuch"),
                ("HMGET", "h", "f", "x"), ("HKEYS", "h"), ("SADD", "s", "m"), ("SMEMBERS", "s"),
                ("SMEMBERS", "nosuch"), ("SINTER", "s", "s"), ("SUNION", "s", "nosuch"), ("LPOP", "nosuch", "2"),
                ("LPOP", "nosuch"), ("RPUSH", "l", "a"), ("LRANGE", "l", "0", "-1"), ("HSCAN", "h", "0"),
                ("SSCAN", "s", "0"), ("HGET", "h", "x"), ("TYPE", "h"), ("HELLO", "2"), ("HGETALL", "h"),
                ("SMEMBERS", "s"), ("LPOP", "nosuch", "2")]
    got = raw_both(ports, commands, "RESP3 types")
    check(got[3].startswith(b"%1\r\n") and got[8].startswith(b"~1\r\n") and got[12] == b"_\r\n",
          "RESP3: HGETALL a map, SMEMBERS a set, LPOP count of a missing key _", repr(got[3]))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    with pair(build, threads=3) as ports:
        servers = clients(ports)
        for r in servers:
            r.flushall()
        hashes(servers)
        lists(servers)
        sets(servers)
        wrongtype(servers)
        resp3(ports)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
