#!/usr/bin/python3
"""Hydra is safe to expose (issue 21 item 3, first part): with
--requirepass every command but AUTH, HELLO and QUIT is refused until the
client authenticates (AUTH, AUTH default, HELLO 3 AUTH default), with
redis-server's replies byte for byte (redis-server --requirepass in the
same run); without a password AUTH behaves as Redis's nopass default user;
the default bind is loopback, and hydra says how to open it.

  hydra_auth_test.py BUILD_DIR

Exits 77 (skip) without redis-py or redis-server.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hydra_pair import check, finish, pair, raw_both, raw_replies  # noqa: E402

PASS = "s3cret pass"


def with_password(ports):
    raw_both(ports, [("PING",), ("GET", "k"), ("MULTI",), ("HELLO", "3"), ("HELLO", "3", "AUTH", "default", "no"),
                     ("HELLO", "3", "AUTH", "bob", PASS), ("AUTH", "no"), ("AUTH", "default", "no"),
                     ("AUTH", "bob", PASS), ("AUTH", "a", "b", "c"), ("AUTH",), ("GET", "k"), ("AUTH", PASS),
                     ("SET", "k", "v"), ("GET", "k"), ("HELLO", "2")], "requirepass: AUTH")
    raw_both(ports, [("HELLO", "3", "AUTH", "default", PASS), ("GET", "k"), ("AUTH", "default", "no"), ("GET", "k"),
                     ("QUIT",)], "requirepass: HELLO AUTH, and a failed AUTH keeps the connection authenticated")
    raw_both(ports, [("AUTH", "default", PASS), ("CONFIG", "GET", "requirepass"), ("FLUSHALL",)],
             "requirepass: CONFIG GET requirepass")


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    with tempfile.NamedTemporaryFile("w", suffix=".pass") as f:
        f.write(PASS + "\n")
        f.flush()
        with pair(build, 1, ["--requirepass-file", f.name], ["--requirepass", PASS]) as ports:
            with_password(ports)
    with tempfile.TemporaryFile("w+") as log:
        with pair(build, 1, [], [], log=log) as ports:  # no --bind: loopback, said so
            raw_both(ports, [("AUTH", "x"), ("AUTH", "default", "x"), ("AUTH", "bob", "x"), ("HELLO", "2", "AUTH", "default", "y"),
                             ("PING",)], "no password: AUTH as Redis's nopass default user")
            got = raw_replies(ports[0], [("CONFIG", "GET", "bind")])[0]
            check(got == b"*2\r\n$4\r\nbind\r\n$9\r\n127.0.0.1\r\n", "the default bind is 127.0.0.1", repr(got))
        log.seek(0)
        out = log.read()
        check("loopback only (the default): --bind 0.0.0.0" in out and "listening on 127.0.0.1:" in out,
              "hydra says it takes loopback clients only and how to open it", out[-400:])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
