"""A small RESP client for Hydra's tests (hydra_test.py): commands encoded
as RESP arrays over a plain socket, replies read and parsed one at a time,
and redis-cli for round trips whose printed form is checked."""
import socket
import subprocess


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, addr, timeout=20):
        self.s = socket.create_connection(addr, timeout=timeout)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def _fill(self):
        b = self.s.recv(1 << 20)
        if not b:
            raise EOFError("server closed the connection")
        self.buf += b

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        """One reply: bytes (status '+' kept as ('+', s)), int, None, list, or ('-', error)."""
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return ("+", rest.decode())
        if t == b"-":
            return ("-", rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._fill()
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise ValueError(f"not RESP: {line[:60]!r}")

    def call(self, *args):
        self.send(encode(*args))
        return self.reply()

    def read_to_eof(self, timeout=5):
        """Everything until the server closes: (bytes, how) with how in eof/reset/timeout."""
        self.s.settimeout(timeout)
        data, how = self.buf, "eof"
        self.buf = b""
        try:
            while True:
                b = self.s.recv(65536)
                if not b:
                    break
                data += b
        except socket.timeout:
            how = "timeout"
        except (ConnectionResetError, BrokenPipeError):
            how = "reset"
        return data, how

    def close(self):
        self.s.close()


def parse_addr(s):
    host, port = s.rsplit(":", 1)
    return host, int(port)


def cli(addr, *args, timeout=20):
    p = subprocess.run(["redis-cli", "-h", addr[0], "-p", str(addr[1]), *args],
                       capture_output=True, text=True, timeout=timeout)
    return (p.stdout + p.stderr).rstrip("\n")


def info_field(c, section, name):
    """The integer field `name` of INFO `section`, read on connection c."""
    text = c.call("INFO", section).decode()
    return [int(ln.split(":", 1)[1]) for ln in text.split("\r\n") if ln.startswith(name + ":")][0]


def reply_within(c, seconds=2):
    """c's next reply, or None if none comes within `seconds` (then its
    timeout is 10 s again)."""
    c.s.settimeout(seconds)
    try:
        return c.reply()
    except OSError:
        return None
    finally:
        c.s.settimeout(10)
