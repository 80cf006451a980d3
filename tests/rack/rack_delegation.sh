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

# ---- two hosts ------------------------------------------------------------------
"$rib" up --hosts 2 || { echo "FAIL: rack up"; exit 1; }
record_dataplanes 2

run_everywhere 2 4 300 two-hosts

# Two batches in flight to another host (kRemoteEagerBatch): 64 fibers'
# blocking applies to one remote trustee leave host 0 in batches of 32 on
# average (a batch above 32 forms only while another is out, and the two
# sum to at most 64), not one batch of 64 per pass. Requests per slot
# record that host 0's dataplane sent during the run (the rack is
# otherwise quiet; its probes only lower the mean).
pipeline="$build/tests/rack/pipeline_app"
settled_sent() {  # host 0's requests_sent once two writes of its stats file agree
  local a b
  b=$(stat_of 0 requests_sent)
  for _ in 1 2 3 4 5 6; do
    sleep 1.1  # the dataplanes write their stats every second
    a=$b b=$(stat_of 0 requests_sent)
    [ "$a" = "$b" ] && break
  done
  echo "$b"
}
sent0=$(settled_sent)
id="pipeline-$$-$RANDOM"
GOSSAMER_RUN_ID=$id timeout 120 "$rib" exec 1 -- "$pipeline" >"$GOSSAMER_RACK_DIR/out.pipeline.1" 2>&1 &
p1=$!
GOSSAMER_RUN_ID=$id timeout 120 "$rib" exec 0 -- "$pipeline" >"$GOSSAMER_RACK_DIR/out.pipeline.0" 2>&1
r0=$?
wait "$p1"; r1=$?
slots=$(( $(settled_sent) - sent0 ))
reqs=$(sed -n 's/^pipeline requests=\([0-9]*\)$/\1/p' "$GOSSAMER_RACK_DIR/out.pipeline.0")
if [ $r0 -ne 0 ] || [ $r1 -ne 0 ] || [ -z "$reqs" ]; then
  fail "pipeline: exited $r0 on host 0, $r1 on host 1"
  for h in 0 1; do sed "s/^/    h$h: /" "$GOSSAMER_RACK_DIR/out.pipeline.$h" | tail -10; done
elif [ "$slots" -le 0 ] || [ $((reqs)) -gt $((slots * 33)) ]; then
  fail "pipeline: $reqs requests from 64 fibers in $slots slot records: more than 32 per batch on average"
else
  pass "pipeline: $reqs requests from 64 fibers in $slots slot records ($(awk -v r="$reqs" -v s="$slots" 'BEGIN { printf "%.1f", r / s }') per batch on average, at most 33 allowed), exact total"
fi

# Faults: tc netem where the kernel has it, else the dataplanes inject them.
"$rib" netem "loss 2% reorder 10% duplicate 2%" || fail "netem"
run_everywhere 2 4 300 faults
faults_seen 2 faults
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
kill_midrun 2 kill
if dp_alive 0 && dp_alive 1; then pass "dataplanes survived the kill"; else fail "a dataplane died"; fi
run_everywhere 2 4 50 after-kill

# Malformed frames at host 1's dataplane from a raw socket in host 0.
before=$(stat_of 1 dropped)
"$rib" exec 0 -- python3 "$here/send_garbage.py" veth0 02:00:c6:12:00:02 198.18.0.1 198.18.0.2 7800 40 || fail "send garbage"
sleep 1.5
after=$(stat_of 1 dropped)
reasons=$(grep '^dropped' "$GOSSAMER_RACK_DIR/h1/dataplane.sock.stats" | grep -vc ' 0$')
bad_mac=$(awk '$1 == "dropped{reason=\"bad_mac\"}" { print $2 }' "$GOSSAMER_RACK_DIR/h1/dataplane.sock.stats")
# 3 forged frames of every 12 (send_garbage.py): a restart, a request, an announce.
if [ "${bad_mac:-0}" -ge 120 ]; then
  pass "forged frames (restart, request, detach announce): $bad_mac dropped as bad_mac"
else
  fail "forged frames: bad_mac is ${bad_mac:-missing}, want 120"
fi
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

# 100 attach connections that never speak (issue 18, finding 7): the dataplane
# refuses those beyond its 16 attaches in progress at once and the others
# after 2 s, and traffic meanwhile runs as fast as without them (the
# handshake used to block core 0 for 2 s per connection: 200 s here).
t0=$(date +%s%N)
run_everywhere 2 4 50 before-silent
base_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
python3 "$here/attach_probe.py" "$sock" silent 100 8 >"$GOSSAMER_RACK_DIR/out.silent" 2>&1 &
probe=$!
sleep 0.3
t0=$(date +%s%N)
run_everywhere 2 4 50 during-silent
silent_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
wait "$probe"
silent_out=$(cat "$GOSSAMER_RACK_DIR/out.silent")
closed=$(sed -n 's/.* opened, \([0-9]*\) closed.*/\1/p' <<<"$silent_out")
# Generous: the same run took base_ms without them; noise on a shared
# 2-core machine, not a 2 s stall per connection, is what this allows.
if [ "${closed:-0}" -eq 100 ] && [ "$silent_ms" -le $((base_ms * 2 + 3000)) ]; then
  pass "100 silent attaches: $silent_out; a run took ${silent_ms} ms during them, ${base_ms} ms before"
else
  fail "100 silent attaches: ${silent_out:-no probe output}; a run took ${silent_ms} ms during them, ${base_ms} ms before"
fi
dp_alive 0 || fail "dataplane 0 died after silent attaches"
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
