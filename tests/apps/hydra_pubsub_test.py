#!/usr/bin/python3
"""Hydra's pub/sub and CLIENT commands (tools/apps/kvstore/pubsub.cpp,
clients.cpp):

  hydra_pubsub_test.py BUILD_DIR
      1. next to redis-server 7.0, byte for byte over raw sockets, RESP2 and
         RESP3 (push frames): SUBSCRIBE / PSUBSCRIBE / UNSUBSCRIBE /
         PUNSUBSCRIBE notices, messages, PING and refused commands in
         subscribed mode, PUBSUB NUMSUB / NUMPAT / CHANNELS, CLIENT's
         replies and errors, CLIENT REPLY OFF / SKIP / ON;
      2. across shards with redis-py: 8 subscribers (dealt over 4 threads),
         channels homed on every shard and a pattern, 4 publishers: every
         PUBLISH counts its receivers, every subscriber gets each of its
         messages once, in each publisher's order;
      3. a subscriber that never reads is disconnected at
         --pubsub-output-limit while a reading one gets every message;
         CLIENT KILL ID; --maxclients refuses with Redis's error.
  hydra_pubsub_test.py rack HOST0:PORT HOST1:PORT
      Subscribers on host 0 and host 1 of a running rack, publishers on
      both: every message reaches every subscriber (hydra_test.py's rack part
      runs it inside host 0's namespace).
Exits 77 (skip) without redis-py or redis-server.
"""
import os
import re
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hydra_pair import check, finish, host_ports, keys_on_distinct_shards, pair, redis  # noqa: E402
from hydra_proc import free_port  # noqa: E402
from resp_client import encode  # noqa: E402


class Raw:
    """A socket that sends commands and reads whole RESP2/RESP3 replies (bytes)."""

    def __init__(self, port, host="127.0.0.1", timeout=10):
        self.s = socket.create_connection((host, port), timeout=timeout)
        self.buf = bytearray()

    def send(self, *args):
        self.s.sendall(encode(*args))

    def _need(self, n):
        while len(self.buf) < n:
            more = self.s.recv(65536)
            if not more:
                raise EOFError("server closed the connection")
            self.buf.extend(more)

    def _end(self, at):
        while True:
            i = self.buf.find(b"\r\n", at)
            if i >= 0:
                break
            self._need(len(self.buf) + 1)
        kind, head = self.buf[at:at + 1], self.buf[at + 1:i]
        at = i + 2
        if kind in (b"$", b"=") and int(head) >= 0:
            self._need(at + int(head) + 2)
            return at + int(head) + 2
        if kind in (b"*", b"%", b"~", b">") and int(head) > 0:
            for _ in range(int(head) * (2 if kind == b"%" else 1)):
                at = self._end(at)
        return at

    def read(self):
        n = self._end(0)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def call(self, *args, replies=1):
        self.send(*args)
        return b"".join(self.read() for _ in range(replies))

    def close(self):
        self.s.close()


def masked(b):
    """What differs by nature between two servers: HELLO's version and id, client ids."""
    b = re.sub(rb"\$7\r\nversion\r\n\$\d+\r\n[0-9.]+\r\n", b"<version>", b)
    return re.sub(rb"\$2\r\nid\r\n:\d+\r\n", b"<id>", b)


def compare(ports, what, script):
    """Runs script(server_index, port) -> list of (label, bytes) on both servers."""
    got = [script(i, p) for i, p in enumerate(ports)]
    for (label, h), (_, r) in zip(got[0], got[1]):
        check(masked(h) == masked(r), f"{what}: {label}: byte for byte as redis-server", f"hydra {h!r}, redis-server {r!r}")


def protocol_script(resp3):
    def run(_, port):
        out = []
        s, p = Raw(port), Raw(port)
        if resp3:
            out.append(("HELLO 3", s.call("HELLO", "3")))
        out.append(("SUBSCRIBE a b a", s.call("SUBSCRIBE", "a", "b", "a", replies=3)))
        out.append(("PSUBSCRIBE x* y?", s.call("PSUBSCRIBE", "x*", "y?", replies=2)))
        out.append(("PING", s.call("PING")))
        out.append(("PING hi", s.call("PING", "hi")))
        out.append(("GET k while subscribed", s.call("GET", "k")))
        out.append(("CLIENT LIST while subscribed", s.call("ECHO", "e") if resp3 else s.call("CLIENT", "LIST")))
        out.append(("NOSUCHCMD while subscribed", s.call("NOSUCHCMD")))
        out.append(("SUBSCRIBE (no channel)", s.call("SUBSCRIBE")))
        out.append(("PUBLISH a m1", p.call("PUBLISH", "a", "m1")))
        out.append(("PUBLISH xz m2 (pattern)", p.call("PUBLISH", "xz", "m2")))
        out.append(("PUBLISH b m3", p.call("PUBLISH", "b", "m3")))
        out.append(("PUBLISH nobody", p.call("PUBLISH", "nobody", "m")))
        out.append(("message a", s.read()))
        out.append(("pmessage x* xz", s.read()))
        out.append(("message b", s.read()))
        out.append(("PUBSUB NUMSUB a b nobody", p.call("PUBSUB", "NUMSUB", "a", "b", "nobody")))
        out.append(("PUBSUB NUMSUB", p.call("PUBSUB", "NUMSUB")))
        out.append(("PUBSUB NUMPAT", p.call("PUBSUB", "NUMPAT")))
        out.append(("PUBSUB CHANNELS a*", p.call("PUBSUB", "CHANNELS", "a*")))
        out.append(("PUBSUB CHANNELS (2 of them)", p.call("PUBSUB", "CHANNELS")[:4]))
        out.append(("PUBSUB NOSUCH", p.call("PUBSUB", "NOSUCH")))
        out.append(("PUBLISH a (arity)", p.call("PUBLISH", "a")))
        out.append(("UNSUBSCRIBE a", s.call("UNSUBSCRIBE", "a")))
        out.append(("UNSUBSCRIBE (the rest)", s.call("UNSUBSCRIBE")))
        out.append(("PUNSUBSCRIBE x*", s.call("PUNSUBSCRIBE", "x*")))
        out.append(("PUNSUBSCRIBE (the rest)", s.call("PUNSUBSCRIBE")))
        out.append(("UNSUBSCRIBE (none left)", s.call("UNSUBSCRIBE")))
        out.append(("PUNSUBSCRIBE (none left)", s.call("PUNSUBSCRIBE")))
        out.append(("PING after unsubscribing", s.call("PING")))
        out.append(("SUBSCRIBE a again", s.call("SUBSCRIBE", "a")))
        out.append(("RESET (unsubscribes, back to RESP2)", s.call("RESET")))
        out.append(("PUBLISH a after RESET", p.call("PUBLISH", "a", "m5")))
        out.append(("GET k after RESET", s.call("GET", "k")))
        out.append(("PUBLISH a after unsubscribing", p.call("PUBLISH", "a", "m4")))
        s.close()
        p.close()
        return out
    return run


def client_script(_, port):
    out = []
    c, other = Raw(port), Raw(port)
    for args in [("CLIENT", "GETNAME"), ("CLIENT", "SETNAME", "a b"), ("CLIENT", "SETNAME", "myname"),
                 ("CLIENT", "GETNAME"), ("CLIENT", "SETNAME", ""), ("CLIENT", "GETNAME"), ("CLIENT", "KILL"),
                 ("CLIENT", "KILL", "ID", "10", "wrong_arg"), ("CLIENT", "KILL", "ID", "str"),
                 ("CLIENT", "KILL", "ID", "0"), ("CLIENT", "KILL", "TYPE", "wrong_type"),
                 ("CLIENT", "KILL", "USER", "wrong_user"), ("CLIENT", "KILL", "SKIPME", "maybe"),
                 ("CLIENT", "KILL", "1.2.3.4:5"), ("CLIENT", "KILL", "ID", "999999"), ("CLIENT", "NOSUCH"),
                 ("CLIENT", "LIST", "TYPE", "nosuch"), ("CLIENT", "LIST", "ID", "x"), ("CLIENT", "NO-EVICT", "on"),
                 ("CLIENT", "NO-EVICT", "maybe"), ("CLIENT", "REPLY", "maybe"), ("CLIENT", "GETREDIR"),
                 ("CLIENT", "UNBLOCK", "999999"), ("HELLO", "2", "SETNAME", "bad name")]:
        out.append((" ".join(args), c.call(*args)))
    # CLIENT REPLY: OFF silences until ON; SKIP the next reply only.
    c.send("CLIENT", "REPLY", "OFF")
    c.send("PING", "p1")
    c.send("CLIENT", "REPLY", "ON")
    out.append(("CLIENT REPLY OFF, PING, ON", c.read()))
    c.send("CLIENT", "REPLY", "SKIP")
    c.send("PING", "p2")
    c.send("PING", "p3")
    out.append(("CLIENT REPLY SKIP, PING, PING", c.read()))
    # Another connection killed by id: 1, and its socket closes.
    oid = int(other.call("CLIENT", "ID")[1:-2])
    out.append(("CLIENT KILL ID other", c.call("CLIENT", "KILL", "ID", str(oid))))
    try:
        other.call("PING")
        gone = b"still answering"
    except (EOFError, ConnectionResetError):
        gone = b"closed"
    out.append(("the killed connection", gone))
    fields = c.call("CLIENT", "INFO")
    out.append(("CLIENT INFO's field names", b" ".join(re.findall(rb"([a-z-]+)=", fields))))
    out.append(("CLIENT INFO's fixed fields", b" ".join(re.findall(rb"(?:flags|qbuf|obl|oll|omem|cmd|resp|multi|sub|psub)=\S+", fields))))
    c.close()
    other.close()
    return out


def cross_shard(port, threads):
    """Subscribers on every thread, channels homed on every shard, a pattern."""
    channels = keys_on_distinct_shards("chan", threads) + keys_on_distinct_shards("news", threads)
    subs = []
    for i in range(8):  # dealt round robin: two per thread
        ps = redis.Redis(port=port, socket_timeout=10).pubsub()
        mine = [ch for j, ch in enumerate(channels) if (i + j) % 2 == 0]
        ps.subscribe(*mine)
        if i % 4 == 0:
            ps.psubscribe("news*")
        want = len(mine) + (1 if i % 4 == 0 else 0)
        got = 0
        while got < want:
            m = ps.get_message(timeout=5)
            if m is None:
                break
            got += 1
        check(got == want, f"subscriber {i}: {want} (p)subscribe confirmations", f"got {got}")
        subs.append((ps, set(mine), i % 4 == 0))
    expect = {}
    for ch in channels:
        expect[ch] = sum(1 for _, mine, pat in subs if ch in mine) + sum(1 for _, _, pat in subs if pat and ch.startswith("news"))
    n_msgs = 50
    counts_ok = [True]

    def publisher(k):
        r = redis.Redis(port=port, socket_timeout=10)
        pipe = r.pipeline(transaction=False)
        sent = []
        for n in range(n_msgs):
            ch = channels[(n + k) % len(channels)]
            pipe.publish(ch, f"p{k}:{n}")
            sent.append(ch)
        for ch, got in zip(sent, pipe.execute()):
            if got != expect[ch]:
                counts_ok[0] = False
                print(f"  PUBLISH {ch}: {got}, want {expect[ch]}")
    pubs = [threading.Thread(target=publisher, args=(k,)) for k in range(4)]
    for t in pubs:
        t.start()
    for t in pubs:
        t.join()
    check(counts_ok[0], "4 publishers x 50 PUBLISH (pipelined): each answers its receivers across 4 shards")
    for i, (ps, mine, pat) in enumerate(subs):
        want = {}
        for k in range(4):
            for n in range(n_msgs):
                ch = channels[(n + k) % len(channels)]
                times = (1 if ch in mine else 0) + (1 if pat and ch.startswith("news") else 0)
                want.setdefault(k, []).extend([f"p{k}:{n}"] * times)
        got = {}
        total = sum(len(v) for v in want.values())
        seen = 0
        end = time.time() + 20
        while seen < total and time.time() < end:
            m = ps.get_message(timeout=1)
            if m and m["type"] in ("message", "pmessage"):
                d = m["data"].decode()
                got.setdefault(int(d[1:d.index(":")]), []).append(d)
                seen += 1
        extra = ps.get_message(timeout=0.2)
        check(got == want and extra is None,
              f"subscriber {i}: each of its {total} messages once, in each publisher's order",
              f"got {seen}, extra {extra!r}")
        ps.close()


def start_hydra(build, *flags):
    """A Hydra of 2 threads with `flags`, answering PING: (port, process)."""
    import subprocess
    port = free_port()
    proc = subprocess.Popen([os.path.join(build, "tools/apps/kvstore/hydra"), "--threads", "2", "--port", str(port),
                             "--seconds", "100", *flags], stdout=subprocess.DEVNULL)
    end = time.time() + 20
    while time.time() < end:
        try:
            redis.Redis(port=port).ping()
            break
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    return port, proc


def slow_subscriber(build):
    """--pubsub-output-limit 1 MiB: a subscriber that never reads is closed,
    a reading one gets all 12 MiB."""
    port, proc = start_hydra(build, "--pubsub-output-limit", "1048576", "--maxclients", "6")
    try:
        slow = socket.create_connection(("127.0.0.1", port))
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.sendall(encode("SUBSCRIBE", "firehose"))
        good = redis.Redis(port=port, socket_timeout=20).pubsub()
        good.subscribe("firehose")
        good.get_message(timeout=5)
        r = redis.Redis(port=port, socket_timeout=20)
        time.sleep(0.2)
        received = []

        def reader():
            while len(received) < 3000:
                m = good.get_message(timeout=10)
                if m is None:
                    return
                if m["type"] == "message":
                    received.append(int(m["data"][:8]))
        t = threading.Thread(target=reader)
        t.start()
        payload = "x" * 4088
        counts = []
        for n in range(3000):
            counts.append(r.publish("firehose", f"{n:08d}{payload}"))
        t.join(timeout=30)
        check(received == list(range(3000)), "the reading subscriber got all 3000 messages (12 MiB) in order",
              f"got {len(received)}")
        check(counts[0] == 2 and counts[-1] == 1, "PUBLISH counted 2 subscribers, then 1 once the slow one was closed",
              f"first {counts[0]}, last {counts[-1]}")
        subs = [l for l in r.execute_command("CLIENT", "LIST", "TYPE", "pubsub").decode().splitlines() if l]
        check(len(subs) == 1, "CLIENT LIST TYPE pubsub: only the reading subscriber is left", repr(subs))
        slow.settimeout(5)
        try:
            while slow.recv(1 << 20):
                pass
            closed = True  # EOF
        except ConnectionResetError:
            closed = True  # the abortive close: unsent messages dropped
        except socket.timeout:
            closed = False
        check(closed, "the slow subscriber's socket was closed by hydra")
        # --maxclients 6: r, good, and 4 more; the 7th is refused.
        check(proc.poll() is None, "hydra still running after the slow subscriber was closed", f"exit {proc.poll()}")
        extra = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        for e in extra:
            e.sendall(encode("PING"))
            e.recv(100)
        refused = socket.create_connection(("127.0.0.1", port))
        refused.settimeout(5)
        got = refused.recv(100)
        check(got == b"-ERR max number of clients reached\r\n", "--maxclients 6: the 7th connection gets Redis's error",
              repr(got))
        for e in extra + [refused, slow]:
            e.close()
        good.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def slow_readers(build):
    """--max-reply-memory 16 MiB, --max-output 4 MiB: 8 connections that
    pipeline GETs of a 1 MiB value and never read are disconnected, those
    owed the most first, until the host owes at most 16 MiB; a client that
    reads meanwhile gets every reply."""
    port, proc = start_hydra(build, "--max-output", str(4 << 20), "--max-reply-memory", str(16 << 20))
    try:
        r = redis.Redis(port=port, socket_timeout=20)
        big = os.urandom(1 << 20)
        r.set("big", big)
        slow = []
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", port))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(encode("GET", "big") * 64)
            slow.append(s)
        good = 0
        for _ in range(50):
            good += r.get("big") == big
            time.sleep(0.01)
        time.sleep(1)
        check(good == 50, "the reading client got all 50 replies of 1 MiB while 8 others never read", f"{good} of 50")
        owed = 0
        listed = r.execute_command("CLIENT", "LIST").decode().splitlines()
        for line in listed:
            f = dict(kv.split("=", 1) for kv in line.split(" ") if "=" in kv)
            owed += int(f["obl"]) + int(f["omem"])
        # A disconnected socket ends (EOF or reset) once the little the
        # kernel still holds for it is read; one still served would stream
        # its 64 MiB through a 4 KiB receive buffer (minutes, when Hydra's
        # threads sleep between writes): each is read for 3 s at most.
        gone = 0
        for s in slow:
            s.settimeout(0.5)
            end = time.time() + 3
            try:
                while time.time() < end:
                    if not s.recv(1 << 20):
                        gone += 1
                        break
            except ConnectionResetError:
                gone += 1
            except socket.timeout:
                pass
        # Every connection CLIENT LIST no longer shows must be closed; one it
        # still shows may be closed later, as reading the sockets below lets
        # Hydra execute more of their GETs.
        unlisted = 1 + 8 - len(listed)
        check(gone >= max(1, unlisted),
              f"--max-reply-memory: {gone} of the 8 non-reading connections were disconnected, "
              f"at least the {unlisted} CLIENT LIST no longer showed", f"{len(listed)} listed")
        check(owed <= (16 << 20), f"the host then owes {owed >> 10} KiB of replies, within the 16 MiB bound")
        check(proc.poll() is None, "hydra still running")
        for s in slow:
            s.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def rack(h0, h1):
    """Subscribers on both hosts, a publisher on each: every message everywhere."""
    subs = []
    for host, port in (h0, h1, h0, h1):
        ps = redis.Redis(host=host, port=port, socket_timeout=10).pubsub()
        ps.subscribe("rack-news")
        ps.psubscribe("rack-*")
        for _ in range(2):
            ps.get_message(timeout=5)
        subs.append(ps)
    counts = []
    for k, (host, port) in enumerate((h1, h0)):
        r = redis.Redis(host=host, port=port, socket_timeout=10)
        counts += [r.publish("rack-news", f"from{k}:{n}") for n in range(20)]
    check(all(c == 8 for c in counts), "PUBLISH via host 1 and via host 0: 8 receivers each (4 subscribers, 2 subscriptions)",
          repr(counts[:5]))
    for i, ps in enumerate(subs):
        got = []
        end = time.time() + 20
        while len(got) < 80 and time.time() < end:
            m = ps.get_message(timeout=1)
            if m and m["type"] in ("message", "pmessage"):
                got.append((m["type"], m["data"].decode()))
        want = [(t, f"from{k}:{n}") for k in range(2) for n in range(20) for t in ("message", "pmessage")]
        check(got == want, f"rack subscriber {i} (host {i % 2}): all 80 messages in order", f"got {len(got)}")
    r = redis.Redis(host=h0[0], port=h0[1])
    check(r.pubsub_numsub("rack-news") == [(b"rack-news", 4)] and r.pubsub_numpat() == 1,
          "PUBSUB NUMSUB / NUMPAT through host 0 count the subscribers of both hosts",
          f"{r.pubsub_numsub('rack-news')} {r.pubsub_numpat()}")
    for ps in subs:
        ps.close()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "rack":
        rack(*host_ports(sys.argv[2:4]))
        return finish()
    build = os.path.abspath(sys.argv[1])
    with pair(build, threads=4) as ports:
        compare(ports, "RESP2 pub/sub", protocol_script(False))
        compare(ports, "RESP3 pub/sub", protocol_script(True))
        compare(ports, "CLIENT", client_script)
        cross_shard(ports[0], 4)
    slow_subscriber(build)
    slow_readers(build)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
