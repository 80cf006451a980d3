#!/usr/bin/python3
"""Hydra's newer commands next to redis-server 7.0, every reply compared
(redis-py's decoded values; raw bytes for RESP3 and DEBUG PROTOCOL):

  hydra_commands_test.py BUILD_DIR

Strings (GETDEL, GETEX, GETSET, GETRANGE, SETRANGE, APPEND, STRLEN,
INCRBYFLOAT, SETBIT, GETBIT, BITCOUNT, LCS), the newer hash, list and set
commands (HSTRLEN, HINCRBYFLOAT, LINSERT, LPOS, LPUSHX, LMOVE, RPOPLPUSH,
SMOVE, SPOP, SRANDMEMBER, SMISMEMBER), OBJECT ENCODING for the sizes Redis's
tests use, CONFIG GET/SET, INFO sections, DEBUG PROTOCOL, COMMAND INFO and
GETKEYS, and their errors.
The two-key commands use keys on different shards of a 3-shard Hydra.
Exits 77 (skip) without redis-py or redis-server.
"""
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hydra_pair import both, check, clients, finish, keys_on_distinct_shards, pair, raw_both  # noqa: E402

SHARDS = 3


def strings(servers):
    a, b = keys_on_distinct_shards("s", SHARDS)[:2]

    def run(r):
        return [r.set(a, "hello"), r.getdel(a), r.getdel(a), r.set(a, "v"), r.getex(a, ex=100), r.ttl(a),
                r.getex(a, persist=True), r.ttl(a), r.getex("nosuch"), r.getset(a, "w"), r.getset("g", "x"),
                r.getrange(a, 0, -1), r.set(a, "Hello World"), r.getrange(a, 0, 4), r.getrange(a, -5, -1),
                r.getrange(a, 5, 1), r.getrange(a, -1, -5), r.getrange("nosuch", 0, 5), r.setrange(a, 6, "Redis"),
                r.get(a), r.setrange("sr", 3, "x"), r.get("sr"), r.setrange("empty", 0, ""), r.exists("empty"),
                r.append(a, "!"), r.append("ap", "x"), r.strlen(a), r.strlen("nosuch"),
                r.incrbyfloat("f", 10.5), r.incrbyfloat("f", 0.1), r.incrbyfloat("f", -5), r.set("f2", "5.0e3"),
                r.incrbyfloat("f2", 2), r.setbit("b", 7, 1), r.setbit("b", 7, 0), r.setbit("b", 100, 1),
                r.getbit("b", 100), r.getbit("b", 1000), r.get("b"), r.set(b, "foobar"), r.bitcount(b),
                r.bitcount(b, 1, 1), r.bitcount(b, -2, -1), r.execute_command("BITCOUNT", b, "5", "30", "BIT"),
                r.set(a, "ohmytext"), r.set(b, "mynewtext"), r.execute_command("LCS", a, b),
                r.execute_command("LCS", a, b, "LEN"), r.execute_command("LCS", a, b, "IDX", "WITHMATCHLEN"),
                r.execute_command("LCS", a, b, "IDX", "MINMATCHLEN", "4")]
    both(servers, "GETDEL/GETEX/GETSET/GETRANGE/SETRANGE/APPEND/STRLEN/INCRBYFLOAT/SETBIT/GETBIT/BITCOUNT/LCS", run)
    for r in servers:
        r.hset("h", "f", "v")
        r.set("nf", "abc")
    bad = [("GETEX", a, "EX", "0"), ("GETEX", a, "EX", "x"), ("GETEX", a, "PERSIST", "EX", "10"), ("GETEX", a, "FOO"),
           ("GETDEL", "h"), ("GETRANGE", a, "x", "1"), ("SETRANGE", a, "-1", "x"), ("SETRANGE", a, "536870911", "xx"),
           ("SETRANGE", "h", "0", "x"), ("INCRBYFLOAT", "nf", "1"), ("INCRBYFLOAT", a, "x"),
           ("INCRBYFLOAT", "f", "1e5000"), ("SETBIT", "b", "-1", "1"), ("SETBIT", "b", "1", "2"),
           ("SETBIT", "b", "4294967296", "1"), ("GETBIT", "b", "x"), ("BITCOUNT", b, "1"),
           ("BITCOUNT", b, "0", "1", "FOO"), ("LCS", a, "h"), ("LCS", a, b, "LEN", "IDX"), ("LCS", a, b, "FOO"),
           ("APPEND", "h", "x"), ("STRLEN", "h")]
    for args in bad:
        both(servers, " ".join(args), lambda r: r.execute_command(*args))


def collections(servers):
    k1, k2 = keys_on_distinct_shards("c", SHARDS)[:2]

    def run(r):
        return [r.hset("h", mapping={"a": "hello", "n": "1.5"}), r.hstrlen("h", "a"), r.hstrlen("h", "x"),
                r.hincrbyfloat("h", "n", 1), r.hincrbyfloat("h", "m", "2.5"), r.hgetall("h"),
                r.rpush(k1, "a", "b", "c", "b"), r.linsert(k1, "BEFORE", "b", "x"), r.linsert(k1, "AFTER", "c", "y"),
                r.linsert(k1, "BEFORE", "zz", "q"), r.linsert("nosuch", "BEFORE", "a", "q"), r.lrange(k1, 0, -1),
                r.lpos(k1, "b"), r.lpos(k1, "b", rank=-1), r.lpos(k1, "b", count=0), r.lpos(k1, "b", rank=2),
                r.lpos(k1, "q"), r.lpos(k1, "b", count=1, maxlen=2), r.lpos("nosuch", "a", count=2),
                r.lpushx(k1, "p"), r.rpushx("nosuch", "p"), r.lmove(k1, k2, "LEFT", "RIGHT"),
                r.lmove(k1, k2, "RIGHT", "LEFT"), r.rpoplpush(k1, k2), r.rpoplpush("nosuch", k2),
                r.lrange(k1, 0, -1), r.lrange(k2, 0, -1), r.lmove(k2, k2, "LEFT", "RIGHT"), r.lrange(k2, 0, -1),
                r.sadd(k1 + "s", "1", "2", "3"), r.smove(k1 + "s", k2 + "s", "2"), r.smove(k1 + "s", k2 + "s", "9"),
                r.smove("nosuch", k2 + "s", "1"), sorted(r.smembers(k1 + "s")), sorted(r.smembers(k2 + "s")),
                r.smismember(k1 + "s", ["1", "2", "3"]), r.spop("nosuch"), r.spop("nosuch", 2),
                r.srandmember("nosuch"), r.srandmember("nosuch", 5), r.sadd("one", "x"), r.spop("one"),
                r.exists("one"), r.sadd("few", "a", "b", "c"), sorted(r.srandmember("few", 5)),
                len(r.srandmember("few", -5)), r.scard("few"), len(r.spop("few", 2)), r.scard("few"),
                len(r.spop("few", 5)), r.exists("few")]
    both(servers, "HSTRLEN/HINCRBYFLOAT/LINSERT/LPOS/LPUSHX/LMOVE/RPOPLPUSH/SMOVE/SMISMEMBER/SPOP/SRANDMEMBER", run)
    for r in servers:
        r.set("str", "x")
        r.sadd("st", "m")
    bad = [("HINCRBYFLOAT", "h", "a", "1"), ("HINCRBYFLOAT", "h", "n", "x"), ("HINCRBYFLOAT", "h", "n", "+inf"),
           ("HINCRBYFLOAT", "str", "n", "-inf"), ("HINCRBYFLOAT", "nokey", "n", "inf"), ("EXISTS", "nokey"),
           ("LINSERT", k1, "MIDDLE", "a", "b"),
           ("LPOS", k1, "b", "RANK", "0"), ("LPOS", k1, "b", "COUNT", "-1"), ("LPOS", k1, "b", "MAXLEN", "-1"),
           ("LPOS", k1, "b", "FOO", "1"), ("LMOVE", k1, k2, "UP", "LEFT"), ("LMOVE", "str", k2, "LEFT", "LEFT"),
           ("LMOVE", k2, "str", "LEFT", "LEFT"), ("SMOVE", "str", "st", "m"), ("SMOVE", "st", "str", "m"),
           ("SPOP", "st", "-1"), ("SPOP", "str"), ("SRANDMEMBER", "st", "x"), ("HRANDFIELD", "h", "1", "FOO"),
           ("SMISMEMBER", "str", "a")]
    for args in bad:
        both(servers, " ".join(args), lambda r: r.execute_command(*args))


def introspection(servers, ports):
    def run(r):
        return [r.set("int", "123"), r.object("encoding", "int"), r.set("emb", "x" * 44), r.object("encoding", "emb"),
                r.set("raw", "x" * 45), r.object("encoding", "raw"), r.hset("hh", "f", "v"),
                r.object("encoding", "hh"), r.config_set("hash-max-listpack-entries", 1), r.hset("hh2", "a", "1"),
                r.hset("hh2", "b", "1"), r.object("encoding", "hh2"), r.config_get("hash-max-listpack-entries"),
                r.config_set("hash-max-listpack-entries", 512), r.sadd("is", "1", "2"), r.object("encoding", "is"),
                r.sadd("hs", "a"), r.object("encoding", "hs"), r.rpush("ql", "a"), r.object("encoding", "ql"),
                r.object("encoding", "nosuch"), r.object("refcount", "int"), r.object("refcount", "raw"),
                r.config_set("list-compress-depth", 2), r.config_get("list-compress-depth"),
                r.config_set("list-compress-depth", 0), r.config_get("appendonly"), sorted(r.keys("i*")), r.touch("int", "x")]
    both(servers, "OBJECT ENCODING/REFCOUNT, CONFIG GET/SET, KEYS, TOUCH", run, normalize=lambda v: v)
    bad = [("CONFIG", "SET", "no-such-param", "1"), ("CONFIG", "SET", "databases", "4"), ("CONFIG", "SET", "save"),
           ("CONFIG", "FOO"), ("OBJECT", "FOO", "int"), ("OBJECT", "ENCODING"), ("DEBUG", "PROTOCOL", "foo"),
           ("SCAN", "0", "COUNT", "0"), ("MEMORY", "FOO"),
           ("CONFIG", "SET", "maxmemory-clients", "200%"), ("CONFIG", "SET", "maxmemory-clients", "x%"),
           ("CONFIG", "SET", "maxmemory-clients", "1zb"), ("CONFIG", "SET", "client-query-buffer-limit", "1000"),
           ("CONFIG", "SET", "client-query-buffer-limit", "big"), ("CONFIG", "SET", "port", "65536"),
           ("CONFIG", "SET", "port", "x"), ("CONFIG", "SET", "maxmemory", "1", "maxmemory-clients", "101%")]
    for args in bad:
        both(servers, " ".join(args), lambda r: r.execute_command(*args))
    # Settable and read back as redis-server's; the hidden key-load-delay
    # only by its exact name; replicaof and slaveof both there.
    def run_config(r):
        got = [r.config_set("maxmemory-clients", "10%"), r.config_get("maxmemory-clients"),
               r.config_set("client-query-buffer-limit", "2mb"), r.config_get("client-query-buffer-limit"),
               r.config_get("key-load-delay"), "key-load-delay" in r.config_get("*"), sorted(r.config_get("*of"))]
        r.config_set("maxmemory-clients", "0")
        r.config_set("client-query-buffer-limit", "1gb")
        return got
    both(servers, "CONFIG SET maxmemory-clients, client-query-buffer-limit; CONFIG GET key-load-delay, *of",
         run_config, normalize=lambda v: v)
    # Hydra's CONFIG SET client-query-buffer-limit takes effect: a request
    # left unfinished past 1 MB closes the connection (with its protocol error).
    hydra = servers[0]
    hydra.config_set("client-query-buffer-limit", "1mb")
    s = socket.create_connection(("127.0.0.1", ports[0]), timeout=10)
    try:
        s.sendall(b"*2\r\n$3\r\nSET\r\n$3000000\r\n" + b"x" * 1500000)
        got = b""
        while chunk := s.recv(4096):
            got += chunk
    except OSError as e:  # reset: closed with our bytes unread
        got = repr(e).encode()
    finally:
        s.close()
    hydra.config_set("client-query-buffer-limit", "1gb")
    check(b"query buffer limit" in got or b"reset" in got.lower(),
          "CONFIG SET client-query-buffer-limit 1mb: a 1.5 MB unfinished request closes the connection", got[:200])
    # INFO commandstats: calls counted per command, as redis-server counts them.
    def echo_calls(r):
        before = r.info("commandstats").get("cmdstat_echo", {}).get("calls", 0)
        for _ in range(3):
            r.echo("x")
        stats = r.info("commandstats")["cmdstat_echo"]
        return [stats["calls"] - before, stats["rejected_calls"], sorted(stats)]
    both(servers, "INFO commandstats: ECHO's calls", echo_calls, normalize=lambda v: v)
    # Keyspace notifications (hydra_notify_test.py tests the events): the
    # flags read back as redis-server's, and "" turns them off again.
    got = []
    for r in servers:
        r.config_set("notify-keyspace-events", "KEA")
        got.append(r.config_get("notify-keyspace-events"))
        r.config_set("notify-keyspace-events", "")
        got.append(r.config_get("notify-keyspace-events"))
    check(got[:2] == got[2:] and got[1] == {"notify-keyspace-events": ""},
          "CONFIG SET notify-keyspace-events KEA, then \"\": read back as redis-server's", got)
    for r, name in zip(servers, ("hydra", "redis-server")):
        info = r.execute_command("INFO", "cpu", "memory")
        check("used_cpu_user" in info and "used_memory" in info and "redis_version" not in info,
              f"INFO cpu memory ({name}): both sections, nothing else", repr(sorted(info))[:200])
    protocol = [("HELLO", "3")] + [("DEBUG", "PROTOCOL", t) for t in
                                   ("string", "integer", "double", "bignum", "null", "array", "set", "map", "attrib",
                                    "push", "verbatim", "true", "false")]
    protocol += [("HELLO", "2")] + [("DEBUG", "PROTOCOL", t) for t in ("double", "map", "attrib", "push", "true")]
    raw_both(ports, protocol, "DEBUG PROTOCOL")


def command(servers, ports):
    # Raw: redis-py would parse COMMAND's replies into its own form.
    raw_both(ports, [("COMMAND", "GETKEYS", "MSET", "a", "1", "b", "2"), ("COMMAND", "GETKEYS", "GET", "k"),
                     ("COMMAND", "GETKEYS", "RENAME", "a", "b"), ("COMMAND", "GETKEYS", "OBJECT", "ENCODING", "k"),
                     ("COMMAND", "GETKEYS", "nosuch", "a"), ("COMMAND", "GETKEYS", "GET"),
                     ("COMMAND", "GETKEYS", "PING"), ("COMMAND", "GETKEYS", "GET", "a", "b"),
                     ("COMMAND", "GETKEYS", "PING", "x"), ("COMMAND", "FOO"), ("COMMAND", "INFO", "nosuch")], "COMMAND")
    for name in ("get", "set", "mset", "del", "rename", "lmove", "hset", "sinterstore"):
        # "COMMAND INFO" as one word: redis-py splits it and has no parser for it.
        got = [r.execute_command("COMMAND INFO", name)[0] for r in servers]
        # name, arity, first key, last key, step (Hydra keeps no flags or ACL categories)
        fields = [[g[0], g[1], g[3], g[4], g[5]] for g in got]
        check(fields[0] == fields[1], f"COMMAND INFO {name}: name, arity and key positions as redis-server",
              f"hydra {fields[0]!r}, redis-server {fields[1]!r}")
    n = servers[0].execute_command("COMMAND COUNT")
    names = servers[0].execute_command("COMMAND LIST")
    check(n == len(names) and "get" in names and "scan" in names, f"COMMAND COUNT ({n}) and LIST agree")


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    with pair(build, threads=SHARDS, redis_args=("--enable-debug-command", "yes")) as ports:
        servers = clients(ports, decode_responses=True)
        for r in servers:
            r.flushall()
        strings(servers)
        collections(servers)
        introspection(servers, ports)
        command(servers, ports)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
