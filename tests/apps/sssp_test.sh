#!/usr/bin/env bash
# tools/apps/sssp end to end: the Graph500 validation (distances and parent
# tree, run on host 0 for every root; the program exits 1 when it fails)
# passes on every root at scales 10..14, standalone on 1, 2, 3 and 4
# partitions (also with small light-phase chunks) and on a 2-host rack in a
# box through `gossamerctl run`; a
# deliberately spoiled distance or parent (--corrupt-for-test) must be
# caught; the results block carries the reference's field names; the graph
# (first root, vertices reached, edges in the component) must not depend on
# how it is partitioned; a second partition adds at most 30 % rounds and 10 %
# relaxations at scale 12.
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

# The reference's results block (src/main.c, SSSP build), every name
# followed by a number; "sssp harmonic_mean_TEPS:" has its "!" marker.
block_fields="SCALE: edgefactor: NBFS: graph_generation: num_mpi_processes: construction_time:"
for s in min firstquartile median thirdquartile max mean stddev; do
  block_fields="$block_fields sssp_${s}_time: ${s}_nedge: sssp_${s}_validate:"
done
for s in min firstquartile median thirdquartile max harmonic_stddev; do block_fields="$block_fields sssp_${s}_TEPS:"; done
num='-\?[0-9][0-9.e+-]*\|nan\|-\?inf'
# check_block LABEL FILE ROOTS: the block parses, with NBFS = ROOTS.
check_block() {
  local f k missing=""
  f=$(sed 's/^\[host 0\] //' "$2")
  for k in $block_fields; do
    echo "$f" | grep -q "^${k//_/[ _]} *\($num\)$" || missing="$missing $k"
  done
  echo "$f" | grep -q "^sssp harmonic_mean_TEPS:     !  [0-9]" || missing="$missing sssp_harmonic_mean_TEPS:"
  if [ -n "$missing" ]; then fail "$1: the results block lacks$missing"; echo "$f"; return; fi
  [ "$(echo "$f" | sed -n 's/^NBFS: *//p')" = "$3" ] || { fail "$1: NBFS is not $3"; return; }
  pass "$1: the results block has the reference's fields (harmonic mean $(echo "$f" | sed -n 's/^sssp harmonic_mean_TEPS: *! *//p') TEPS)"
}

# check_run LABEL FILE RC HOSTS [ROOTS]: a run on HOSTS hosts whose every root validated.
check_run() {
  local label=$1 f=$2 rc=$3 hosts=$4 roots=${5:-64}
  if [ "$rc" -eq 0 ] && [ "$(field validated "$f")" = yes ] && [ "$(field hosts "$f")" = "$hosts" ] &&
    [ "$(field roots "$f")" = "$roots" ] && [ "$(field reached "$f")" -gt 1 ]; then
    pass "$label: $roots roots validated ($(grep -o 'threads=.*teps=[^ ]*' "$f"), reached=$(field reached "$f"))"
  else
    fail "$label: exit $rc"; cat "$f"; return
  fi
  # Every round ends with one piece from each partition to each other one
  # (the light phase's chunks come on top).
  local p r b
  p=$(field threads "$f"); r=$(field rounds "$f"); b=$(field batches "$f")
  [ "$b" -ge $((r * p * (p - 1))) ] || fail "$label: $b pieces in $r rounds on $p partitions, fewer than one a round"
}

# check_trace LABEL FILE: --trace's line agrees with the summary's counts:
# every partition counts each round, 2 partitions send each other one last
# piece a round, and every last piece is counted once on arrival.
tfield() { grep -o "trace rounds=.*" "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -1; }
check_trace() {
  local r p n
  r=$(field rounds "$2"); p=$(field threads "$2")
  n=$(grep -o "trace rounds=.*" "$2" | sed -n 's/.*(n \([0-9/]*\): ahead.*/\1/p' | head -1 | tr '/' '+')
  if [ -n "$r" ] && [ "$(tfield rounds "$2")" = $((r * p)) ] && [ "$(tfield last "$2")" = $((r * p * (p - 1))) ] &&
    [ -n "$n" ] && [ $((n)) -eq $((r * p * (p - 1))) ]; then
    pass "$1: --trace counts $((r * p)) partition-rounds and $((n)) last pieces sent and received ($(grep -o 'compute_us=[^ ]* wait_us=[^ ]*' "$2"))"
  else
    fail "$1: --trace's counts disagree with rounds=$r threads=$p"; grep -o "trace rounds=.*" "$2"
  fi
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
for t in 1 2 4; do
  timeout 120 "$app" --scale 12 --threads $t >"$out/s12t$t" 2>&1
  check_run "standalone scale 12, $t partition(s)" "$out/s12t$t" $? 1
done
check_block "standalone scale 12, 2 partitions" "$out/s12t2" 64
# The defaults: delta 0.05, a window of 1.
[ "$(field delta "$out/s12t2")/$(field window "$out/s12t2")" = 0.05/1 ] &&
  pass "standalone: delta 0.05 and window 1 by default" ||
  fail "standalone: delta $(field delta "$out/s12t2"), window $(field window "$out/s12t2") by default, not 0.05 and 1"
# With --window 2 (the default is 1: fewer rounds, but slower on this VM,
# tools/apps/sssp/SCALING.md) a second partition adds few rounds: its light phases cover two buckets,
# so a bucket refilled by the other partition shares its extra round with
# the next bucket's first pass. Same graph and roots; the one-bucket rounds
# of before took 1.53 times as many rounds at this scale (2635 against
# 1725), today's 1.06 times.
timeout 120 "$app" --scale 12 --threads 2 --window 2 >"$out/s12w2" 2>&1
check_run "standalone scale 12, 2 partitions, --window 2" "$out/s12w2" $? 1
r1=$(field rounds "$out/s12t1"); r2=$(field rounds "$out/s12w2")
if [ -n "$r1" ] && [ -n "$r2" ] && [ $((r2 * 10)) -le $((r1 * 13)) ]; then
  pass "scale 12: $r2 rounds on 2 partitions, at most 1.3 times the $r1 on 1"
else
  fail "scale 12: $r2 rounds on 2 partitions against $r1 on 1 (more than 1.3 times)"
fi
x1=$(field relaxations "$out/s12t1"); x2=$(field relaxations "$out/s12t2")
if [ -n "$x1" ] && [ -n "$x2" ] && [ $((x2 * 10)) -le $((x1 * 11)) ]; then
  pass "scale 12: $x2 relaxations on 2 partitions, at most 1.1 times the $x1 on 1"
else
  fail "scale 12: $x2 relaxations on 2 partitions against $x1 on 1 (more than 1.1 times)"
fi
timeout 120 "$app" --scale 10 --threads 2 >"$out/s10" 2>&1
check_run "standalone scale 10, 2 partitions" "$out/s10" $? 1
# Without chunks (one send at the end of the light phase), 2 partitions
# send each other exactly one piece a round (batches are split only above
# 2^17 updates, more than this graph has; with 3 or more, a partition may
# relax what one has sent while it waits for another, and send that early).
timeout 120 "$app" --scale 12 --threads 2 --roots 16 --chunk 1099511627776 >"$out/s12nochunk" 2>&1
check_run "standalone scale 12, 2 partitions, no chunks" "$out/s12nochunk" $? 1 16
r=$(field rounds "$out/s12nochunk"); b=$(field batches "$out/s12nochunk")
if [ -n "$b" ] && [ "$b" -eq $((r * 2)) ]; then
  pass "no chunks: $b pieces in $r rounds on 2 partitions, one each way a round"
else
  fail "no chunks: $b pieces in $r rounds on 2 partitions (not 2 a round)"
fi
timeout 120 "$app" --scale 12 --threads 2 --roots 16 --trace >"$out/s12trace" 2>&1
check_run "standalone scale 12, 2 partitions, --trace" "$out/s12trace" $? 1 16
check_trace "standalone scale 12, 2 partitions" "$out/s12trace"
timeout 120 "$app" --scale 14 --threads 2 --roots 8 >"$out/s14" 2>&1
check_run "standalone scale 14, 2 partitions" "$out/s14" $? 1 8
# Small chunks: the light phase sends its updates every 256 relaxations and
# relaxes the others' while it waits for a round's end (pieces of up to three
# rounds in flight). These graphs are too small for the default 16 Ki to cut
# a light phase; here the pieces must outnumber one per pair and round.
for t in 2 3 4; do
  timeout 120 "$app" --scale 14 --threads $t --roots 8 --chunk 256 >"$out/s14c$t" 2>&1
  check_run "standalone scale 14, $t partitions, --chunk 256" "$out/s14c$t" $? 1 8
  r=$(field rounds "$out/s14c$t"); b=$(field batches "$out/s14c$t")
  [ -n "$b" ] && [ "$b" -gt $((r * t * (t - 1))) ] && pass "--chunk 256, $t partitions: $b pieces in $r rounds" ||
    fail "--chunk 256, $t partitions: $b pieces in $r rounds, no chunk sent"
done
# Three partitions (uneven shares), another seed and edge factor, other deltas.
timeout 120 "$app" --scale 12 --threads 3 --roots 16 >"$out/s12t3" 2>&1
check_run "standalone scale 12, 3 partitions" "$out/s12t3" $? 1 16
same_graph "scale 12 on 1 and 3 partitions" "$out/s12t1" "$out/s12t3"
same_graph "scale 12 on 1 and 4 partitions" "$out/s12t1" "$out/s12t4"
timeout 120 "$app" --scale 11 --edgefactor 8 --seed 7 --delta 0.03 --threads 2 >"$out/s11" 2>&1
check_run "standalone scale 11, edgefactor 8, seed 7, delta 0.03" "$out/s11" $? 1
timeout 120 "$app" --scale 11 --edgefactor 8 --seed 7 --delta 2 --threads 2 --roots 16 >"$out/s11bf" 2>&1
check_run "standalone scale 11, delta 2 (Bellman-Ford rounds)" "$out/s11bf" $? 1 16
# --skip-validation skips it and still prints the block.
timeout 60 "$app" --scale 10 --threads 2 --roots 4 --skip-validation >"$out/skip" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ "$(field validated "$out/skip")" = skipped ]; then
  check_block "--skip-validation" "$out/skip" 4
else
  fail "--skip-validation: exit $rc"; cat "$out/skip"
fi
# A given root; one that is not a vertex is refused.
timeout 60 "$app" --scale 10 --threads 2 --root 5 >"$out/root5" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ "$(field root "$out/root5")" = 5 ] && [ "$(field validated "$out/root5")" = yes ] &&
  [ "$(field roots "$out/root5")" = 1 ]; then
  pass "--root 5 is the one source, validated by default"
else
  fail "--root 5: exit $rc"; cat "$out/root5"
fi
timeout 60 "$app" --scale 10 --threads 2 --root 1024 >"$out/badroot" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "is not a vertex" "$out/badroot" && pass "--root 1024 on 1024 vertices is refused" ||
  { fail "--root 1024: exit $rc"; cat "$out/badroot"; }

# A wrong distance or parent must be caught: exit 1, an error named, no results.
for c in distance parent; do
  timeout 120 "$app" --scale 12 --threads 2 --corrupt-for-test $c >"$out/bad$c" 2>&1
  rc=$?
  if [ $rc -eq 1 ] && [ "$(field validated "$out/bad$c")" = no ] &&
    grep -q "validation FAILED for root" "$out/bad$c" && grep -q "^Validation Error: " "$out/bad$c" &&
    grep -q "^No results printed for invalid run" "$out/bad$c"; then
    pass "standalone: a spoiled $c is caught ($(grep -m1 '^Validation Error' "$out/bad$c"))"
  else
    fail "standalone --corrupt-for-test $c: exit $rc"; cat "$out/bad$c"
  fi
done

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
grun -- "$app" --scale 10 --threads 2 --trace >"$out/r10" 2>&1
check_run "2-host rack scale 10, 2 partitions" "$out/r10" $? 2
check_block "2-host rack scale 10" "$out/r10" 64
check_trace "2-host rack scale 10" "$out/r10"
# Wider buckets and a window of 2 across hosts (fewer rounds; SCALING.md, "Across hosts").
grun -- "$app" --scale 11 --threads 2 --roots 16 --delta 0.1 --window 2 >"$out/r11" 2>&1
check_run "2-host rack scale 11, --delta 0.1 --window 2" "$out/r11" $? 2 16
[ "$(field delta "$out/r11")/$(field window "$out/r11")" = 0.1/2 ] || fail "2-host rack: --delta 0.1 --window 2 not taken"
grun -- "$app" --scale 12 --threads 4 --roots 16 --chunk 512 >"$out/r12" 2>&1
check_run "2-host rack scale 12, 4 partitions, --chunk 512" "$out/r12" $? 2 16
same_graph "scale 12 standalone and on the rack" "$out/s12t4" "$out/r12"
# gossamerctl's --threads overrides the program's count: 6 partitions, 3 a host.
grun --threads 6 -- "$app" --scale 12 --threads 4 --roots 8 >"$out/r12t6" 2>&1
rc=$?
check_run "2-host rack scale 12, gossamerctl run --threads 6" "$out/r12t6" $rc 2 8
[ "$(field threads "$out/r12t6")" = 6 ] || fail "--threads 6 gave $(field threads "$out/r12t6") partitions"

grun -- "$app" --scale 12 --threads 4 --roots 4 --corrupt-for-test parent >"$out/rbad" 2>&1
rc=$?
if [ $rc -eq 1 ] && [ "$(field validated "$out/rbad")" = no ] && grep -q "validation FAILED for root" "$out/rbad"; then
  pass "2-host rack: a spoiled parent is caught, gossamerctl run exits 1"
else
  fail "rack --corrupt-for-test: exit $rc"; cat "$out/rbad"
fi

if [ $failures -eq 0 ]; then echo "sssp: all checks passed"; exit 0; fi
echo "sssp: $failures check(s) failed"; exit 1
