"""The check log of the Hydra tests: check() prints one line per check and
counts the failures; finish() prints the total and gives the exit status.
No dependencies, so tests that need neither redis-py nor redis-server
(hydra_scan_test.py, hydra_pipeline_test.py) share it with hydra_pair.py.
"""
failures = []


def check(ok, what, detail=""):
    print(("ok: " if ok else "FAIL: ") + what + ("" if ok or not detail else f": {detail}"), flush=True)
    if not ok:
        failures.append(what)
    return ok


def finish():
    print(f"{len(failures)} failure(s)" if failures else "all passed")
    return 1 if failures else 0
