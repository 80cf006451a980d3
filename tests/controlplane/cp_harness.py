"""The control-plane tests' harness: a loopback rack of gossamerds (Rack),
the checks' bookkeeping (check, run), a Prometheus scrape, instance
scripts, descriptor counting and a TCP proxy for hosts behind one.
Shared by controlplane_test.py and inject_test.py."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time


GOSSAMERD, GOSSAMERCTL, BULK_PEER = sys.argv[1], sys.argv[2], sys.argv[3]
BASE_PORT = 17000 + (os.getpid() % 500) * 8
# A timeout of 15 intervals: a peer is declared down only after 1.5 s of
# silence, which a machine loaded by parallel builds does not cause by
# itself (600 ms once did, at load 18); the stopped-gossamerd check
# still bounds detection by this timeout (controlplane_test.py).
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
