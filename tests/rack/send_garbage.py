#!/usr/bin/env python3
"""Sends malformed frames from a raw socket on IFACE to DST_MAC: random
bytes, truncated headers, UDP to the dataplane port with a bad magic, a bad
version, wrong lengths, a bogus source host, and truncated copies of a
plausible frame; and well-formed frames with a forged tag (a restart, a
request, a detach announce), which must fail authentication. Run inside a
rack-in-a-box host namespace.

  send_garbage.py IFACE DST_MAC SRC_IP DST_IP PORT COUNT"""
import os
import random
import re
import socket
import struct
import sys
import time


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def udp_frame(dst_mac, src_mac, src_ip, dst_ip, port, payload):
    udp = struct.pack("!HHHH", port, port, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0,
                     socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return dst_mac + src_mac + b"\x08\x00" + ip + udp


def wire_constant(name):
    # A constant of wire.hpp (kVersion, kTagBytes): the other malformations
    # must fail for their own reason, not for the version or the length.
    hpp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "dataplane", "src", "wire.hpp")
    with open(hpp) as f:
        return int(re.search(r"\b" + name + r" = (\d+);", f.read()).group(1))


VERSION = wire_constant("kVersion")


def header(magic=0x464D5347, version=VERSION, typ=1, conn=0, src=0, dst=1, seq=1, records=0, length=0,
           boot=12345):
    # wire::FrameHeader (48 bytes): magic, version, type, conn, flags, src_host,
    # dst_host, seq, boot (64-bit), dst_boot (64-bit), ack, credit, records,
    # length, coalesced, coalescing.
    return struct.pack("<IBBBBHHIQQIIHHHH", magic, version, typ, conn, 0, src, dst, seq, boot, 0, 0, 32,
                       records, length, 0, 0)


TAG = wire_constant("kTagBytes")  # the trailer after the records (nonce and tag, dataplane/src/auth.hpp)


def main():
    iface, dst, src_ip, dst_ip, port, count = sys.argv[1:7]
    port, count = int(port), int(count)
    dst_mac = bytes.fromhex(dst.replace(":", ""))
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    src_mac = s.getsockname()[4]
    rnd = random.Random(42)
    frames = []
    for _ in range(count):
        frames.append(dst_mac + src_mac + bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 200))))
        frames.append(dst_mac + src_mac + b"\x08\x00" + bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 60))))
        frames.append(udp_frame(dst_mac, src_mac, src_ip, dst_ip, port, header(magic=0xdeadbeef)))
        frames.append(udp_frame(dst_mac, src_mac, src_ip, dst_ip, port, header(version=9)))
        frames.append(udp_frame(dst_mac, src_mac, src_ip, dst_ip, port, header(records=3, length=40) + b"\0" * 40))
        frames.append(udp_frame(dst_mac, src_mac, src_ip, dst_ip, port, header(src=7)))
        frames.append(udp_frame(dst_mac, src_mac, src_ip, dst_ip, port, header(conn=200)))
        rec = struct.pack("<BBHHHIHHHHIQ", 9, 0, 1, 0, 0, 1, 8, 0, 0, 0, 0, 1) + b"\0" * 8
        frames.append(udp_frame(dst_mac, src_mac, src_ip, dst_ip, port, header(records=1, length=len(rec)) + rec))
        good = udp_frame(dst_mac, src_mac, src_ip, dst_ip, port, header())
        frames.append(good[:rnd.randint(14, len(good) - 1)])
        # Well formed but forged (the tag is made up): a restart with a
        # newer incarnation, a request invoking closure 1 on trustee 1, a
        # non-graceful detach announce. Each must be dropped as bad_mac.
        future = time.time_ns() + 400 * 10**9  # incarnations are ns since the epoch
        tag = bytes(rnd.getrandbits(8) for _ in range(TAG))
        frames.append(udp_frame(dst_mac, src_mac, src_ip, dst_ip, port, header(typ=2, seq=0, boot=future) + tag))
        req = struct.pack("<BBHHHIHHHHIQ", 1, 0, 1, 0, 1, 1, 8, 0, 0, 0, 0, 1) + struct.pack("<Q", 1)
        frames.append(udp_frame(dst_mac, src_mac, src_ip, dst_ip, port,
                                header(conn=1, records=1, length=len(req)) + req + tag))
        det = struct.pack("<BBHHHIHHHHIQ", 4, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 1) + b"\0" * 16
        frames.append(udp_frame(dst_mac, src_mac, src_ip, dst_ip, port, header(records=1, length=len(det)) + det + tag))
    for f in frames:
        s.send(f.ljust(14, b"\0"))
    print(f"sent {len(frames)} malformed frames")


if __name__ == "__main__":
    main()
