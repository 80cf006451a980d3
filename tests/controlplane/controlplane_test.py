#!/usr/bin/env python3
"""gossamerd and gossamerctl on a loopback rack: three (or four) daemons on
127.0.0.1 with their own ports and sockets, no dataplane (--no-dataplane, or a
stand-in script for the supervision check). Real processes, real TCP, the
real handshake. The instances are small shell scripts, so that what is
checked here is the control plane itself: launch, output, exit status, fate
sharing, heartbeats, authentication, hostile input. The bulk connections
gossamerd brokers between the instances of a run (GOSSAMER_BULK) are checked
by BULK_PEER, a small binary run as the instance (bulk_peer.cpp). The same
commands on a rack in a box with a real rack application are in tests/rack/.

usage: controlplane_test.py GOSSAMERD GOSSAMERCTL BULK_PEER
"""
import hashlib
import hmac
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

GOSSAMERD, GOSSAMERCTL, BULK_PEER = sys.argv[1], sys.argv[2], sys.argv[3]
BASE_PORT = 17000 + (os.getpid() % 500) * 8
# A timeout of 15 intervals: a peer is declared down only after 1.5 s of
# silence, which a machine loaded by parallel builds does not cause by
# itself (600 ms once did, at load 18); the stopped-gossamerd check below
# still bounds detection by this timeout.
HB_INTERVAL, HB_TIMEOUT = 100, 1500
# cp::kVersion, read from proto.hpp so that a protocol bump needs no edit here.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "controlplane", "src", "proto.hpp")) as f:
    CP_VERSION = int(re.search(r"\bkVersion = (\d+);", f.read()).group(1))
failures = []
started = []  # every Popen we made, to clean up
tmpdirs = []  # and every directory


def check(cond, what):
    print(("ok     " if cond else "FAILED ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of ours is dead for this purpose.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class Rack:
    def __init__(self, n, d, psk=None):
        self.n, self.d = n, d
        tmpdirs.append(d)
        self.psk = os.path.join(d, "psk")
        with open(self.psk, "w") as f:
            f.write(psk or os.urandom(24).hex() + "\n")
        os.chmod(self.psk, 0o600)
        self.procs = [None] * n
        for i in range(n):
            self.write_config(i, self.psk)

    def cfg(self, i):
        return os.path.join(self.d, f"h{i}.yaml")

    def sock(self, i):
        return os.path.join(self.d, f"h{i}.sock")

    def port(self, i):
        return BASE_PORT + i

    def write_config(self, i, psk, name=None):
        hosts = "".join(f"    - name: h{j}\n      control: 127.0.0.1:{self.port(j)}\n"
                        f"      data: 127.0.0.{j + 1}:7800\n" for j in range(self.n))
        with open(name or self.cfg(i), "w") as f:
            f.write(f"host:\n  index: {i}\nrack:\n  hosts:\n{hosts}"
                    f"controlplane:\n  listen: 127.0.0.1:{self.port(i)}\n  psk_file: {psk}\n"
                    f"  socket: {self.sock(i)}\n  heartbeat_interval_ms: {HB_INTERVAL}\n"
                    f"  heartbeat_timeout_ms: {HB_TIMEOUT}\n"
                    f"metrics:\n  listen: 127.0.0.1:{self.port(i) + 4000}\n")

    def start(self, i, config=None, extra=("--no-dataplane",), wrap=()):
        log = open(os.path.join(self.d, f"gossamerd.{i}.log"), "a")
        p = subprocess.Popen(list(wrap) + [GOSSAMERD, "--config", config or self.cfg(i), *extra],
                             stdout=log, stderr=subprocess.STDOUT)
        started.append(p)
        self.procs[i] = p
        return p

    def log(self, i):
        with open(os.path.join(self.d, f"gossamerd.{i}.log")) as f:
            return f.read()

    def ctl(self, i, *args, timeout=30, **kw):
        return subprocess.run([GOSSAMERCTL, "-c", self.cfg(i), *args], capture_output=True, text=True,
                              timeout=timeout, **kw)

    def wait_up(self, i=0, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            if os.path.exists(self.sock(i)) and self.ctl(i, "status").returncode == 0:
                return True
            time.sleep(0.1)
        return False

    def stop(self, i):
        p = self.procs[i]
        if p and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode if p else None


def scrape(rack, i):
    """Host i's /metrics as {'name{labels}': value}; {} if it does not answer."""
    import urllib.request
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{rack.port(i) + 4000}/metrics", timeout=3).read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def write_script(d, name, body):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)
    return path


def host_of_config():
    # In the scripts: the host index from GOSSAMER_CONFIG (.../hI.yaml).
    return 'h=${GOSSAMER_CONFIG##*/h}; h=${h%.yaml}\n'


# ---- the peer protocol, enough to play a hostile or honest dialer ----------------------
# (controlplane/src/proto.hpp: 8-byte header {u32 length, u16 type, u16 0},
# strings as u32 length + bytes; after the handshake every message is tagged,
# runtime/include/gossamer/abi/session.hpp.)
HELLO, CHALLENGE, PROOF, HEARTBEAT, BULK_HELLO, BULK_READY = 1, 2, 3, 4, 5, 6
PREPARE, PREPARED, START, OUTPUT, EXITED, STOP = 10, 11, 12, 13, 14, 15
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 15, 8, 1  # proto.hpp kScrypt*


def frame(t, body):
    return struct.pack("<IHH", len(body), t, 0) + body


def pstr(b):
    return struct.pack("<I", len(b)) + b


def rack_id(rack):
    """Daemon::rack_id(): FNV-1a over the host count and each host's name and control address."""
    x = 1469598103934665603
    def mix(text):
        nonlocal x
        for c in text.encode():
            x = ((x ^ c) * 1099511628211) % (1 << 64)
        x = ((x ^ 0xff) * 1099511628211) % (1 << 64)
    mix(str(rack.n))
    for j in range(rack.n):
        mix(f"h{j}")
        mix(f"127.0.0.1:{rack.port(j)}")
    return x


def psk_of(rack):
    with open(rack.psk) as f:
        return f.read().rstrip("\n\r \t").encode()


_handshake_keys = {}


def handshake_key(secret, rid):
    """proto.hpp handshake_key(): scrypt(secret, salt "gossamer-cp-psk-1" | rack id)."""
    if (secret, rid) not in _handshake_keys:
        _handshake_keys[secret, rid] = hashlib.scrypt(
            secret, salt=pstr(b"gossamer-cp-psk-1") + struct.pack("<Q", rid), n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P,
            maxmem=64 << 20, dklen=32)
    return _handshake_keys[secret, rid]


def key_of(rack):
    """The handshake key of RACK's daemons."""
    return handshake_key(psk_of(rack), rack_id(rack))


def session_key(key, use, kind, sender, nonce_d, nonce_a, d, a, rack, run=b""):
    """proto.hpp session_key(): use b"L" (the daemons) or b"I" (instances), kind b"m" or b"b", sender b"D" or b"A"."""
    msg = (pstr(b"gossamer-cp-session-1") + use + kind + sender + nonce_d + nonce_a + struct.pack("<IIQ", d, a, rack) +
           pstr(run))
    return hmac.new(key, msg, hashlib.sha256).digest()


def tag(key, part, n, header, body=b""):
    """gossamer/abi/session.hpp: HMAC-SHA256(key, part | n | header | body), the first 16 bytes."""
    return hmac.new(key, part + struct.pack("<Q", n) + header + body, hashlib.sha256).digest()[:16]


def tagged(key, n, t, body):
    """Message N of a direction under KEY, as an authenticated link sends it."""
    h = struct.pack("<IHH", len(body), t, 0)
    return h + tag(key, b"h", n, h) + body + tag(key, b"b", n, h, body)


def read_message(s, tags, timeout):
    """The bytes of the next message, with its tags if TAGS, or None when the
    connection ends first."""
    head, tail = (24, 16) if tags else (8, 0)
    s.settimeout(timeout)
    data = b""
    try:
        while len(data) < head or len(data) < head + tail + struct.unpack("<I", data[:4])[0]:
            chunk = s.recv(4096)
            if not chunk:
                return None
            data += chunk
    except (ConnectionResetError, socket.timeout):
        return None
    return data


def read_tagged(s, key, n, timeout=4):
    """(type, body) of message N under KEY; 'bad tag' if a tag does not verify;
    None when the connection ends first."""
    data = read_message(s, True, timeout)
    if data is None:
        return None
    h = data[:8]
    length, t, _ = struct.unpack("<IHH", h)
    body = data[24:24 + length]
    if data[8:24] != tag(key, b"h", n, h) or data[24 + length:40 + length] != tag(key, b"b", n, h, body):
        return "bad tag"
    return t, body


def mac(key, label, role, nonce_d, nonce_a, d, a, rack, run=None):
    """handshake_mac (label gossamer-cp-1) and bulk_mac (gossamer-cp-bulk-1, with the run id)."""
    msg = pstr(label) + role + nonce_d + nonce_a + struct.pack("<IIQ", d, a, rack)
    if run is not None:
        msg += pstr(run)
    return hmac.new(key, msg, hashlib.sha256).digest()


def read_frame(s, timeout=4):
    """(type, body) of the next (untagged) message, or None when the connection ends first."""
    data = read_message(s, False, timeout)
    if data is None:
        return None
    n, t, _ = struct.unpack("<IHH", data[:8])
    return t, data[8:8 + n]


def bulk_dialer(rack, to, me, run, proof="right", key=None, version=CP_VERSION):
    """Plays host ME dialing host TO's bulk handshake for RUN. proof: 'right',
    'mesh' (the mesh handshake's MAC, a replay across protocols), 'other-run'
    (the bulk MAC of another run), 'random'; KEY: another secret than the
    rack's. Returns (socket, what came back: 'no challenge', 'refused',
    'ready' (the challenge's MAC was the documented one, and the bulk-ready
    came tagged under the documented session key), or 'ready after a bad
    challenge')."""
    rid = rack_id(rack)
    key = handshake_key(key, rid) if key else key_of(rack)
    nonce_d = os.urandom(32)
    s = socket.create_connection(("127.0.0.1", rack.port(to)))
    s.sendall(frame(BULK_HELLO, struct.pack("<IIQ", version, me, rid) + nonce_d + pstr(run)))
    f = read_frame(s)
    if not f or f[0] != CHALLENGE or len(f[1]) != 68:
        return s, "no challenge"
    host, nonce_a, mac_a = struct.unpack("<I", f[1][:4])[0], f[1][4:36], f[1][36:68]
    good = host == to and mac_a == mac(key, b"gossamer-cp-bulk-1", b"a", nonce_d, nonce_a, me, to, rid, run)
    proofs = {
        "right": lambda: mac(key, b"gossamer-cp-bulk-1", b"d", nonce_d, nonce_a, me, to, rid, run),
        "mesh": lambda: mac(key, b"gossamer-cp-1", b"D", nonce_d, nonce_a, me, to, rid),
        "other-run": lambda: mac(key, b"gossamer-cp-bulk-1", b"d", nonce_d, nonce_a, me, to, rid, run + b"0"),
        "random": lambda: os.urandom(32),
    }
    s.sendall(frame(PROOF, proofs[proof]()))
    f = read_tagged(s, session_key(key, b"L", b"b", b"A", nonce_d, nonce_a, me, to, rid, run), 0)
    if f and f != "bad tag" and f[0] == BULK_READY and f[1] == pstr(run):
        return s, "ready" if good else "ready after a bad challenge"
    return s, "refused"


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def stale_epoll(pid):
    """Registrations in the process's epoll sets whose descriptor is no longer
    open in it as the same file: what a socket closed with close(2) while a
    copy lives on elsewhere leaves behind (epoll forgets a registration only
    when the file itself goes, so events for it would still come)."""
    stale = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:[eventpoll]":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                lines = [l.split() for l in f if l.startswith("tfd:")]
        except OSError:
            continue
        for w in lines:
            # "tfd: 15 events: 19 data: 7f.. pos:0 ino:2f32e98d sdev:9"
            ino = next((int(x[4:], 16) for x in w if x.startswith("ino:")), None)
            try:
                now = os.stat(f"/proc/{pid}/fd/{w[1]}").st_ino
            except OSError:
                now = None
            if now is None or (ino is not None and now != ino):
                stale.append((w[1], ino, now))
    return stale


def fds_quiet(procs, timeout=5):
    """Every daemon's open descriptor count once it has stopped changing
    (the same in three samples 0.1 s apart): a baseline that a run which
    just ended (its pipes, its gossamerctl link) no longer inflates."""
    end = time.time() + timeout
    last, same = None, 0
    while True:
        now = [fd_count(p.pid) for p in procs]
        same = same + 1 if now == last else 0
        last = now
        if same >= 2 or time.time() > end:
            return now
        time.sleep(0.1)


def fds_settle(procs, want, timeout=5):
    """Waits until every daemon's open descriptor count is back to WANT; the counts."""
    end = time.time() + timeout
    while True:
        now = [fd_count(p.pid) for p in procs]
        if now == want or time.time() > end:
            return now
        time.sleep(0.05)


class Proxy:
    """Forwards the TCP connections it accepts on PORT to port TO while
    `allow` is set; closes the others at once. A subclass may watch and add
    to what it forwards (forward(), inject_test.py)."""

    def __init__(self, port, to):
        self.to, self.allow = to, True
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", port))
        self.ls.listen(16)
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            if not self.allow:
                c.close()
                continue
            try:
                u = socket.create_connection(("127.0.0.1", self.to))
            except OSError:
                c.close()
                continue
            self.forward(c, u)

    def forward(self, c, u):
        """Pumps both ways between the accepted C and the upstream U."""
        for a, b in ((c, u), (u, c)):
            threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    @staticmethod
    def pump(a, b, tap=None):
        """A to B until either ends; TAP(chunk), after each chunk, returns
        bytes to write to B next."""
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
                extra = tap(data) if tap else b""
                if extra:
                    b.sendall(extra)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        try:
            self.ls.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.ls.close()


def start_behind(rack, make):
    """Starts the two hosts of RACK with host 1's control address (what host 0
    dials) at port(2), where make(port(2), port(1)) listens in front of host
    1's own listener. Returns what make() made."""
    proxy = make(rack.port(2), rack.port(1))
    for i in range(2):
        with open(rack.cfg(i)) as f:
            text = f.read().replace(f"control: 127.0.0.1:{rack.port(1)}", f"control: 127.0.0.1:{rack.port(2)}")
        with open(rack.cfg(i), "w") as f:
            f.write(text)
        rack.start(i)
    return proxy


def main():
    d = tempfile.mkdtemp(prefix="gossamer-cp-")
    rack = Rack(3, d)
    for i in range(3):
        rack.start(i)
    if not check(all(rack.wait_up(i) for i in range(3)), "3 daemons start and see each other up"):
        for i in range(3):
            print(rack.log(i))
        return

    st = rack.ctl(0, "status")
    lines = [l for l in st.stdout.splitlines() if l[:1].isdigit()]
    check(st.returncode == 0 and len(lines) == 3 and "self" in lines[0] and all(" up " in l for l in lines[1:]),
          f"status lists host 0 as self, hosts 1 and 2 up: {st.stdout!r}")

    # ---- metrics: what gossamerd knows (no dataplane here) ---------------------------
    m = scrape(rack, 0)
    check(all(m.get(f'gossamer_host_up{{host="h0",peer="h{h}"}}') == 1 for h in range(3)) and
          0 <= m.get('gossamer_host_heartbeat_age_seconds{host="h0",peer="h1"}', -1) < HB_TIMEOUT / 1000 and
          m.get('gossamer_dataplane_up{host="h0"}') == 0 and m.get('gossamer_runs{host="h0"}') == 0 and
          any(k.startswith("gossamer_build_info{") for k in m),
          f"/metrics on host 0: every host up, heartbeat ages, no dataplane: "
          f"{ {k: v for k, v in m.items() if k.startswith('gossamer_')} }")
    # A client that never finishes its request does not stall the others
    # (issue 18, finding 14: the one exposer thread waited 30 s on it), and
    # is itself let go after the 2 s request timeout.
    slow = socket.create_connection(("127.0.0.1", rack.port(0) + 4000))
    slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # the headers never end
    time.sleep(0.2)
    t0 = time.monotonic()
    m = scrape(rack, 0)
    took = time.monotonic() - t0
    check(m.get('gossamer_dataplane_up{host="h0"}') == 0 and took < 1.5,
          f"/metrics answers in {took:.2f} s while another client holds a request open")
    slow.settimeout(6)
    t0 = time.monotonic()
    try:
        while slow.recv(4096):
            pass
        let_go = time.monotonic() - t0
    except OSError:
        let_go = None
    slow.close()
    check(let_go is not None and let_go < 4, f"the unfinished request is closed by gossamerd after {let_go} s")

    # ---- run: output with prefixes, exit status, environment -------------------------
    hello = write_script(d, "hello", host_of_config() +
                         'echo "hello from host $h run $GOSSAMER_RUN_ID threads ${GOSSAMER_THREADS:-none}"\n'
                         'echo "token of host $h: $GOSSAMER_RUN_TOKEN"\n'
                         'echo "to stderr $h" >&2\nprintf "no newline $h"\nexit 0\n')
    r = rack.ctl(1, "run", "--threads", "6", "--", hello)
    out = r.stdout.splitlines()
    ids = {l.split(" run ")[1].split()[0] for l in out if " run " in l}
    check(r.returncode == 0, f"run returns 0 when every instance exits 0 (rc={r.returncode}, {r.stderr!r})")
    check(all(any(l.startswith(f"[host {h}] hello from host {h} run ") and l.endswith("threads 6") for l in out)
              for h in range(3)), f"every host's stdout comes back prefixed, GOSSAMER_THREADS=6: {out}")
    check(len(ids) == 1 and all(re.fullmatch(r"gossamerd-[0-9a-f]{32}", i) for i in ids),
          f"one GOSSAMER_RUN_ID on every host, issued by gossamerd: {ids}")
    tokens = {int(m.group(1)): m.group(2) for m in
              (re.fullmatch(r"\[host (\d)\] token of host \1: (.*)", l) for l in out) if m}
    check(sorted(tokens) == [0, 1, 2] and all(re.fullmatch(r"[0-9a-f]{64}", t) for t in tokens.values()) and
          len(set(tokens.values())) == 3,
          f"every host's instance has its own run token (GOSSAMER_RUN_TOKEN, 64 hex digits): {tokens}")
    check(all(f"[host {h}] to stderr {h}" in r.stderr for h in range(3)), f"stderr prefixed: {r.stderr!r}")
    check(all(f"[host {h}] no newline {h}" in r.stdout for h in range(3)), "a last line without newline is kept")

    # ---- bulk connections between the instances of a run ---------------------------
    # BULK_PEER checks what it inherits (one connected, blocking TCP socket
    # with TCP_NODELAY per other host, nothing else), that the socket for
    # host h leads to host h's instance on this very connection, both ways,
    # and that no copy of it stays open in gossamerd (end-of-file on close).
    pairs = {(i, j) for i in range(3) for j in range(3) if i != j}
    base_fds = fds_quiet(rack.procs)
    for origin in (1, 0, 2):
        r = rack.ctl(origin, "run", "--", BULK_PEER)
        # "[host 1] bulk 1-2 ok": host 1's instance talked with host 2's.
        got = {(int(m.group(2)), int(m.group(3))) for m in
               (re.fullmatch(r"\[host (\d+)\] bulk (\d+)-(\d+) ok", l) for l in r.stdout.splitlines())
               if m and m.group(1) == m.group(2)}
        check(r.returncode == 0 and got == pairs,
              f"run from host {origin}: every instance is connected to every other host's instance over its "
              f"GOSSAMER_BULK socket, both ways: rc {r.returncode}, {sorted(got)}, {r.stderr.strip()!r}")
    now = fds_settle(rack.procs, base_fds)
    check(now == base_fds, f"the daemons keep no bulk descriptor after the runs: open descriptors {base_fds} -> {now}")

    fail1 = write_script(d, "fail1", host_of_config() +
                         'if [ "$h" = 1 ]; then echo "host 1 fails"; exit 3; fi\nexec sleep 30\n')
    t0 = time.time()
    r = rack.ctl(0, "run", "--", fail1)
    took = time.time() - t0
    check(r.returncode == 3 and "host 1 (h1)" in r.stderr and "exited with status 3" in r.stderr and took < 3,
          f"an instance exiting 3 on host 1: run exits 3 in {took:.1f}s naming host 1: {r.stderr.strip()!r}")

    # ---- fate sharing: kill -9 of host 2's instance -----------------------------------
    sleeper = write_script(d, "sleeper", host_of_config() + f'echo $$ > {d}/pid.$h\nexec sleep 60\n')
    def start_sleepers(host):
        # gossamerctl run of the sleeper from HOST; returns it and the instances' pids.
        for h in range(3):
            try:
                os.unlink(f"{d}/pid.{h}")
            except OSError:
                pass
        proc = subprocess.Popen([GOSSAMERCTL, "-c", rack.cfg(host), "run", "--", sleeper],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append(proc)
        found = {}
        end = time.time() + 10
        while time.time() < end and len(found) < 3:
            for h in range(3):
                try:
                    with open(f"{d}/pid.{h}") as f:
                        found[h] = int(f.read())
                except (OSError, ValueError):
                    pass
            time.sleep(0.05)
        return proc, found

    p, pids = start_sleepers(0)
    if check(len(pids) == 3, "the sleeper started on every host"):
        stale = {i: stale_epoll(rack.procs[i].pid) for i in range(3)}
        check(not any(stale.values()),
              f"while the instances hold their bulk sockets, no daemon's epoll set still watches them: {stale}")
        st = rack.ctl(2, "status")
        check("running" in st.stdout and str(pids[2]) in st.stdout, f"status on host 2 shows the running instance")
        t0 = time.time()
        os.kill(pids[2], signal.SIGKILL)
        try:
            _, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        took = time.time() - t0
        check(p.returncode == 128 + 9 and "host 2 (h2)" in err and "signal 9" in err and took < 2.0,
              f"kill -9 on host 2: run exits {p.returncode} in {took:.2f}s naming host 2: {err.strip()!r}")
        time.sleep(0.2)
        check(not any(alive(pid) for pid in pids.values()), f"no instance is left running: {pids}")

    # ---- Ctrl-C on gossamerctl stops every host ---------------------------------------
    p, pids = start_sleepers(1)
    time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    time.sleep(0.2)
    check(len(pids) == 3 and p.returncode == 130 and not any(alive(x) for x in pids.values()),
          f"SIGINT on gossamerctl: exit {p.returncode}, instances stopped on every host: {err.strip()!r}")

    # ---- a different binary on one host ------------------------------------------------
    other = write_script(d, "other", "echo I am a different program\n")
    rack.stop(1)
    # Host 1's daemon sees `other` at the path of `hello`: a private mount namespace.
    rack.start(1, wrap=["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        f'mount --bind "{other}" "{hello}" && exec "$0" "$@"'])
    if check(rack.wait_up(0) and rack.wait_up(1), "host 1 rejoins after a restart"):
        before = fds_quiet(rack.procs)
        r = rack.ctl(0, "run", "--", hello)
        check(r.returncode == 2 and "host 1 (h1)" in r.stderr and "different binary" in r.stderr and
              "[host" not in r.stdout,
              f"a different binary on host 1: refused before anything starts: {r.stderr.strip()!r}")
        now = fds_settle(rack.procs, before)
        check(now == before, f"the refused run leaves no bulk descriptor behind: {before} -> {now}")
    rack.stop(1)
    rack.start(1)
    check(rack.wait_up(0) and rack.wait_up(1), "host 1 rejoins without the bind mount")
    r = rack.ctl(0, "run", "--", os.path.join(d, "no-such-binary"))
    check(r.returncode == 2 and "no-such-binary" in r.stderr, f"a missing binary is refused: {r.stderr.strip()!r}")

    # ---- what an instance inherits, and what outlives it ---------------------------------
    # ls as the instance (sh execs it: no descriptors of its own): it lists
    # its descriptors, one of which is the directory it reads. Besides stdin,
    # stdout and stderr, exactly the sockets GOSSAMER_BULK names.
    r = rack.ctl(0, "run", "--", "/bin/sh", "-c", 'echo "bulk=${GOSSAMER_BULK-unset}"; exec /bin/ls -l /proc/self/fd')
    listed, bulk = {}, {}
    for l in r.stdout.splitlines():
        w = l.split()
        if l.startswith("[host ") and len(w) == 3 and w[2].startswith("bulk="):
            # host:fd:send key:receive key -> {fd: host}
            bulk[w[1]] = {x.split(":")[1]: x.split(":")[0] for x in w[2][5:].split(",") if ":" in x}
        elif l.startswith("[host ") and "->" in w and not w[-1].startswith("/proc/"):
            listed.setdefault(w[1], {})[w[w.index("->") - 1]] = w[-1]
    inherit_ok = len(listed) == 3 and len(bulk) == 3
    for h, fds in listed.items():
        want = {"0", "1", "2"} | set(bulk.get(h, {}))
        inherit_ok &= (set(fds) == want and len(bulk[h]) == 2 and h[:-1] not in bulk[h].values() and
                       all(fds[fd].startswith("socket:") for fd in bulk[h]))
    check(r.returncode == 0 and inherit_ok,
          f"an instance inherits only stdin, stdout, stderr and the two bulk sockets GOSSAMER_BULK names "
          f"(no daemon sockets): {listed} {bulk}")
    stray = write_script(d, "stray", host_of_config() +
                         f'sh -c \'trap "" TERM; echo $$ > {d}/stray.$0; exec sleep 30\' $h &\n'
                         'sleep 0.3\nif [ "$h" = 1 ]; then exit 4; fi\nexec sleep 30\n')
    r = rack.ctl(0, "run", "--", stray)
    time.sleep(1.5)
    strays = []
    for h in range(3):
        try:
            with open(f"{d}/stray.{h}") as f:
                strays.append(int(f.read()))
        except (OSError, ValueError):
            pass
    check(r.returncode == 4 and len(strays) == 3 and not any(alive(x) for x in strays),
          f"what instances leave in their group, even ignoring SIGTERM, is killed (host 1 exited 4, the others were stopped): rc {r.returncode}, {strays}")
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo)
    os.chmod(fifo, 0o755)
    t0 = time.time()
    r = rack.ctl(0, "run", "--", fifo, timeout=10)
    check(r.returncode == 2 and "not a" in r.stderr and time.time() - t0 < 3 and rack.wait_up(0, timeout=3),
          f"an executable FIFO is refused at once, the daemon stays responsive: {r.stderr.strip()!r}")

    # ---- a host that stops answering while a run is being prepared --------------------
    rack.procs[2].send_signal(signal.SIGSTOP)
    t0 = time.time()
    r = rack.ctl(0, "run", "--", hello, timeout=20)
    took = time.time() - t0
    rack.procs[2].send_signal(signal.SIGCONT)
    check(r.returncode == 2 and "host 2 (h2)" in r.stderr and took < 5 and "[host" not in r.stdout,
          f"host 2 silent during the prepare: not started, named, in {took:.1f}s: {r.stderr.strip()!r}")
    check(rack.wait_up(0, timeout=10), "host 2 is back up")
    st = rack.ctl(0, "status")
    check("no applications running" in st.stdout, "and no run is left behind on host 0")

    # ---- a gossamerd that stops answering ---------------------------------------------
    rack.procs[2].send_signal(signal.SIGSTOP)
    t0 = time.time()
    seen = None
    while time.time() - t0 < 5:
        st = rack.ctl(0, "status")
        row = [l for l in st.stdout.splitlines() if l.startswith("2 ")]
        if row and " down " in row[0]:
            seen = time.time() - t0
            break
        time.sleep(0.05)
    check(seen is not None and seen < HB_TIMEOUT / 1000 + 0.5 and st.returncode == 3,
          f"a stopped gossamerd is seen down within the heartbeat timeout ({HB_TIMEOUT} ms): "
          f"{seen if seen is None else round(seen, 2)}s, status rc {st.returncode}")
    r = rack.ctl(0, "run", "--", hello)
    check(r.returncode == 2 and "host 2 (h2) is down" in r.stderr, f"run refuses while host 2 is down: {r.stderr!r}")
    m = scrape(rack, 0)
    check(m.get('gossamer_host_up{host="h0",peer="h2"}') == 0 and m.get('gossamer_host_up{host="h0",peer="h1"}') == 1,
          "/metrics on host 0 says host 2 down, host 1 up")
    check(scrape(rack, 2) == {}, "a stopped gossamerd serves no metrics (Prometheus' up == 0)")
    rack.procs[2].send_signal(signal.SIGCONT)
    check(rack.wait_up(0, timeout=10), "after SIGCONT host 2 is up again")

    # ---- authentication -----------------------------------------------------------------
    rack.stop(2)
    bad_psk = os.path.join(d, "bad-psk")
    with open(bad_psk, "w") as f:
        f.write("not-the-rack-key-0123456789\n")
    os.chmod(bad_psk, 0o600)
    impostor = os.path.join(d, "impostor.yaml")
    rack.write_config(2, bad_psk, name=impostor)
    rack.start(2, config=impostor)
    time.sleep(1.5)
    st = rack.ctl(0, "status")
    row = [l for l in st.stdout.splitlines() if l.startswith("2 ")]
    check(row and " down " in row[0] and "wrong pre-shared key" in rack.log(0) + rack.log(1),
          f"a daemon with the wrong key cannot join: {row}")
    rack.stop(2)
    os.chmod(rack.psk, 0o644)
    p = rack.start(2)
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
    check(p.returncode == 1 and "chmod 600" in rack.log(2), "a psk file readable by others is refused")
    os.chmod(rack.psk, 0o600)
    # Issue 18 finding 13: a secret too weak to survive offline guessing.
    weak_psk = os.path.join(d, "weak-psk")
    with open(weak_psk, "w") as f:
        f.write("our rack secret is sixteen bytes or more\n")
    os.chmod(weak_psk, 0o600)
    weak = os.path.join(d, "weak.yaml")
    rack.write_config(2, weak_psk, name=weak)
    p = rack.start(2, config=weak)
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    check(p.returncode == 1 and f"the pre-shared key in {weak_psk}" in rack.log(2) and
          "fewer than 128" in rack.log(2) and "head -c 32 /dev/urandom | base64" in rack.log(2),
          f"a weak psk is refused, naming the file and how to make a good one (rc {p.returncode})")
    rack.start(2)
    check(rack.wait_up(0), "host 2 rejoins with the right key")

    # ---- hostile input -------------------------------------------------------------------
    def closed_by_peer(s, timeout=4):
        s.settimeout(timeout)
        try:
            while s.recv(4096):
                pass
            return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    cases = {
        "random bytes": os.urandom(200),
        "a 1 GiB length": struct.pack("<IHH", 1 << 30, 1, 0),
        "a hello with a bad version": struct.pack("<IHH", 48, 1, 0) + struct.pack("<IIQ", 99, 0, 0) + bytes(32),
        "a proof without a hello": struct.pack("<IHH", 32, 3, 0) + bytes(32),
        "nothing at all": b"",
    }
    for what, data in cases.items():
        s = socket.create_connection(("127.0.0.1", rack.port(2)))
        try:
            s.sendall(data)
        except OSError:
            pass
        check(closed_by_peer(s), f"garbage on the peer port ({what}): the connection is dropped")
        s.close()
    u = socket.socket(socket.AF_UNIX)
    u.connect(rack.sock(0))
    u.sendall(struct.pack("<IHH", 1 << 31, 30, 0))
    check(closed_by_peer(u), "a huge length on the gossamerctl socket: dropped")
    u.close()
    u = socket.socket(socket.AF_UNIX)
    u.connect(rack.sock(0))
    u.sendall(struct.pack("<IHH", 12, 30, 0) + struct.pack("<I", 1 << 30) + b"abcdefgh")
    check(closed_by_peer(u), "a lying string length in a run request: answered and dropped")
    u.close()
    check(all(p.poll() is None for p in rack.procs) and rack.wait_up(0) and rack.wait_up(2),
          "every daemon survives the garbage and the rack is still up")
    r = rack.ctl(2, "run", "--", hello)
    check(r.returncode == 0 and r.stdout.count("hello from host") == 3, "and runs still work afterwards")

    # ---- bulk handshakes, honest and hostile -------------------------------------------
    # Honest ones (this test knows the key) for runs host 2 does not know: the
    # Prepare may come after a peer's dial, so host 2 keeps them, at most 64
    # per peer host (the oldest go at once), for 10 s.
    pid2 = rack.procs[2].pid
    base2 = fds_quiet([rack.procs[2]])[0]  # not while the last run's descriptors close
    t_pending = time.time()
    kept = [bulk_dialer(rack, 2, 0, b"feed%04d" % k) for k in range(66)]
    check(all(w == "ready" for _, w in kept),
          f"a bulk handshake for a run host 2 does not know yet completes, with the documented MACs: "
          f"{sorted(set(w for _, w in kept))}")
    oldest_closed = [closed_by_peer(s, timeout=1) for s, _ in kept[:2]]
    held = fds_settle([rack.procs[2]], [base2 + 64], timeout=2)[0] - base2
    check(all(oldest_closed) and held == 64,
          f"host 2 keeps at most 64 of them from one peer host, closing the oldest: {oldest_closed}, {held} kept")
    refused = {
        "the mesh handshake's proof (a replay across protocols)": dict(proof="mesh"),
        "a proof for another run": dict(proof="other-run"),
        "a random proof": dict(proof="random"),
        "the wrong key": dict(key=b"not-the-rack-key-0123456789"),
        "a bad version": dict(version=9),
        "a run id of 65 bytes": dict(run=b"a" * 65),
        "a run id with a slash": dict(run=b"../x"),
        "a host index that may not dial host 2": dict(me=2),
        "an unknown host index": dict(me=7),
    }
    for what, kw in refused.items():
        args = dict(rack=rack, to=2, me=0, run=b"bulk0001") | kw
        s, outcome = bulk_dialer(**args)
        check(outcome in ("no challenge", "refused") and closed_by_peer(s),
              f"a bulk handshake with {what}: no socket for it, the connection is dropped ({outcome})")
        s.close()
    rid = rack_id(rack)
    nonce = os.urandom(32)
    bulk_hello = frame(BULK_HELLO, struct.pack("<IIQ", CP_VERSION, 0, rid) + nonce + pstr(b"bulk0002"))
    raw = {
        "a bulk hello, then garbage instead of a proof": (bulk_hello, os.urandom(100)),
        "a bulk hello, then nothing (a stalled handshake)": (bulk_hello, b""),
        "a bulk hello over 256 bytes": (frame(BULK_HELLO, struct.pack("<IIQ", CP_VERSION, 0, rid) + nonce +
                                              pstr(b"a" * 300)), b""),
        "a bulk hello with a lying run id length": (frame(BULK_HELLO, struct.pack("<IIQ", CP_VERSION, 0, rid) + nonce +
                                                          struct.pack("<I", 1 << 30) + b"abc"), b""),
        "a bulk-ready from the dialer": (frame(BULK_READY, pstr(b"bulk0002")), b""),
    }
    for what, (first, then) in raw.items():
        s = socket.create_connection(("127.0.0.1", rack.port(2)))
        s.sendall(first)
        f = read_frame(s, timeout=1)
        try:
            s.sendall(then)
        except OSError:
            pass
        rest = read_frame(s, timeout=4)
        check((f is None or f[0] == CHALLENGE) and rest is None and closed_by_peer(s),
              f"{what}: dropped without a bulk-ready")
        s.close()
    # The other way round: a mesh hello answered with the bulk handshake's
    # proof must not become host 0's mesh link.
    s = socket.create_connection(("127.0.0.1", rack.port(2)))
    s.sendall(frame(HELLO, struct.pack("<IIQ", CP_VERSION, 0, rid) + nonce))
    f = read_frame(s)
    if f and f[0] == CHALLENGE:
        s.sendall(frame(PROOF, mac(key_of(rack), b"gossamer-cp-bulk-1", b"d", nonce, f[1][4:36], 0, 2, rid, b"")))
    check(f is not None and f[0] == CHALLENGE and closed_by_peer(s),
          "a mesh hello with the bulk handshake's proof is dropped")
    s.close()
    if time.time() - t_pending < 9:
        check(not closed_by_peer(kept[2][0], timeout=0.2), "the kept ones are still open before 10 s")
    left = max(0.5, 12 - (time.time() - t_pending))
    closed = [closed_by_peer(s, timeout=left) for s, _ in kept[2:]]
    took = time.time() - t_pending
    check(all(closed) and 9.5 < took < 12,
          f"the bulk connections for a run that never came are closed after 10 s ({took:.1f} s)")
    for s, _ in kept:
        s.close()
    now = fds_settle([rack.procs[2]], [base2], timeout=3)
    check(all(p.poll() is None for p in rack.procs) and rack.wait_up(0) and now == [base2],
          f"host 2 survives all of it and holds no descriptor for them: {base2} -> {now}")
    r = rack.ctl(0, "run", "--", BULK_PEER)
    check(r.returncode == 0 and r.stdout.count(" ok") == 6, f"and bulk connections still work: {r.stderr.strip()!r}")

    # ---- clean shutdown --------------------------------------------------------------
    p = subprocess.Popen([GOSSAMERCTL, "-c", rack.cfg(0), "run", "--", sleeper], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    started.append(p)
    time.sleep(0.5)
    for i in (2, 1, 0):
        rc = rack.stop(i)
        check(rc == 0 and not os.path.exists(rack.sock(i)), f"SIGTERM: gossamerd {i} exits 0 and removes its socket")
    try:
        p.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
    check(p.returncode not in (0, None), f"a run in progress when the daemons stop fails: rc {p.returncode}")

    # ---- a pair of hosts that cannot make their bulk connection -------------------------
    # Host 1's control address (what host 0 dials) is a proxy: it forwards
    # the mesh connection, then closes every new connection.
    pr = Rack(2, tempfile.mkdtemp(prefix="gossamer-cp2-"))
    proxy = start_behind(pr, Proxy)
    if check(pr.wait_up(0) and pr.wait_up(1), "a 2-host rack whose mesh goes through a proxy is up"):
        r = pr.ctl(0, "run", "--", BULK_PEER, "--proxied")
        check(r.returncode == 0 and r.stdout.count(" ok") == 2, f"bulk connections go through it too: {r.stderr!r}")
        before = fds_quiet(pr.procs)
        proxy.allow = False
        t0 = time.time()
        r = pr.ctl(0, "run", "--", BULK_PEER, timeout=20)
        took = time.time() - t0
        check(r.returncode == 2 and "no bulk connection with host" in r.stderr and "host 0 (h0)" in r.stderr and
              "host 1 (h1)" in r.stderr and "[host" not in r.stdout and took < 11,
              f"no bulk connection possible between hosts 0 and 1: refused in {took:.1f}s, naming both: "
              f"{r.stderr.strip()!r}")
        check("bulk connection to host 1 (h1) failed" in pr.log(0), "host 0 logs why its bulk dial failed")
        now = fds_settle(pr.procs, before)
        check(now == before, f"and no descriptor is left behind: {before} -> {now}")
        proxy.allow = True
        r = pr.ctl(0, "run", "--", BULK_PEER, "--proxied")
        check(r.returncode == 0 and r.stdout.count(" ok") == 2, f"the next run, with the proxy open, works: {r.stderr!r}")
    for i in range(2):
        pr.stop(i)
    proxy.close()

    # ---- dataplane supervision (a stand-in dataplane) --------------------------------
    solo = Rack(1, tempfile.mkdtemp(prefix="gossamer-cp1-"))
    # metrics.listen taken by another process: a clear error, no half-started daemon.
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    taken = os.path.join(solo.d, "taken.yaml")
    solo.write_config(0, solo.psk, name=taken)
    with open(taken) as f:
        text = f.read().replace(f"127.0.0.1:{solo.port(0) + 4000}", f"127.0.0.1:{holder.getsockname()[1]}")
    with open(taken, "w") as f:
        f.write(text)
    p = solo.start(0, config=taken)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
    holder.close()
    check(p.returncode == 1 and "cannot serve metrics on 127.0.0.1:" in solo.log(0) and
          not os.path.exists(solo.sock(0)),
          f"metrics.listen in use: gossamerd exits 1 saying so (rc {p.returncode})")
    fake = write_script(solo.d, "fake-dataplane", f'echo $$ >> {solo.d}/dp.pids\nexec sleep 60\n')
    solo.start(0, extra=("--dataplane", fake))
    solo.wait_up(0)
    time.sleep(0.3)

    def dp_pids():
        try:
            with open(f"{solo.d}/dp.pids") as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []
    first = dp_pids()
    r = solo.ctl(0, "run", "--", BULK_PEER)
    check(r.returncode == 0 and "[host 0] bulk none ok" in r.stdout,
          f"a 1-host rack: no GOSSAMER_BULK, no bulk connection: {r.stdout!r} {r.stderr!r}")
    if check(len(first) == 1 and "running" in solo.ctl(0, "status").stdout, "gossamerd starts its dataplane"):
        os.kill(first[0], signal.SIGKILL)
        end = time.time() + 5
        while time.time() < end and len(dp_pids()) < 2:
            time.sleep(0.05)
        st = solo.ctl(0, "status").stdout
        check(len(dp_pids()) == 2 and "1 restarts" in st and "dataplane killed by signal 9" in solo.log(0),
              f"a killed dataplane is restarted and reported: {st!r}")
    solo.stop(0)
    check(not any(alive(x) for x in dp_pids()), "SIGTERM on gossamerd stops its dataplane")


def run(test, what="control-plane"):
    """Runs TEST, then ends every process it started and removes its
    directories (kept when a check failed); exits 1 if one did."""
    try:
        test()
    finally:
        for p in started:
            if p.poll() is None:
                if p.args and p.args[0] == GOSSAMERD or (len(p.args) > 1 and GOSSAMERD in p.args):
                    p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()
        if not failures:
            for t in tmpdirs:
                shutil.rmtree(t, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print(f"all {what} checks passed")


if __name__ == "__main__":
    run(main)
