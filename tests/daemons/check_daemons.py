#!/usr/bin/env python3
"""The daemons are wired to their real dependencies and their configuration:
--version runs code from DPDK / libibverbs / prometheus-cpp, a bad config is
refused with FILE:LINE:COLUMN errors. gossamerd without its pre-shared key
file says which file and how to make one (the rest of gossamerd is in
tests/controlplane/). The dataplane refuses a config without a DPDK port clearly, and on
a net_null vdev it starts, creates its socket, and on SIGTERM stops cleanly
and removes the socket."""
import os
import signal
import subprocess
import sys
import tempfile
import time

def run(args):
    return subprocess.run(args, capture_output=True, text=True, timeout=60)

def check_dataplane(exe):
    failures = []
    d = tempfile.mkdtemp()
    base = ('host:\n  index: 0\nrack:\n  hosts:\n    - name: a\n      control: 127.0.0.1:7700\n'
            '      data: 127.0.0.1:7800\n    - name: b\n      control: 127.0.0.2:7700\n'
            '      data: 127.0.0.2:7800\n')
    sock = os.path.join(d, "dp.sock")
    psk = os.path.join(d, "psk")
    with open(os.open(psk, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    def write(name, eal, psk_file=psk, extra=""):
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(base + f"dataplane:\n  transport: udp\n  socket: {sock}\n  eal_args: {eal}\n"
                    f"  incarnation_file: {d}/dp.incarnation\n{extra}"
                    f"controlplane:\n  psk_file: {psk_file}\n")
        return path
    noport = write("noport.yaml", '["--no-huge", "-m", "64", "--no-shconf", "--no-pci", "--file-prefix=dpw1"]')
    r = run([exe, "--config", noport])
    if r.returncode != 1 or "does not exist" not in r.stderr or "--vdev" not in r.stderr:
        failures.append(f"config without a port: rc={r.returncode} stderr={r.stderr[-400:]!r}")
    # Frames are authenticated by default: no rack secret, no dataplane.
    nopsk = write("nopsk.yaml", '["--no-huge", "-m", "64", "--no-shconf", "--no-pci", "--file-prefix=dpw3", '
                                '"--vdev=net_null0"]', psk_file=os.path.join(d, "missing-psk"))
    r = run([exe, "--config", nopsk])
    if r.returncode != 1 or "start-up step 'keys'" not in r.stderr or "missing-psk" not in r.stderr:
        failures.append(f"config without the rack secret: rc={r.returncode} stderr={r.stderr[-400:]!r}")
    null = write("null.yaml", '["--no-huge", "-m", "64", "--no-shconf", "--no-pci", "--file-prefix=dpw2", '
                              '"--vdev=net_null0"]')
    p = subprocess.Popen([exe, "--config", null], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for _ in range(300):
        if os.path.exists(sock) or p.poll() is not None:
            break
        time.sleep(0.1)
    if not os.path.exists(sock):
        p.kill()
        failures.append(f"net_null dataplane never created its socket: {p.communicate()[0][-600:]!r}")
        return failures
    mode = os.stat(sock).st_mode & 0o777
    if mode != 0o600:
        failures.append(f"socket mode {oct(mode)}, expected 0600 without socket_group")
    p.send_signal(signal.SIGTERM)
    try:
        out = p.communicate(timeout=20)[0]
    except subprocess.TimeoutExpired:
        p.kill()
        out = p.communicate()[0]
        failures.append("dataplane did not stop within 20 s of SIGTERM")
    if p.returncode != 0 or os.path.exists(sock):
        failures.append(f"SIGTERM: rc={p.returncode}, socket left: {os.path.exists(sock)}, out={out[-400:]!r}")
    return failures


def main():
    exe, kind, good_config = sys.argv[1], sys.argv[2], sys.argv[3]
    failures = []
    r = run([exe, "--version"])
    want = {"dataplane": "DPDK", "gossamerd": "prometheus-cpp"}[kind]
    if r.returncode != 0 or want not in r.stdout:
        failures.append(f"--version: rc={r.returncode} stdout={r.stdout!r} stderr={r.stderr!r}")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write("host:\n  name: a\nruntime:\n  polling: spin\n")
        bad = f.name
    r = run([exe, "--config", bad])
    if r.returncode != 1 or f"{bad}:4:12: runtime.polling:" not in r.stderr:
        failures.append(f"bad config: rc={r.returncode} stderr={r.stderr!r}")
    if kind == "gossamerd":
        d = tempfile.mkdtemp()
        cfg = os.path.join(d, "g.yaml")
        missing = os.path.join(d, "no-psk")
        with open(good_config) as src, open(cfg, "w") as f:
            f.write(src.read().replace("/etc/gossamer/psk", missing))
        r = run([exe, "--config", cfg, "--no-dataplane"])
        if r.returncode != 1 or missing not in r.stderr or "chmod 600" not in r.stderr:
            failures.append(f"missing psk file: rc={r.returncode} stderr={r.stderr!r}")
    else:
        failures += check_dataplane(exe)
    for f in failures:
        print("FAILED:", f)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0

if __name__ == "__main__":
    sys.exit(main())
