#!/usr/bin/env bash
# An idle host costs almost nothing (issue 19): on a 2-host rack in a box
# with gossamerd, host 0's dataplane and gossamerd together use < 2 % of one
# CPU over 5 idle seconds (their threads' scheduler counters). Then strace
# -c -f counts every system call of the dataplane for a few idle seconds:
# frames wake its sleeps, so it sleeps at most ~20 times a second (it woke
# every millisecond to look before); besides the sleeps and draining the
# wake socket before them, only a small rate of calls (the once-a-second stats
# and faults files, reading a wake eventfd after a wake-up) is allowed, and
# accept4/sched_yield/recvmsg must not appear at all (issue 17).
#   rack_idle.sh BUILD_DIR [LINK [HOSTS]]
# LINK: af_packet (default; frames wake a core through a packet socket of
# its own), af_xdp (through Gossamer's XDP program's ring buffer) or memif
# (through the doorbell beside the memif socket; no kernel frame can reach
# that link, so the last check holds trivially there). HOSTS (default 2):
# with memif and 3, host 0's dataplane serves two ports (one memif per
# peer), and its core sleeps long only when it armed both doorbells.
# Needs root, network namespaces and strace; exits 77 (skip) otherwise.
set -uo pipefail
. "$(dirname "$0")/lib.sh" "$1"

link=${2:-af_packet} hosts=${3:-2}
skip_unless_rack
[ "$link" != af_xdp ] || skip_unless_bpf_loads
command -v strace >/dev/null || { echo "SKIP: strace is not installed"; exit 77; }
own_rack ri "idle-$link-$hosts"
out="$GOSSAMER_RACK_DIR.out"
mkdir -p "$out"
cleanup() {
  [ -n "${KEEP_RACK:-}" ] || "$rib" down >/dev/null 2>&1 || true
  rm -rf "$out"
}
trap cleanup EXIT
SECONDS_TRACED=4

if ! timeout 90 "$rib" up --hosts "$hosts" --link "$link" >"$out/up" 2>&1; then
  tail -20 "$out/up"; echo "FAIL: rack up"; exit 1
fi
pid=$("$rib" pid 0 dataplane) || { echo "FAIL: no dataplane pid"; exit 1; }
gd=$("$rib" pid 0 gossamerd) || { echo "FAIL: no gossamerd pid"; exit 1; }
sleep 2  # idle: past the start-up and the first announces

# CPU time of an idle host (its dataplane and gossamerd, every thread),
# from the scheduler's nanosecond counters, before strace slows anything.
oncpu_ns() {  # PID...: nanoseconds on a CPU, summed over their threads
  cat $(for p in "$@"; do echo /proc/"$p"/task/*/schedstat; done) 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'
}
stats="$GOSSAMER_RACK_DIR/h0/dataplane.sock.stats"
kernel_frames() {  # frames of the kernel's (ARP, IPv6, TCP) that reached host 0's dataplane
  awk '$1 == "dropped{reason=\"not_ipv4\"}" || $1 == "dropped{reason=\"not_udp\"}" { s += $2 } END { print s + 0 }' "$stats"
}
kernel0=$(kernel_frames)
CPU_SECONDS=5
before=$(oncpu_ns "$pid" "$gd") dp_before=$(oncpu_ns "$pid")
sleep "$CPU_SECONDS"
after=$(oncpu_ns "$pid" "$gd") dp_after=$(oncpu_ns "$pid")
pct=$(awk -v a="$before" -v b="$after" -v s="$CPU_SECONDS" 'BEGIN { printf "%.2f", (b - a) / (s * 1e7) }')
dp_pct=$(awk -v a="$dp_before" -v b="$dp_after" -v s="$CPU_SECONDS" 'BEGIN { printf "%.2f", (b - a) / (s * 1e7) }')
echo "idle host 0 ($link, $hosts hosts) over ${CPU_SECONDS} s: dataplane and gossamerd ${pct}% of one CPU (dataplane ${dp_pct}%)"
if awk -v p="$pct" 'BEGIN { exit !(p < 2) }'; then pass "idle CPU ${pct}% < 2% of one CPU"
else fail "idle CPU ${pct}% of one CPU (dataplane ${dp_pct}%), want < 2%"; fi
timeout -s INT "$SECONDS_TRACED" strace -c -f -q -p "$pid" -o "$out/strace" 2>/dev/null
[ -s "$out/strace" ] || { echo "FAIL: strace wrote nothing"; exit 1; }
cat "$out/strace"

# The summary's rows: "% time seconds usecs/call calls [errors] syscall".
# The calls column is the 4th whether or not the errors column is empty.
calls() { awk -v s="$1" '$NF == s { print $4 }' "$out/strace" | head -1; }
sleeps=$(calls epoll_pwait2); sleeps=${sleeps:-0}
other=$(awk '$1 ~ /^[0-9.]+$/ && $NF != "total" && $NF != "epoll_pwait2" { s += $4 } END { print s + 0 }' "$out/strace")
# Arming the wake socket before a sleep (recvfrom until it is empty; memif:
# its doorbell socket) goes with the sleeps (af_xdp: see below).
arming=$(calls recvfrom); arming=${arming:-0}
other=$((other - arming))
per_s=$((other / SECONDS_TRACED)) sleeps_per_s=$((sleeps / SECONDS_TRACED))
echo "idle dataplane over ${SECONDS_TRACED} s: $sleeps sleeps (epoll_pwait2), $arming recvfrom, $other other system calls ($per_s/s)"
[ "$sleeps" -gt 0 ] && pass "it sleeps ($sleeps epoll_pwait2)" || fail "no epoll_pwait2: is it spinning?"
# Frames wake it (af_packet: the wake socket; af_xdp: the XDP program's
# ring buffer), so it need not wake to look.
if [ "$sleeps_per_s" -le 100 ]; then pass "sleeps: $sleeps_per_s/s (<= 100/s)"; else fail "sleeps: $sleeps_per_s/s (> 100/s: waking on a timer to look for frames?)"; fi
# af_xdp arms without a system call (the ring buffer is memory-mapped);
# its recvfrom calls are the driver's: an rx burst that finds the fill
# queue flagged need_wakeup kicks the kernel with one. The loop bursts
# about 3 times per wake-up (the look after arming, then twice more).
if [ "$link" = af_xdp ]; then per_sleep=6 what="the af_xdp driver's fill-queue kicks (recvfrom)"
else per_sleep=3 what="draining the wake socket (memif: the doorbell)"; fi
# memif between more than 2 hosts: one doorbell per port, each drained.
[ "$link" != memif ] || [ "$hosts" -le 2 ] || { per_sleep=$((per_sleep * (hosts - 1))); what="draining the $((hosts - 1)) ports' doorbells"; }
if [ "$arming" -le $((per_sleep * sleeps + 10)) ]; then pass "$what: $arming calls for $sleeps sleeps"
else fail "$what: $arming calls for $sleeps sleeps (> $per_sleep per sleep)"; fi
if [ "$per_s" -le 30 ]; then pass "other system calls: $per_s/s (<= 30/s)"; else fail "other system calls: $per_s/s"; fi
for s in accept4 sched_yield recvmsg poll; do
  n=$(calls "$s"); n=${n:-0}
  [ "$n" -eq 0 ] && pass "no $s" || fail "$n $s calls while idle"
done

# Only the dataplane's frames reach it (af_packet: the sockets' filter;
# af_xdp: the XDP program): over the idle seconds above, gossamerd's TCP
# heartbeats crossed the same interface, and no core read and dropped one.
# (A few frames of the interface's first moments, before the filter was on
# the driver's sockets, may have been counted at start: not in this window.)
sleep 1.2  # the stats file is rewritten every second
kernel=$(( $(kernel_frames) - kernel0 ))
if [ -s "$stats" ] && [ "$kernel" -eq 0 ]; then pass "no ARP, IPv6 or TCP frame reached the dataplane in $((CPU_SECONDS + SECONDS_TRACED)) idle seconds ($kernel0 at start)"
else fail "the kernel's frames reached the dataplane: $kernel more dropped as not_ipv4/not_udp while idle"; fi

[ "$failures" -eq 0 ] && echo "rack-idle ($link, $hosts hosts): all checks passed" || echo "rack-idle ($link, $hosts hosts): $failures check(s) failed"
[ "$failures" -eq 0 ]
