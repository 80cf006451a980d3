#!/usr/bin/env python3
"""Issue 22: the verbs queue pairs' endpoints through a real gossamerd.

One gossamerd (host 1 of a 2-host rack, dataplane.transport: verbs,
--no-dataplane); the test plays host 0 on the mesh with the real handshake
and message tags, and plays host 1's dataplane by writing and reading the
files next to its socket (dataplane/src/verbs_exchange.hpp):

- the dataplane's <socket>.verbs reaches host 0 as a VerbsEndpoints message
  (type 16) with every field of the line;
- bad VerbsEndpoints from host 0 (empty, cut, padded, garbage, for another
  host, from another host, a QPN beyond 24 bits, a connection out of range)
  are counted (gossamer_controlplane_protocol_errors_total) and dropped: the
  link stays up, nothing reaches <socket>.verbs-peers, gossamerd keeps
  running;
- a good one reaches <socket>.verbs-peers, as the dataplane parses it.

usage: verbs_mesh_test.py GOSSAMERD GOSSAMERCTL
"""
import os
import socket
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.argv += [""] * (4 - len(sys.argv))  # controlplane_test reads GOSSAMERD GOSSAMERCTL BULK_PEER
import controlplane_test as cp  # noqa: E402  (the rack, the handshake's pieces, the checks)

check = cp.check
VERBS = 16  # proto.hpp Type::kVerbsEndpoints
GID = bytes(range(0xf0, 0x100))


def endpoints(frm, to, boot, qps, gid=GID, lid=0):
    """A VerbsEndpoints body (proto.hpp): from, to, boot, gid, lid, then the
    queue pairs (conn, qpn, psn, rkey, ring_addr, ring_units, generation)."""
    body = struct.pack("<IIQ", frm, to, boot) + gid + struct.pack("<II", lid, len(qps))
    for q in qps:
        body += struct.pack("<IIIIQII", *q)
    return body


class Link:
    """Host ME's mesh link to host TO: the handshake, then tagged messages."""

    def __init__(self, rack, me, to):
        rid, key = cp.rack_id(rack), cp.key_of(rack)
        nonce_d = os.urandom(32)
        self.s = socket.create_connection(("127.0.0.1", rack.port(to)))
        self.s.sendall(cp.frame(cp.HELLO, struct.pack("<IIQ", cp.CP_VERSION, me, rid) + nonce_d))
        f = cp.read_frame(self.s)
        assert f and f[0] == cp.CHALLENGE, f"no challenge from host {to}: {f!r}"
        nonce_a = f[1][4:36]
        self.s.sendall(cp.frame(cp.PROOF, cp.mac(key, b"gossamer-cp-1", b"D", nonce_d, nonce_a, me, to, rid)))
        self.send_key = cp.session_key(key, b"L", b"m", b"D", nonce_d, nonce_a, me, to, rid)
        self.recv_key = cp.session_key(key, b"L", b"m", b"A", nonce_d, nonce_a, me, to, rid)
        self.sent = self.received = 0
        self.buf = b""

    def send(self, t, body):
        self.s.sendall(cp.tagged(self.send_key, self.sent, t, body))
        self.sent += 1

    def heartbeat(self):
        self.send(cp.HEARTBEAT, struct.pack("<QBII", self.sent + 1, 0, 0, 0))

    def wait_for(self, t, timeout=5):
        """The body of the next message of type T, or None. Buffered: one
        recv may hold several messages."""
        end = time.time() + timeout
        while time.time() < end:
            while len(self.buf) >= 8 and len(self.buf) >= 40 + struct.unpack("<I", self.buf[:4])[0]:
                n = struct.unpack("<I", self.buf[:4])[0]
                h, body = self.buf[:8], self.buf[24:24 + n]
                ok = (self.buf[8:24] == cp.tag(self.recv_key, b"h", self.received, h) and
                      self.buf[24 + n:40 + n] == cp.tag(self.recv_key, b"b", self.received, h, body))
                self.buf = self.buf[40 + n:]
                self.received += 1
                if not ok:
                    return None
                if struct.unpack("<IHH", h)[1] == t:
                    return body
            self.s.settimeout(max(0.05, end - time.time()))
            try:
                chunk = self.s.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                return None
            self.buf += chunk
        return None


def protocol_errors(rack, i):
    for k, v in cp.scrape(rack, i).items():
        if k.split("{")[0] == "gossamer_controlplane_protocol_errors_total":
            return v
    return -1


def main():
    d = tempfile.mkdtemp(prefix="gossamer-verbs-mesh-")
    rack = cp.Rack(2, d)
    dp_sock = os.path.join(d, "dp1.sock")
    with open(rack.cfg(1), "a") as f:
        f.write(f"dataplane:\n  transport: verbs\n  socket: {dp_sock}\n")
    # What host 1's dataplane wrote: its QP of connection 1 to host 0.
    with open(dp_sock + ".verbs", "w") as f:
        f.write(f"qp 0 777 {GID.hex()} 0 1 4660 100 4097 140000000000 4096 2\n")
    rack.start(1)
    end = time.time() + 10
    up = False  # status says 3 while host 0 is down: it answers
    while not up and time.time() < end:
        up = os.path.exists(rack.sock(1)) and rack.ctl(1, "status").returncode in (0, 3)
        time.sleep(0.1)
    if not check(up, "host 1's gossamerd is up"):
        return
    link = Link(rack, 0, 1)
    body = link.wait_for(VERBS)
    check(body == endpoints(1, 0, 777, [(1, 4660, 100, 4097, 140000000000, 4096, 2)]),
          f"host 1's dataplane file reaches host 0 as VerbsEndpoints: {body!r}")

    before = protocol_errors(rack, 1)
    good = endpoints(0, 1, 999, [(0, 0x123, 5, 0x77, 0x7f0000000000, 2048, 0)])
    bad = {
        "an empty body": b"",
        "a cut body": good[:-1],
        "a padded body": good + b"x",
        "garbage": os.urandom(4096),
        "a count beyond the bytes": good[:36] + struct.pack("<I", 0x7fffffff) + good[40:],
        "for host 2 (not this one)": endpoints(0, 2, 999, [(0, 0x123, 5, 0x77, 0x7f0000000000, 2048, 0)]),
        "from host 1 on host 0's link": endpoints(1, 1, 999, [(0, 0x123, 5, 0x77, 0x7f0000000000, 2048, 0)]),
        "a QPN beyond 24 bits": endpoints(0, 1, 999, [(0, 1 << 24, 5, 0x77, 0x7f0000000000, 2048, 0)]),
        "a connection out of range": endpoints(0, 1, 999, [(9, 0x123, 5, 0x77, 0x7f0000000000, 2048, 0)]),
        "a ring that wraps": endpoints(0, 1, 999, [(0, 0x123, 5, 0x77, (1 << 64) - 64, 2048, 0)]),
    }
    for what, b in bad.items():
        link.send(VERBS, b)
        link.heartbeat()
    time.sleep(0.3)
    link.heartbeat()
    check(not os.path.exists(dp_sock + ".verbs-peers"), "no bad message reaches the dataplane's file")
    after = protocol_errors(rack, 1)
    check(after - before == len(bad), f"each bad message is counted: {before} -> {after}, {len(bad)} sent")
    check(rack.procs[1].poll() is None, "gossamerd keeps running")
    link.send(VERBS, good)
    end = time.time() + 5
    text = ""
    while time.time() < end and not text:
        link.heartbeat()
        try:
            with open(dp_sock + ".verbs-peers") as f:
                text = f.read()
        except FileNotFoundError:
            time.sleep(0.05)
    check(text == f"qp 0 999 {GID.hex()} 0 0 {0x123} 5 {0x77} {0x7f0000000000} 2048 0\n",
          f"the good one, on the same link after the bad ones, reaches .verbs-peers: {text!r}")
    check(oct(os.stat(dp_sock + ".verbs-peers").st_mode & 0o777) == "0o600", "the file is 0600")
    check("verbs endpoints dropped" in rack.log(1), "gossamerd logs what it dropped")
    rack.stop(1)


if __name__ == "__main__":
    cp.run(main, "verbs endpoint exchange")
