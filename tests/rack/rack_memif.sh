#!/usr/bin/env bash
# The kernel-free link (issue 19 item 1): two hosts' dataplanes joined by
# DPDK's net_memif over shared memory (tools/rack-in-a-box up --link memif),
# gossamerd on both (its TCP keeps veth0):
#   - 1 host over memif is refused, saying why (3 hosts: rack_memif_mesh.sh);
#   - rack_app on both hosts with exact totals, started on each host and
#     with `gossamerctl run`;
#   - the same under loss, reordering and duplication, which the dataplanes
#     inject in their receive path (netem on veth0 would never see a memif
#     frame);
#   - the data path bypassed the kernel: veth0 carried far fewer frames than
#     the dataplanes exchanged;
#   - after a kill -9 of the memif server's dataplane (gossamerd starts a new
#     one) the client connects again by itself, and after one of the
#     client's: exact totals again;
#   - the same with two polling cores per host (a memif queue pair each),
#     where a restarted server's client stops and gossamerd starts it again;
#   - again with jumbo frames (--mtu 9000), under faults too; the dataplanes
#     say so at start-up and no frame was too long;
#   - jumbo frames on af_packet too, and a dataplane.mtu above veth0's MTU
#     refused at start-up with the limit named.
#   rack_memif.sh BUILD_DIR
# Needs root and network namespaces; exits 77 (skip) otherwise.
set -uo pipefail
. "$(dirname "$0")/lib.sh" "$1"
app="$build/tests/rack/rack_app"

skip_unless_rack "$app"
own_rack mf memif
cleanup() { [ -n "${KEEP_RACK:-}" ] || "$rib" down >/dev/null 2>&1 || true; }
trap cleanup EXIT
run_timeout=60

if out=$("$rib" up --hosts 1 --link memif 2>&1); then
  fail "up --hosts 1 --link memif started a rack"; "$rib" down >/dev/null 2>&1
elif grep -q "it needs at least 2 hosts" <<<"$out"; then
  pass "1 host over memif refused: $out"
else
  fail "up --hosts 1 --link memif failed for another reason: $out"
fi

veth_frames() {  # HOST: frames veth0 sent and received so far
  "$rib" exec "$1" -- sh -c 'echo $(( $(cat /sys/class/net/veth0/statistics/tx_packets) + $(cat /sys/class/net/veth0/statistics/rx_packets) ))'
}

rack_up() {  # LABEL ARGS...
  local label=$1
  shift
  if ! timeout 120 "$rib" up --hosts 2 --link memif "$@" >"$GOSSAMER_RACK_DIR.up" 2>&1; then
    tail -20 "$GOSSAMER_RACK_DIR.up"; rm -f "$GOSSAMER_RACK_DIR.up"; fail "$label: rack up"; exit 1
  fi
  rm -f "$GOSSAMER_RACK_DIR.up"
  if grep -q "net_memif0,id=0,role=server" "$GOSSAMER_RACK_DIR/h0.yaml" &&
     grep -q "net_memif0,id=0,role=client" "$GOSSAMER_RACK_DIR/h1.yaml"; then
    pass "$label: rack up, host 0 the memif server, host 1 the client; both gossamerds see each other over veth0"
  else
    fail "$label: the configs do not name a memif server and client"
  fi
}

# ---- default MTU
rack_up memif
v0=$(veth_frames 0)
run_everywhere 2 6 300 memif
run_with_gossamerctl 2 6 300 memif-gossamerctl
sleep 1.2  # the stats files are rewritten every second
v1=$(veth_frames 0)
dp=$(( $(stat_of 0 rx_frames) + $(stat_of 0 frames_sent) ))
if [ "$dp" -gt 1000 ] && [ $((v1 - v0)) -lt $((dp / 10)) ]; then
  pass "kernel bypassed: host 0's dataplane exchanged $dp frames, its veth0 $((v1 - v0)) (gossamerd's TCP)"
else
  fail "host 0's dataplane exchanged $dp frames, veth0 $((v1 - v0)): the data went through the kernel?"
fi

"$rib" netem "loss 2% reorder 10% duplicate 2%" >"$GOSSAMER_RACK_DIR.netem" 2>&1 || fail "netem"
grep -q "memif link bypasses the kernel" "$GOSSAMER_RACK_DIR.netem" || fail "netem did not hand the faults to the dataplanes: $(cat "$GOSSAMER_RACK_DIR.netem")"
rm -f "$GOSSAMER_RACK_DIR.netem"
run_everywhere 2 6 300 memif-faults
faults_seen 2 memif-faults
"$rib" netem off >/dev/null || fail "netem off"

# Restarts: the server's (host 0) leaves its socket file behind and its
# client must connect again by itself; a new client connects to the server.
for h in 0 1; do
  if "$rib" dataplane "$h" restart >/dev/null 2>&1; then
    run_everywhere 2 6 300 "memif-after-restart-$h"
  else
    fail "host $h's dataplane did not come back after a restart"
  fi
done
"$rib" down >/dev/null 2>&1

# ---- two polling cores per host: a memif queue pair each. A restarted
# server's client cannot restart a port of 2 queues under its cores: it
# stops (exit 75) and gossamerd starts it again.
rack_up memif-2-cores --cores 2
for h in 0 1; do
  grep -q "net_memif), 2 queues, MTU" "$GOSSAMER_RACK_DIR/h$h/gossamerd.log" ||
    fail "host $h's dataplane did not start with 2 queues"
done
run_everywhere 2 6 300 memif-2-cores
"$rib" netem "loss 2% reorder 10% duplicate 2%" >/dev/null || fail "netem"
run_everywhere 2 6 300 memif-2-cores-faults
faults_seen 2 memif-2-cores-faults
"$rib" netem off >/dev/null || fail "netem off"
# Host 1's dataplane, a new process that has written its stats file: its
# port is open. (A run started while it restarts fails, as fate sharing
# wants: the test waits.)
client_back() {  # OLD-PID
  local t new stats="$GOSSAMER_RACK_DIR/h1/dataplane.sock.stats"
  for t in $(seq 300); do
    new=$("$rib" pid 1 dataplane 2>/dev/null)
    if [ -n "$new" ] && [ "$new" != "$1" ] && [ -s "$stats" ] &&
       [ "$(stat -c %Y "$stats")" -gt "$(stat -c %Y "/proc/$new")" ]; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}
for h in 0 1; do
  old1=$("$rib" pid 1 dataplane)
  if "$rib" dataplane "$h" restart >/dev/null 2>&1; then
    [ "$h" -eq 1 ] || client_back "$old1" || fail "memif-2-cores: host 1's client was not started again within 30 s"
    run_everywhere 2 6 300 "memif-2-cores-after-restart-$h"
  else
    fail "host $h's dataplane (2 cores) did not come back after a restart"
  fi
done
grep -q "memif server is back, and a port of 2 queues cannot be restarted" "$GOSSAMER_RACK_DIR/h1/gossamerd.log" ||
  fail "host 1's client did not stop to be restarted after host 0's dataplane restarted"
sleep 1.5  # the stats files are rewritten every second
for h in 0 1; do
  fp=$(awk '$1 ~ /^core_frames_processed\{core="[01]"\}$/ && $2 > 0 { n++ } END { print n + 0 }' \
    "$GOSSAMER_RACK_DIR/h$h/dataplane.sock.stats")
  [ "$fp" -eq 2 ] && pass "memif-2-cores: host $h: both cores processed frames" ||
    fail "memif-2-cores: host $h: $fp of 2 cores processed frames"
done
"$rib" down >/dev/null 2>&1

# ---- jumbo frames
rack_up memif-jumbo --mtu jumbo  # 9000 on memif
for h in 0 1; do
  grep -q "net_memif), 1 queue, MTU 9000" "$GOSSAMER_RACK_DIR/h$h/gossamerd.log" ||
    fail "host $h's dataplane did not start with MTU 9000"
done
run_everywhere 2 6 300 memif-jumbo
"$rib" netem "loss 2% reorder 10% duplicate 2%" >/dev/null || fail "netem"
run_everywhere 2 6 300 memif-jumbo-faults
faults_seen 2 memif-jumbo-faults
"$rib" netem off >/dev/null || fail "netem off"
for h in 0 1; do
  tl=$(awk '$1 == "dropped{reason=\"too_long\"}" { print $2 }' "$GOSSAMER_RACK_DIR/h$h/dataplane.sock.stats")
  [ "${tl:-x}" = 0 ] || fail "host $h: too_long is ${tl:-missing}, want 0"
done


# ---- jumbo frames on af_packet (veths of MTU 9000, ring frames to match),
# and a port that cannot carry the MTU: a clear error at start-up.
"$rib" down >/dev/null 2>&1
if timeout 120 "$rib" up --hosts 2 --link af_packet --mtu 9000 >"$GOSSAMER_RACK_DIR.up" 2>&1; then
  rm -f "$GOSSAMER_RACK_DIR.up"
  run_everywhere 2 6 300 af-packet-jumbo
  "$rib" exec 0 -- ip link set dev veth0 mtu 1500
  "$rib" dataplane 0 restart >/dev/null 2>&1 && fail "host 0's dataplane started with dataplane.mtu above veth0's MTU"
  if grep -q "dataplane.mtu is 9000, but port 0 carries at most 1500 (net_af_packet: interface veth0's MTU" \
      "$GOSSAMER_RACK_DIR/h0/gossamerd.log"; then
    pass "dataplane.mtu 9000 on a veth of MTU 1500: refused at start-up, naming the limit"
  else
    fail "no start-up error naming veth0's MTU: $(grep -i mtu "$GOSSAMER_RACK_DIR/h0/gossamerd.log" | tail -2)"
  fi
else
  tail -20 "$GOSSAMER_RACK_DIR.up"; rm -f "$GOSSAMER_RACK_DIR.up"; fail "rack up --link af_packet --mtu 9000"
fi

if [ $failures -eq 0 ]; then echo "rack memif: all checks passed"; exit 0; fi
echo "rack memif: $failures check(s) failed"; exit 1
