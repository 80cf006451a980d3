# Shared by the tests that bring up a rack in a box (tests/*/...sh). Source
# it with the build directory, after `set -uo pipefail`:
#   . "$(dirname "$0")/../rack/lib.sh" "$1"
# It sets build, root, rib (tools/rack-in-a-box), ctl (gossamerctl) and
# failures, and defines pass, fail, skip_unless_rack and own_rack; and, for
# racks running tests/rack/rack_app (set app to its path first), stat_of,
# record_dataplanes, dp_alive, destroyed_once, run_everywhere,
# run_with_gossamerctl, faults_seen and kill_midrun.

build=$(cd "${1:?build dir}" && pwd)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rib="$root/tools/rack-in-a-box"
ctl="$build/tools/gossamerctl/gossamerctl"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# Exits 77 (skip), saying why, unless we are root with network namespaces
# and the dataplane, gossamerd, gossamerctl and every BINARY given are built.
skip_unless_rack() {
  local b
  if [ "$(id -u)" -ne 0 ]; then echo "SKIP: needs root (network namespaces)"; exit 77; fi
  if ! ip netns list >/dev/null 2>&1; then echo "SKIP: ip netns unusable"; exit 77; fi
  for b in "$build/dataplane/gossamer-dataplane" "$build/controlplane/gossamerd" "$ctl" "$@"; do
    [ -x "$b" ] || { echo "SKIP: $b was not built"; exit 77; }
  done
}

# The kernel must load BPF programs (af_xdp's XDP program). A kernel whose
# BPF JIT allocator is stuck (seen on a 6.18 test kernel: a task holding its
# lock waits for work its own queue cannot run) blocks every load forever,
# unkillably: probe in the background (a one-instruction socket filter,
# which the JIT compiles like any program) and skip, saying why, if it does
# not return within 10 s. The probe cannot be stopped then; it is left.
skip_unless_bpf_loads() {
  local p i
  python3 -c 'import socket, struct, ctypes
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
insn = ctypes.create_string_buffer(struct.pack("HBBI", 0x06, 0, 0, 0))  # BPF_RET | BPF_K, 0
prog = struct.pack("HL", 1, ctypes.addressof(insn))
s.setsockopt(socket.SOL_SOCKET, 26, prog)  # SO_ATTACH_FILTER' >/dev/null 2>&1 &
  p=$!
  for ((i = 0; i < 100; i++)); do
    kill -0 "$p" 2>/dev/null || { wait "$p" 2>/dev/null; return 0; }
    sleep 0.1
  done
  disown "$p" 2>/dev/null
  echo "SKIP: this kernel does not load a BPF program within 10 s (its BPF JIT allocator is stuck:" \
    "processes in state D in bpf_prog_pack_alloc; reboot the machine); pid $p is the stuck probe"
  exit 77
}

# A rack of our own: namespace prefix LETTERS + pid (at most 8 characters,
# rack-in-a-box's limit), state in /tmp/gossamer-rack-NAME-PID.
own_rack() {  # LETTERS NAME
  export GOSSAMER_RACK_PREFIX="$1$(($$ % 1000000))"
  export GOSSAMER_RACK_DIR="/tmp/gossamer-rack-$2-$$"
  export GOSSAMER_BUILD="$build"
  export GOSSAMER_START_TIMEOUT=30
}

stat_of() {  # HOST NAME: sum of a dataplane stat over all label sets
  awk -v n="$2" '{ k=$1; sub(/\{.*/, "", k); if (k == n) s += $2 } END { print s+0 }' \
    "$GOSSAMER_RACK_DIR/h$1/dataplane.sock.stats"
}
# The dataplanes' pids after `up`: gossamerd would restart one that died, so
# "alive" means "the same process as at the start".
declare -a dp_pids
record_dataplanes() {  # HOSTS
  local h
  dp_pids=()
  for ((h = 0; h < $1; h++)); do dp_pids[h]=$("$rib" pid "$h" dataplane || true); done
}
dp_alive() {  # HOST
  local p
  p=$("$rib" pid "$1" dataplane 2>/dev/null) && [ "$p" = "${dp_pids[$1]}" ]
}

# rack_app's Tracked property was destroyed exactly once in the rack, on the
# last host: from every host's destroyed_tracked=COUNT, in host order (""
# where a host printed none). Fails and returns 1 otherwise.
destroyed_once() {  # LABEL COUNT...
  local label=$1 h=0 d total=0 rc=0
  shift
  for d in "$@"; do
    total=$((total + ${d:-0}))
    if [ $h -eq $(($# - 1)) ] && [ "${d:-0}" != 1 ]; then
      rc=1; fail "$label: the property on host $h was destroyed ${d:-0} times, expected once"
    fi
    h=$((h + 1))
  done
  [ "$total" -eq 1 ] || { rc=1; fail "$label: $total destructions in the rack, expected 1"; }
  return $rc
}

# Runs $app THREADS OPS on every host of the rack with one run id, each for
# at most $run_timeout seconds (default 120); checks every instance exits 0
# (rack_app checks its totals itself) and the Tracked property was destroyed
# exactly once, on the host of the last thread.
run_everywhere() {  # HOSTS THREADS OPS LABEL
  local hosts=$1 threads=$2 ops=$3 label=$4
  local id="run-$label-$$-$RANDOM" h rc ok=1
  local -a pids
  for ((h = 0; h < hosts; h++)); do
    GOSSAMER_RUN_ID=$id timeout "${run_timeout:-120}" "$rib" exec "$h" -- "$app" "$threads" "$ops" \
      >"$GOSSAMER_RACK_DIR/out.$label.$h" 2>&1 &
    pids[h]=$!
  done
  for ((h = 0; h < hosts; h++)); do
    wait "${pids[h]}"; rc=$?
    if [ $rc -ne 0 ]; then
      ok=0; fail "$label: host $h exited $rc"; sed 's/^/    /' "$GOSSAMER_RACK_DIR/out.$label.$h" | tail -20
    fi
  done
  local -a counts=()
  for ((h = 0; h < hosts; h++)); do
    counts+=("$(sed -n 's/.*destroyed_tracked=\([0-9]*\).*/\1/p' "$GOSSAMER_RACK_DIR/out.$label.$h")")
  done
  destroyed_once "$label" "${counts[@]}" || ok=0
  [ $ok -eq 1 ] && pass "$label: $hosts hosts, $threads threads, exact totals, property destroyed once"
}

# Runs $app THREADS OPS with `gossamerctl run` from host 0 (gossamerd starts
# it on every host), for at most $run_timeout seconds (default 120); checks
# the exit status and the destructions (destroyed_once).
run_with_gossamerctl() {
  local hosts=$1 threads=$2 ops=$3 label=$4 rc=0 h ok=1
  local out="$GOSSAMER_RACK_DIR/out.$label"
  local -a counts=()
  timeout "${run_timeout:-120}" "$rib" exec 0 -- "$ctl" run -- "$app" "$threads" "$ops" >"$out" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then ok=0; fail "$label: gossamerctl run exited $rc"; sed 's/^/    /' "$out" | tail -20; fi
  for ((h = 0; h < hosts; h++)); do
    counts+=("$(sed -n "s/^\[host $h\] .*destroyed_tracked=\([0-9]*\).*/\1/p" "$out")")
  done
  destroyed_once "$label" "${counts[@]}" || ok=0
  [ $ok -eq 1 ] && pass "$label: gossamerctl run on $hosts hosts, $threads threads, exact totals, property destroyed once"
}

# After runs under `rack-in-a-box netem`: the faults happened, in the
# dataplanes' stats summed over the hosts (retransmissions, duplicate or
# out-of-order frames dropped, and injected losses when the dataplanes inject
# the faults because the kernel has no netem).
faults_seen() {  # HOSTS LABEL
  local hosts=$1 label=$2 h rt=0 dups=0 inj=0
  sleep 1.5  # the dataplanes write their stats every second
  for ((h = 0; h < hosts; h++)); do
    rt=$((rt + $(stat_of "$h" retransmits)))
    dups=$((dups + $(stat_of "$h" duplicates) + $(stat_of "$h" out_of_order)))
    inj=$((inj + $(stat_of "$h" injected_loss)))
  done
  if [ -e "$GOSSAMER_RACK_DIR/h0/dataplane.sock.faults" ] && [ "$inj" -eq 0 ]; then fail "$label: the dataplanes injected nothing"; fi
  if [ "$rt" -gt 0 ] && [ "$dups" -gt 0 ]; then pass "$label: $rt retransmissions, $dups duplicate/out-of-order frames dropped, $inj frames lost by injection"
  else fail "$label: expected retransmissions ($rt) and dropped duplicates ($dups)"; fi
}

# kill -9 of the last host's instance of a long run of $app on every host:
# host 0's instance must stop within 5 s, saying that host left the rack.
kill_midrun() {  # HOSTS LABEL
  local hosts=$1 label=$2 id="kill-$$-$RANDOM" h victim v r0 start took
  local -a pids
  v=$((hosts - 1))
  for ((h = 0; h < hosts; h++)); do
    GOSSAMER_RUN_ID=$id timeout 60 "$rib" exec "$h" -- "$app" 4 200000 >"$GOSSAMER_RACK_DIR/out.$label.$h" 2>&1 &
    pids[h]=$!
  done
  for _ in $(seq 50); do grep -q "host 0 of $hosts" "$GOSSAMER_RACK_DIR/out.$label.0" 2>/dev/null && break; sleep 0.1; done
  sleep 1
  victim=$(pgrep -f "$app 4 200000" | while read -r p; do
    if [ "$(ip netns identify "$p" 2>/dev/null)" = "${GOSSAMER_RACK_PREFIX}-h$v" ]; then echo "$p"; fi; done | head -1)
  if [ -z "$victim" ]; then
    fail "$label: could not find host $v's instance"; kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}"
    return
  fi
  kill -9 "$victim"
  start=$(date +%s)
  wait "${pids[0]}" 2>/dev/null; r0=$?
  took=$(( $(date +%s) - start ))
  wait "${pids[@]:1}" 2>/dev/null
  if [ $r0 -ne 0 ] && grep -q "host $v left the rack" "$GOSSAMER_RACK_DIR/out.$label.0" && [ $took -le 5 ]; then
    pass "kill -9 on host $v: host 0's instance stopped in ${took}s: $(grep -o "host $v left the rack.*" "$GOSSAMER_RACK_DIR/out.$label.0" | head -1)"
  else
    fail "$label: host 0 exited $r0 after ${took}s"; tail -5 "$GOSSAMER_RACK_DIR/out.$label.0"
  fi
}
