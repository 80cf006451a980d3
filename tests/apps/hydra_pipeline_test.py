#!/usr/bin/python3
"""Pipelines over a large key space (tools/apps/kvstore/prefetch.cpp):

  hydra_pipeline_test.py BUILD_DIR

Before executing a connection's requests, Hydra scans the ones already in
its input and prefetches their keys' places in the own shard's map, once
the map has at least 32768 buckets. So the key space here is filled with
60,000 keys first, with 1 thread (every key in the own shard) and with 2
(half of them in the other thread's shard: skipped by the scan, they reach
that shard's trustee in batches, whose keys it prefetches in turn,
batch.cpp; 30,000 keys make a map of 42,043 buckets in each shard). Then
pipelines of mixed requests, each checked against a model of the key
space: GETs of keys present and absent, SETs new and overwriting, keys
short (inline in the string) and long (over 15 bytes, and over the scan's
256-byte limit), a request of one argument (PING), one of many (MSET,
MGET), an inline request between multibulk ones, a request cut in two
across writes, an empty `*0`; every reply must be the model's, in order.
"""
import os
import random
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resp_client import Conn, encode  # noqa: E402
from hydra_proc import free_port, local_hydra  # noqa: E402
from check_log import check, finish  # noqa: E402


def key(rng):
    kind = rng.random()
    if kind < 0.45:
        return f"key:{rng.randrange(80000):012d}"  # 16 bytes, as redis-benchmark's: outside the string
    if kind < 0.9:
        return f"k{rng.randrange(80000)}"  # short: inside the string
    return "long:" + "x" * rng.choice([40, 300]) + str(rng.randrange(50))  # 300: past the scan's limit


def pipeline_checks(addr, threads):
    rng = random.Random(1000 + threads)
    c = Conn(addr)
    model = {}
    check(c.call("FLUSHALL") == ("+", "OK"), f"{threads} thread(s): FLUSHALL")
    for i in range(0, 60000, 500):  # a map of more than 32768 buckets in every shard
        kvs = []
        for j in range(i, i + 500):
            k = f"key:{j:012d}" if j % 2 else f"k{j}"
            model[k] = b"v%d" % j
            kvs += [k, model[k]]
        c.send(encode("MSET", *kvs))
    replies = [c.reply() for _ in range(120)]
    check(all(r == ("+", "OK") for r in replies), f"{threads} thread(s): 60,000 keys stored")
    check(c.call("DBSIZE") == 60000, f"{threads} thread(s): DBSIZE 60000")

    bad = 0
    for rnd in range(300):
        reqs, expect = [], []
        for _ in range(rng.choice([2, 5, 16, 40])):
            r = rng.random()
            if r < 0.45:
                k = key(rng)
                reqs.append(encode("GET", k))
                expect.append(model.get(k))
            elif r < 0.85:
                k, v = key(rng), b"s%d" % rng.randrange(10 ** 9)
                reqs.append(encode("SET", k, v))
                model[k] = v
                expect.append(("+", "OK"))
            elif r < 0.9:
                reqs.append(encode("PING"))
                expect.append(("+", "PONG"))
            elif r < 0.94:
                ks = [key(rng) for _ in range(3)]
                reqs.append(encode("MGET", *ks))
                expect.append([model.get(k) for k in ks])
            elif r < 0.97:
                k1, k2 = key(rng), key(rng)
                reqs.append(encode("MSET", k1, "m1", k2, "m2"))
                model[k1], model[k2] = b"m1", b"m2"
                expect.append(("+", "OK"))
            elif r < 0.99:
                k = f"k{rng.randrange(80000)}"
                reqs.append(f"GET {k}\r\n".encode())  # inline
                expect.append(model.get(k))
            else:
                reqs.append(b"*0\r\n")  # empty: skipped, no reply
        data = b"".join(reqs)
        if rnd % 3 == 0:  # cut in two writes: the scan meets a partial request
            cut = rng.randrange(1, len(data))
            c.send(data[:cut])
            time.sleep(0.002)
            c.send(data[cut:])
        else:
            c.send(data)
        got = [c.reply() for _ in expect]
        if got != expect:
            bad += 1
            if bad <= 3:
                first = next(i for i in range(len(got)) if got[i] != expect[i])
                check(False, f"{threads} thread(s): pipeline {rnd}, reply {first}",
                      f"got {got[first]!r:.80} want {expect[first]!r:.80}")
    check(bad == 0, f"{threads} thread(s): 300 pipelines of mixed requests answered as the model says", f"{bad} differ")
    sample = rng.sample(sorted(model), 2000)
    c.send(b"".join(encode("GET", k) for k in sample))
    got = [c.reply() for _ in sample]
    check(got == [model[k] for k in sample], f"{threads} thread(s): 2000 keys read back after the pipelines")
    check(c.call("DBSIZE") == len(model), f"{threads} thread(s): DBSIZE {len(model)}")
    c.close()


def main():
    hydra = os.path.join(sys.argv[1], "tools", "apps", "kvstore", "hydra")
    for threads in (1, 2):
        port = free_port()
        with local_hydra(hydra, port, threads=threads, seconds=150):
            for _ in range(100):
                try:
                    if Conn(("127.0.0.1", port), timeout=2).call("PING") == ("+", "PONG"):
                        break
                except OSError:
                    time.sleep(0.1)
            try:
                pipeline_checks(("127.0.0.1", port), threads)
            except (OSError, EOFError, socket.timeout) as e:
                check(False, f"{threads} thread(s): the connection", repr(e))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
