#!/usr/bin/env python3
"""Lays out the first request after an idle period hop by hop (idle-trace).

Reads the text output of a tracefs instance (tools/bench/idle-trace) and the
roles file (lines "dp0 PID", "dp1 PID", "app0 PID", ...). For each request
between echo's markers "echo_idle I start" and "echo_idle I end", finds the
milestones of the path: host 0's client kicks its dataplane, the dataplane
runs and sends the frame, the frame wakes host 1's dataplane, which wakes
the trustee thread, which answers, host 1's dataplane sends the response,
and the client sees it. Prints each request's milestones (microseconds since
the start marker and since the previous milestone) and, for every hop, the
median over the requests.

  idle_trace_report.py TRACE ROLES [--verbose]
"""
import re
import statistics
import sys

LINE = re.compile(r"^\s*(?P<comm>.+?)-(?P<tid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<ts>\d+\.\d+):\s+(?P<ev>\w+):?\s*(?P<rest>.*)$")


def parse(path):
    events = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            events.append((float(m["ts"]) * 1e6, int(m["tid"]), int(m["cpu"]), m["ev"], m["rest"], m["comm"]))
    return events


def field(rest, name):
    m = re.search(r"\b" + name + r"=(\S+)", rest)
    return m.group(1) if m else None


def samples(events):
    """(index, start position, end position) of each marked request."""
    starts, out = {}, []
    for i, e in enumerate(events):
        if e[3] != "tracing_mark_write":
            continue
        m = re.match(r"echo_idle (\d+) (start|end)", e[4])
        if not m:
            continue
        k = int(m.group(1))
        if m.group(2) == "start":
            starts[k] = i
        elif k in starts:
            out.append((k, starts[k], i))
    return out


def milestones(ev, dp0, dp1, client):
    """The path's milestones in one request's events: [(name, time)]."""
    t0 = ev[0][0]
    got = [("start", t0)]
    seen = set()

    def once(name, t):
        if name not in seen:
            seen.add(name)
            got.append((name, t))

    trustee = None
    for ts, tid, cpu, name, rest, comm in ev:
        if tid == client and name == "sys_write" and "count: 8" in rest and "client kicks dp0" not in seen:
            once("client kicks dp0", ts)
        elif name == "sched_switch":
            nxt = int(field(rest, "next_pid") or -1)
            if nxt == dp0 and "dp0 on a CPU" not in seen and "client kicks dp0" in seen:
                once("dp0 on a CPU", ts)
            elif nxt == dp1 and "frame wakes dp1" in seen:
                once("dp1 on a CPU", ts)
            elif trustee is not None and nxt == trustee:
                once("trustee on a CPU", ts)
        elif name == "sys_epoll_pwait2" and "->" in rest:
            if tid == dp0 and "dp0 on a CPU" in seen:
                once("dp0 epoll returns", ts)
            elif tid == dp1 and "dp1 on a CPU" in seen:
                once("dp1 epoll returns", ts)
        elif name == "sys_sendto" and "->" not in rest:
            if tid == dp0:
                once("dp0 sendto (request)", ts)
            elif tid == dp1 and "trustee answers" in seen:
                once("dp1 sendto (response)", ts)
            elif tid == dp1 and "dp1 wakes trustee" in seen:
                once("dp1 sendto (before the response)", ts)
        elif name == "sys_sendto" and "->" in rest and tid == dp0 and "dp0 sendto (request)" in seen:
            once("dp0 sendto returns", ts)
        elif name == "sched_waking" and tid == dp0 and int(field(rest, "pid") or -1) == dp1:
            once("frame wakes dp1", ts)
        elif name == "sys_futex" and tid == dp1 and "op: 1," in rest and "dp1 wakes trustee" not in seen:
            once("dp1 wakes trustee", ts)
        elif name == "sched_waking" and tid == dp1 and "dp1 wakes trustee" in seen and trustee is None:
            trustee = int(field(rest, "pid") or -1)
        elif name == "ring_doorbell" and trustee is not None and tid == trustee:
            once("trustee answers", ts)
        elif name == "sys_futex" and "->" in rest and trustee is not None and tid == trustee:
            once("trustee futex returns", ts)
    got.append(("end", ev[-1][0]))
    got.sort(key=lambda x: x[1])
    return got


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    verbose = "--verbose" in sys.argv[3:]
    roles = {}
    with open(sys.argv[2]) as f:
        for line in f:
            k, v = line.split()
            roles[k] = int(v)
    events = parse(sys.argv[1])
    # A dataplane with one polling core polls on its main thread.
    dp0, dp1 = roles["dp0"], roles["dp1"]
    hops = {}
    totals = []
    for k, a, b in samples(events):
        ev = events[a : b + 1]
        client = ev[0][1]
        ms = milestones(ev, dp0, dp1, client)
        t0 = ms[0][1]
        totals.append(ms[-1][1] - t0)
        print(f"request {k}: {ms[-1][1] - t0:.0f} us")
        prev = t0
        for i, (name, t) in enumerate(ms[1:], 1):
            print(f"  {t - t0:7.1f} us  (+{t - prev:6.1f})  {name}")
            hops.setdefault(f"{ms[i - 1][0]} -> {name}", []).append(t - prev)
            prev = t
        if verbose:
            for ts, tid, cpu, name, rest, comm in ev:
                if name in ("sys_sched_yield",):
                    continue
                print(f"      {ts - t0:8.1f} [{cpu}] {comm}-{tid} {name}: {rest[:110]}")
    if not totals:
        print("no marked requests in the trace")
        return 1
    print(f"over {len(totals)} requests: median {statistics.median(totals):.0f} us")
    print("hops (median over the requests that had them, us):")
    for h, v in hops.items():
        print(f"  {statistics.median(v):7.1f}  [{len(v)}]  {h}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
