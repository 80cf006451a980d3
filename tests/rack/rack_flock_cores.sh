#!/usr/bin/env bash
# Issue 17 item 6: one QP scheduler decision per host with 2 polling cores.
# A 4-host rack in a box (`up --cores 2`), 4 connections per host pair and
# max_active_qps 5, so every receiver shares 5 active connections among 3
# equally busy senders (connection 0 of each is always active: 2 more to
# share). flock_mesh_app runs 6 threads per host, each delegating to every
# other host in turn. Checks:
#   - every request ran exactly once;
#   - the active inbound connections of each host, summed over its peers
#     and read from every dataplane's metrics file (what gossamerd exports
#     as gossamer_dataplane_connection_active{direction="inbound"}) every
#     20 ms (each new 100 ms sample counted once), never exceed the limit,
#     and the scheduler did grant more than connection 0 somewhere;
#   - under this even load the thread scheduler moves few threads: at most
#     MAX_MOVES_PER_S per host, measured after a warm-up.
#   rack_flock_cores.sh BUILD_DIR
# Needs root and network namespaces; exits 77 (skip) otherwise.
set -uo pipefail
. "$(dirname "$0")/lib.sh" "$1"
app="$build/tests/rack/flock_mesh_app"
sampler="$build/tests/rack/active_sampler"
skip_unless_rack "$app" "$sampler"
own_rack fc flockcores
out="$GOSSAMER_RACK_DIR.out"
mkdir -p "$out"
run_pid="" sampler_pid=""
cleanup() {
  [ -n "$run_pid" ] && kill "$run_pid" 2>/dev/null
  [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null
  [ -n "${KEEP_RACK:-}" ] || "$rib" down >/dev/null 2>&1 || true
  [ "$failures" -eq 0 ] && rm -rf "$out"
}
trap cleanup EXIT

HOSTS=4 CORES=2 CONNS=4 LIMIT=${LIMIT:-5} THREADS=$((HOSTS * 6)) SECONDS_RUN=${SECONDS_RUN:-12} WARMUP=3
MAX_MOVES_PER_S=${MAX_MOVES_PER_S:-20}
cat >"$out/extra.yaml" <<YAML
connections:
  per_remote_host: $CONNS
  max_active_qps: $LIMIT
YAML
if ! timeout 120 "$rib" up --hosts "$HOSTS" --cores "$CORES" --config-extra "$out/extra.yaml" >"$out/up.log" 2>&1; then
  fail "rack-in-a-box up"; tail -20 "$out/up.log"; exit 1
fi
pass "$HOSTS-host rack up with $CORES dataplane cores, $CONNS connections per host pair, max_active_qps $LIMIT"

files=()
for ((h = 0; h < HOSTS; h++)); do files+=("$GOSSAMER_RACK_DIR/h$h/dataplane.sock.metrics"); done
"$sampler" "$LIMIT" 20 "$((SECONDS_RUN + 1))" "$WARMUP" "${files[@]}" >"$out/samples" 2>&1 &
sampler_pid=$!
"$rib" exec 0 -- timeout 90 "$ctl" run --threads "$THREADS" -- "$app" "$THREADS" "$SECONDS_RUN" >"$out/run.out" 2>&1 &
run_pid=$!
wait "$run_pid"
rc=$?
run_pid=""
wait "$sampler_pid"
sampler_pid=""
if [ $rc -eq 0 ] && grep -q "each counted once: yes" "$out/run.out"; then
  pass "every request ran exactly once: $(grep 'flock_mesh_app:' "$out/run.out" | sed 's/^\[host 0\] //')"
else
  fail "flock_mesh_app exited $rc"; tail -20 "$out/run.out"
fi

sed 's/^/    /' "$out/samples"
read -r _ _ samples _ over <<<"$(grep '^total ' "$out/samples")"
max=$(awk '/^host / { if ($8 > m) m = $8 } END { print m + 0 }' "$out/samples")
if [ "${samples:-0}" -ge $((HOSTS * SECONDS_RUN * 5)) ] && [ "${over:-1}" = 0 ]; then
  pass "active inbound connections never above $LIMIT in $samples samples of $HOSTS hosts"
else
  fail "active inbound connections above $LIMIT in ${over:-?} of ${samples:-0} samples (or too few samples)"
fi
if [ "$max" -gt $((HOSTS - 1)) ]; then
  pass "the QP scheduler granted connections beyond connection 0 (up to $max active on a host)"
else
  fail "no host ever had more than connection 0 of each peer active (max $max): nothing was scheduled"
fi
bad=$(awk -v m="$MAX_MOVES_PER_S" '/^host / { r = $NF; if (r < 0 || r > m) print "host " $2 ": " r "/s" }' "$out/samples")
rates=$(awk '/^host / { printf "%s%s", sep, $NF; sep = ", " }' "$out/samples")
if [ -z "$bad" ]; then
  pass "thread moves under even load at most $MAX_MOVES_PER_S/s per host (per host: $rates)"
else
  fail "thread moves under even load above $MAX_MOVES_PER_S/s: $(echo $bad)"
fi

[ "$failures" -eq 0 ] && echo "rack-flock-cores: all checks passed" || echo "rack-flock-cores: $failures check(s) failed"
[ "$failures" -eq 0 ]
