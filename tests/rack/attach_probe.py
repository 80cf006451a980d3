#!/usr/bin/env python3
"""Speaks the attach handshake (gossamer/abi/attach.hpp) to a dataplane the
way a buggy or foreign application would, and prints the dataplane's answer.

  attach_probe.py SOCKET CASE
CASE: wrong-version | no-build-id | unsealed | wrong-size | garbage
Prints "refused: TEXT" or "accepted" and exits 0 if it got an answer.

  attach_probe.py SOCKET silent N SECONDS
Opens N connections that never send the attach message and holds them for
SECONDS; prints "silent: N opened, K closed by the dataplane, last after T s"
(a dataplane must refuse them, and must not wait on any of them)."""
import os
import socket
import re
import struct
import sys

ATTACH = 1
REFUSED = 3
ATTACH_OK = 2


def abi_header(name):
    hpp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "runtime", "include", "gossamer",
                       "abi", name)
    with open(hpp) as f:
        return f.read()


def attach_version():
    # abi::kAttachVersion, read from attach.hpp.
    return int(re.search(r"\bkAttachVersion = (\d+);", abi_header("attach.hpp")).group(1))


def slot_layout_version():
    # abi::kLayoutVersion, computed as slots.hpp does from its constants.
    text = abi_header("slots.hpp")
    const = {k: int(re.search(rf"\b{k} = (\d+);", text).group(1)) for k in ("kPrimaryBytes", "kOverflowBytes")}
    revision = int(re.search(r"kLayoutVersion =\s*(\d+)u << 24", text).group(1))
    return (revision << 24) | (const["kPrimaryBytes"] << 12) | (const["kOverflowBytes"] >> 6)


def request(version=None, layout=None, build_id=b"\x01" * 20, threads=4, seg=4096):
    if version is None:
        version = attach_version()
    if layout is None:
        layout = slot_layout_version()
    bid = build_id.ljust(64, b"\0")
    # type, versions, build-id, run id and run token (none), threads, pid, segment size
    return struct.pack("<IIII64s64s64sIIQ", ATTACH, version, layout, len(build_id), bid, b"", b"", threads,
                       os.getpid(), seg)


def silent(path, n, seconds):
    import select
    import time
    start = time.monotonic()
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(path)
        socks.append(s)
    open_socks = set(socks)
    last = 0.0
    deadline = start + seconds
    while open_socks and time.monotonic() < deadline:
        ready, _, _ = select.select(list(open_socks), [], [], max(0.0, deadline - time.monotonic()))
        for s in ready:
            # A refusal (a message) or the close: either way the dataplane let go.
            try:
                data = s.recv(512)
            except OSError:
                data = b""
            if not data or len(data) >= 4:
                open_socks.discard(s)
                last = time.monotonic() - start
    print(f"silent: {n} opened, {n - len(open_socks)} closed by the dataplane, last after {last:.1f} s")
    for s in socks:
        s.close()
    return 0


def main():
    path, case = sys.argv[1], sys.argv[2]
    if case == "silent":
        return silent(path, int(sys.argv[3]), float(sys.argv[4]))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(path)
    fd = os.memfd_create("probe", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 4096)
    ev = os.eventfd(0) if hasattr(os, "eventfd") else os.memfd_create("ev")
    if case != "unsealed":
        import fcntl
        fcntl.fcntl(fd, 1033, 0x0002 | 0x0004)  # F_ADD_SEALS: SHRINK | GROW
    if case == "wrong-version":
        msg = request(version=99)
    elif case == "no-build-id":
        msg = request(build_id=b"")
    elif case == "wrong-size":
        msg = request()[:50]
    elif case == "garbage":
        msg = os.urandom(224)
    else:
        msg = request()
    socket.send_fds(s, [msg], [fd, ev])
    try:
        reply = s.recv(512)
    except socket.timeout:
        print("no answer")
        return 1
    if len(reply) < 16:
        print("closed")
        return 0
    typ = struct.unpack_from("<I", reply)[0]
    text = reply[16:].split(b"\0")[0].decode(errors="replace")
    print(("refused: " + text) if typ == REFUSED else ("accepted" if typ == ATTACH_OK else f"type {typ}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
