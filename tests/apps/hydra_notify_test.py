#!/usr/bin/python3
"""Hydra's keyspace notifications and MONITOR (tools/apps/kvstore/notify.cpp,
monitor.cpp), next to redis-server 7.0:

  hydra_notify_test.py BUILD_DIR
      1. CONFIG SET/GET notify-keyspace-events: the same flag strings back,
         the same error for a bad class character;
      2. with redis-py, one PSUBSCRIBE * subscriber per thread (4 shards)
         and channel subscribers: a script of commands on keys of every
         shard, each awaited, gives every subscriber the same messages in
         the same order as redis-server's (set, new, expire, del, lpush,
         rpop, hset, hincrby, sadd, srem, zadd, zincr, rename_from/_to,
         copy_to, sinterstore, incrby, append, expired on lookup...);
         classes masked as Redis masks them;
      3. expired events from the active expiry (no lookup), evicted events;
      4. MONITOR: the lines of commands from several connections (over the
         threads) in Redis's format, escaping, redaction of AUTH and HELLO
         AUTH, MULTI/EXEC order, admin and refused commands left out, the
         same as redis-server's but for times and ports; RESET then
         MONITOR in one write shows each command once; a MONITOR line over
         --pubsub-output-limit (SET of 64 MiB) is never built: the monitors
         are closed and Hydra's peak memory stays bounded;
      5. PEXPIRE k 1 (pipelined, every shard) always sends expire, never del;
      6. (hydra_notify_order.py) on 4 shards, then on 2 threads: a write
         that wakes a blocked client (BLPOP, BLMPOP, BLMOVE, BRPOPLPUSH,
         BZPOPMIN, BZMPOP...) sends its events before the served pop's;
         LMOVE/RPOPLPUSH the push's before the pop's; keymiss on every read
         of a missing key; SETBIT's event only for a change: each case's
         events and replies as redis-server's.
  hydra_notify_test.py rack HOST0:PORT HOST1:PORT
      On a running 2-host rack: CONFIG SET via host 0 reaches host 1;
      subscribers on both hosts get every event of writes via both hosts
      (keys on every shard), each key's events in command order; MONITOR via
      a host sees that host's commands and not the other's (hydra_test.py's
      rack part runs it inside host 0's namespace).
Exits 77 (skip) without redis-py or redis-server.
"""
import os
import re
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hydra_pair import check, finish, host_ports, keys_on_distinct_shards, pair, redis  # noqa: E402
import hydra_notify_order as order  # noqa: E402
from resp_client import encode  # noqa: E402

SHARDS = 4


def drain(pubsubs, quiet=0.5, limit=10.0):
    """Every message each subscriber gets until none came for `quiet` s."""
    got = [[] for _ in pubsubs]
    end = time.time() + limit
    last = time.time()
    while time.time() < end and time.time() - last < quiet:
        for i, ps in enumerate(pubsubs):
            m = ps.get_message(timeout=0.02)
            while m is not None:
                if m["type"] in ("message", "pmessage"):
                    got[i].append((m["channel"].decode(), m["data"].decode()))
                    last = time.time()
                m = ps.get_message(timeout=0)
    return got


def subscribers(port, n, patterns=("*",), channels=()):
    out = []
    for _ in range(n):
        ps = redis.Redis(port=port, socket_timeout=20).pubsub()
        if patterns:
            ps.psubscribe(*patterns)
        if channels:
            ps.subscribe(*channels)
        for _ in range(len(patterns) + len(channels)):  # the (p)subscribe notices
            ps.get_message(timeout=5)
        out.append(ps)
    return out


def config(ports):
    rs = [redis.Redis(port=p, socket_timeout=20, decode_responses=True) for p in ports]
    for flags in ["KEA", "gKE", "$lshzxeKE", "KA", "EA", "Kx", "En", "KEm", "AKEnm", "ltE", ""]:
        got = []
        for r in rs:
            r.config_set("notify-keyspace-events", flags)
            got.append(r.config_get("notify-keyspace-events")["notify-keyspace-events"])
        check(got[0] == got[1], f"CONFIG SET notify-keyspace-events {flags!r}: CONFIG GET as redis-server",
              f"hydra {got[0]!r}, redis-server {got[1]!r}")
    errs = []
    for r in rs:
        try:
            r.config_set("notify-keyspace-events", "KEq")
            errs.append("no error")
        except redis.exceptions.ResponseError as e:
            errs.append(str(e))
    check(errs[0] == errs[1], "a bad class character: Redis's error", f"hydra {errs[0]!r}, redis-server {errs[1]!r}")


def script(k):
    """Commands on keys of every shard (k: one key per shard, a..d)."""
    a, b, c, d = k
    return [
        ["set", a, "1"], ["set", a, "2"], ["set", b, "x", "EX", "100"], ["incr", c], ["incrby", c, "5"],
        ["append", c, "7"], ["setrange", c, "0", "9"], ["expire", a, "100"], ["persist", a], ["del", a],
        ["lpush", d, "x", "y"], ["rpush", d, "z"], ["lpop", d], ["rpop", d, "2"],
        ["hset", a, "f", "1", "g", "2"], ["hincrby", a, "f", "3"], ["hdel", a, "f", "g"],
        ["sadd", b + "s", "m", "n"], ["srem", b + "s", "zz"], ["srem", b + "s", "m"], ["spop", b + "s"],
        ["zadd", c + "z", "1", "m", "2", "n"], ["zadd", c + "z", "1", "m"], ["zincrby", c + "z", "2", "m"],
        ["zrem", c + "z", "m", "n"], ["set", d, "v"], ["rename", d, a], ["copy", a, b + "c"],
        ["copy", a, b + "c", "REPLACE"], ["set", d, "v2"], ["rename", d, b + "c"],
        ["del", c], ["sadd", c, "q"], ["sadd", c, "q", "r"], ["sadd", d, "r", "s"],
        ["sinterstore", b, c, d], ["getdel", b + "c"], ["set", b, "w"], ["getex", b, "PX", "50000"],
        ["getex", b, "PERSIST"], ["pexpire", b, "1"], ["sleep"], ["get", b], ["expire", a, "0"],
        ["mset", a, "1"], ["getset", a, "2"], ["incrbyfloat", a, "1.5"], ["setbit", d + "b", "3", "1"],
        ["linsert", "nolist", "before", "x", "y"], ["lpushx", "nolist", "x"],
    ]


def run_script(r, cmds):
    for cmd in cmds:
        if cmd == ["sleep"]:
            time.sleep(0.05)
            continue
        try:
            r.execute_command(*cmd)
        except redis.exceptions.ResponseError as e:
            print(f"  ({' '.join(cmd)}: {e})")


def events(ports):
    keys = keys_on_distinct_shards("nk", SHARDS)
    rs = [redis.Redis(port=p, socket_timeout=20) for p in ports]
    for flags in ["KEA", "AKEn", "Kl", "E$", "Kgx"]:
        got = []
        for r, p in zip(rs, ports):
            r.flushall()
            r.config_set("notify-keyspace-events", flags)
            subs = subscribers(p, SHARDS)  # dealt round robin: one per thread on hydra
            run_script(r, script(keys))
            got.append(drain(subs))
            for s in subs:
                s.close()
        hydra, real = got
        check(len(real[0]) >= 4, f"{flags}: redis-server sent events (the test sees something)", len(real[0]))
        for i, g in enumerate(hydra):
            check(g == real[0], f"{flags}: subscriber {i}: the events of redis-server, in its order",
                  f"\n  hydra        {g}\n  redis-server {real[0]}")
    # Channel subscriptions (not patterns): a key's keyspace channel, an event's channel.
    got = []
    for r, p in zip(rs, ports):
        r.flushall()
        r.config_set("notify-keyspace-events", "KEA")
        subs = subscribers(p, 2, patterns=(), channels=(f"__keyspace@0__:{keys[1]}", "__keyevent@0__:del"))
        run_script(r, script(keys))
        got.append(drain(subs))
        for s in subs:
            s.close()
    check(got[0][0] == got[1][0] and got[0][1] == got[1][0] and got[1][0],
          "SUBSCRIBE to a keyspace and a keyevent channel: redis-server's messages",
          f"\n  hydra        {got[0]}\n  redis-server {got[1][0]}")
    for r in rs:
        r.config_set("notify-keyspace-events", "")


def relative_expire(ports):
    """PEXPIRE k 1 on an existing key: always "expire", never "del" (Redis
    compares the deadline with the time it computed it from), however long
    the command waits for its shard (pipelined, keys on every shard). Hydra
    only: redis-server 7.0 reads the clock a second time for the comparison
    and so may itself send del now and then (7.2 compares with the command's
    time snapshot, as Hydra does)."""
    keys = [f"px{i}" for i in range(400)]
    for name, p in zip(["hydra"], ports):
        r = redis.Redis(port=p, socket_timeout=20)
        r.flushall()
        r.config_set("notify-keyspace-events", "Eg")
        subs = subscribers(p, 1)
        pipe = r.pipeline(transaction=False)
        for k in keys:
            pipe.set(k, "v")
        pipe.execute()
        for k in keys:
            pipe.pexpire(k, 1)
        pipe.execute()
        got = drain(subs)[0]
        dels = [k for ch, k in got if ch.endswith(":del")]
        check(not dels and len(got) == len(keys), f"{name}: PEXPIRE k 1 on {len(keys)} keys: every event is expire",
              f"{len(got)} events, del for {dels[:10]}")
        subs[0].close()
        r.config_set("notify-keyspace-events", "")


def expiry_and_eviction(ports):
    for name, p in zip(["hydra", "redis-server"], ports):
        r = redis.Redis(port=p, socket_timeout=20)
        r.flushall()
        r.config_set("notify-keyspace-events", "Ex")
        subs = subscribers(p, 1)
        r.psetex("gone", 100, "1")  # nobody reads it: the active expiry must find it
        got = drain(subs, quiet=1.5)[0]
        check(got == [("__keyevent@0__:expired", "gone")], f"{name}: an expired event from the active expiry", got)
        subs[0].close()
        r.config_set("notify-keyspace-events", "Ee")
        r.config_set("maxmemory-policy", "allkeys-lru")
        subs = subscribers(p, 1)
        r.set("foo", "bar")
        r.config_set("maxmemory", 1)
        got = drain(subs, quiet=1.5)[0]
        r.config_set("maxmemory", 0)
        r.config_set("maxmemory-policy", "noeviction")
        check(("__keyevent@0__:evicted", "foo") in got, f"{name}: an evicted event", got)
        subs[0].close()
        r.config_set("notify-keyspace-events", "")


def read_until(sock, buf, marker, limit=10):
    """buf and what sock sends until marker is in it, then what comes in 0.2 s more."""
    sock.settimeout(0.5)
    end = time.time() + limit
    while time.time() < end and marker not in buf:
        try:
            buf += sock.recv(65536)
        except socket.timeout:
            pass
    time.sleep(0.2)
    try:
        buf += sock.recv(65536)
    except socket.timeout:
        pass
    return buf


LINE = re.compile(rb"^\+(\d+)\.(\d{6}) \[0 127\.0\.0\.1:(\d+)\] (.*)$")


def monitor_lines(port, conns=4):
    """MONITOR's lines for a fixed set of commands from `conns` connections,
    as (client number, command text); and whether time and port were right."""
    mon = socket.create_connection(("127.0.0.1", port), timeout=10)
    mon.sendall(encode("MONITOR"))
    buf = b""
    while b"\r\n" not in buf:
        buf += mon.recv(4096)
    ok_reply, buf = buf.split(b"\r\n", 1)
    cs = [redis.Redis(port=port, socket_timeout=20, single_connection_client=True) for _ in range(conns)]
    for c in cs:
        c.ping()  # connected (its PING is shown too)
    ports = {c.connection._sock.getsockname()[1]: i for i, c in enumerate(cs)}
    start = time.time()
    sent = 0
    for i, c in enumerate(cs):
        c.set(f"k{i}", f"v\n\"{i}\"\x01 \\")
        c.get(f"k{i}")
        sent += 2
    c0 = cs[0]
    for cmd in (["auth", "nopass"], ["auth", "default", "pw"], ["hello", "2", "AUTH", "default", "pw", "SETNAME", "n"], ["hello", "2", "SETNAME", "auth", "AUTH", "default", "secret1"],
                ["hello", "3", "AUTH", "x"],
                ["config", "get", "maxmemory"], ["client", "list"], ["client", "id"], ["nosuchcommand", "x"],
                ["get"], ["echo", "é"]):
        try:
            c0.execute_command(*cmd)
        except redis.exceptions.ResponseError:
            pass
    p = c0.pipeline(transaction=True)
    p.set("t", "1").incr("t")
    p.execute()
    try:  # a refused command inside MULTI: the EXEC fails
        c0.execute_command("multi")
        try:
            c0.execute_command("nosuchcommand")
        except redis.exceptions.ResponseError:
            pass
        c0.execute_command("exec")
    except redis.exceptions.ResponseError:
        pass
    c0.execute_command("multi")
    c0.execute_command("set", "u", "1")
    c0.execute_command("discard")
    cs[1].set("last", "1")
    buf = read_until(mon, buf, b'"last"')
    mon.close()
    for c in cs:
        c.close()
    out, bad = [], []
    for raw in buf.split(b"\r\n"):
        if not raw:
            continue
        m = LINE.match(raw)
        if not m:
            out.append((None, raw))
            bad.append(f"not Redis's form: {raw!r}")
            continue
        t = int(m.group(1)) + int(m.group(2)) / 1e6
        if not start - 5 <= t <= time.time() + 5:  # a loaded machine: a few seconds' slack
            bad.append(f"time {t:.6f} not within [{start:.3f}, now]: {raw!r}")
        out.append((ports.get(int(m.group(3)), "other"), m.group(4)))
    return ok_reply, out, bad


def monitor(ports):
    (h_ok, hydra, h_bad), (r_ok, real, r_bad) = monitor_lines(ports[0]), monitor_lines(ports[1])
    check(h_ok == r_ok == b"+OK", "MONITOR answers +OK", f"{h_ok!r} {r_ok!r}")
    check(not h_bad and not r_bad, "every line has Redis's form, a current time, a client's port",
          "".join(f"\n  hydra: {b}" for b in h_bad) + "".join(f"\n  redis-server: {b}" for b in r_bad))
    # redis-py's connection setup (CLIENT SETINFO on newer ones) may differ: compare from the first PING.
    check(len(real) > 20, "redis-server's monitor saw the commands", len(real))
    check(hydra == real, "MONITOR's lines as redis-server's (escaping, redaction, MULTI/EXEC, admin left out)",
          "\n" + "\n".join(f"  {a!r:60} {b!r}" for a, b in zip(hydra + [None] * len(real), real + [None] * len(hydra))
                           if a != b))


def pid_of(port):
    """The pid of the process started with --port PORT (Hydra)."""
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--port" in argv and argv[argv.index(b"--port") + 1:][:1] == [str(port).encode()]:
            return int(d)
    return None


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def read_monitor_line(sock):
    buf = b""
    while b"\r\n" not in buf:
        more = sock.recv(4096)
        if not more:
            break
        buf += more
    return buf


def monitor_huge(port):
    """Two monitors (on two threads) and SET big <64 MiB of NULs>: its line
    would be 256 MiB escaped, over --pubsub-output-limit (32 MiB): never
    built, the monitors disconnected as Redis's limit would; Hydra's peak
    memory grows by far less than 4 copies of the line."""
    pid = pid_of(port)
    mons = []
    for _ in range(2):
        m = socket.create_connection(("127.0.0.1", port), timeout=20)
        m.sendall(encode("MONITOR"))
        read_monitor_line(m)
        mons.append(m)
    before = status_kb(pid, "VmRSS")
    r = redis.Redis(port=port, socket_timeout=60)
    check(r.set("big", b"\0" * (64 << 20)), "SET big <64 MiB> with 2 monitors: OK")
    peak = status_kb(pid, "VmHWM")
    growth = (peak - before) >> 10
    # The value's own copies take under 300 MB in a normal build and ~410 MB
    # under ASan (its redzones and quarantine); the lines built per monitor
    # took 1348 MB before the fix.
    check(growth < 700, "SET big <64 MiB> with 2 monitors: Hydra's peak memory grows < 700 MB", f"{growth} MB")
    closed = 0
    for m in mons:
        m.settimeout(5)
        try:
            while True:
                if not m.recv(1 << 20):
                    closed += 1
                    break
        except ConnectionResetError:
            closed += 1
        except socket.timeout:
            pass
        m.close()
    check(closed == 2, "a MONITOR line over --pubsub-output-limit: its monitors are disconnected", closed)
    r.delete("big")
    check(r.ping(), "Hydra answers after")


def monitor_reset(ports):
    """MONITOR, then RESET and MONITOR in one write: each command once."""
    got = []
    for p in ports:
        m = socket.create_connection(("127.0.0.1", p), timeout=10)
        m.sendall(encode("MONITOR"))
        read_monitor_line(m)
        m.sendall(encode("RESET") + encode("MONITOR"))
        buf = b""
        end = time.time() + 5
        while buf.count(b"\r\n") < 2 and time.time() < end:
            buf += m.recv(4096)
        r = redis.Redis(port=p, socket_timeout=10)
        r.set("after-reset", "1")
        r.set("after-reset-last", "1")
        buf = read_until(m, buf, b'"after-reset-last"')
        m.close()
        got.append(buf.count(b'"after-reset" "1"'))
    check(got[0] == got[1] == 1, "RESET and MONITOR in one write: every command's line once (hydra, redis-server)", got)


def monitor_in_multi(ports):
    """MONITOR queued in MULTI: EXEC answers it with Redis's error, and the
    connection is no monitor afterwards (PING answers +PONG)."""
    got = []
    for p in ports:
        s = socket.create_connection(("127.0.0.1", p), timeout=10)
        s.sendall(encode("MULTI") + encode("MONITOR") + encode("EXEC") + encode("PING"))
        got.append(read_until(s, b"", b"+PONG\r\n"))
        s.close()
    check(got[0] == got[1] and b"-ERR MONITOR isn't allowed for DENY BLOCKING client" in got[0],
          "MULTI; MONITOR; EXEC: the error redis-server gives, then PING answered (hydra, redis-server)", got)


def rack(h0, h1):
    r0, r1 = (redis.Redis(host=h, port=p, socket_timeout=10, decode_responses=True) for h, p in (h0, h1))
    r0.config_set("notify-keyspace-events", "KEg$")
    check(r1.config_get("notify-keyspace-events") == {"notify-keyspace-events": "g$KE"},
          "CONFIG SET notify-keyspace-events via host 0 is in force on host 1", r1.config_get("notify-keyspace-events"))
    subs = []
    for host, port in (h0, h1, h0, h1):
        ps = redis.Redis(host=host, port=port, socket_timeout=10).pubsub()
        ps.psubscribe("__key*")
        ps.get_message(timeout=5)
        subs.append(ps)
    mon = socket.create_connection(h0, timeout=10)
    mon.sendall(encode("MONITOR"))
    time.sleep(0.2)
    keys = keys_on_distinct_shards("rk", SHARDS)
    want = {}
    for n, k in enumerate(keys):
        r = (r0, r1)[n % 2]  # half via each host
        r.set(k, "v")
        r.expire(k, 100)
        r.delete(k)
        want[k] = [(f"__keyspace@0__:{k}", e) for e in ("set", "expire", "del")]
    got = drain(subs, quiet=1.5)
    for i, g in enumerate(got):
        per_key = {k: [m for m in g if m[0] == f"__keyspace@0__:{k}"] for k in keys}
        check(per_key == want and len(g) == 2 * 3 * len(keys),
              f"rack subscriber {i} (host {i % 2}): every event of writes via both hosts, each key's in order",
              f"{len(g)} messages: {g}")
    mon.settimeout(1)
    seen = b""
    try:
        while True:
            more = mon.recv(65536)
            if not more:
                break
            seen += more
    except socket.timeout:
        pass
    mon.close()
    seen = seen.lower()  # redis-py sends SET
    via0 = [k for n, k in enumerate(keys) if n % 2 == 0]
    via1 = [k for n, k in enumerate(keys) if n % 2 == 1]
    check(all(f'"set" "{k}" "v"'.encode() in seen for k in via0) and
          not any(f'"set" "{k}" "v"'.encode() in seen for k in via1),
          "MONITOR via host 0 sees the commands sent via host 0 and not those via host 1", seen[:300])
    for ps in subs:
        ps.close()
    r0.config_set("notify-keyspace-events", "")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "rack":
        rack(*host_ports(sys.argv[2:4]))
        return finish()
    build = os.path.abspath(sys.argv[1])
    with pair(build, threads=SHARDS) as ports:
        config(ports)
        events(ports)
        relative_expire(ports)
        expiry_and_eviction(ports)
        monitor(ports)
        monitor_reset(ports)
        monitor_in_multi(ports)
        monitor_huge(ports[0])
        order.blocking(ports, SHARDS)
        order.moves(ports, SHARDS)
        order.keymiss(ports, SHARDS)
        order.setbit(ports)
    with pair(build, threads=2) as ports:  # the blocked client and the writer on the two threads
        order.blocking(ports, 2)
        order.moves(ports, 2)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
