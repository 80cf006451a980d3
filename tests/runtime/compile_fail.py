#!/usr/bin/env python3
"""Compile-failure tests of the closure rules (gossamer NoRef).

usage: compile_fail.py --include DIR --snippets DIR [--jobs N] -- CXX [CXX ARGS...]

Every snippets/fail_*.cpp must fail to compile, and the compiler's output must
contain "gossamer NoRef" and "trust.ref()" (the static_assert that tells the
user what to do instead). Every snippets/ok_*.cpp is a positive control and
must compile with the same command: it catches a wrong include path or
compiler command, which would otherwise make every fail_ snippet "pass".
"""

import argparse
import concurrent.futures
import pathlib
import subprocess
import sys

REQUIRED = ("gossamer NoRef", "trust.ref()")


def compile_snippet(cxx, include, path):
    cmd = list(cxx) + ["-std=c++20", "-fsyntax-only", "-I" + str(include), str(path)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return cmd, proc.returncode, proc.stdout + proc.stderr


def check(cxx, include, path):
    """Returns an error message, or None when the snippet behaves."""
    cmd, rc, out = compile_snippet(cxx, include, path)
    name = path.name
    if name.startswith("ok_"):
        if rc != 0:
            return f"{name}: positive control failed to compile:\n  {' '.join(cmd)}\n{out}"
        return None
    if rc == 0:
        return f"{name}: compiled, but must be rejected"
    missing = [s for s in REQUIRED if s not in out]
    if missing:
        return (f"{name}: rejected, but the diagnostic lacks {missing}:\n  {' '.join(cmd)}\n"
                + out[-4000:])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--include", required=True, type=pathlib.Path)
    ap.add_argument("--snippets", required=True, type=pathlib.Path)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("cxx", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cxx = args.cxx[1:] if args.cxx and args.cxx[0] == "--" else args.cxx
    if not cxx:
        ap.error("no compiler command after --")
    if not (args.include / "gossamer" / "gossamer.hpp").is_file():
        print(f"no gossamer/gossamer.hpp under {args.include}", file=sys.stderr)
        return 1
    snippets = sorted(args.snippets.glob("*.cpp"))
    fails = [p for p in snippets if p.name.startswith("fail_")]
    oks = [p for p in snippets if p.name.startswith("ok_")]
    if not fails or not oks:
        print(f"expected fail_*.cpp and ok_*.cpp snippets in {args.snippets}", file=sys.stderr)
        return 1
    errors = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda p: (p, check(cxx, args.include, p)), snippets))
    for path, err in results:
        print(f"{'FAIL' if err else 'ok  '} {path.name}")
        if err:
            errors.append(err)
    for e in errors:
        print("\n" + e, file=sys.stderr)
    print(f"{len(snippets) - len(errors)}/{len(snippets)} snippets behave")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
