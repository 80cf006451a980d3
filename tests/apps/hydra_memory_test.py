#!/usr/bin/python3
"""Hydra's --maxmemory and its policies (tools/apps/kvstore/memory.cpp,
eviction.cpp), with redis-py:

  hydra_memory_test.py BUILD_DIR
      1. noeviction (--maxmemory 48 MB): writes are refused with Redis's OOM
         error, byte for byte, once the heap is over it; reads, DEL and
         MULTI's refusal as Redis; writes work again once memory is freed;
         CONFIG SET maxmemory 1 refuses the very next write;
      2. allkeys-lru (--maxmemory 40 MB): writing four times what fits
         succeeds throughout while the heap stays near the bound, keys read
         meanwhile survive far more than keys nobody read, INFO counts the
         evicted keys; OBJECT IDLETIME follows the access clock; CONFIG
         SET maxmemory-policy switches to noeviction and back;
      3. volatile-lru (--maxmemory 30 MB): only keys with a TTL are evicted.
Exits 77 (skip) without redis-py.
"""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hydra_pair import check, finish, redis  # noqa: E402
from hydra_pubsub_test import start_hydra  # noqa: E402

OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"  # Redis 7.0's shared.oomerr


def raw_set(port):
    """SET's raw reply bytes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"*3\r\n$3\r\nSET\r\n$3\r\nraw\r\n$1\r\nv\r\n")
    reply = s.recv(4096)
    s.close()
    return reply


def maxmemory(build):
    """--maxmemory 48 MB (noeviction): writes of 10 kB values are refused
    with Redis's OOM error once the heap is over it, reads and DEL still
    work, and writes work again once memory is freed."""
    port, proc = start_hydra(build, "--maxmemory", str(48 * 10**6))
    try:
        r = redis.Redis(port=port, socket_timeout=20)
        value = b"v" * 10000
        stored, err = 0, None
        try:
            for i in range(20000):
                r.set(f"k{i}", value)
                stored += 1
                if i % 250 == 0:
                    time.sleep(0.25)  # the heap is read every 100 ms
        except redis.exceptions.ResponseError as e:
            err = str(e)
        check(err == "OOM command not allowed when used memory > 'maxmemory'." and 3000 < stored < 6500,
              f"--maxmemory 48 MB: SET refused with Redis's OOM error after {stored} values of 10 kB", repr(err))
        check(r.get("k1") == value and r.dbsize() == stored, "reads still answered, nothing lost")
        p = r.pipeline(transaction=True)
        p.incr("c")
        try:
            p.execute()
            tx = "ran"
        except redis.exceptions.ResponseError as e:
            tx = str(e)
        check(tx.startswith("Transaction discarded") or "OOM" in tx, "MULTI while over: refused (EXECABORT)", tx)
        check(r.delete(*[f"k{i}" for i in range(stored)]) == stored, "DEL still works while over")
        time.sleep(0.5)
        check(r.set("after", "v") is True, "SET works again once memory is freed")
        check(r.config_get("maxmemory*") == {"maxmemory": str(48 * 10**6), "maxmemory-policy": "noeviction",
                                               "maxmemory-clients": str(512 << 20), "maxmemory-samples": "5"},
              "CONFIG GET maxmemory*")
        check(r.config_set("maxmemory", "1") and raw_set(port) == OOM,
              "CONFIG SET maxmemory 1: the next SET gets Redis's OOM error byte for byte", repr(raw_set(port)))
        check(r.config_set("maxmemory", "0") and r.set("free", "v"), "CONFIG SET maxmemory 0: writes again")
        # A MULTI queued before the host went over: its EXEC counts as the
        # writes it holds and is refused, the transaction discarded (Redis
        # 7.0's execCommandAbort; unit/multi checks the same).
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$1\r\n1\r\n")
        got = b""
        while got.count(b"\r\n") < 2:
            got += s.recv(4096)
        r.config_set("maxmemory", "1")
        end = time.time() + 10  # the heap is read every 100 ms: until a SET elsewhere is refused
        while raw_set(port) != OOM and time.time() < end:
            time.sleep(0.1)
        s.sendall(b"*1\r\n$4\r\nEXEC\r\n")
        reply = s.recv(4096)
        s.close()
        want = b"-EXECABORT Transaction discarded because of: OOM command not allowed when used memory > 'maxmemory'.\r\n"
        check(got == b"+OK\r\n+QUEUED\r\n" and reply == want, "EXEC of a queued SET while over: EXECABORT ... OOM",
              repr((got, reply)))
        check(r.config_set("maxmemory", "0") and r.exists("x") == 0, "the aborted transaction wrote nothing")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def lru(build):
    """allkeys-lru at 40 MB: 160 MB of writes all succeed, the heap stays
    near 40 MB, and 2000 keys read throughout survive while 2000 keys
    written with them and never read mostly go."""
    limit = 40 * 10**6
    port, proc = start_hydra(build, "--maxmemory", str(limit), "--maxmemory-policy", "allkeys-lru")
    try:
        r = redis.Redis(port=port, socket_timeout=30)
        value = b"v" * 1000
        hot, cold = [f"hot{i}" for i in range(2000)], [f"cold{i}" for i in range(2000)]
        p = r.pipeline(transaction=False)
        for k in hot + cold:
            p.set(k, value)
        p.execute()
        time.sleep(0.05)  # the access clock moves on (4 ms resolution)
        peak, failed = 0, 0
        for batch in range(80):  # 80 x 2000 values of 1 kB: four times the bound
            p = r.pipeline(transaction=False)
            for i in range(2000):
                p.set(f"fill{batch}:{i}", value)
            failed += sum(1 for v in p.execute(raise_on_error=False) if v is not True)
            if batch % 4 == 0:  # the hot keys are read now and then
                p = r.pipeline(transaction=False)
                for k in hot:
                    p.get(k)
                p.execute()
                time.sleep(0.01)
            peak = max(peak, int(r.info("memory")["used_memory"]))
        info = {**r.info("memory"), **r.info("stats")}
        check(failed == 0, f"allkeys-lru: 160000 SETs of 1 kB at --maxmemory 40 MB all succeed ({failed} failed)")
        check(peak < limit * 1.25, f"used_memory stays near the bound: peak {peak / 1e6:.1f} MB of {limit / 1e6:.0f} MB")
        check(info["maxmemory_policy"] == "allkeys-lru" and info["evicted_keys"] > 100000,
              f"INFO: maxmemory_policy allkeys-lru, evicted_keys {info['evicted_keys']}")
        hot_left = r.exists(*hot)
        cold_left = r.exists(*cold)
        check(hot_left >= 1800 and cold_left <= 600,
              f"keys read meanwhile survive ({hot_left} of 2000), keys never read mostly go ({cold_left} of 2000)")
        r.set("idle", "v")
        time.sleep(1.2)
        idle = r.object("idletime", "idle")
        r.get("idle")
        check(idle >= 1 and r.object("idletime", "idle") == 0, f"OBJECT IDLETIME: {idle} s after 1.2 s, 0 after a GET")
        check(r.config_set("maxmemory-policy", "noeviction") and r.config_set("maxmemory", "1"), "CONFIG SET noeviction")
        check(raw_set(port) == OOM, "then SET: Redis's OOM error byte for byte", repr(raw_set(port)))
        check(r.config_set("maxmemory-policy", "allkeys-lru") and r.set("again", "v"), "and back to allkeys-lru: SET evicts")
        check(r.config_get("maxmemory*")["maxmemory-policy"] == "allkeys-lru", "CONFIG GET maxmemory-policy")
        try:
            r.config_set("maxmemory-policy", "sometimes")
            bad = "accepted"
        except redis.exceptions.ResponseError as e:
            bad = str(e)
        check(bad.startswith("CONFIG SET failed (possibly related to argument 'maxmemory-policy') - argument(s) must be"),
              "CONFIG SET of an unknown policy: Redis's error", bad)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def volatile_lru(build):
    """volatile-lru at 30 MB: only keys with a TTL are evicted; keys without
    one all stay while 60 MB of keys with a TTL are written."""
    port, proc = start_hydra(build, "--maxmemory", str(30 * 10**6), "--maxmemory-policy", "volatile-lru")
    try:
        r = redis.Redis(port=port, socket_timeout=30)
        value = b"v" * 1000
        p = r.pipeline(transaction=False)
        for i in range(5000):
            p.set(f"keep{i}", value)
        p.execute()
        failed = 0
        for batch in range(30):
            p = r.pipeline(transaction=False)
            for i in range(2000):
                p.set(f"ttl{batch}:{i}", value, ex=1000)
            failed += sum(1 for v in p.execute(raise_on_error=False) if v is not True)
        kept = r.exists(*[f"keep{i}" for i in range(5000)])
        evicted = r.info("stats")["evicted_keys"]
        check(failed == 0 and kept == 5000 and evicted > 20000,
              f"volatile-lru: 60000 SETs with a TTL succeed ({failed} failed), all 5000 keys without one stay "
              f"({kept}), {evicted} keys with a TTL evicted")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    maxmemory(build)
    lru(build)
    volatile_lru(build)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
