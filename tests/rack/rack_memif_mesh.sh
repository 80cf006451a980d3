#!/usr/bin/env bash
# The kernel-free link between more than two hosts (issue 19 item 1): three
# hosts, one memif per pair (tools/rack-in-a-box up --hosts 3 --link memif),
# each dataplane serving two ports (dataplane.ports, one per peer):
#   - every host's dataplane starts with 2 ports, and its config names a
#     memif server or client per peer as the rack's address plan says;
#   - rack_app on all three hosts with exact totals (every thread delegates
#     to every trustee: requests flow between every pair of hosts), and
#     every port of every host received and sent frames;
#   - the same under loss, reordering and duplication, injected by the
#     dataplanes on every port's receive path;
#   - what a port of host i sent to host j, host j's port to host i
#     received, frame for frame: each frame went out on its peer's port;
#   - the same counts per port in gossamerd's Prometheus metrics
#     (gossamer_dataplane_port_frames_total, and gossamer_dataplane_port_peer
#     naming the peer of each port) and a line per port in `gossamerctl top`;
#   - the data path bypassed the kernel: veth0 carried far fewer frames than
#     the dataplanes exchanged;
#   - after a kill -9 of host 1's dataplane (the client of host 0's memif,
#     the server of host 2's; gossamerd starts a new one), host 2's client
#     port connects again by itself: exact totals again;
#   - again with two polling cores per host (a queue pair per core on each
#     port), under faults too.
#   rack_memif_mesh.sh BUILD_DIR
# Needs root and network namespaces; exits 77 (skip) otherwise.
set -uo pipefail
. "$(dirname "$0")/lib.sh" "$1"
app="$build/tests/rack/rack_app"

skip_unless_rack "$app"
own_rack mm memif-mesh
cleanup() { [ -n "${KEEP_RACK:-}" ] || "$rib" down >/dev/null 2>&1 || true; }
trap cleanup EXIT
run_timeout=40

rack_up() {  # ARGS...
  if ! timeout 90 "$rib" up --hosts 3 --link memif "$@" >"$GOSSAMER_RACK_DIR.up" 2>&1; then
    tail -20 "$GOSSAMER_RACK_DIR.up"; rm -f "$GOSSAMER_RACK_DIR.up"; fail "rack up --hosts 3 --link memif $*"; exit 1
  fi
  rm -f "$GOSSAMER_RACK_DIR.up"
}
rack_up
# Host i < j serves the memif of the pair (i, j): h0 two servers, h1 a
# client and a server, h2 two clients.
roles() { sed -n 's/.*vdev: "net_memif[01],id=0,role=\([a-z]*\),socket=[^,]*memif-\([0-9]-[0-9]\)\.sock.*/\1:\2/p' "$GOSSAMER_RACK_DIR/h$1.yaml" | tr '\n' ' '; }
want=("server:0-1 server:0-2 " "client:0-1 server:1-2 " "client:0-2 client:1-2 ")
for h in 0 1 2; do
  got=$(roles "$h")
  [ "$got" = "${want[h]}" ] && pass "host $h: memif ports $got" || fail "host $h: memif ports '$got', want '${want[h]}'"
  grep -q "ready: 2 ports (0 to host [0-9]: DPDK port 0 (net_memif), 1 queue, MTU 1500, cores wake on frames; 1 to host [0-9]: DPDK port 1 (net_memif)" "$GOSSAMER_RACK_DIR/h$h/gossamerd.log" ||
    fail "host $h's dataplane did not start with 2 memif ports: $(grep -o 'ready: .*' "$GOSSAMER_RACK_DIR/h$h/gossamerd.log" | tail -1)"
done

veth_frames() {  # HOST: frames veth0 sent and received so far
  "$rib" exec "$1" -- sh -c 'echo $(( $(cat /sys/class/net/veth0/statistics/tx_packets) + $(cat /sys/class/net/veth0/statistics/rx_packets) ))'
}
port_frames() {  # HOST PORT DIRECTION(rx|tx)
  awk -v k="port_$3_frames{port=\"$2\"}" '$1 == k { print $2 }' "$GOSSAMER_RACK_DIR/h$1/dataplane.sock.stats"
}
port_to() { echo $(($2 < $1 ? $2 : $2 - 1)); }  # HOST PEER: host's port to peer (in peer order)

v0=$(veth_frames 0)
run_everywhere 3 6 300 memif-mesh
sleep 2.2  # the stats files are rewritten every second: twice, once all is acknowledged
v1=$(veth_frames 0)
for h in 0 1 2; do
  for j in 0 1 2; do
    [ "$j" -ne "$h" ] || continue
    p=$(port_to "$h" "$j") pj=$(port_to "$j" "$h")
    tx=$(port_frames "$h" "$p" tx) rx=$(port_frames "$j" "$pj" rx)
    if [ "${tx:-0}" -gt 50 ] && [ "$tx" = "$rx" ]; then
      pass "host $h to host $j: $tx frames sent on its port $p, $rx received on host $j's port $pj"
    else
      fail "host $h to host $j: ${tx:-no} frames sent on its port $p, ${rx:-no} received on host $j's port $pj"
    fi
  done
done
# The same counters per port in gossamerd's Prometheus metrics and in
# `gossamerctl top` (issue 19): the rack is quiet now, so the metrics (every
# 100 ms) and .stats (every second) have the same numbers; and each port
# names the peer it reaches.
metric() {  # TEXT NAME LABEL...: the value of the series with those labels
  local text=$1 name=$2
  shift 2
  awk -v n="$name{" -v ls="$*" 'index($0, n) == 1 {
    k = split(ls, want, " "); ok = 1
    for (i = 1; i <= k; i++) if (!index($0, want[i])) ok = 0
    if (ok) { print $NF; exit } }' <<<"$text"
}
for h in 0 1 2; do
  m=$("$rib" exec "$h" -- curl -s --max-time 5 "http://198.18.0.$((h + 1)):9464/metrics")
  for j in 0 1 2; do
    [ "$j" -ne "$h" ] || continue
    p=$(port_to "$h" "$j")
    for d in rx:received tx:sent; do
      want=$(port_frames "$h" "$p" "${d%%:*}")
      got=$(metric "$m" gossamer_dataplane_port_frames_total "port=\"$p\"" "direction=\"${d#*:}\"")
      if [ -n "$got" ] && awk -v a="$got" -v b="${want:-x}" 'BEGIN { exit !(a + 0 == b + 0 && b + 0 > 0) }'; then
        pass "host $h: gossamer_dataplane_port_frames_total{port=$p,direction=${d#*:}} $got, as .stats"
      else
        fail "host $h: gossamer_dataplane_port_frames_total{port=$p,direction=${d#*:}} '${got}', .stats says '${want}'"
      fi
    done
    [ "$(metric "$m" gossamer_dataplane_port_peer "port=\"$p\"" "peer=\"h$j\"")" = 1 ] &&
      pass "host $h: gossamer_dataplane_port_peer{port=$p,peer=h$j} 1" ||
      fail "host $h: no gossamer_dataplane_port_peer{port=$p,peer=h$j} 1 in its metrics"
  done
done
top_out=$("$rib" exec 0 -- timeout 20 "$ctl" -c "$GOSSAMER_RACK_DIR/h0.yaml" top --iterations 2 --interval 0.5 2>&1)
if grep -Eq '^    ports \(frames/s received/sent\): 0 to h1 [0-9.kMG]+/[0-9.kMG]+; 1 to h2 [0-9.kMG]+/[0-9.kMG]+$' <<<"$top_out"; then
  pass "gossamerctl top shows host 0's ports: $(grep 'ports (' <<<"$top_out" | tail -1 | sed 's/^ *//')"
else
  fail "gossamerctl top shows no ports line for host 0 (ports 0 to h1, 1 to h2):"; sed 's/^/  /' <<<"$top_out" | head -30
fi
# Through the kernel, every frame of the dataplane would cross veth0 too;
# veth0 carries gossamerd's TCP (heartbeats, the run's start and end), about
# a tenth of the dataplane's frames since acks ride on responses (1080
# against 108 once): a quarter is the margin.
dp=$(( $(stat_of 0 rx_frames) + $(stat_of 0 frames_sent) ))
if [ "$dp" -gt 500 ] && [ $((v1 - v0)) -lt $((dp / 4)) ]; then
  pass "kernel bypassed: host 0's dataplane exchanged $dp frames, its veth0 $((v1 - v0)) (gossamerd's TCP)"
else
  fail "host 0's dataplane exchanged $dp frames, veth0 $((v1 - v0)): the data went through the kernel?"
fi

"$rib" netem "loss 2% reorder 10% duplicate 2%" >/dev/null 2>&1 || fail "netem"
run_everywhere 3 6 300 memif-mesh-faults
faults_seen 3 memif-mesh-faults
for h in 0 1 2; do
  inj=$(stat_of "$h" injected_loss)
  [ "$inj" -gt 0 ] || fail "host $h injected no loss"
done
"$rib" netem off >/dev/null || fail "netem off"
if "$rib" dataplane 1 restart >/dev/null 2>&1; then
  run_everywhere 3 6 300 memif-mesh-after-restart-1
  # Its core looks at the link once a second.
  for _ in $(seq 30); do grep -q "memif link up again" "$GOSSAMER_RACK_DIR/h2/gossamerd.log" && break; sleep 0.1; done
  grep -q "memif link up again" "$GOSSAMER_RACK_DIR/h2/gossamerd.log" ||
    fail "host 2's client port did not say it connected again to host 1's new server: $(grep -i memif "$GOSSAMER_RACK_DIR/h2/gossamerd.log" | tail -3)"
else
  fail "host 1's dataplane did not come back after a restart"
fi
"$rib" down >/dev/null 2>&1

# ---- two polling cores per host: each core owns a queue pair on each port.
rack_up --cores 2
for h in 0 1 2; do
  grep -q "ready: 2 ports (0 to host [0-9]: DPDK port 0 (net_memif), 2 queues" "$GOSSAMER_RACK_DIR/h$h/gossamerd.log" ||
    fail "host $h's dataplane did not start with 2 ports of 2 queues"
done
run_everywhere 3 6 300 memif-mesh-2-cores
"$rib" netem "loss 2% reorder 10% duplicate 2%" >/dev/null 2>&1 || fail "netem"
run_everywhere 3 6 300 memif-mesh-2-cores-faults
faults_seen 3 memif-mesh-2-cores-faults
"$rib" netem off >/dev/null || fail "netem off"

if [ $failures -eq 0 ]; then echo "rack memif mesh: all checks passed"; exit 0; fi
echo "rack memif mesh: $failures check(s) failed"; exit 1
