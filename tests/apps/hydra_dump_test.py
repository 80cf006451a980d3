#!/usr/bin/python3
"""Hydra's DUMP and RESTORE next to redis-server 7.0:

  hydra_dump_test.py BUILD_DIR

1. Byte for byte (raw RESP2 and RESP3): DUMP of strings (Hydra writes them
   as Redis does: integer encodings, no compression at 20 bytes or less)
   and of a missing key; RESTORE's replies and error texts: BUSYKEY,
   REPLACE, bad TTLs and options, and corrupted payloads (a wrong CRC, a
   newer RDB version, fewer than 10 bytes, an unknown type, a truncated
   body, an empty list, a NaN score, a duplicate member, a corrupt listpack
   header, each with its CRC made right so that the decoder is reached).
2. Round trips both ways for every type, in each of Redis's encodings
   (strings raw, integer and LZF-compressed; lists as quicklists of
   listpacks and with plain nodes; hashes and sorted sets as listpacks and
   as tables; sets as intsets and tables): redis-server's DUMP restored
   into Hydra and Hydra's restored into redis-server hold the same value
   and TTL, over Hydra's 4 shards (source and target keys on different
   shards).
3. Robustness: 3000 random corruptions of real payloads (bytes flipped,
   cut, inserted; the CRC made right) sent to Hydra: each answers OK or
   an error, and Hydra is still up after.
4. `hydra_dump_test.py rack HOST:PORT HOST:PORT` (hydra_test.py's rack
   part runs it): DUMP through one host, RESTORE through the other into a
   key on every shard of both hosts, both ways; BUSYKEY and Bad data
   format through the host that does not own the key; COPY of hashes
   across hosts keeps their encoding and order.
   Hashes compare with their OBJECT ENCODING, and a listpack's fields in
   order.
5. The payloads of Redis's own tests/integration/corrupt-dump.tcl (when
   redis-tests has fetched the suite): each answered as redis-server with
   sanitize-dump-payload yes answers it.
Exits 77 (skip) without redis-py or redis-server.
"""
import glob
import os
import random
import re
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hydra_pair import check, clients, finish, keys_on_distinct_shards, pair, raw_both, redis  # noqa: E402


def crc64(data):
    """Redis's crc64: reflected CRC-64/Jones (check value of '123456789':
    0xe9c6d914c4b8d9ca), bit by bit."""
    crc = 0
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x95AC9329AC4BC9B5 if crc & 1 else 0)
    return crc


def payload(body, version=10):
    """An RDB object body with the DUMP footer, its CRC right."""
    data = body + struct.pack("<H", version)
    return data + struct.pack("<Q", crc64(data))


def recrc(p):
    """A payload with its CRC recomputed (len >= 10)."""
    return p[:-8] + struct.pack("<Q", crc64(p[:-8]))


def setups():
    """Keys of every type and encoding: name -> commands that build it."""
    big = "x" * 100
    return {
        "s_short": [("SET", "s_short", "hello")],
        "s_int8": [("SET", "s_int8", "-12")],
        "s_int16": [("SET", "s_int16", "30000")],
        "s_int32": [("SET", "s_int32", "-2000000000")],
        "s_int64": [("SET", "s_int64", "9223372036854775807")],
        "s_lead0": [("SET", "s_lead0", "007")],
        "s_20": [("SET", "s_20", "abcdefghijklmnopqrst")],
        "s_lzf": [("SET", "s_lzf", big)],
        "s_bin": [("SET", "s_bin", bytes(range(256)) * 3)],
        "l_small": [("RPUSH", "l_small", "a", "127", "32767", "2147483647", "9223372036854775808", "0", "12",
                     "-5000", "x" * 31, "y" * 8191, "z" * 70000)],
        "l_many": [("RPUSH", "l_many", *[str(i) for i in range(3000)])],
        "h_small": [("HSET", "h_small", "f1", "v1", "n", "17", "big", "q" * 100)],
        "h_big": [("HSET", "h_big", *[x for i in range(300) for x in (f"f{i}", f"v{i}")])],
        "set_int": [("SADD", "set_int", "1", "-7", "100000", "5000000000")],
        "set_big": [("SADD", "set_big", *[f"m{i}" for i in range(600)])],
        "z_small": [("ZADD", "z_small", "1", "a", "2.5", "b", "-inf", "lo", "inf", "hi", "-0", "nz", "1e300", "huge")],
        "z_big": [("ZADD", "z_big", *[x for i in range(200) for x in (str(i / 7), f"m{i}")])],
        "ttl": [("SET", "ttl", "v", "PX", "100000")],
    }


def value_of(r, key):
    """A key's type, value and whether it has a TTL, comparable across servers."""
    t = r.type(key).decode()
    if t == "string":
        v = r.get(key)
    elif t == "list":
        v = r.lrange(key, 0, -1)
    elif t == "hash":  # a listpack's order is part of its value (insertion order, kept by DUMP/RESTORE)
        enc = r.object("encoding", key)
        items = list(r.hgetall(key).items())
        v = (enc, items if enc == b"listpack" else sorted(items))
    elif t == "set":
        v = sorted(r.smembers(key))
    elif t == "zset":
        v = r.zrange(key, 0, -1, withscores=True)
    else:
        v = None
    ttl = r.pttl(key)
    return t, v, ttl > 0 if ttl != -1 else -1


def raw_checks(ports, shards):
    a, b = keys_on_distinct_shards("k", shards)[:2]
    strings = [("SET", a, v) for v in ("hello", "-12", "30000", "-2000000000", "2147483648", "007", "-0", "+1",
                                       "12345678901", "abcdefghijklmnopqrst", "1.5", "")]
    cmds = [("FLUSHALL",)]
    for s in strings:
        cmds += [s, ("DUMP", a)]
    cmds += [("DUMP", "nokey"), ("DUMP",), ("DUMP", a, b)]
    good = payload(b"\x00\x05hello")
    lp = bytes.fromhex("0d000000 0200 8161 02 8162 02 ff".replace(" ", ""))  # listpack of "a", "b"
    bad = {
        "crc": good[:-1] + bytes([good[-1] ^ 1]),
        "short": good[:9],
        "empty": b"",
        "version": payload(b"\x00\x05hello", version=11),
        "version9": payload(b"\x00\x05hello", version=9),
        "type99": payload(b"\x63\x05hello"),
        "truncated": payload(b"\x00\x40\xff" + b"x" * 20),
        "emptylist": payload(b"\x01\x00"),
        "emptyset": payload(b"\x02\x00"),
        "nanscore": payload(b"\x05\x01\x01m" + struct.pack("<d", float("nan"))),
        "dupset": payload(b"\x02\x02\x01a\x01a"),
        "dupzset": payload(b"\x05\x02\x01a" + struct.pack("<d", 1) + b"\x01a" + struct.pack("<d", 2)),
        "lpheader": payload(b"\x12\x01\x02" + bytes([len(lp)]) + b"\x0e" + lp[1:]),
        "lpgood": payload(b"\x12\x01\x02" + bytes([len(lp)]) + lp),
        "badcontainer": payload(b"\x12\x01\x03" + bytes([len(lp)]) + lp),
        "badlen": payload(b"\x00\x82hello"),
        "badenc": payload(b"\x00\xc4hello"),
        "lzfbad": payload(b"\x00\xc3\x03\x0a\x1fabc"),
        "intset": payload(b"\x0b\x10" + struct.pack("<II", 2, 4) + struct.pack("<hhhh", 1, 2, 3, 4)),
        "intsetbad": payload(b"\x0b\x10" + struct.pack("<II", 2, 5) + struct.pack("<hhhh", 1, 2, 3, 4)),
    }
    cmds += [("DEL", a), ("RESTORE", a, "0", good), ("GET", a), ("RESTORE", a, "0", good),
             ("RESTORE", a, "0", good, "REPLACE"), ("RESTORE", a, "x", good), ("RESTORE", a, "-1", good),
             ("RESTORE", a, "x", good, "REPLACE"), ("RESTORE", a, "-1", b"junk", "REPLACE"),
             ("RESTORE", a, "0", good, "FOO"), ("RESTORE", a, "0", good, "IDLETIME"),
             ("RESTORE", a, "0", good, "IDLETIME", "-1"), ("RESTORE", a, "0", good, "IDLETIME", "x"),
             ("RESTORE", a, "0", good, "FREQ", "256"), ("RESTORE", a, "0", good, "FREQ", "-1"),
             ("RESTORE", a, "0", good, "IDLETIME", "5", "FREQ", "5"), ("RESTORE", a, "0", good, "FREQ", "5", "IDLETIME", "5"),
             ("RESTORE", b, "0", good, "IDLETIME", "100"), ("OBJECT", "IDLETIME", b),
             ("RESTORE", b, "0", good, "REPLACE", "FREQ", "10"), ("GET", b),
             ("RESTORE", b, "5000", good, "REPLACE"), ("GET", b), ("PERSIST", b),
             ("RESTORE", b, "1", good, "REPLACE", "ABSTTL"), ("EXISTS", b),  # a deadline in the past: deleted
             ("RESTORE", b, "1", good, "ABSTTL"), ("EXISTS", b),
             ("RESTORE", a, "0"), ("RESTORE",)]
    for name, p in bad.items():
        cmds += [("DEL", b), ("RESTORE", b, "0", p), ("TYPE", b)]
    cmds += [("SET", b, "old"), ("RESTORE", b, "0", bad["crc"]), ("RESTORE", b, "0", bad["crc"], "REPLACE"),
             ("GET", b), ("MULTI",), ("RESTORE", b, "0", good, "REPLACE"), ("DUMP", b), ("EXEC",)]
    raw_both(ports, cmds, "DUMP/RESTORE, RESP2")
    raw_both(ports, [("HELLO", "3")] + cmds, "DUMP/RESTORE, RESP3")


def round_trips(ports, shards):
    h, r = clients(ports)
    r.config_set("list-max-listpack-size", "-2")
    targets = keys_on_distinct_shards("t", shards)
    for src_name, dst_name, src, dst in (("redis-server", "hydra", r, h), ("hydra", "redis-server", h, r)):
        for c in (h, r):
            c.flushall()
        for name, cmds in setups().items():
            for cmd in cmds:
                for c in (h, r):
                    c.execute_command(*cmd)
        for i, name in enumerate(setups()):
            dumped = src.dump(name)
            tgt = targets[i % len(targets)]
            try:
                got = dst.restore(tgt, 0 if name != "ttl" else 50000, dumped, replace=True)
            except Exception as e:  # noqa: BLE001
                got = repr(e)
            same = value_of(dst, tgt) == value_of(src, name)
            check(got in (True, b"OK") and same, f"{src_name}'s DUMP of {name} restored into {dst_name}",
                  f"RESTORE answered {got!r}; {value_of(dst, tgt)!r}"[:300])
    # Plain quicklist nodes (an element above the packed threshold) from redis-server.
    r.execute_command("DEBUG", "QUICKLIST-PACKED-THRESHOLD", "100")
    r.delete("plain")
    r.rpush("plain", "a" * 500, "b", "c" * 1000, "d")
    dumped = r.dump("plain")
    check(dumped[0] == 18, "redis-server writes a quicklist (type 18) for the list with plain nodes", repr(dumped[:4]))
    h.restore("plain", 0, dumped, replace=True)
    check(h.lrange("plain", 0, -1) == r.lrange("plain", 0, -1), "a list with plain nodes restored into hydra")
    r.execute_command("DEBUG", "QUICKLIST-PACKED-THRESHOLD", str(1 << 30))
    # Hydra's own DUMP restores into itself across shards with REPLACE.
    h.set(targets[0], "x")
    h.rpush(targets[1], "1", "2")
    h.restore(targets[0], 0, h.dump(targets[1]), replace=True)
    check(h.lrange(targets[0], 0, -1) == [b"1", b"2"], "hydra's DUMP restored into hydra on another shard")


def corruptions(ports):
    h, r = clients(ports)
    rng = random.Random(21)
    sources = [r.dump(k) for k in setups() if r.exists(k)] + [h.dump(k) for k in setups() if h.exists(k)]
    sources = [s for s in sources if s and len(s) < 20000]
    answers = {}
    for i in range(3000):
        p = bytearray(rng.choice(sources))
        body = p[:-10]
        for _ in range(rng.randint(1, 4)):
            op = rng.random()
            if op < 0.6 and body:
                body[rng.randrange(len(body))] = rng.randrange(256)
            elif op < 0.8 and body:
                del body[rng.randrange(len(body)):]
            else:
                body.insert(rng.randrange(len(body) + 1), rng.randrange(256))
        data = payload(bytes(body))
        try:
            got = h.restore("fz", 0, data, replace=True)
            key = "OK"
        except Exception as e:  # noqa: BLE001
            key = str(e)
            got = key
        answers[key] = answers.get(key, 0) + 1
        if got not in (True, b"OK") and not str(got).startswith(("Bad data format", "DUMP payload")):
            check(False, "a corrupted payload gets OK or Bad data format", f"{bytes(data)!r}: {got!r}"[:300])
            break
    print(f"3000 corrupted payloads: {answers}")
    check(h.ping(), "hydra is up after 3000 corrupted payloads")


def redis_corpus(ports):
    """The payloads of Redis's own tests/integration/corrupt-dump.tcl (most
    of them corrupt: listpacks, ziplists, intsets, quicklists, streams), if
    redis-tests has fetched the suite: Hydra must answer each as
    redis-server does with sanitize-dump-payload yes (deep checks)."""
    cache = os.environ.get("GOSSAMER_CACHE", os.path.expanduser("~/.cache/gossamer"))
    found = sorted(glob.glob(os.path.join(cache, "redis-*", "tests", "integration", "corrupt-dump.tcl")))
    if not found:
        print(f"note: no Redis test suite in {cache} (tools/apps/kvstore/redis-tests --fetch-only): "
              "corrupt-dump.tcl's payloads not tried")
        return
    payloads = []
    for m in re.finditer(r'restore \S+ 0 "((?:\\x[0-9A-Fa-f]{2}|[^"\\])*)"', open(found[-1]).read()):
        text, b, i = m.group(1), bytearray(), 0
        while i < len(text):
            if text.startswith("\\x", i):
                b.append(int(text[i + 2:i + 4], 16))
                i += 4
            else:
                b.append(ord(text[i]))
                i += 1
        payloads.append(bytes(b))
    h, r = clients(ports)
    r.config_set("sanitize-dump-payload", "yes")
    same = 0
    for p in payloads:
        got = []
        for c in (h, r):
            try:
                got.append(repr(c.restore("cd", 0, p, replace=True)))
            except redis.exceptions.ResponseError as e:
                got.append(str(e))
        same += got[0] == got[1]
        check(got[0] == got[1], f"corrupt-dump.tcl payload {p[:12].hex()}...: hydra as redis-server", repr(got))
    check(len(payloads) >= 20, f"{len(payloads)} payloads of {found[-1]} tried, {same} answered alike")
    r.config_set("sanitize-dump-payload", "no")


def rack(addrs):
    """On a 2-host rack (hydra_test.py's rack part): values of every type
    dumped through one host and restored through the other into a key on
    every shard (so across hosts both ways: the value travels to the
    target's trustee serialized), compared; BUSYKEY and a corrupted payload
    through the host that does not own the key. COPY of a listpack hash
    (its order) and of a hashtable one HDEL left small (still a
    hashtable: the Dump carries the encoding) to every shard."""
    h0, h1 = (redis.Redis(host=h, port=p, socket_timeout=30) for h, p in addrs)
    shards = int(h0.info("server").get("gossamer_shards", 4))
    targets = keys_on_distinct_shards("rt", shards)
    h0.flushall()
    for cmds in setups().values():
        for cmd in cmds:
            h0.execute_command(*cmd)
    for name in setups():
        for src, dst, how in ((h0, h1, "host 0 to host 1"), (h1, h0, "host 1 to host 0")):
            dumped = src.dump(name)
            ok = True
            for t in targets:
                dst.restore(t, 0 if name != "ttl" else 50000, dumped, replace=True)
                ok = ok and value_of(src, t) == value_of(src, name)
            check(ok, f"rack: DUMP of {name} restored {how} into a key on each of {shards} shards")
    h1.hset("h_order", mapping={f"f{(i * 37) % 100}": str(i) for i in range(100)})
    h1.hset("h_conv", mapping={f"f{i}": str(i) for i in range(513)})
    h1.hdel("h_conv", *[f"f{i}" for i in range(510)])
    for name, enc in (("h_order", b"listpack"), ("h_conv", b"hashtable")):
        for src, dst, how in ((h0, h1, "via host 0, read via host 1"), (h1, h0, "via host 1, read via host 0")):
            ok = True
            for t in targets:
                src.copy(name, t, replace=True)
                ok = ok and value_of(dst, t) == value_of(dst, name) and value_of(dst, t)[1][0] == enc
            check(ok, f"rack: COPY of {name} ({enc.decode()}) {how} to a key on each of {shards} shards: "
                  "the same encoding and order")
    for t in targets:
        for c in (h0, h1):
            try:
                got = c.restore(t, 0, h0.dump("s_short"))
            except redis.exceptions.ResponseError as e:
                got = str(e)
            check(str(got).endswith("Target key name already exists."), f"rack: RESTORE of an existing {t} is BUSYKEY", repr(got))
            try:
                got = c.restore(t, 0, payload(b"\x01\x00"), replace=True)
            except redis.exceptions.ResponseError as e:
                got = str(e)
            check(got == "Bad data format" and c.exists(t) == 1, f"rack: an empty list's payload for {t}: Bad data format",
                  repr(got))


def zset_budget(build):
    """--max-shard-request 64 KiB: a sorted set of 4-byte members is charged
    its scores too (each travels on as text with its member), so 1500
    members (~100 KiB decoded) are refused where 700 (~47 KiB) restore.
    Charging the members alone let 1500 through (review, 2026-11-27)."""
    def zset(n):
        body = bytes([5, 0x40 | (n >> 8), n & 0xFF])  # RDB_TYPE_ZSET_2, 14-bit length
        for i in range(n):
            body += b"\x04" + struct.pack("<I", i) + struct.pack("<d", float(i))
        return payload(body)
    with pair(build, threads=2, hydra_args=("--max-shard-request", "65536")) as ports:
        r = redis.Redis(port=ports[0])
        try:
            r.execute_command("RESTORE", "zbig", "0", zset(1500))
            got = "OK"
        except redis.exceptions.ResponseError as e:
            got = str(e)
        check(got == "DUMP payload expands past --max-shard-request",
              "RESTORE of a sorted set whose members and scores exceed --max-shard-request is refused", got)
        check(r.execute_command("RESTORE", "zsmall", "0", zset(700)) == b"OK" and r.zcard("zsmall") == 700,
              "RESTORE of a sorted set within --max-shard-request (700 members)")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "rack":
        rack([(h, int(p)) for h, p in (a.rsplit(":", 1) for a in sys.argv[2:4])])
        return finish()
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    with pair(build, threads=4, redis_args=("--enable-debug-command", "yes")) as ports:
        raw_checks(ports, 4)
        round_trips(ports, 4)
        corruptions(ports)
        redis_corpus(ports)
    zset_budget(build)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
