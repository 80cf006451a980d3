"""Enough of gossamerd's peer protocol (controlplane/src/proto.hpp) to play a
hostile or honest dialer in the control-plane tests: framing, the
handshake's keys and proofs, tagged messages, the bulk dialer."""
import hashlib
import hmac
import os
import socket
import struct

from cp_harness import CP_VERSION


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
