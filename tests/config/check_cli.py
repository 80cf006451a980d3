#!/usr/bin/env python3
"""End-to-end checks of `gossamerctl config check`.

usage: check_cli.py MODE GOSSAMERCTL EXAMPLES_DIR
  examples  every example validates: exit 0, "FILE: ok" per file, no stderr
  typo      a typo'd key: exit 1, FILE:LINE:COLUMN: key.path: message on
            stderr, and the good file given alongside is still reported ok
  usage     --help exits 0; no FILE is a usage error (CLI11's code, not 0 or 1)
"""
import pathlib
import subprocess
import sys
import tempfile


def run(ctl, *args):
    return subprocess.run([ctl, *args], capture_output=True, text=True, timeout=30)


def expect(cond, what, proc=None):
    if not cond:
        detail = ""
        if proc is not None:
            detail = (f"\n  exit {proc.returncode}\n  stdout: {proc.stdout!r}"
                      f"\n  stderr: {proc.stderr!r}")
        sys.exit(f"FAIL: {what}{detail}")


def examples(ctl, examples_dir):
    files = sorted(str(p) for p in pathlib.Path(examples_dir).glob("*.yaml"))
    expect(len(files) >= 3, f"fewer than 3 examples in {examples_dir}")
    p = run(ctl, "config", "check", *files)
    expect(p.returncode == 0, "examples should validate", p)
    expect(p.stdout.splitlines() == [f"{f}: ok" for f in files], "one 'FILE: ok' per file", p)
    expect(p.stderr == "", "nothing on stderr", p)


def typo(ctl, examples_dir):
    good = str(pathlib.Path(examples_dir) / "single-host.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        bad = str(pathlib.Path(tmp) / "typo.yaml")
        pathlib.Path(bad).write_text(
            "host:\n"
            "  name: dev\n"
            "dataplane:\n"
            "  polling_mode: busy\n"
            "  cores: 0\n")
        p = run(ctl, "config", "check", bad, good)
        expect(p.returncode == 1, "a bad file makes the exit status 1", p)
        expected = [
            f"{bad}:4:3: dataplane.polling_mode: unknown key 'polling_mode' (did you mean 'polling'?)",
            f"{bad}:5:10: dataplane.cores: value 0 out of range [1, 8]",
        ]
        expect(p.stderr.splitlines() == expected, "every error, FILE:LINE:COLUMN: key.path: message", p)
        expect(p.stdout.splitlines() == [f"{good}: ok"], "the good file is still checked", p)

        missing = str(pathlib.Path(tmp) / "missing.yaml")
        p = run(ctl, "config", "check", missing)
        expect(p.returncode == 1, "an unreadable file is invalid", p)
        expect(p.stderr.startswith(f"{missing}: cannot read file:"), "says why", p)


def usage(ctl, _examples_dir):
    p = run(ctl, "--help")
    expect(p.returncode == 0 and "config" in p.stdout, "--help lists subcommands", p)
    p = run(ctl, "config", "check", "--help")
    expect(p.returncode == 0 and "FILE" in p.stdout, "config check --help", p)
    p = run(ctl, "config", "check")
    expect(p.returncode not in (0, 1), "no FILE is a usage error", p)
    p = run(ctl)
    expect(p.returncode not in (0, 1), "no subcommand is a usage error", p)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    mode, ctl, examples_dir = sys.argv[1:]
    {"examples": examples, "typo": typo, "usage": usage}[mode](ctl, examples_dir)
    print(f"ok: {mode}")
