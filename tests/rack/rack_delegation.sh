#!/usr/bin/env bash
# Integration test of issue 4 on a rack in a box: remote delegation across
# 2 and 3 hosts, under injected loss/reordering/duplication, kill -9 of an
# instance, malformed frames, refused attaches and a different build. The
# rack runs gossamerd on every host (issue 5), which supervises the
# dataplanes; on 3 hosts the program is also launched with `gossamerctl run`.
#   rack_delegation.sh BUILD_DIR
# Needs root and network namespaces; exits 77 (skip) otherwise.
set -uo pipefail
. "$(dirname "$0")/lib.sh" "$1"
app="$build/tests/rack/rack_app"
other="$build/tests/rack/rack_app_other"
here=$(cd "$(dirname "$0")" && pwd)

skip_unless_rack "$app" "$other"
own_rack rd delegation
cleanup() { [ -n "${KEEP_RACK:-}" ] || "$rib" down >/dev/null 2>&1 || true; }
trap cleanup EXIT

stat_of() {  # HOST NAME: sum of a stat over all label sets
  awk -v n="$2" '{ k=$1; sub(/\{.*/, "", k); if (k == n) s += $2 } END { print s+0 }' \
    "$GOSSAMER_RACK_DIR/h$1/dataplane.sock.stats"
}
# The dataplanes' pids after `up`: gossamerd would restart one that died, so
# "alive" means "the same process as at the start".
declare -a dp_pids
record_dataplanes() {
  local h
  dp_pids=()
  for ((h = 0; h < $1; h++)); do dp_pids[h]=$("$rib" pid "$h" dataplane || true); done
}
dp_alive() {
  local p
  p=$("$rib" pid "$1" dataplane 2>/dev/null) && [ "$p" = "${dp_pids[$1]}" ]
}

# Runs BINARY THREADS OPS on every host of the rack with one run id; checks
# every instance exits 0 and the Tracked property was destroyed exactly once,
# on the host of the last thread.
run_everywhere() {
  local hosts=$1 threads=$2 ops=$3 label=$4
  local id="run-$label-$$-$RANDOM" h rc ok=1
  local -a pids
  for ((h = 0; h < hosts; h++)); do
    GOSSAMER_RUN_ID=$id timeout 120 "$rib" exec "$h" -- "$app" "$threads" "$ops" \
      >"$GOSSAMER_RACK_DIR/out.$label.$h" 2>&1 &
    pids[h]=$!
  done
  for ((h = 0; h < hosts; h++)); do
    wait "${pids[h]}"; rc=$?
    if [ $rc -ne 0 ]; then
      ok=0; fail "$label: host $h exited $rc"; sed 's/^/    /' "$GOSSAMER_RACK_DIR/out.$label.$h" | tail -20
    fi
  done
  local destroyed=0 d
  for ((h = 0; h < hosts; h++)); do
    d=$(sed -n 's/.*destroyed_tracked=\([0-9]*\).*/\1/p' "$GOSSAMER_RACK_DIR/out.$label.$h")
    destroyed=$((destroyed + ${d:-0}))
    if [ "$h" -eq $((hosts - 1)) ] && [ "${d:-0}" != 1 ]; then
      ok=0; fail "$label: the property on host $h was destroyed ${d:-0} times, expected once"
    fi
  done
  [ "$destroyed" -eq 1 ] || { ok=0; fail "$label: $destroyed destructions in the rack, expected 1"; }
  [ $ok -eq 1 ] && pass "$label: $hosts hosts, $threads threads, exact totals, property destroyed once"
}

# Runs BINARY THREADS OPS with `gossamerctl run` from host 0 (gossamerd starts
# it on every host); checks the exit status and the destructions as above.
run_with_gossamerctl() {
  local hosts=$1 threads=$2 ops=$3 label=$4 rc=0 h d destroyed=0 ok=1
  local out="$GOSSAMER_RACK_DIR/out.$label"
  timeout 120 "$rib" exec 0 -- "$build/tools/gossamerctl/gossamerctl" run -- "$app" "$threads" "$ops" >"$out" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then ok=0; fail "$label: gossamerctl run exited $rc"; sed 's/^/    /' "$out" | tail -20; fi
  for ((h = 0; h < hosts; h++)); do
    d=$(sed -n "s/^\[host $h\] .*destroyed_tracked=\([0-9]*\).*/\1/p" "$out")
    destroyed=$((destroyed + ${d:-0}))
    if [ "$h" -eq $((hosts - 1)) ] && [ "${d:-0}" != 1 ]; then
      ok=0; fail "$label: the property on host $h was destroyed ${d:-0} times, expected once"
    fi
  done
  [ "$destroyed" -eq 1 ] || { ok=0; fail "$label: $destroyed destructions in the rack, expected 1"; }
  [ $ok -eq 1 ] && pass "$label: gossamerctl run on $hosts hosts, $threads threads, exact totals, property destroyed once"
}

# ---- two hosts ------------------------------------------------------------------
"$rib" up --hosts 2 || { echo "FAIL: rack up"; exit 1; }
record_dataplanes 2

run_everywhere 2 4 300 two-hosts

# Faults: tc netem where the kernel has it, else the dataplanes inject them.
"$rib" netem "loss 2% reorder 10% duplicate 2%" || fail "netem"
run_everywhere 2 4 300 faults
sleep 1.5  # the dataplanes write their stats every second
rt=$(( $(stat_of 0 retransmits) + $(stat_of 1 retransmits) ))
dups=$(( $(stat_of 0 duplicates) + $(stat_of 1 duplicates) + $(stat_of 0 out_of_order) + $(stat_of 1 out_of_order) ))
inj=$(( $(stat_of 0 injected_loss) + $(stat_of 1 injected_loss) ))
if [ -e "$GOSSAMER_RACK_DIR/h0/dataplane.sock.faults" ] && [ "$inj" -eq 0 ]; then fail "faults: the dataplanes injected nothing"; fi
if [ "$rt" -gt 0 ] && [ "$dups" -gt 0 ]; then pass "faults: $rt retransmissions, $dups duplicate/out-of-order frames dropped, $inj frames lost by injection"
else fail "faults: expected retransmissions ($rt) and dropped duplicates ($dups)"; fi
"$rib" netem off || fail "netem off"

# A different build on host 1 under the same run id: both refuse, naming the host.
id="other-$$"
GOSSAMER_RUN_ID=$id timeout 60 "$rib" exec 0 -- "$app" 4 10 >"$GOSSAMER_RACK_DIR/out.other.0" 2>&1 &
p0=$!
GOSSAMER_RUN_ID=$id timeout 60 "$rib" exec 1 -- "$other" 4 10 >"$GOSSAMER_RACK_DIR/out.other.1" 2>&1
r1=$?
wait $p0; r0=$?
if [ $r0 -ne 0 ] && [ $r1 -ne 0 ] && grep -q "host 1 (h1) runs a different build" "$GOSSAMER_RACK_DIR/out.other.0"; then
  pass "different build refused: $(grep -o 'host 1 (h1) runs a different build[^)]*)' "$GOSSAMER_RACK_DIR/out.other.0" | head -1)"
else
  fail "different build: exit codes $r0/$r1"; cat "$GOSSAMER_RACK_DIR/out.other."*
fi

# kill -9 of host 1's instance: host 0's instance stops with a message,
# the dataplanes live on, and the next run attaches and passes.
id="kill-$$"
GOSSAMER_RUN_ID=$id timeout 60 "$rib" exec 0 -- "$app" 4 200000 >"$GOSSAMER_RACK_DIR/out.kill.0" 2>&1 &
p0=$!
GOSSAMER_RUN_ID=$id timeout 60 "$rib" exec 1 -- "$app" 4 200000 >"$GOSSAMER_RACK_DIR/out.kill.1" 2>&1 &
p1=$!
for _ in $(seq 50); do grep -q "host 0 of 2" "$GOSSAMER_RACK_DIR/out.kill.0" 2>/dev/null && break; sleep 0.1; done
sleep 1
victim=$(pgrep -f "$app 4 200000" | while read -r p; do
  if [ "$(ip netns identify "$p" 2>/dev/null)" = "${GOSSAMER_RACK_PREFIX}-h1" ]; then echo "$p"; fi; done | head -1)
if [ -n "$victim" ]; then
  kill -9 "$victim"
  start=$(date +%s)
  wait $p0; r0=$?
  took=$(( $(date +%s) - start ))
  wait $p1 2>/dev/null
  if [ $r0 -ne 0 ] && grep -q "host 1 left the rack" "$GOSSAMER_RACK_DIR/out.kill.0" && [ $took -le 5 ]; then
    pass "kill -9 on host 1: host 0's instance stopped in ${took}s: $(grep -o 'host 1 left the rack.*' "$GOSSAMER_RACK_DIR/out.kill.0" | head -1)"
  else
    fail "kill -9: host 0 exited $r0 after ${took}s"; tail -5 "$GOSSAMER_RACK_DIR/out.kill.0"
  fi
else
  fail "kill -9: could not find host 1's instance"; kill $p0 $p1 2>/dev/null; wait
fi
if dp_alive 0 && dp_alive 1; then pass "dataplanes survived the kill"; else fail "a dataplane died"; fi
run_everywhere 2 4 50 after-kill

# Malformed frames at host 1's dataplane from a raw socket in host 0.
before=$(stat_of 1 dropped)
"$rib" exec 0 -- python3 "$here/send_garbage.py" veth0 02:00:c6:12:00:02 198.18.0.1 198.18.0.2 7800 40 || fail "send garbage"
sleep 1.5
after=$(stat_of 1 dropped)
reasons=$(grep '^dropped' "$GOSSAMER_RACK_DIR/h1/dataplane.sock.stats" | grep -vc ' 0$')
if dp_alive 1 && [ $((after - before)) -ge 200 ] && [ "$reasons" -ge 6 ]; then
  pass "malformed frames: $((after - before)) counted and dropped; $(grep '^dropped' "$GOSSAMER_RACK_DIR/h1/dataplane.sock.stats" | grep -v ' 0$' | tr '\n' ' ')"
else
  fail "malformed frames: dropped went $before -> $after over $reasons reasons (want 6+), alive: $(dp_alive 1 && echo yes || echo no)"
fi
run_everywhere 2 4 50 after-garbage

# Attaches a buggy or foreign application would try: refused, clearly.
sock="$GOSSAMER_RACK_DIR/h0/dataplane.sock"
for c in wrong-version no-build-id unsealed wrong-size; do
  out=$(python3 "$here/attach_probe.py" "$sock" "$c")
  case "$c:$out" in
    wrong-version:refused:*version*|no-build-id:refused:*build-id*|unsealed:refused:*sealed*|wrong-size:refused:*bytes*)
      pass "attach $c refused: ${out#refused: }" ;;
    *) fail "attach $c: $out" ;;
  esac
done
dp_alive 0 || fail "dataplane 0 died after bad attaches"
"$rib" down >/dev/null

# ---- three hosts -----------------------------------------------------------------
"$rib" up --hosts 3 || { echo "FAIL: rack up (3)"; exit 1; }
run_everywhere 3 6 200 three-hosts
run_with_gossamerctl 3 6 200 three-hosts-gossamerctl
"$rib" netem "loss 2% reorder 10% duplicate 2%" || fail "netem (3)"
run_everywhere 3 6 200 three-hosts-faults
"$rib" down >/dev/null

if [ $failures -eq 0 ]; then echo "rack delegation: all checks passed"; exit 0; fi
echo "rack delegation: $failures check(s) failed"; exit 1
