#!/usr/bin/env bash
# An idle dataplane makes no system call per loop iteration beyond its sleep
# (issue 17): on a 2-host rack in a box with gossamerd, strace -c -f counts
# every system call of host 0's dataplane for a few idle seconds. Only the
# sleep (epoll_pwait2) may grow with the iterations; everything else (the
# once-a-second stats and faults files, reading a wake eventfd after a
# wake-up) must stay below a small rate, and accept4/sched_yield/recvmsg must
# not appear at all.
#   rack_idle.sh BUILD_DIR
# Needs root, network namespaces and strace; exits 77 (skip) otherwise.
set -uo pipefail
. "$(dirname "$0")/lib.sh" "$1"

skip_unless_rack
command -v strace >/dev/null || { echo "SKIP: strace is not installed"; exit 77; }
own_rack ri idle
out="$GOSSAMER_RACK_DIR.out"
mkdir -p "$out"
cleanup() {
  [ -n "${KEEP_RACK:-}" ] || "$rib" down >/dev/null 2>&1 || true
  rm -rf "$out"
}
trap cleanup EXIT
SECONDS_TRACED=4

if ! timeout 90 "$rib" up --hosts 2 >"$out/up" 2>&1; then
  tail -20 "$out/up"; echo "FAIL: rack up"; exit 1
fi
pid=$("$rib" pid 0 dataplane) || { echo "FAIL: no dataplane pid"; exit 1; }
sleep 2  # idle: past the start-up and the first announces
timeout -s INT "$SECONDS_TRACED" strace -c -f -q -p "$pid" -o "$out/strace" 2>/dev/null
[ -s "$out/strace" ] || { echo "FAIL: strace wrote nothing"; exit 1; }
cat "$out/strace"

# The summary's rows: "% time seconds usecs/call calls [errors] syscall".
# The calls column is the 4th whether or not the errors column is empty.
calls() { awk -v s="$1" '$NF == s { print $4 }' "$out/strace" | head -1; }
sleeps=$(calls epoll_pwait2); sleeps=${sleeps:-0}
other=$(awk '$1 ~ /^[0-9.]+$/ && $NF != "total" && $NF != "epoll_pwait2" { s += $4 } END { print s + 0 }' "$out/strace")
per_s=$((other / SECONDS_TRACED))
echo "idle dataplane over ${SECONDS_TRACED} s: $sleeps sleeps (epoll_pwait2), $other other system calls ($per_s/s)"
[ "$sleeps" -gt 0 ] && pass "it sleeps ($sleeps epoll_pwait2)" || fail "no epoll_pwait2: is it spinning?"
if [ "$per_s" -le 30 ]; then pass "other system calls: $per_s/s (<= 30/s)"; else fail "other system calls: $per_s/s"; fi
for s in accept4 sched_yield recvmsg poll; do
  n=$(calls "$s"); n=${n:-0}
  [ "$n" -eq 0 ] && pass "no $s" || fail "$n $s calls while idle"
done

[ "$failures" -eq 0 ] && echo "rack-idle: all checks passed" || echo "rack-idle: $failures check(s) failed"
[ "$failures" -eq 0 ]
