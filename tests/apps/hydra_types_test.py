#!/usr/bin/python3
"""Hydra's hashes, lists and sets, TYPE and WRONGTYPE, next to redis-server
7.0 (redis-py's decoded values, and raw bytes for RESP3's maps and sets):

  hydra_types_test.py BUILD_DIR

Small hashes keep insertion order in both (listpacks: hash_order checks
the order, the conversions to hashtable and OBJECT ENCODING); sets are
unordered in Hydra where Redis keeps small ones in insertion order, so
SMEMBERS, and HKEYS/HVALS of a hashtable, are compared sorted, and the raw
RESP3 checks use one-element collections. Exits 77 (skip) without redis-py
or redis-server.
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


def hash_order(servers):
    """Redis 7.0's listpack hashes: insertion order in every reply, HSET of a
    field keeping its place, HDEL closing the gap; a hashtable past
    hash-max-listpack-entries (512) or -value (64), never converted back,
    kept by RENAME and COPY; DUMP/RESTORE."""
    def subsequence(part, whole):
        it = iter(whole)
        return all(x in it for x in part)

    def run(r):
        r.delete("ho", "ho2", "ho3", "hbig", "hlong", "hf", "hmv")
        out = [r.hset("ho", mapping={"zeta": "1", "alpha": "2", "mid": "3", "b": "4", "a": "5"}),
               r.hset("ho", "alpha", "20"), r.hdel("ho", "mid"), r.hset("ho", "mid", "33"),
               r.hincrby("ho", "n", 7), r.hincrbyfloat("ho", "f", 1.5), r.hsetnx("ho", "zeta", "x"),
               r.hsetnx("ho", "new", "y")]
        out += [list(r.hgetall("ho").items()), r.hkeys("ho"), r.hvals("ho"), r.hscan("ho", 0),
                r.hscan("ho", 0, match="[a-m]*"), r.hrandfield("ho", 100, withvalues=True),
                r.hrandfield("ho", 8), subsequence(r.hrandfield("ho", 2), r.hkeys("ho")),
                r.object("encoding", "ho"), r.config_get("hash-max-listpack-entries"),
                r.config_get("hash-max-listpack-value")]
        # 512 fields stay a listpack, in order; the 513th converts; HDEL never converts back.
        r.hset("hbig", mapping={f"f{(i * 7919) % 512}": str(i) for i in range(512)})
        out += [r.object("encoding", "hbig"), r.hkeys("hbig")[:20], r.hset("hbig", "one-more", "v"),
                r.object("encoding", "hbig"), r.hdel("hbig", *[f"f{i}" for i in range(500)]),
                r.hlen("hbig"), r.object("encoding", "hbig"), sorted(r.hkeys("hbig"))]
        # 64-byte fields and values stay; 65 converts (HSETNX of an existing field does not).
        out += [r.hset("hlong", "x" * 64, "y" * 64), r.object("encoding", "hlong"),
                r.hsetnx("hlong", "x" * 64, "z" * 65), r.object("encoding", "hlong"),
                r.hset("hlong", "k", "v" * 65), r.object("encoding", "hlong"), r.hset("hf", "f" * 65, "v"),
                r.object("encoding", "hf")]
        # RENAME and COPY keep a hashtable with few fields; DUMP/RESTORE makes it a listpack again.
        out += [r.rename("hbig", "ho2"), r.object("encoding", "ho2"), r.copy("ho2", "ho3"),
                r.object("encoding", "ho3"), r.copy("ho", "hcopy"), r.object("encoding", "hcopy"),
                list(r.hgetall("hcopy").items()), r.rename("hcopy", "hmv"), list(r.hgetall("hmv").items())]
        dump, dump_small = r.dump("ho2"), r.dump("ho")
        out += [r.restore("ho4", 0, dump), r.object("encoding", "ho4"), sorted(r.hkeys("ho4")),
                r.restore("ho5", 0, dump_small), r.object("encoding", "ho5"), list(r.hgetall("ho5").items())]
        # CONFIG SET applies to later writes: an existing listpack converts on its next write past it.
        out += [r.config_set("hash-max-listpack-entries", 4), r.object("encoding", "ho5"), r.hdel("ho5", "n"),
                r.object("encoding", "ho5"), r.hset("ho5", "n", "1"), r.object("encoding", "ho5"),
                r.hset("hmv2", mapping={"a": "1", "b": "2"}), r.object("encoding", "hmv2"),
                r.restore("ho6", 0, dump_small), r.object("encoding", "ho6"),
                r.config_set("hash-max-listpack-entries", 512), r.config_set("hash-max-listpack-value", 3),
                r.hincrbyfloat("hmv2", "a", 0.25), r.object("encoding", "hmv2"),
                r.config_set("hash-max-listpack-value", 64)]
        return out
    both(servers, "hash_order: listpack order (HGETALL/HKEYS/HVALS/HSCAN/HRANDFIELD), conversions, OBJECT ENCODING,"
         " RENAME/COPY/DUMP/RESTORE", run)


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
        hash_order(servers)
        lists(servers)
        sets(servers)
        wrongtype(servers)
        resp3(ports)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
