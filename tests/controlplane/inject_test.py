#!/usr/bin/env python3
"""Issue 18, finding 2: an attacker on the path between two gossamerds, who
sees and can write the bytes of their mesh connection (here a TCP relay the
connection goes through: host 1's control address is the relay) but does
not hold the rack secret.

- injection: once the mesh is up, the relay writes a well-formed Prepare and
  then a Start into the stream, both ways (each as from the other host: a run
  of /bin/sh that leaves a marker file). Before the message tags both hosts
  ran it. Now the receiver refuses the first injected message, logs and
  counts it (gossamer_controlplane_protocol_errors_total), closes the link,
  and nothing runs; the daemons make a new connection and the rack works.
- replay: during a real run, the relay sends host 1's output message to host
  0 a second time. Before, gossamerctl printed the line twice; now host 0
  refuses the copy (its tags are for an earlier message number) the same way.

usage: inject_test.py GOSSAMERD GOSSAMERCTL
"""
import glob
import hashlib
import os
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.argv += [""] * (4 - len(sys.argv))  # cp_harness reads GOSSAMERD GOSSAMERCTL BULK_PEER
import controlplane_test as cp  # noqa: E402  (the rack, the codec, the checks)

check = cp.check
REFUSED = "failed its header tag"  # link.hpp, what a receiver logs


class Relay(cp.Proxy):
    """Listens on PORT and forwards every connection to port TO. For each
    connection it keeps the chunks it forwarded, per direction ('d2a':
    dialer to acceptor, 'a2d'), and writes what the test queues for a
    direction right after a chunk it forwarded in that direction: between
    two messages (the daemons write each message at once, and on loopback a
    small one arrives in one piece)."""

    class Conn:
        def __init__(self):
            self.chunks = {"d2a": [], "a2d": []}
            self.queue = {"d2a": [], "a2d": []}
            self.lock = threading.Lock()

        def mesh(self):
            """A mesh connection: it opened with a Hello (not a BulkHello)."""
            with self.lock:
                first = self.chunks["d2a"][:1]
            return bool(first) and len(first[0]) >= 8 and struct.unpack("<IHH", first[0][:8])[1] == cp.HELLO

        def inject(self, direction, data):
            with self.lock:
                self.queue[direction].append(data)

        def find(self, direction, needle):
            with self.lock:
                return next((c for c in self.chunks[direction] if needle in c), None)

        def tap(self, direction):
            """Records a chunk forwarded in DIRECTION; returns what to write after it."""
            def after(chunk):
                with self.lock:
                    self.chunks[direction].append(chunk)
                    todo, self.queue[direction] = self.queue[direction], []
                return b"".join(todo)
            return after

    def __init__(self, port, to):
        self.conns = []
        super().__init__(port, to)

    def forward(self, c, u):
        conn = Relay.Conn()
        self.conns.append(conn)
        for a, b, d in ((c, u, "d2a"), (u, c, "a2d")):
            threading.Thread(target=self.pump, args=(a, b, conn.tap(d)), daemon=True).start()

    def mesh(self):
        """The newest mesh connection, or None."""
        return next((c for c in reversed(self.conns) if c.mesh()), None)


def prepare(run, origin, path, args, cwd="/"):
    """A Prepare body (proto.hpp): run, origin, path, sha256, args, cwd, threads."""
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest().encode()
    body = cp.pstr(run) + struct.pack("<I", origin) + cp.pstr(path.encode()) + cp.pstr(sha)
    body += struct.pack("<I", len(args)) + b"".join(cp.pstr(a.encode()) for a in args)
    return body + cp.pstr(cwd.encode()) + struct.pack("<I", 0)


def errors(rack, i):
    return rack_metric(rack, i, "gossamer_controlplane_protocol_errors_total")


def rack_metric(rack, i, name):
    m = cp.scrape(rack, i)
    return next((v for k, v in m.items() if k.startswith(name)), None)


def wait_for(cond, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def main():
    d = tempfile.mkdtemp(prefix="gossamer-inject-")
    rack = cp.Rack(2, d)
    # Host 1's control address, which host 0 dials, is the relay; host 1
    # listens on its own port behind it.
    relay = cp.start_behind(rack, Relay)
    if not check(rack.wait_up(0) and rack.wait_up(1) and relay.mesh() is not None,
                 "a 2-host rack whose mesh goes through the relay is up"):
        return

    # ---- injection: Prepare + Start, both ways, as from the other host ------------------
    marker = os.path.join(d, "ran")
    args = ["-c", 'touch "$0.${GOSSAMER_CONFIG##*/}"', marker]
    run = b"feedfacecafe0001"
    mesh = relay.mesh()
    before = [errors(rack, i) or 0 for i in range(2)]
    # Old-style messages (the protocol without tags): all this attacker can write.
    mesh.inject("d2a", cp.frame(cp.PREPARE, prepare(run, 0, "/bin/sh", args)))  # to host 1, "from host 0"
    mesh.inject("a2d", cp.frame(cp.PREPARE, prepare(run, 1, "/bin/sh", args)))  # to host 0, "from host 1"
    time.sleep(2)  # the hosts would check the binary and connect the run's bulk connection
    for direction in ("d2a", "a2d"):
        mesh.inject(direction, cp.frame(cp.START, cp.pstr(run)))
    time.sleep(2)
    ran = glob.glob(marker + "*")
    check(not ran, f"the injected Prepare and Start ran nothing on either host: {ran}")
    logs = rack.log(0) + rack.log(1)
    check(REFUSED in logs and "closing the connection" in logs,
          "the receiver logs the injected message as failing its tag and closes the connection")
    check(wait_for(lambda: sum(errors(rack, i) or 0 for i in range(2)) > sum(before), 2),
          f"and counts it (gossamer_controlplane_protocol_errors_total): {before} -> "
          f"{[errors(rack, i) for i in range(2)]}")
    check(wait_for(lambda: relay.mesh() is not mesh, 5) and rack.wait_up(0) and rack.wait_up(1),
          "the daemons make a new, authenticated connection and the rack is up again")
    r = rack.ctl(0, "run", "--", "/bin/sh", "-c", "echo still works")
    check(r.returncode == 0 and r.stdout.count("still works") == 2, f"and runs work: {r.stdout!r} {r.stderr!r}")

    # ---- replay: host 1's output message, a second time -----------------------------
    script = cp.write_script(d, "speaker", cp.host_of_config() +
                             'if [ "$h" = 1 ]; then echo replay-me-7f3a; fi\nsleep 3\n')
    mesh = relay.mesh()
    before, logged = errors(rack, 0) or 0, rack.log(0).count(REFUSED)
    replayed = threading.Event()

    def replay():
        chunk = None
        end = time.time() + 10
        while chunk is None and time.time() < end:
            chunk = mesh.find("a2d", b"replay-me-7f3a")
            time.sleep(0.02)
        if chunk is not None:
            mesh.inject("a2d", chunk)
            replayed.set()
    t = threading.Thread(target=replay, daemon=True)
    t.start()
    r = rack.ctl(0, "run", "--", script, timeout=30)
    t.join()
    lines = [line for line in r.stdout.splitlines() if "replay-me-7f3a" in line]
    check(replayed.is_set(), "the relay saw host 1's output message and sent it again")
    check(len(lines) <= 1, f"the replayed output message is not taken: {lines}")
    check(rack.log(0).count(REFUSED) > logged, "host 0 logs the replayed message as failing its tag")
    check(wait_for(lambda: (errors(rack, 0) or 0) > before, 2), "and counts it")
    check(r.returncode != 0 and "host 1" in r.stderr,
          f"the run fails: its link to host 1 went down ({r.returncode}, {r.stderr.strip()!r})")
    check(rack.wait_up(0, timeout=10), "the rack is up again afterwards")
    for i in range(2):
        rack.stop(i)
    relay.close()


cp.run(main, "injection and replay")
