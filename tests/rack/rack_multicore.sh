#!/usr/bin/env bash
# The dataplane with two polling cores (dataplane.cores: 2, `rack-in-a-box up
# --cores 2`: the vdev gets 2 queue pairs) on racks in a box with gossamerd:
#   - up --cores validation, and the generated h0.yaml (cores: 2, qpairs=2)
#     and veths (2 rx and tx queues);
#   - rack_app with exact totals on 2 hosts, then under loss, reordering and
#     duplication, then after a kill -9 of an instance mid-run (the
#     dataplanes must be the same processes);
#   - rack_app with exact totals on 3 hosts with 4 connections per remote
#     host, so that each core owns several;
#   - per core, from every dataplane's stats file: both cores processed
#     frames (of connections they own) and served doorbells (of application
#     threads they own), and the frames processed never exceed the frames
#     received (plus injected duplicates, processed twice).
#   rack_multicore.sh BUILD_DIR
# Needs root and network namespaces; exits 77 (skip) otherwise.
set -uo pipefail
. "$(dirname "$0")/lib.sh" "$1"
app="$build/tests/rack/rack_app"

skip_unless_rack "$app"
own_rack mc multicore
out="$GOSSAMER_RACK_DIR.out"
mkdir -p "$out"
cleanup() {
  [ -n "${KEEP_RACK:-}" ] || "$rib" down >/dev/null 2>&1 || true
  rm -rf "$out"
}
trap cleanup EXIT
CORES=2
run_timeout=45   # per run_everywhere; a healthy run takes a few seconds

up() {  # HOSTS [ARGS...]: a rack with $CORES dataplane cores, or exit
  local hosts=$1
  shift
  if ! timeout 90 "$rib" up --hosts "$hosts" --cores "$CORES" "$@" >"$out/up" 2>&1; then
    tail -20 "$out/up"; echo "FAIL: rack up ($hosts hosts)"; exit 1
  fi
  record_dataplanes "$hosts"
}

# Checks the per-core stats of every host's dataplane, read once per host
# after the traffic (the file is rewritten every second; counters are still
# once the runs are over).
check_cores() {  # HOSTS LABEL
  local hosts=$1 label=$2 h line ok=1
  sleep 1.5
  for ((h = 0; h < hosts; h++)); do
    line=$(awk -v want="$CORES" '
      { k = $1; c = ""
        if (match(k, /core="[0-9]+"/)) c = substr(k, RSTART + 6, RLENGTH - 7)
        sub(/\{.*/, "", k) }
      k == "cores" { cores = $2 }
      k == "injected_duplicates" { dup += $2 }
      k == "core_rx_frames" { rx += $2 }
      k == "core_frames_processed" { fp[c] = $2; sum += $2 }
      k == "core_doorbells" { db[c] = $2 }
      k == "core" && $1 ~ /conn="/ { owned[$2]++ }
      END {
        bad = (cores != want)
        line = "cores " (cores == "" ? "missing" : cores) ";"
        for (c = 0; c < want; c++) {
          line = line " core " c ": " (owned[c] + 0) " connections, " (fp[c] + 0) " frames processed, " \
            (db[c] + 0) " doorbells;"
          if (fp[c] + 0 <= 0 || db[c] + 0 <= 0) bad = 1
        }
        line = line " processed " sum + 0 " of " rx + 0 " received + " dup + 0 " injected duplicates"
        if (sum + 0 <= 0 || sum > rx + dup) bad = 1
        print (bad ? "BAD " : "OK ") line
      }' "$GOSSAMER_RACK_DIR/h$h/dataplane.sock.stats" 2>&1)
    case "$line" in
      OK*) ;;
      *) ok=0; fail "$label: host $h's dataplane: ${line#BAD }" ;;
    esac
  done
  [ $ok -eq 1 ] && pass "$label: on all $hosts hosts both cores processed frames and served doorbells (host $((hosts - 1)): ${line#OK })"
}

# ---- two hosts ------------------------------------------------------------------
up 2

# Refused before anything else (a rack is up: the option is checked first).
for c in 0 9 x; do
  if msg=$("$rib" up --hosts 2 --cores "$c" 2>&1) || [[ $msg != *"--cores must be a number in 1..8, got '$c'"* ]]; then
    fail "up --cores $c: not refused as expected: $msg"
  fi
done
pass "up --cores 0, 9 and x refused"

yaml="$GOSSAMER_RACK_DIR/h0.yaml"
if grep -q "^  cores: $CORES\$" "$yaml" && grep -q "net_af_packet0,iface=veth0,qpairs=$CORES\"" "$yaml" &&
   "$rib" exec 0 -- ip -d link show veth0 | grep -q "numtxqueues $CORES numrxqueues $CORES"; then
  pass "h0.yaml has dataplane.cores $CORES and qpairs=$CORES; veth0 has $CORES queues"
else
  fail "h0.yaml or veth0 lacks $CORES cores/queues:"; grep -n 'cores\|vdev' "$yaml"
  "$rib" exec 0 -- ip -d link show veth0
fi

# Each polling core on its own CPU, spread over the hosts (dataplane.cpus as
# rack-in-a-box writes it): in the stats (core_cpu), and in the affinity of
# the dataplane's polling threads. DPDK alone put them all on CPU 0.
sleep 1.5
ncpus=$(nproc)
for h in 0 1; do
  want="" got="" threads=""
  for ((c = 0; c < CORES; c++)); do
    want+=" $(( (h * CORES + c) % ncpus ))"
    got+=" $(awk -v k="core_cpu{core=\"$c\"}" '$1 == k { print $2 }' "$GOSSAMER_RACK_DIR/h$h/dataplane.sock.stats")"
  done
  pid=$("$rib" pid "$h" dataplane)
  for t in /proc/"$pid"/task/*; do
    [ "$(cat "$t/comm")" = gossamer-datapl ] && threads+=" $(awk '/^Cpus_allowed_list/ { print $2 }' "$t/status")"
  done
  threads=$(tr ' ' '\n' <<<"$threads" | grep . | sort -n | tr '\n' ' ')
  if [ "$got" = "$want" ] && [ "$threads" = "$(tr ' ' '\n' <<<"$want" | grep . | sort -n | tr '\n' ' ')" ]; then
    pass "host $h: polling cores on CPUs$want (stats core_cpu and thread affinity)"
  else
    fail "host $h: polling cores want CPUs$want; stats core_cpu say${got:- nothing}; polling threads' affinity: $threads"
    grep -n 'cpus' "$GOSSAMER_RACK_DIR/h$h.yaml"
  fi
done

run_everywhere 2 8 300 two-hosts
"$rib" netem "loss 2% reorder 10% duplicate 2%" >/dev/null || fail "netem"
run_everywhere 2 8 300 faults
faults_seen 2 faults
"$rib" netem off >/dev/null || fail "netem off"

kill_midrun 2 kill
if dp_alive 0 && dp_alive 1; then pass "dataplanes survived the kill (same pids)"; else fail "a dataplane died or was restarted"; fi
run_everywhere 2 8 100 after-kill
check_cores 2 two-hosts-cores
"$rib" down >/dev/null

# ---- three hosts, 4 connections per remote host -----------------------------------
printf 'connections:\n  per_remote_host: 4\n' >"$out/connections.yaml"
up 3 --config-extra "$out/connections.yaml"
run_everywhere 3 12 200 three-hosts
if dp_alive 0 && dp_alive 1 && dp_alive 2; then pass "three-hosts: dataplanes alive (same pids)"; else fail "three-hosts: a dataplane died or was restarted"; fi
check_cores 3 three-hosts-cores
"$rib" down >/dev/null

if [ $failures -eq 0 ]; then echo "rack multicore: all checks passed"; exit 0; fi
echo "rack multicore: $failures check(s) failed"; exit 1
