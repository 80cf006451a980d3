#!/usr/bin/env python3
"""`gossamerctl top` on a terminal, end to end.

Usage: top_pty.py GOSSAMERCTL CONFIG EXPECTED

EXPECTED is a comma-separated list of HOST:THREAD pairs, e.g. h0:0,h0:1,h1:2.

Runs `GOSSAMERCTL -c CONFIG top --iterations 2 --interval 1` under a
pseudo-terminal (top draws differently on a terminal: cursor addressing,
erase sequences, the keyboard in non-canonical mode), reads all its output
with a deadline, strips the escape sequences and checks:
  - it exits with status 0 and leaves the cursor visible;
  - it drew two frames, with terminal escapes;
  - in the second frame, every expected (host, thread) has a row under its
    host's header with a numeric utilization (the first frame has no rates),
    and every host with expected threads shows its dataplane's time per slot
    in each stage (rx, deliver, doorbells, tx) as numbers;
then runs `top` with no --iterations and presses `q`: it must quit with 0.
Prints one ok/FAIL line per check and the second frame; exits 1 on failure,
77 (skip) when no pseudo-terminal can be opened, 2 on bad usage.
Python 3 standard library only.
"""
import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time

DEADLINE = float(os.environ.get("TOP_PTY_DEADLINE", "20"))  # seconds per run
ROWS, COLS = 500, 250  # a large window: no row of a small rack is cut
ESCAPES = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|[()][0-9A-Za-z]|[=>78])")
NUMBER = re.compile(r"^\d+(\.\d+)?$")

failures = 0


def ok(msg):
    print(f"ok: {msg}", flush=True)


def fail(msg):
    global failures
    failures += 1
    print(f"FAIL: {msg}", flush=True)


class NoPty(Exception):
    pass


def spawn(argv):
    """Starts argv on a new pseudo-terminal; returns (pid, master fd)."""
    try:
        pid, fd = pty.fork()
    except OSError as e:
        raise NoPty(str(e))
    if pid == 0:
        try:
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    return pid, fd


def read_until_exit(pid, fd, deadline, on_output=None):
    """Reads the terminal until the child exits or the deadline passes
    (then kills it). Returns (output bytes, exit status or None)."""
    out = b""
    end = time.monotonic() + deadline
    while True:
        left = end - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(fd)
            return out, None
        ready, _, _ = select.select([fd], [], [], min(left, 0.2))
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal (exited)
                chunk = b""
            if not chunk:
                break
            out += chunk
            if on_output:
                on_output(out)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return out, os.waitstatus_to_exitcode(status)


def frames_of(text):
    """Splits top's output into frames, each a list of lines, escapes removed."""
    plain = ESCAPES.sub("", text.replace("\r", ""))
    frames = []
    for line in plain.split("\n"):
        if line.startswith("gossamerctl top "):
            frames.append([])
        if frames:
            frames[-1].append(line.rstrip())
    return frames


def utilizations(frame):
    """{(host, thread): [UTIL% column of each row]} of one frame."""
    found = {}
    host = None
    in_table = False
    for line in frame:
        m = re.match(r"^host (\S+)", line)
        if m:
            host, in_table = m.group(1), False
            continue
        if line.startswith("  THREAD "):
            in_table = True
            continue
        fields = line.split()
        if host and in_table and len(fields) >= 3 and line.startswith("  ") and fields[0].isdigit():
            found.setdefault((host, fields[0]), []).append(fields[1])
    return found


def check_two_frames(ctl, config, expected):
    argv = [ctl, "-c", config, "top", "--iterations", "2", "--interval", "1"]
    pid, fd = spawn(argv)
    out, status = read_until_exit(pid, fd, DEADLINE)
    text = out.decode("utf-8", "replace")
    if status is None:
        fail(f"{' '.join(argv)} still running after {DEADLINE:.0f} s (killed); output:\n{text[-2000:]}")
        return
    if status == 0:
        ok("top --iterations 2 exited with status 0")
    else:
        fail(f"top --iterations 2 exited with status {status}; output:\n{text[-2000:]}")
    if "\x1b[H" in text and text.rstrip("\r\n").endswith("\x1b[?25h"):
        ok("drawn with terminal escapes; the cursor is visible again at exit")
    else:
        fail(f"no cursor addressing, or the cursor left hidden: {text[-200:]!r}")
    frames = frames_of(text)
    if len(frames) != 2:
        fail(f"{len(frames)} frames, expected 2; output:\n{text[-3000:]}")
        if not frames:
            return
    else:
        ok("two refreshes")
    last = frames[-1]
    print("second frame:")
    for line in last:
        print(f"  | {line}")
    found = utilizations(last)
    missing, not_numeric = [], []
    for host, thread in expected:
        utils = found.get((host, thread))
        if not utils:
            missing.append(f"{host}:{thread}")
        elif not any(NUMBER.match(u) for u in utils):
            not_numeric.append(f"{host}:{thread}={'/'.join(utils)}")
    if missing:
        fail(f"no row in the second frame for {', '.join(missing)} (rows: "
             f"{', '.join(f'{h}:{t}' for h, t in sorted(found)) or 'none'})")
    if not_numeric:
        fail(f"no numeric utilization in the second frame for {', '.join(not_numeric)}")
    if not missing and not not_numeric:
        ok("second frame: " + ", ".join(
            f"{h}:{t} {next(u for u in found[(h, t)] if NUMBER.match(u))}%" for h, t in expected))
    # Every host under load shows its dataplane's time per slot in each
    # stage, as numbers (the first frame has no rates).
    stages = [line for line in last if "time per slot:" in line]
    hosts = {h for h, _ in expected}
    costed = [line for line in stages
              if all(re.search(rf"\b{name} [0-9.]+[kMG]?ns\b", line) for name in ("rx", "deliver", "doorbells", "tx"))]
    if len(costed) >= len(hosts):
        ok(f"second frame: time per slot by stage on {len(costed)} hosts: {costed[0].strip()}")
    else:
        fail(f"second frame: {len(costed)} hosts show every stage's time per slot, expected {len(hosts)}: {stages}")
    # And what their ports' devices dropped, as a rate (0 on a healthy rack).
    drops = [line for line in last if re.search(r"\bport drops/s [0-9.]+[kMG]?\b", line)]
    if len(drops) >= len(hosts):
        ok(f"second frame: port drops/s on {len(drops)} hosts")
    else:
        fail(f"second frame: {len(drops)} hosts show their ports' drops/s, expected {len(hosts)}: "
             f"{[line for line in last if 'messages/s' in line]}")


def check_q_quits(ctl, config):
    argv = [ctl, "-c", config, "top", "--interval", "1"]
    pid, fd = spawn(argv)
    pressed = []

    def press_q_after_first_frame(out):
        if not pressed and b"gossamerctl top " in out:
            time.sleep(0.3)  # while it waits for the next refresh
            os.write(fd, b"q")
            pressed.append(time.monotonic())

    out, status = read_until_exit(pid, fd, DEADLINE, press_q_after_first_frame)
    if not pressed:
        fail(f"top without --iterations drew nothing within {DEADLINE:.0f} s")
    elif status == 0 and time.monotonic() - pressed[0] < 5:
        ok(f"q quits (status 0, {time.monotonic() - pressed[0]:.1f} s after the key)")
    else:
        fail(f"after q: status {status}; output tail: {out.decode('utf-8', 'replace')[-300:]!r}")


def main():
    if len(sys.argv) != 4:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    ctl, config, spec = sys.argv[1:]
    expected = []
    for pair in filter(None, spec.split(",")):
        host, sep, thread = pair.rpartition(":")
        if not sep or not host or not thread.isdigit():
            print(f"top_pty.py: bad EXPECTED entry {pair!r} (want HOST:THREAD)", file=sys.stderr)
            return 2
        expected.append((host, thread))
    if not expected:
        print("top_pty.py: EXPECTED is empty", file=sys.stderr)
        return 2
    if not os.access(ctl, os.X_OK):
        print(f"top_pty.py: {ctl}: not an executable", file=sys.stderr)
        return 2
    try:
        check_two_frames(ctl, config, expected)
        check_q_quits(ctl, config)
    except NoPty as e:
        print(f"SKIP: no pseudo-terminal ({e})")
        return 77
    print(f"top_pty: {'FAIL' if failures else 'ok'} ({failures} failed checks)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
