#!/usr/bin/env python3
"""path-pages' report: pages and translations per process and mapping.

Reads DIR/roles ("ROLE PID" lines) and DIR/smaps.I.ROLE (a copy of
/proc/PID/smaps taken right after idle request I, the referenced bits
cleared right before it) and prints, per process and kind of mapping, the
median over the requests of the KiB referenced and of the translations they
need: one per 2 MiB for the part of a mapping in huge pages (AnonHugePages,
ShmemPmdMapped, FilePmdMapped), one per 4 KiB for the rest.

Kinds marked * are a file's read-only pages, shared with every process that
maps the file: smaps counts them referenced when any process touched them
(the page's own referenced flag), so for libc and ld.so they include the
rest of the machine, and the two dataplanes (or echo instances) count each
other's code. The other kinds are this process's own pages.
"""
import collections
import os
import re
import statistics
import sys


def kind(name, perms):
    """A short label for a mapping: what it is, not where."""
    if not name:
        return "anon"
    if name.startswith("/memfd:"):
        base = name[len("/memfd:"):].split(" ")[0]
        return "memfd:" + base
    if name.startswith("["):
        return name
    base = os.path.basename(name.split(" ")[0])
    base = re.sub(r"\.so[.0-9]*$", ".so", base)
    if "x" in perms:
        return base + " text*"
    return base + (" data" if "w" in perms else " rodata*")


def parse(path):
    """{kind: (referenced KiB, translations)} for one smaps file."""
    out = collections.defaultdict(lambda: [0, 0.0])
    cur = None
    fields = {}

    def flush():
        if cur is None:
            return
        ref = fields.get("Referenced", 0)
        huge = fields.get("AnonHugePages", 0) + fields.get("ShmemPmdMapped", 0) + fields.get("FilePmdMapped", 0)
        if ref == 0:
            return
        in_huge = min(ref, huge)
        out[cur][0] += ref
        out[cur][1] += -(-in_huge // 2048) + (ref - in_huge) / 4
    head = re.compile(r"^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \S+\s*(.*)$")
    with open(path) as f:
        for line in f:
            m = head.match(line)
            if m:
                flush()
                cur = kind(m.group(2).strip(), m.group(1))
                fields = {}
                continue
            k, _, v = line.partition(":")
            v = v.strip()
            if v.endswith(" kB"):
                fields[k] = int(v[:-3])
    flush()
    return out


def main():
    d = sys.argv[1]
    roles = [l.split() for l in open(os.path.join(d, "roles")) if l.strip()]
    samples = sorted({int(f.split(".")[1]) for f in os.listdir(d) if f.startswith("smaps.")})
    if not samples:
        sys.exit("path-pages: no smaps were taken (did the hook run?)")
    print(f"{len(samples)} requests; per process and mapping, the median of each request's")
    print("KiB referenced and translations (4 KiB pages + 2 MiB pages)")
    grand = [0.0] * len(samples)
    for role, _ in roles:
        per = [parse(os.path.join(d, f"smaps.{i}.{role}")) for i in samples
               if os.path.exists(os.path.join(d, f"smaps.{i}.{role}"))]
        if not per:
            continue
        kinds = sorted({k for p in per for k in p}, key=lambda k: -statistics.median(p.get(k, [0, 0])[1] for p in per))
        totals = [sum(v[1] for v in p.values()) for p in per]
        own = [sum(v[1] for k, v in p.items() if not k.endswith("*")) for p in per]
        for i, t in enumerate(own):
            grand[i] += t
        print(f"\n{role}: {statistics.median(totals):.0f} translations, "
              f"{statistics.median(own):.0f} in its own pages (not *)")
        for k in kinds:
            kib = statistics.median(p.get(k, [0, 0])[0] for p in per)
            tr = statistics.median(p.get(k, [0, 0])[1] for p in per)
            if tr >= 0.5:
                print(f"  {k:40s} {kib:8.0f} KiB {tr:7.1f}")
    print(f"\nall processes, own pages (not *): {statistics.median(grand):.0f} translations per request "
          f"(min {min(grand):.0f}, max {max(grand):.0f})")


if __name__ == "__main__":
    main()
