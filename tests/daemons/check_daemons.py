#!/usr/bin/env python3
"""The daemons are wired to their real dependencies and their configuration:
--version runs code from DPDK / libibverbs / prometheus-cpp, a bad config is
refused with FILE:LINE:COLUMN errors, and a good one is accepted and then
reported as not implemented yet (exit 3), never silently "working"."""
import subprocess
import sys
import tempfile

def run(args):
    return subprocess.run(args, capture_output=True, text=True, timeout=60)

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
    r = run([exe, "--config", good_config])
    if r.returncode != 3 or "not implemented yet" not in r.stderr:
        failures.append(f"good config: rc={r.returncode} stderr={r.stderr!r}")
    for f in failures:
        print("FAILED:", f)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0

if __name__ == "__main__":
    sys.exit(main())
