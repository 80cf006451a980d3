#!/usr/bin/python3
"""SCAN's cursor over Hydra's shards (tools/apps/kvstore/keys.cpp):

  hydra_scan_test.py BUILD_DIR            a 4-shard hydra on loopback
  hydra_scan_test.py scan HOST:PORT ...   the checks alone against a running
                                          hydra (hydra_test.py's rack part
                                          runs them through each host)

A full SCAN (COUNT 7 to 50) runs while another connection adds new keys and
deletes others between its calls. Every key present for the whole scan must
come back (Redis's guarantee: at least once; Hydra's cursor, a shard and a
position in a hash order fixed per key, gives exactly once, checked too);
keys deleted before the scan started must not; the cursor must visit every
shard (its top 8 bits) and end at 0. MATCH, TYPE and COUNT, KEYS and
RANDOMKEY are checked on the same data, and SCAN's argument errors against
Redis 7.0's texts.
"""
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resp_client import Conn, parse_addr  # noqa: E402
from hydra_proc import free_port, local_hydra  # noqa: E402 (the standalone server, stopped after)
from check_log import check, finish  # noqa: E402


def full_scan(c, churn, *opts):
    """Every key SCAN answers (a list, duplicates kept) and the shards its cursor named."""
    cursor, seen, shards, calls = b"0", [], set(), 0
    while True:
        r = c.call("SCAN", cursor, *opts)
        if not (isinstance(r, list) and len(r) == 2):
            check(False, "SCAN answers [cursor, keys]", repr(r)[:200])
            return seen, shards
        cursor, keys = r
        seen += keys
        calls += 1
        shards.add(int(cursor) >> 56)
        if cursor == b"0" or calls > 100000:
            return seen, shards
        churn()


def scan_checks(addr, shards_expected):
    w, c = Conn(addr), Conn(addr)
    rng = random.Random(os.getpid())
    check(w.call("FLUSHALL") == ("+", "OK"), "FLUSHALL")
    stable = [f"stable:{i}" for i in range(3000)]
    gone = [f"gone:{i}" for i in range(500)]
    for i in range(0, len(stable), 100):
        w.call("MSET", *[x for k in stable[i:i + 100] for x in (k, "v")])
    for i in range(0, len(gone), 100):
        w.call("MSET", *[x for k in gone[i:i + 100] for x in (k, "v")])
    w.call("DEL", *gone)  # deleted before the scan: must not come back
    w.call("HSET", "stable:hash", "f", "v")
    w.call("RPUSH", "stable:list", "x")
    w.call("SADD", "stable:set", "m")
    stable += ["stable:hash", "stable:list", "stable:set"]
    added = [0]
    volatile = []

    def churn():  # between SCAN calls: new keys in, some of them out again (rehashing the shards' maps)
        batch = [f"new:{added[0] + i}" for i in range(8)]
        added[0] += len(batch)
        w.call("MSET", *[x for k in batch for x in (k, "v")])
        volatile.extend(batch)
        if len(volatile) > 400:
            out = [volatile.pop(rng.randrange(len(volatile))) for _ in range(8)]
            w.call("DEL", *out)

    for count in (7, 50):
        seen, cursors = full_scan(c, churn, "COUNT", count)
        names = [k.decode() for k in seen]
        missing = [k for k in stable if k not in set(names)]
        check(not missing, f"SCAN COUNT {count} under writes: every key present throughout returned "
              f"({len(stable)} keys, {added[0]} added meanwhile)", f"missing {missing[:5]}")
        dup = len(names) - len(set(names))
        check(dup == 0, f"SCAN COUNT {count}: no key returned twice", f"{dup} duplicates")
        check(not any(n.startswith("gone:") for n in names), f"SCAN COUNT {count}: keys deleted before the scan not returned")
        check(len(cursors) >= shards_expected, f"SCAN COUNT {count}: the cursor visited every shard",
              f"shards seen {sorted(cursors)}, want {shards_expected}")

    seen, _ = full_scan(c, lambda: None, "MATCH", "stable:1*", "COUNT", 100)
    want = {k for k in stable if k.startswith("stable:1")}
    check({k.decode() for k in seen} == want, f"SCAN MATCH stable:1* returns the {len(want)} matching keys")
    for t, key in (("hash", "stable:hash"), ("list", "stable:list"), ("set", "stable:set")):
        seen, _ = full_scan(c, lambda: None, "TYPE", t)
        check([k.decode() for k in seen] == [key], f"SCAN TYPE {t}", repr(seen)[:200])
    keys = c.call("KEYS", "stable:2*")
    check(sorted(k.decode() for k in keys) == sorted(k for k in stable if k.startswith("stable:2")), "KEYS stable:2*")
    r = c.call("RANDOMKEY")
    check(isinstance(r, bytes) and c.call("EXISTS", r) == 1, "RANDOMKEY answers an existing key", repr(r))
    errors = [
        (("SCAN", "x"), "ERR invalid cursor"),
        (("SCAN", "0", "COUNT", "0"), "ERR syntax error"),
        (("SCAN", "0", "COUNT", "x"), "ERR value is not an integer or out of range"),
        (("SCAN", "0", "FOO", "1"), "ERR syntax error"),
        (("SCAN", "0", "COUNT"), "ERR syntax error"),
    ]
    for args, text in errors:
        r = c.call(*args)
        check(r == ("-", text), " ".join(args) + f" -> {text}", repr(r))
    check(c.call("FLUSHALL") == ("+", "OK") and c.call("SCAN", "0") == [b"0", []] and c.call("RANDOMKEY") is None,
          "an empty key space: SCAN 0 answers cursor 0 and nothing, RANDOMKEY nil")
    w.close()
    c.close()


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "scan":
        for a in sys.argv[2].split(","):
            scan_checks(parse_addr(a), int(sys.argv[3]) if len(sys.argv) > 3 else 1)
        return finish()
    hydra = os.path.join(sys.argv[1], "tools", "apps", "kvstore", "hydra")
    port = free_port()
    with local_hydra(hydra, port, threads=4, seconds=100):
        for _ in range(100):
            try:
                if Conn(("127.0.0.1", port), timeout=2).call("PING") == ("+", "PONG"):
                    break
            except OSError:
                time.sleep(0.1)
        scan_checks(("127.0.0.1", port), 4)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
