#!/usr/bin/env bash
# tools/apps/sssp end to end: distances equal sequential Dijkstra's (the
# program validates on host 0 and exits non-zero naming the first differing
# vertex) on scales 10..14, standalone with several partition counts and on
# a 2-host rack in a box through `gossamerctl run`; a deliberately spoiled
# distance (--corrupt-for-test) must be caught; the graph (root, vertices
# reached, edges in the component) must not depend on how it is partitioned.
#   sssp_test.sh BUILD_DIR
# The standalone part always runs. The rack part needs root and network
# namespaces: without them it is skipped (exit 77, after the standalone part
# passed).
set -uo pipefail
. "$(dirname "$0")/../rack/lib.sh" "$1"
app="$build/tools/apps/sssp/sssp"
out=$(mktemp -d /tmp/sssp-test.XXXXXX)
rack_up=0
cleanup() {
  [ $rack_up -eq 1 ] && "$rib" down >/dev/null 2>&1
  rm -rf "$out"
}
trap cleanup EXIT

# field NAME FILE: the value of NAME=... on the result line.
field() { grep -o "^\(\[host 0\] \)\?sssp .*" "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -1; }

# check_run LABEL FILE RC HOSTS: a validated run on HOSTS hosts.
check_run() {
  local label=$1 f=$2 rc=$3 hosts=$4
  if [ "$rc" -eq 0 ] && [ "$(field validated "$f")" = yes ] && [ "$(field hosts "$f")" = "$hosts" ] &&
    [ "$(field reached "$f")" -gt 1 ]; then
    pass "$label: distances equal Dijkstra's ($(grep -o 'threads=.*teps=[^ ]*' "$f"), reached=$(field reached "$f"))"
  else
    fail "$label: exit $rc"; cat "$f"; return
  fi
  # Batching: at most one request per (partition, destination) per round
  # (batches are split only above 2^17 updates, more than these graphs have).
  local p r b
  p=$(field threads "$f"); r=$(field rounds "$f"); b=$(field batches "$f")
  [ "$b" -le $((r * p * (p - 1))) ] || fail "$label: $b batches in $r rounds on $p partitions"
}

# same_graph LABEL A B: two runs of one (scale, seed) saw the same graph.
same_graph() {
  local k
  for k in root reached edges; do
    if [ "$(field $k "$2")" != "$(field $k "$3")" ]; then
      fail "$1: $k differs: $(field $k "$2") vs $(field $k "$3")"; return
    fi
  done
  pass "$1: same root, vertices reached and edges ($(field edges "$2")) however partitioned"
}

# ---- standalone (no GOSSAMER_CONFIG: one host) --------------------------------------
[ -x "$app" ] || { echo "FAIL: $app was not built"; exit 1; }
unset GOSSAMER_CONFIG GOSSAMER_THREADS
for s in 10 12 14; do
  timeout 120 "$app" --scale "$s" --threads 4 --validate >"$out/s$s" 2>&1
  check_run "standalone scale $s" "$out/s$s" $? 1
done
# Other partition counts (one partition; three: uneven shares) and another
# seed and edge factor, each still equal to Dijkstra.
timeout 120 "$app" --scale 12 --threads 1 --validate >"$out/s12t1" 2>&1
check_run "standalone scale 12, 1 partition" "$out/s12t1" $? 1
timeout 120 "$app" --scale 12 --threads 3 --validate >"$out/s12t3" 2>&1
check_run "standalone scale 12, 3 partitions" "$out/s12t3" $? 1
same_graph "scale 12 on 1 and 3 partitions" "$out/s12t1" "$out/s12t3"
same_graph "scale 12 on 1 and 4 partitions" "$out/s12t1" "$out/s12"
timeout 120 "$app" --scale 11 --edgefactor 8 --seed 7 --delta 0.03 --threads 2 --validate >"$out/s11" 2>&1
check_run "standalone scale 11, edgefactor 8, seed 7, delta 0.03" "$out/s11" $? 1
timeout 120 "$app" --scale 11 --edgefactor 8 --seed 7 --delta 2 --threads 2 --validate >"$out/s11bf" 2>&1
check_run "standalone scale 11, delta 2 (Bellman-Ford rounds)" "$out/s11bf" $? 1
# A given root; one that is not a vertex is refused.
timeout 60 "$app" --scale 10 --threads 2 --root 5 >"$out/root5" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ "$(field root "$out/root5")" = 5 ] && [ "$(field validated "$out/root5")" = yes ]; then
  pass "--root 5 is the source, validated by default at scale 10"
else
  fail "--root 5: exit $rc"; cat "$out/root5"
fi
timeout 60 "$app" --scale 10 --threads 2 --root 1024 >"$out/badroot" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "is not a vertex" "$out/badroot" && pass "--root 1024 on 1024 vertices is refused" ||
  { fail "--root 1024: exit $rc"; cat "$out/badroot"; }

# A wrong distance must be caught: exit 1, the first differing vertex named.
timeout 120 "$app" --scale 12 --threads 4 --corrupt-for-test >"$out/bad" 2>&1
rc=$?
if [ $rc -eq 1 ] && [ "$(field validated "$out/bad")" = no ] &&
  grep -q "validation FAILED at the first differing vertex [0-9]*: distance" "$out/bad"; then
  pass "standalone: a spoiled distance is caught ($(grep -o 'vertex [0-9]*:.*' "$out/bad"))"
else
  fail "standalone --corrupt-for-test: exit $rc"; cat "$out/bad"
fi

# ---- on a 2-host rack in a box -------------------------------------------------------
skip=""
if [ "$(id -u)" -ne 0 ]; then skip="needs root (network namespaces)"
elif ! ip netns list >/dev/null 2>&1; then skip="ip netns unusable"
elif ! { ip netns add "sp$$-probe" && ip netns del "sp$$-probe"; } >/dev/null 2>&1; then
  skip="cannot create a network namespace"
fi
for b in "$build/dataplane/gossamer-dataplane" "$build/controlplane/gossamerd" "$ctl"; do
  [ -z "$skip" ] && [ ! -x "$b" ] && skip="$b was not built"
done
if [ -n "$skip" ]; then
  if [ $failures -ne 0 ]; then echo "sssp: $failures check(s) failed"; exit 1; fi
  echo "SKIP: the rack part: $skip (the standalone part passed)"
  exit 77
fi

own_rack sp sssp
rack_up=1  # from here on, the trap takes the rack down (down also removes its directory)
"$rib" up --hosts 2 >"$out/up" 2>&1 || { cat "$out/up"; fail "rack up"; exit 1; }

grun() { "$rib" exec 0 -- timeout 150 "$ctl" run "$@"; }
for s in 10 12 14; do
  grun -- "$app" --scale "$s" --threads 4 --validate >"$out/r$s" 2>&1
  check_run "2-host rack scale $s" "$out/r$s" $? 2
done
same_graph "scale 12 standalone and on the rack" "$out/s12" "$out/r12"
# gossamerctl's --threads overrides the program's count: 6 partitions, 3 a host.
grun --threads 6 -- "$app" --scale 12 --threads 4 --validate >"$out/r12t6" 2>&1
rc=$?
check_run "2-host rack scale 12, gossamerctl run --threads 6" "$out/r12t6" $rc 2
[ "$(field threads "$out/r12t6")" = 6 ] || fail "--threads 6 gave $(field threads "$out/r12t6") partitions"

grun -- "$app" --scale 12 --threads 4 --corrupt-for-test >"$out/rbad" 2>&1
rc=$?
if [ $rc -eq 1 ] && [ "$(field validated "$out/rbad")" = no ] &&
  grep -q "validation FAILED at the first differing vertex" "$out/rbad"; then
  pass "2-host rack: a spoiled distance is caught, gossamerctl run exits 1"
else
  fail "rack --corrupt-for-test: exit $rc"; cat "$out/rbad"
fi

if [ $failures -eq 0 ]; then echo "sssp: all checks passed"; exit 0; fi
echo "sssp: $failures check(s) failed"; exit 1
