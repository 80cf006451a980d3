"""Shared by the tests that drive Hydra and redis-server side by side with
redis-py (hydra_redis_py_test.py, hydra_txn_test.py, hydra_types_test.py):
the check log, starting both servers on loopback, comparing replies (decoded
by redis-py, or raw bytes over a socket), and Hydra's shard of a key.

Importing it exits 77 (skip) without redis-py; pair() exits 77 without
redis-server.
"""
import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time

try:
    import redis
except ImportError:
    print("SKIP: redis-py is not installed (tools/dev/install-deps installs python3-redis)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hydra_proc import free_port  # noqa: E402 (beside this file)
from resp_client import encode  # noqa: E402
from check_log import check, finish  # noqa: E402,F401 (the check log, re-exported to the pair tests)



def wait_up(port, proc, timeout=30):
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        try:
            if redis.Redis(port=port, socket_timeout=2).ping():
                return True
        except (redis.exceptions.AuthenticationError, redis.exceptions.ResponseError):  # NOAUTH: up
            return True
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    return False


def outcome(fn):
    """A call's value, or its error as ('error', text)."""
    try:
        return fn()
    except redis.exceptions.ResponseError as e:
        return ("error", str(e))


def both(servers, what, fn, normalize=lambda v: v):
    got = [normalize(outcome(lambda: fn(r))) for r in servers]
    check(got[0] == got[1], f"{what}: hydra as redis-server", f"hydra {got[0]!r}, redis-server {got[1]!r}")
    return got[0]


@contextlib.contextmanager
def pair(build, threads=2, hydra_args=(), redis_args=(), log=None):
    """Hydra (`threads` shards) and redis-server on loopback, each with its
    extra arguments: yields their ports; both stopped after. Checks that
    Hydra exits 0 on SIGTERM. Hydra's output goes to `log` if given."""
    hydra = os.path.join(build, "tools/apps/kvstore/hydra")
    server = shutil.which("redis-server")
    if not server:
        print("SKIP: redis-server is not installed (tools/dev/install-deps installs it)")
        sys.exit(77)
    hport = free_port()
    procs = [subprocess.Popen([hydra, "--threads", str(threads), "--port", str(hport), *hydra_args], stdout=log,
                              stderr=subprocess.STDOUT if log else None)]
    try:
        up = wait_up(hport, procs[0])
        rport = free_port()  # hydra holds hport by now
        procs.append(subprocess.Popen([server, "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                                       "--appendonly", "no", *redis_args], stdout=subprocess.DEVNULL))
        if not (up and wait_up(rport, procs[1])):
            print("FAIL: a server did not start")
            sys.exit(1)
        yield hport, rport
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
    check(procs[0].returncode == 0, "hydra exits 0 on SIGTERM", f"rc {procs[0].returncode}")


def clients(ports, **kw):
    return [redis.Redis(port=p, socket_timeout=20, **kw) for p in ports]


def raw_replies(port, commands):
    """Each command's raw reply bytes, one whole RESP2/RESP3 reply each."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    buf = bytearray()

    def need(n):  # until buf holds n bytes
        while len(buf) < n:
            more = s.recv(65536)
            if not more:
                raise EOFError("server closed the connection")
            buf.extend(more)

    def end_of(at):  # the offset just past the reply starting at `at`
        while True:
            i = buf.find(b"\r\n", at)
            if i >= 0:
                break
            need(len(buf) + 1)
        kind, head = buf[at:at + 1], buf[at + 1:i]
        at = i + 2
        if kind in (b"$", b"=") and int(head) >= 0:
            need(at + int(head) + 2)
            return at + int(head) + 2
        if kind in (b"*", b"%", b"~") and int(head) > 0:
            for _ in range(int(head) * (2 if kind == b"%" else 1)):
                at = end_of(at)
        return at

    out = []
    for cmd in commands:
        s.sendall(encode(*cmd))
        n = end_of(0)
        out.append(bytes(buf[:n]))
        del buf[:n]
    s.close()
    return out


def masked(reply):
    """HELLO's version and id, which differ by nature, masked."""
    reply = re.sub(rb"\$7\r\nversion\r\n\$\d+\r\n[0-9.]+\r\n", b"$7\r\nversion\r\n<v>\r\n", reply)
    return re.sub(rb"\$2\r\nid\r\n:\d+\r\n", b"$2\r\nid\r\n<id>\r\n", reply)


def raw_both(ports, commands, what, normalize=lambda r: r):
    """Sends `commands` on one connection to each server; every reply must be
    byte for byte the same (after masked and `normalize`)."""
    got = [[normalize(masked(r)) for r in raw_replies(p, commands)] for p in ports]
    for cmd, h, r in zip(commands, got[0], got[1]):
        check(h == r, f"{what}: raw {' '.join(map(str, cmd))}: byte for byte as redis-server",
              f"hydra {h!r}, redis-server {r!r}")
    return got[0]


def shard_of(key, shards):
    """Hydra's shard of `key` (shard.hpp: FNV-1a, a murmur finalizer, mod)."""
    h = 14695981039346656037
    for c in key.encode() if isinstance(key, str) else key:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    h ^= h >> 33
    h = (h * 0xff51afd7ed558ccd) & 0xFFFFFFFFFFFFFFFF
    h ^= h >> 33
    return h % shards


def keys_on_distinct_shards(prefix, shards):
    """One key per shard: prefix0.., each on a different shard."""
    found = {}
    i = 0
    while len(found) < shards:
        k = f"{prefix}{i}"
        found.setdefault(shard_of(k, shards), k)
        i += 1
    return [found[s] for s in range(shards)]


def host_ports(args):
    """HOST:PORT arguments (a rack's hosts) as (host, port) pairs."""
    return [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in args)]
