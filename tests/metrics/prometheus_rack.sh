#!/usr/bin/env bash
# Issue 6: a real Prometheus scrapes a 2-host rack in a box whose hosts run a
# workload under `gossamerctl run`, with the repository's scrape
# configuration (monitoring/prometheus.yml, made concrete by
# monitoring/check.py gen-config: 1 s intervals, the hosts' 198.18.0.x:9464)
# and rule files. Checks:
#   - promtool check rules / check config (shipped and generated);
#   - monitoring/check.py static (dashboard, rules, catalog);
#   - both targets up; then monitoring/check.py check: every query of the
#     Grafana dashboard and every recording and alert rule evaluates and
#     returns data, from both hosts, every rule loaded and healthy, plus
#     expectations on what the workload must have produced (local and
#     remote requests, fragments, retransmissions under injected loss, ...);
#   - the workload (tests/metrics/metrics_load) checks its own results and
#     exits 0 on every host;
#   - if tests/metrics/top_pty.py exists (the `gossamerctl top` test), it runs
#     in host 0's namespace while the workload runs:
#       python3 top_pty.py GOSSAMERCTL CONFIG_OF_HOST0 EXPECTED_THREADS
#     with EXPECTED_THREADS like h0:0,h0:1,h1:2,h1:3 (host names from the
#     rack's config); its exit status is a check (77 counts as skipped).
#   prometheus_rack.sh BUILD_DIR
# Needs root, network namespaces, prometheus and promtool; exits 77 (skip)
# otherwise. Prints ok:/FAIL: lines; exits 1 if any check failed. Kept on
# failure (printed): the work directory with Prometheus' config, log and
# data, the workload's output and the gossamerd logs.
set -uo pipefail
. "$(dirname "$0")/../rack/lib.sh" "$1"
app="$build/tests/metrics/metrics_load"
check="$root/monitoring/check.py"
top="$root/tests/metrics/top_pty.py"

LOAD_SECONDS=50   # the workload; the checks below run while it does
THREADS=4         # in the rack (2 per host)
PROM_PORT=9090    # inside host 0's namespace, on 127.0.0.1

skip_unless_rack "$app"
for p in prometheus promtool python3 timeout; do
  command -v "$p" >/dev/null 2>&1 || { echo "SKIP: $p not found (prometheus, promtool: Debian packages prometheus)"; exit 77; }
done

own_rack pm prom
work=$(mktemp -d /tmp/gossamer-prom-test.XXXXXX)
t_start=$(date +%s)
elapsed() { echo "$(($(date +%s) - t_start))s"; }

# Background processes we started (each one's pid is the process itself:
# rack-in-a-box exec and ip netns exec exec their command, and timeout
# passes our SIGTERM on to its child).
prom_pid="" load_pid="" top_pid=""
stop_bg() {
  local p
  for p in $top_pid $load_pid $prom_pid; do
    kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
  done
  top_pid="" load_pid="" prom_pid=""
}
cleanup() {
  stop_bg
  "$rib" netem off >/dev/null 2>&1 || true
  if [ $failures -ne 0 ] || [ -n "${KEEP_RACK:-}" ]; then
    for h in 0 1; do
      cp "$GOSSAMER_RACK_DIR/h$h/gossamerd.log" "$work/gossamerd-h$h.log" 2>/dev/null || true
    done
  fi
  [ -n "${KEEP_RACK:-}" ] || "$rib" down >/dev/null 2>&1 || true
  if [ $failures -eq 0 ] && [ -z "${KEEP_RACK:-}" ]; then
    rm -rf "$work"
  else
    echo "kept for inspection: $work"
  fi
}
trap cleanup EXIT
trap 'fail "interrupted"; exit 1' INT TERM

# ---- the files, offline ---------------------------------------------------------------------
out=$(cd "$root/monitoring" && promtool check rules rules/recording.yml rules/alerts.yml 2>&1) &&
  pass "promtool check rules: $(echo "$out" | grep -o 'SUCCESS: [0-9]* rules found' | paste -sd, -)" ||
  { fail "promtool check rules"; echo "$out"; }
out=$(promtool check config "$root/monitoring/prometheus.yml" 2>&1) &&
  pass "promtool check config monitoring/prometheus.yml (the shipped template)" ||
  { fail "promtool check config monitoring/prometheus.yml"; echo "$out"; }
if python3 "$check" gen-config --target 198.18.0.1:9464 --target 198.18.0.2:9464 \
  --interval 1s --eval-interval 1s >"$work/prometheus.yml" 2>"$work/gen-config.err"; then
  out=$(promtool check config "$work/prometheus.yml" 2>&1) &&
    pass "promtool check config on the generated configuration (1 s, 198.18.0.1-2:9464)" ||
    { fail "promtool check config $work/prometheus.yml"; echo "$out"; }
else
  fail "check.py gen-config: $(cat "$work/gen-config.err")"
fi
out=$(python3 "$check" static 2>&1) && pass "check.py static" || { fail "check.py static"; echo "$out"; }
[ $failures -eq 0 ] || exit 1

# ---- the rack, Prometheus, the workload ---------------------------------------------------------
if ! timeout 90 "$rib" up --hosts 2 >"$work/up" 2>&1; then
  cat "$work/up"; fail "rack up"; exit 1
fi
pass "2-host rack up ($(elapsed))"
mkdir -p "$work/tsdb"
"$rib" exec 0 -- timeout 170 prometheus --config.file="$work/prometheus.yml" \
  --storage.tsdb.path="$work/tsdb" --web.listen-address="127.0.0.1:$PROM_PORT" \
  --log.level=warn >"$work/prometheus.log" 2>&1 &
prom_pid=$!
url="http://127.0.0.1:$PROM_PORT"
pycheck() { "$rib" exec 0 -- timeout 120 python3 "$check" "$@"; }

"$rib" exec 0 -- timeout $((LOAD_SECONDS + 60)) "$ctl" run -- "$app" "$LOAD_SECONDS" "$THREADS" \
  >"$work/load.out" 2>"$work/load.err" &
load_pid=$!
# Where the workload's threads run (printed by host 0's instance).
for _ in $(seq 300); do
  [ "$(grep -c '^\[host 0\] thread [0-9]* host [0-9]*$' "$work/load.out")" -eq "$THREADS" ] && break
  kill -0 "$load_pid" 2>/dev/null || break
  sleep 0.1
done
mapfile -t names < <(awk '/^rack:/ { r = 1 } r && $1 == "-" && $2 == "name:" { print $3 }' "$GOSSAMER_RACK_DIR/h0.yaml")
expected=$(awk -v names="${names[*]}" 'BEGIN { split(names, n, " ") }
  /^\[host 0\] thread [0-9]+ host [0-9]+$/ { printf "%s%s:%s", sep, n[$6 + 1], $4; sep = "," }' "$work/load.out")
if [ "$(echo "$expected" | tr ',' '\n' | grep -c .)" -eq "$THREADS" ] && [ "${#names[@]}" -eq 2 ]; then
  pass "workload running on both hosts: threads $expected ($(elapsed))"
else
  fail "the workload did not report its $THREADS threads (hosts: ${names[*]})"; tail -5 "$work/load.out" "$work/load.err"
fi

# `gossamerctl top` (another test's script) while the workload runs.
if [ -f "$top" ] && [ -n "$expected" ]; then
  "$rib" exec 0 -- timeout 60 python3 "$top" "$ctl" "$GOSSAMER_RACK_DIR/h0.yaml" "$expected" >"$work/top.out" 2>&1 &
  top_pid=$!
fi

# A little loss for a while, so that the retransmission series move (then
# none, so that the scrapes and the checks below see a clean network).
if "$rib" netem "loss 2%" >/dev/null 2>"$work/netem.err"; then
  sleep 8
  "$rib" netem off >/dev/null 2>>"$work/netem.err" || fail "netem off: $(cat "$work/netem.err")"
  pass "8 s of 2 % loss injected with netem"
else
  fail "netem: $(cat "$work/netem.err")"
fi

if pycheck wait-up --url "$url" --targets 2 --samples 5 --timeout 30; then
  # Everything, while the workload still runs (its series exist only while
  # it is attached). --hosts 2: every metric the queries use must have
  # series from both hosts. The --expect queries must return samples > 0:
  # what this workload must have made move, and that busy + idle seconds
  # add up to wall time (1 s per second, within 20 %: the cycles-to-seconds
  # conversion; a 10 s window, so that series younger than the recording
  # rules' 1 m windows are not under-counted by rate()); every stage of
  # the dataplane's loop has a time per slot on both hosts, and the stages
  # together take no more than the busy time they are part of.
  if pycheck check --url "$url" --hosts 2 --timeout 30 --verbose \
    --expect 'count(gossamer:trustee_utilization:ratio_rate1m{app="metrics_load"} > 0) == '"$THREADS" \
    --expect 'min(gossamer_app_rack_threads{app="metrics_load"}) == '"$THREADS" \
    --expect 'count(gossamer_app_threads{app="metrics_load"} > 0) == 2' \
    --expect 'count(sum by (source) (gossamer:trustee_requests_served:rate1m{app="metrics_load"}) > 0) == 2' \
    --expect 'count(sum by (dest) (gossamer:client_requests_sent:rate1m{app="metrics_load"}) > 0) == 2' \
    --expect 'sum(rate(gossamer_client_direct_applies_total{app="metrics_load"}[1m]))' \
    --expect 'min(gossamer:trustee_batching:ratio_rate1m{app="metrics_load"}) >= 1' \
    --expect 'count(gossamer:dataplane_coalescing:ratio_rate1m > 0) == 2' \
    --expect 'count(gossamer:dataplane_core_utilization:ratio_rate1m > 0) >= 2' \
    --expect 'count(gossamer:dataplane_stage_seconds_per_slot:rate1m > 0) == 8' \
    --expect 'count(sum by (host, core) (rate(gossamer_dataplane_stage_seconds_total[10s])) <= on (host, core) sum by (host, core) (rate(gossamer_dataplane_busy_seconds_total[10s])) * 1.01) >= 2' \
    --expect 'count(abs(rate(gossamer_trustee_busy_seconds_total{app="metrics_load"}[10s]) + rate(gossamer_trustee_idle_seconds_total{app="metrics_load"}[10s]) - 1) < 0.2) == '"$THREADS" \
    --expect 'count(abs(rate(gossamer_dataplane_busy_seconds_total[10s]) + rate(gossamer_dataplane_idle_seconds_total[10s]) - 1) < 0.2) >= 2' \
    --expect 'sum(increase(gossamer_dataplane_retransmits_total[2m]))' \
    --expect 'sum(increase(gossamer_dataplane_fragments_sent_total[2m]))' \
    --expect 'sum(increase(gossamer_dataplane_fragments_received_total[2m]))' \
    --expect 'sum(increase(gossamer_dataplane_large_slots_total[2m]))' \
    --expect 'sum(increase(gossamer_thread_tcp_bytes_total{app="metrics_load",direction="sent"}[2m]))' \
    --expect 'sum(increase(gossamer_thread_tcp_bytes_total{app="metrics_load",direction="received"}[2m]))' \
    --expect 'count(gossamer_host_up == 1) == 4' \
    --expect 'count(gossamer_dataplane_up == 1) == 2' \
    --expect 'count(gossamer_dataplane_port_dropped_frames_total >= 0) == 8' \
    --expect 'count(gossamer_runs >= 1) == 2' \
    >"$work/check.out" 2>&1; then
    grep -E '^(ok: (all|expected)|warning:|alert state:)' "$work/check.out"
    pass "check.py: every dashboard query and rule returns data from both hosts ($(elapsed))"
  else
    grep -v '^ok: ' "$work/check.out"
    fail "check.py against Prometheus"
  fi
else
  fail "both gossamerd targets up in Prometheus"; tail -5 "$work/prometheus.log"
fi

if [ -n "$top_pid" ]; then
  wait "$top_pid"
  rc=$?
  top_pid=""
  case $rc in
    0) pass "tests/metrics/top_pty.py (gossamerctl top) with threads $expected" ;;
    77) echo "skipped: tests/metrics/top_pty.py: $(tail -1 "$work/top.out")" ;;
    *) fail "tests/metrics/top_pty.py exited $rc"; tail -20 "$work/top.out" ;;
  esac
elif [ ! -f "$top" ]; then
  echo "note: no tests/metrics/top_pty.py (the gossamerctl top test): not run"
fi

wait "$load_pid"
rc=$?
load_pid=""
ok_hosts=$(grep -c '^\[host [0-9]\] host [0-9]: run returned 0; .* checks passed$' "$work/load.out")
if [ $rc -eq 0 ] && [ "$ok_hosts" -eq 2 ] && ! grep -q 'CHECK FAILED' "$work/load.out" "$work/load.err"; then
  pass "workload: $(grep -h '^\[host 0\] [0-9]* increments' "$work/load.out" | cut -d' ' -f3-); $(grep -h 'checks passed' "$work/load.out" | sed 's/^\[host [0-9]\] //' | paste -sd'|' -)"
else
  fail "workload exited $rc, $ok_hosts host(s) passed their checks"; tail -20 "$work/load.out" "$work/load.err"
fi
stop_bg

if [ $failures -eq 0 ]; then echo "prometheus rack: all checks passed ($(elapsed))"; exit 0; fi
echo "prometheus rack: $failures check(s) failed ($(elapsed))"; exit 1
