#!/usr/bin/env bash
# Issue 5 on a 3-host rack in a box with a real rack application, launched
# with `gossamerctl run` (gossamerd on every host supervises the dataplanes):
# output from every host with prefixes, exit statuses, --threads, large
# apply_with arguments and responses (512 B .. 4 MiB) byte-exact under
# injected loss, both with gossamerd's TCP connections for large bodies and
# through the dataplanes only, kill -9 of host 2's instance (run exits within 2 s naming
# host 2, nothing left running), and runs after dataplane restarts.
#   rack_gossamerctl.sh BUILD_DIR
# Needs root and network namespaces; exits 77 (skip) otherwise.
set -uo pipefail
. "$(dirname "$0")/lib.sh" "$1"
app="$build/tests/rack/rack_app"
skip_unless_rack "$app"
own_rack rg gctl
bg=""
cleanup() {
  [ -n "$bg" ] && kill "$bg" 2>/dev/null
  [ -n "${KEEP_RACK:-}" ] || "$rib" down >/dev/null 2>&1 || true
}
trap cleanup EXIT
out="$GOSSAMER_RACK_DIR.out"
mkdir -p "$out"
trap 'cleanup; rm -rf "$out"' EXIT

gctl() { "$rib" exec 0 -- timeout 180 "$ctl" "$@"; }
now() { date +%s.%N; }

# The threshold of 4096 (below the default's 256 KiB) puts this test's
# sizes on both sides of it: 512 through the slots, 64 KiB and 4 MiB over
# TCP, and rack_app's concurrent phase straddles 4096 itself.
"$rib" up --hosts 3 --large-threshold 4096 >"$out/up" 2>&1 || { cat "$out/up"; echo "FAIL: rack up"; exit 1; }

# Data frames the dataplanes sent, over all hosts and connections. The stats
# files are rewritten every second.
frames() {
  local h t=0 n
  sleep 1.2
  for h in 0 1 2; do
    n=$(awk '{ k=$1; sub(/\{.*/, "", k); if (k == "frames_sent") s += $2 } END { printf "%.0f\n", s+0 }' \
      "$GOSSAMER_RACK_DIR/h$h/dataplane.sock.stats" 2>/dev/null)
    t=$((t + ${n:-0}))
  done
  echo "$t"
}

# ---- output, prefixes, status, large requests under loss ----------------------------
"$rib" netem "loss 2% reorder 10% duplicate 2%" >/dev/null || fail "netem"
sizes=512,4096,65536,4194304
f0=$(frames)
gctl run -- "$app" 6 50 "$sizes" >"$out/big" 2>"$out/big.err"
rc=$?
bulk_frames=$(( $(frames) - f0 ))
ok=1
[ $rc -eq 0 ] || { ok=0; fail "run under loss exited $rc"; tail -20 "$out/big" "$out/big.err"; }
# main's fiber runs on host 0 only; every host prints how its run() returned.
grep -q "^\[host 0\] host 0 of 3, 6 threads in the rack$" "$out/big" || { ok=0; fail "no prefixed output from host 0"; }
for h in 0 1 2; do
  grep -q "^\[host $h\] run returned 0" "$out/big" || { ok=0; fail "no prefixed 'run returned 0' from host $h"; }
done
for s in ${sizes//,/ }; do
  grep -q "^\[host 0\] phase: $s-byte round trip to trustee 5 in" "$out/big" || { ok=0; fail "no $s-byte round trip"; }
done
grep -q "CHECK FAILED" "$out/big" "$out/big.err" && { ok=0; fail "a check failed: $(grep -h 'CHECK FAILED' "$out/big" "$out/big.err" | head -3)"; }
[ $ok -eq 1 ] && pass "gossamerctl run on 3 hosts under injected loss: output from every host, apply_with of $sizes bytes byte-exact ($(grep -o '4194304-byte round trip.*' "$out/big"))"
# 16 fibers at once, sizes around the rack's threshold (4096) and up to 1 MiB: several
# references per batch; each request ran exactly once (rack_app checks the
# trustee's count and every byte), and the bodies above the threshold went
# over TCP.
conc=$(sed -n 's/^\[host 0\] phase: \(.*concurrent large requests.*\)/\1/p' "$out/big")
ctcp=$(sed -n 's/.*tcp_bytes_sent=\([0-9]*\).*/\1/p' <<<"$conc")
if [ $ok -eq 1 ] && [ -n "$conc" ] && [ "${ctcp:-0}" -gt 0 ]; then
  pass "large requests in flight together under loss, over TCP: $conc"
else
  fail "concurrent large requests: '${conc:-no phase line}'"
fi

# The same run started without gossamerd (rack-in-a-box exec on every host):
# no TCP connections for large bodies, so every byte goes through the
# dataplanes in fragments. Both must be byte-exact; the gossamerctl run must
# have sent far fewer frames (its 64 KiB and 4 MiB bodies went over TCP).
f0=$(frames)
id="rg-pieces-$$"
ppids=()
for h in 2 1 0; do
  GOSSAMER_RUN_ID=$id timeout 180 "$rib" exec "$h" -- "$app" 6 50 "$sizes" >"$out/pieces.$h" 2>&1 &
  ppids+=($!)
done
prc=0
for p in "${ppids[@]}"; do wait "$p" || prc=1; done
piece_frames=$(( $(frames) - f0 ))
if [ $prc -eq 0 ] && grep -q "phase: 4194304-byte round trip to trustee 5 in" "$out/pieces.0" &&
   grep -q "concurrent large requests .* ran exactly once, tcp_bytes_sent=0$" "$out/pieces.0" &&
   ! grep -q "CHECK FAILED" "$out"/pieces.*; then
  pass "the same sizes through the dataplanes only (no gossamerd), byte-exact under loss ($(grep -o '4194304-byte round trip.*' "$out/pieces.0"))"
else
  fail "pieces run: exit $prc"; tail -5 "$out"/pieces.*
fi
if [ "$bulk_frames" -gt 0 ] && [ $((bulk_frames * 4)) -lt "$piece_frames" ]; then
  pass "bodies over the threshold went over TCP: $bulk_frames dataplane frames with gossamerctl run, $piece_frames without"
else
  fail "gossamerctl run sent $bulk_frames dataplane frames, the dataplane-only run $piece_frames (want 4x fewer)"
fi
"$rib" netem off >/dev/null || fail "netem off"

# ---- --threads overrides the program's count; a non-zero status comes back ---------
gctl run --threads 9 -- "$app" 6 20 >"$out/threads" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "^\[host 0\] host 0 of 3, 9 threads in the rack$" "$out/threads"; then
  pass "--threads 9 overrides the program's 6"
else
  fail "--threads 9: exit $rc"; tail -5 "$out/threads"
fi
# rack_app returns 100 from main when the rack has more than 64 threads: exit 1 on host 0.
gctl run --threads 66 -- "$app" 6 20 >"$out/nonzero" 2>"$out/nonzero.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "host 0 (h0): instance pid [0-9]* exited with status 1" "$out/nonzero.err"; then
  pass "a non-zero exit on host 0 is run's status (1), named: $(tail -1 "$out/nonzero.err")"
else
  fail "non-zero: exit $rc"; tail -5 "$out/nonzero.err"
fi

# ---- kill -9 of host 2's instance ------------------------------------------------------
"$rib" exec 0 -- timeout 120 "$ctl" run -- "$app" 6 100000000 >"$out/kill" 2>"$out/kill.err" &
bg=$!
declare -a pids=()
for _ in $(seq 100); do
  for h in 0 1 2; do
    pids[$h]=$("$rib" exec "$h" -- "$ctl" status | awk -v app="$app" '$NF == app && $2 == "running" { print $5 }')
  done
  [ -n "${pids[0]}" ] && [ -n "${pids[1]}" ] && [ -n "${pids[2]}" ] && grep -q "^\[host 0\] host 0 of 3" "$out/kill" && break
  sleep 0.1
done
if [ -z "${pids[0]}" ] || [ -z "${pids[1]}" ] || [ -z "${pids[2]}" ]; then
  fail "kill -9: instances not all running: '${pids[*]}'"; tail -5 "$out/kill" "$out/kill.err"
else
  t0=$(now)
  kill -9 "${pids[2]}"
  wait "$bg"
  rc=$?
  bg=""
  took=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
  sleep 0.3
  left=""
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && left+=" $p"; done
  if [ $rc -eq 137 ] && grep -q "host 2 (h2): instance pid ${pids[2]} killed by signal 9" "$out/kill.err" &&
    awk -v t="$took" 'BEGIN { exit !(t < 2.0) }' && [ -z "$left" ]; then
    pass "kill -9 of host 2's instance: run exited 137 after ${took}s: $(tail -1 "$out/kill.err")"
  else
    fail "kill -9: exit $rc after ${took}s, still running:${left:- none}"; tail -3 "$out/kill.err"
  fi
fi

# ---- runs after dataplane restarts -------------------------------------------------------
for h in 1 2 0 1; do
  "$rib" dataplane "$h" restart >/dev/null 2>&1 || fail "dataplane $h restart"
  gctl run -- "$app" 6 50 >"$out/restart.$h" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && [ "$(grep -c '^\[host [0-9]\] run returned 0' "$out/restart.$h")" -eq 3 ]; then
    pass "a run after host $h's dataplane restarted"
  else
    fail "run after host $h's dataplane restarted: exit $rc"; tail -5 "$out/restart.$h"
  fi
done

if [ $failures -eq 0 ]; then echo "rack gossamerctl: all checks passed"; exit 0; fi
echo "rack gossamerctl: $failures check(s) failed"; exit 1
