#!/usr/bin/python3
"""Hydra (tools/apps/kvstore) driven by a real client, redis-py (Debian's
python3-redis, hence /usr/bin/python3), side by side with redis-server 7.0:

  hydra_redis_py_test.py BUILD_DIR

Both servers are started on loopback ports; every step runs against both and
the replies must be equal (redis-py's decoded values, and its error texts).
What redis-py 4.3 cannot speak (RESP3: it has no `protocol=3`) goes over a
raw socket and is compared byte for byte, with only the server version and
client id, which differ by nature, masked.

Covered: INCR/INCRBY/DECR/DECRBY (redis-py's incr sends INCRBY) and their
errors, a pipeline of mixed commands, SET's options, SETEX/PSETEX, the
EXPIRE family with NX/XX/GT/LT, TTL/PTTL/EXPIRETIME/PERSIST, keys really
expiring (lazily on access, and actively: DBSIZE drops with nobody reading
them), HELLO 2/3 and the RESP3 replies, error texts of malformed options.
Exits 77 (skip) without redis-py or redis-server.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hydra_pair import both, check, clients, finish, pair, raw_both  # noqa: E402


# ---- redis-py -----------------------------------------------------------------------


def client_checks(servers):
    for r in servers:
        r.flushall()
    both(servers, "incr, incr by 5, decr, decr by 3, incrby -2",
         lambda r: [r.incr("c"), r.incr("c", 5), r.decr("c"), r.decr("c", 3), r.incrby("c", -2), r.get("c")])
    both(servers, "incr of a non-integer", lambda r: (r.set("s", "abc"), r.incr("s")))
    both(servers, "incrby overflowing", lambda r: (r.set("m", str(2**63 - 1)), r.incrby("m", 1)))
    both(servers, "decrby of INT64_MIN", lambda r: r.decrby("m", -2**63))
    both(servers, "incrby with a non-integer step", lambda r: r.execute_command("INCRBY", "c", "1.5"))

    def pipeline(r):
        p = r.pipeline(transaction=False)
        p.set("a", "1").incr("a").incrby("a", 10).get("a").mget("a", "nosuch", "c").exists("a", "nosuch", "a")
        p.set("t", "v", ex=100).ttl("t").set("t", "w", keepttl=True).ttl("t").set("t", "x").ttl("t")
        p.set("t", "y", nx=True).set("t", "z", xx=True, get=True).get("t").delete("a", "t", "nosuch")
        return p.execute(raise_on_error=False)
    both(servers, "pipeline of SET/INCR/INCRBY/GET/MGET/EXISTS/SET EX/TTL/KEEPTTL/NX/XX GET/DEL", pipeline,
         lambda v: [str(x) if isinstance(x, Exception) else x for x in v])

    def expire_family(r):
        r.set("e", "v")
        out = [r.expire("e", 100, gt=True), r.expire("e", 100, lt=True), r.ttl("e"),
               r.expire("e", 200, nx=True), r.expire("e", 200, xx=True), r.ttl("e"),
               r.expire("e", 50, gt=True), r.pexpire("e", 150000, gt=True), r.ttl("e"),
               r.persist("e"), r.persist("e"), r.ttl("e"), r.expire("nosuch", 10),
               r.expireat("e", 4102444800), r.execute_command("EXPIRETIME", "e"),
               r.pexpireat("e", 4102444800123), r.execute_command("PEXPIRETIME", "e"), r.ttl("nosuch")]
        out.append(r.pttl("e") > 10**9)
        out += [r.setex("x", 100, "v"), r.ttl("x"), r.psetex("x", 100000, "v"), r.ttl("x")]
        out += [r.expire("x", -1), r.exists("x")]  # a time in the past deletes the key
        return out
    both(servers, "EXPIRE/PEXPIRE/EXPIREAT/PEXPIREAT with NX/XX/GT/LT, TTL, EXPIRETIME, PERSIST, SETEX, PSETEX",
         expire_family)

    bad = [("SET", "k", "v", "EX", "0"), ("SET", "k", "v", "EX", "x"), ("SET", "k", "v", "EX", "10", "PX", "10"),
           ("SET", "k", "v", "NX", "XX"), ("SET", "k", "v", "KEEPTTL", "EX", "5"), ("SET", "k", "v", "FOO"),
           ("SET", "k", "v", "PX", str(2**63 - 1)), ("SETEX", "k", "0", "v"), ("PSETEX", "k", "-5", "v"),
           ("EXPIRE", "k", "10", "NX", "XX"), ("EXPIRE", "k", "10", "GT", "LT"), ("EXPIRE", "k", "10", "FOO"),
           ("EXPIRE", "k", str(2**63 - 1)), ("PEXPIRE", "k", str(2**63 - 1)), ("DECR",), ("INCRBY", "k")]
    for args in bad:
        both(servers, " ".join(args), lambda r: r.execute_command(*args))

    # Keys that really expire: read after their deadline (lazy expiry)...
    for r in servers:
        r.set("soon", "v", px=50)
    end = time.time() + 10
    while time.time() < end and any(r.get("soon") is not None for r in servers):
        time.sleep(0.02)
    check(all(r.get("soon") is None and r.ttl("soon") == -2 for r in servers), "SET PX 50: gone after its deadline")
    # ...and never read again (active expiry: DBSIZE counts keys not yet dropped).
    for r in servers:
        r.flushall()
        p = r.pipeline(transaction=False)
        for i in range(2000):
            p.set(f"k{i}", "v", px=100)
        p.set("stays", "v").execute()
    check([r.dbsize() for r in servers] == [2001, 2001], "2000 keys with PX 100 and one without")
    end = time.time() + 10
    while time.time() < end and any(r.dbsize() != 1 for r in servers):
        time.sleep(0.05)
    got = [r.dbsize() for r in servers]
    check(got == [1, 1], "the active sweep drops expired keys nobody reads (DBSIZE 1 on both)", repr(got))
    got = both(servers, "INFO keyspace after the sweep", lambda r: r.info("keyspace"))
    check(got == {"db0": {"keys": 1, "expires": 0, "avg_ttl": 0}}, "INFO keyspace: keys=1,expires=0", repr(got))


# ---- RESP3 over a raw socket (redis-py 4.3 has none) ------------------------------


def resp3_checks(ports):
    commands = [("FLUSHALL",), ("HELLO",), ("HELLO", "4"), ("HELLO", "x"), ("HELLO", "3", "FOO"),
                ("HELLO", "3", "AUTH", "bob", "x"), ("HELLO", "3"), ("GET", "nosuch"), ("SET", "k", "1"),
                ("MGET", "k", "nosuch"), ("SET", "k", "2", "NX"), ("SET", "n", "v", "XX", "GET"),
                ("SET", "k", "3", "GET"), ("CONFIG", "GET", "save"), ("INFO", "keyspace"), ("INCRBY", "k", "4"),
                ("HELLO", "2", "SETNAME", "x"), ("GET", "nosuch"), ("MGET", "nosuch")]
    got = raw_both(ports, commands, "RESP3")
    check(got[7] == b"_\r\n" and got[17] == b"$-1\r\n", "GET of a missing key: _ after HELLO 3, $-1 after HELLO 2")


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    with pair(build, threads=2) as ports:
        client_checks(clients(ports))
        resp3_checks(ports)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
