#!/usr/bin/env bash
# Issue 7 on a 2-host rack in a box, 4 connections per host pair and at most
# 2 active (connections.max_active_qps), so 20 threads x 2 hosts share far
# fewer connections than they could: flock_app keeps host 0's threads
# delegating to host 1 (one thread in ten with 8 KiB arguments) under
# injected loss. Checks:
#   - every 100 ms, on both hosts, the connections the QP scheduler keeps
#     active (gossamer_dataplane_connection_active{direction="inbound"})
#     never exceed the limit, and the schedulers did act (connections
#     activated up to the limit, threads moved);
#   - every request ran exactly once (flock_app counts both sides) although
#     connections were deactivated with frames in flight and loss;
#   - the thread scheduler put the 8 KiB threads on other connections than
#     the 32-byte ones (host 0's placement in its dataplane's stats).
#   rack_flock.sh BUILD_DIR
# Needs root and network namespaces; exits 77 (skip) otherwise.
set -uo pipefail
. "$(dirname "$0")/lib.sh" "$1"
app="$build/tests/rack/flock_app"
skip_unless_rack "$app"
own_rack rf flock
out="$GOSSAMER_RACK_DIR.out"
mkdir -p "$out"
run_pid="" sampler_pid=""
cleanup() {
  [ -n "$run_pid" ] && kill "$run_pid" 2>/dev/null
  [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null
  "$rib" down >/dev/null 2>&1 || true
  [ "$failures" -eq 0 ] && rm -rf "$out"
}
trap cleanup EXIT

LIMIT=2 CONNS=4 SECONDS_RUN=8
cat >"$out/extra.yaml" <<YAML
connections:
  per_remote_host: $CONNS
  max_active_qps: $LIMIT
  scheduler_interval_us: 2000
YAML
# The 8 KiB requests must cross the dataplane (the thread scheduler places
# threads by the bytes they send there), not the TCP path for large bodies.
if ! "$rib" up --hosts 2 --config-extra "$out/extra.yaml" --large-threshold 16384 >"$out/up.log" 2>&1; then
  fail "rack-in-a-box up"; tail -20 "$out/up.log"; exit 1
fi
pass "2-host rack up, $CONNS connections per host pair, max_active_qps $LIMIT"
"$rib" netem "loss 1% reorder 5% duplicate 1%" >/dev/null 2>&1 || fail "netem"

# The sampler: both gossamerds' /metrics every 100 ms while the run lasts.
cat >"$out/sampler.py" <<'PY'
import re, sys, time, urllib.request
limit, seconds, outfile = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
pat = re.compile(r'^gossamer_dataplane_connection_active\{host="(h\d)",peer="h\d",conn="(\d+)",direction="inbound"\} (\S+)$')
samples, over, seen = 0, [], set()
end = time.time() + seconds
while time.time() < end:
    for ip in ("198.18.0.1", "198.18.0.2"):
        try:
            text = urllib.request.urlopen(f"http://{ip}:9464/metrics", timeout=1).read().decode()
        except OSError:
            continue
        active = {}
        for line in text.splitlines():
            m = pat.match(line)
            if m:
                active.setdefault(m.group(1), 0)
                active[m.group(1)] += int(float(m.group(3)))
        for host, n in active.items():
            samples += 1
            seen.add(n)
            if n > limit:
                over.append((host, n))
    time.sleep(0.1)
with open(outfile, "w") as f:
    f.write(f"samples {samples}\nover {len(over)} {over[:5]}\nseen {sorted(seen)}\n")
PY
"$rib" exec 0 -- python3 "$out/sampler.py" "$LIMIT" "$((SECONDS_RUN + 2))" "$out/samples" &
sampler_pid=$!

"$rib" exec 0 -- timeout 120 "$ctl" run --threads 20 -- "$app" 20 "$SECONDS_RUN" >"$out/run.out" 2>&1 &
run_pid=$!
# Host 0's thread placement, sampled while the run lasts.
stats0="$GOSSAMER_RACK_DIR/h0/dataplane.sock.stats"
for i in $(seq $((SECONDS_RUN - 1))); do
  sleep 1
  cp "$stats0" "$out/stats.$i" 2>/dev/null
done
wait "$run_pid"
rc=$?
run_pid=""
wait "$sampler_pid"
sampler_pid=""
if [ $rc -eq 0 ] && grep -q "each counted once: yes" "$out/run.out"; then
  pass "every request ran exactly once: $(grep 'flock_app:' "$out/run.out" | sed 's/^\[host 0\] //')"
else
  fail "flock_app exited $rc"; tail -20 "$out/run.out"
fi

read -r _ samples <"$out/samples"
over=$(sed -n 's/^over \([0-9]*\).*/\1/p' "$out/samples")
seen=$(sed -n 's/^seen //p' "$out/samples")
if [ "${samples:-0}" -ge 20 ] && [ "$over" = 0 ]; then
  pass "active inbound connections never above $LIMIT in $samples samples (values seen: $seen)"
else
  fail "active connections over the limit, or too few samples: $(cat "$out/samples")"
fi

# The schedulers acted: a sample at the limit (connections activated beyond
# connection 0), threads moved on host 0. Renewals declined are shown, not
# required: one steady sender keeps its connections since issue 17's
# hysteresis (before, it was taken for dormant, and deactivated, whenever
# one scheduler interval saw no frame from it: 12 renewals declined and 318
# thread moves in a run on 59a3a15). Decisions under changing load, and the
# limit meanwhile, are rack-flock-cores's.
declined=0 moves=0
for h in 0 1; do
  s="$GOSSAMER_RACK_DIR/h$h/dataplane.sock.stats"
  declined=$((declined + $(awk '/^renewals_declined/ { s += $2 } END { print s + 0 }' "$s")))
done
moves=$(awk '/^thread_moves/ { print $2 }' "$stats0")
if grep -qw "$LIMIT" <<<"${seen//[\[\],]/ }" && [ "${moves:-0}" -gt 0 ]; then
  pass "the schedulers acted: $LIMIT connections active in some samples, $moves thread moves on host 0" \
    "($declined renewals declined)"
else
  fail "no sample with $LIMIT connections active (values seen: $seen) or no thread moved (${moves:-0})"
fi

# Placement: in how many samples were the large threads on connections that
# no small thread used? Only samples where host 1 let host 0 use two
# connections or more count (with one, everybody shares it).
large=$(sed -n 's/.*large thread \([0-9]*\).*/\1/p' "$out/run.out" | sort -u)
apart=0 together=0 single=0
for f in "$out"/stats.*; do
  [ -f "$f" ] || continue
  verdict=$(awk -v large="$(echo $large)" '
    BEGIN { n = split(large, l, " "); for (i = 1; i <= n; i++) big[l[i]] = 1 }
    /^outbound_active\{peer="1"/ { usable += $2 }
    /^thread_conn\{/ && /peer="1"/ {
      match($0, /thread="[0-9]+"/); t = substr($0, RSTART + 8, RLENGTH - 9)
      if (t in big) lc[$2] = 1; else sc[$2] = 1
    }
    END {
      if (usable < 2) { print "single"; exit }
      for (c in lc) if (c in sc) { print "together"; exit }
      print "apart"
    }' "$f")
  case $verdict in
    apart) apart=$((apart + 1)) ;;
    together) together=$((together + 1)) ;;
    *) single=$((single + 1)) ;;
  esac
done
if [ -n "$large" ] && [ $apart -ge 1 ] && [ $apart -gt $together ]; then
  pass "8 KiB threads ($(echo $large)) on other connections than the 32-byte ones in $apart of" \
    "$((apart + together)) samples with 2+ usable connections ($single samples with one)"
else
  fail "8 KiB threads shared a connection with 32-byte ones in $together of $((apart + together)) samples" \
    "with 2+ usable connections ($single with one)"
  grep thread_conn "$stats0" | head -30
fi

[ "$failures" -eq 0 ] && echo "rack-flock: all checks passed" || echo "rack-flock: $failures check(s) failed"
[ "$failures" -eq 0 ]
