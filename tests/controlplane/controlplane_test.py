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
import os
import re
import signal
import socket
import struct
import subprocess
import tempfile
import time

from cp_harness import *  # noqa: F401,F403  (the rack, the checks)
from cp_wire import *  # noqa: F401,F403  (the peer protocol)


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
        check("running" in st.stdout and str(pids[2]) in st.stdout, "status on host 2 shows the running instance")
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



if __name__ == "__main__":
    run(main)
