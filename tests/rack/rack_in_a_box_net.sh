#!/usr/bin/env bash
# Tests tools/rack-in-a-box: namespaces, addressing, exec, generated configs,
# netem, gossamerd (the real one, without dataplanes, then supervising a stub
# dataplane: restart, refusals, pause/resume, stop/start, down), dataplanes
# started directly (--no-gossamerd, with the stub), up/down idempotence.
#
#   rack_in_a_box_net.sh BUILD_DIR
#
# BUILD_DIR must hold tools/gossamerctl/gossamerctl. Needs root; exits 77
# (skipped) without it or without usable network namespaces. Uses a private
# state directory and namespace prefix, so it never touches a rack that is
# already up.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
rack=$repo/tools/rack-in-a-box

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
ok() { echo "ok: $*"; }

[ $# -ge 1 ] || fail "usage: $0 BUILD_DIR"
build=$(cd "$1" && pwd) || fail "build directory '$1' does not exist"
ctl=$build/tools/gossamerctl/gossamerctl
[ -x "$ctl" ] || fail "$ctl not found (build the project first)"
gd=$build/controlplane/gossamerd
# gossamerd is built only with prometheus-cpp: without it, test the rest.
have_gd=0
nogd=(--no-gossamerd)
if [ -x "$gd" ]; then have_gd=1; nogd=(); fi

[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
for t in ip ping ethtool tc python3; do
  command -v "$t" >/dev/null 2>&1 || skip "'$t' is not installed"
done

prefix=gt$$
prefix=${prefix:0:8}
probe=${prefix}-probe
ip netns add "$probe" 2>/dev/null || skip "'ip netns add' does not work here"
ip netns del "$probe"

tmp=$(mktemp -d /tmp/rack-test.XXXXXX)
export GOSSAMER_RACK_DIR=$tmp/rack
export GOSSAMER_RACK_PREFIX=$prefix
unset GOSSAMER_BUILD

stub_pids=()
cleanup() {
  local rc=$? p
  "$rack" down >/dev/null 2>&1 || true
  # Stub dataplanes a broken `down` left behind (only ours: they run from $tmp).
  for p in "${stub_pids[@]}"; do
    if { tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | grep -qF "$tmp/build/"; then
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
  # Belt and braces: the namespaces are global names.
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    case "$ns" in "$prefix"-*) ip netns del "$ns" 2>/dev/null || true ;; esac
  done
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Namespaces of this test's prefix currently present, sorted, space-separated.
our_namespaces() {
  ip netns list | awk '{print $1}' | grep -E "^$prefix-" | sort | tr '\n' ' ' || true
}

# The pid of host H's running gossamerd or dataplane (rack-in-a-box pid).
rack_pid() {
  "$rack" pid "$1" "$2" || fail "host $1 has no running $2"
}

ping_from() {  # ping_from HOST IP
  "$rack" exec "$1" -- ping -c1 -W2 "$2" >/dev/null 2>&1
}

# -- usage and argument errors
"$rack" --help | grep -q "up --hosts N" || fail "--help does not show the usage"
if "$rack" bogus >/dev/null 2>&1; then fail "an unknown command succeeded"; fi
if "$rack" up --hosts 0 --no-dataplane >/dev/null 2>&1; then fail "up --hosts 0 succeeded"; fi
if "$rack" up --hosts 17 --no-dataplane >/dev/null 2>&1; then fail "up --hosts 17 succeeded"; fi
if "$rack" exec 0 -- true >/dev/null 2>&1; then fail "exec succeeded with no rack up"; fi
"$rack" down >/dev/null || fail "down with nothing up failed"
[ -z "$(our_namespaces)" ] || fail "argument errors left namespaces: $(our_namespaces)"
ok "usage and argument errors"

# The CPUs PID may run on (a list as taskset prints it), and what a pinned
# host I's processes get: its polling core's CPU (up without --cores).
cpus_of() { awk '/^Cpus_allowed_list:/ {print $2}' "/proc/$1/status"; }
all_cpus=$(cpus_of $$)
# This shell's CPUs one by one (the list may be 0-1, or 2-3,6 in a cpuset);
# host i gets the (i mod count)-th.
mine=()
IFS=, read -ra ranges <<<"$all_cpus"
for r in "${ranges[@]}"; do for ((c = ${r%-*}; c <= ${r#*-}; c++)); do mine+=("$c"); done; done
host_cpu() { echo "${mine[$(($1 % ${#mine[@]}))]}"; }
# PID runs on host I's CPU (what `up` pins a host's processes to).
pinned() {
  [ "$(cpus_of "$1")" = "$(host_cpu "$2")" ] ||
    fail "pid $1 (host $2) may run on CPUs $(cpus_of "$1"), not its host's CPU $(host_cpu "$2")"
}

# -- up
"$rack" up --hosts 3 --no-dataplane "${nogd[@]}" --float --build "$build" || fail "up --hosts 3 --no-dataplane failed"
want="$prefix-h0 $prefix-h1 $prefix-h2 $prefix-sw "
[ "$(our_namespaces)" = "$want" ] || fail "namespaces are '$(our_namespaces)', want '$want'"
[ "$(cat "$GOSSAMER_RACK_DIR/hosts")" = 3 ] || fail "hosts file does not say 3"
[ "$(cat "$GOSSAMER_RACK_DIR/build")" = "$build" ] || fail "build file does not name $build"
ok "up created $want"

for i in 0 1 2; do
  mac=$(ip -n "$prefix-h$i" -br link show dev veth0 | awk '{print $3}')
  [ "$mac" = "02:00:c6:12:00:0$((i + 1))" ] || fail "h$i veth0 MAC is '$mac'"
  ip -n "$prefix-h$i" -4 -br addr show dev veth0 | grep -q "198.18.0.$((i + 1))/24" ||
    fail "h$i veth0 lacks 198.18.0.$((i + 1))/24"
  ip -n "$prefix-h$i" link show dev lo | grep -q 'UP' || fail "h$i lo is down"
done
ip netns exec "$prefix-h0" ethtool -k veth0 | grep -q '^generic-receive-offload: off' ||
  fail "GRO is still on in h0"
ip -n "$prefix-sw" -br link show master br0 | grep -c '^h[0-9]' | grep -qx 3 ||
  fail "br0 does not have 3 ports"
# The switch does not send bridged frames through iptables (br_netfilter).
for f in /proc/sys/net/bridge/bridge-nf-call-iptables /proc/sys/net/bridge/bridge-nf-call-ip6tables; do
  v=$(ip netns exec "$prefix-sw" sh -c "[ ! -e $f ] || cat $f")
  [ -z "$v" ] || [ "$v" = 0 ] || fail "$f is '$v' in the switch namespace"
done
ok "addresses, MACs, offloads, bridge ports, no netfilter on the bridge"

if "$rack" up --hosts 2 --no-dataplane --no-gossamerd --build "$build" >"$tmp/up2.out" 2>&1; then
  fail "a second up succeeded"
fi
grep -q "down" "$tmp/up2.out" || fail "second up does not tell to run down: $(cat "$tmp/up2.out")"
[ "$(our_namespaces)" = "$want" ] || fail "second up changed the namespaces"
ok "second up refused"

# -- connectivity
ping_from 0 198.18.0.2 || fail "h0 cannot ping 198.18.0.2"
ping_from 0 198.18.0.3 || fail "h0 cannot ping 198.18.0.3"
ping_from 2 198.18.0.1 || fail "h2 cannot ping 198.18.0.1"
ok "ping between hosts"

# -- exec
# shellcheck disable=SC2016  # expanded by the inner shell, in the namespace
got=$("$rack" exec 1 -- sh -c 'echo $GOSSAMER_CONFIG')
[ "$got" = "$GOSSAMER_RACK_DIR/h1.yaml" ] || fail "exec 1 saw GOSSAMER_CONFIG='$got'"
rc=0
"$rack" exec 2 -- sh -c 'exit 7' || rc=$?
[ "$rc" -eq 7 ] || fail "exec did not pass on the exit status 7 (got $rc)"
if "$rack" exec 3 -- true 2>"$tmp/exec3.err"; then fail "exec 3 succeeded on a 3-host rack"; fi
grep -q "out of range" "$tmp/exec3.err" || fail "exec 3: unclear error: $(cat "$tmp/exec3.err")"
ok "exec"

# -- configs
for i in 0 1 2; do
  f=$GOSSAMER_RACK_DIR/h$i.yaml
  "$ctl" config check "$f" || fail "gossamerctl config check rejected $f"
  grep -q "index: $i" "$f" || fail "$f lacks index: $i"
  grep -q "socket: \"$GOSSAMER_RACK_DIR/h$i/dataplane.sock\"" "$f" || fail "$f has the wrong socket"
  grep -q "incarnation_file: \"$GOSSAMER_RACK_DIR/h$i/dataplane.incarnation\"" "$f" ||
    fail "$f does not keep the incarnation in the rack's directory"
  grep -q -- "--vdev=net_af_packet0,iface=veth0" "$f" || fail "$f lacks the af_packet vdev"
done
grep -c 'mac: 02:00:c6:12:00:0[123]' "$GOSSAMER_RACK_DIR/h0.yaml" | grep -qx 3 || fail "h0.yaml lacks the 3 MACs"
for i in 0 1 2; do
  f=$GOSSAMER_RACK_DIR/h$i.yaml
  grep -q "listen: 198.18.0.$((i + 1)):7700" "$f" || fail "$f lacks controlplane.listen 198.18.0.$((i + 1)):7700"
  grep -q "psk_file: \"$GOSSAMER_RACK_DIR/psk\"" "$f" || fail "$f lacks controlplane.psk_file"
  grep -q "socket: \"$GOSSAMER_RACK_DIR/h$i/gossamerd.sock\"" "$f" || fail "$f lacks controlplane.socket"
done
[ "$(stat -c %a "$GOSSAMER_RACK_DIR/psk")" = 600 ] || fail "the psk file is not mode 0600"
[ "$(tr -d '\n' <"$GOSSAMER_RACK_DIR/psk" | wc -c)" -ge 16 ] || fail "the psk is shorter than 16 bytes"
ok "configs pass gossamerctl config check, with the control plane keys and a 0600 psk"

# -- gossamerd without dataplanes (--no-dataplane): up waited for the mesh
if [ "$have_gd" = 1 ]; then
  for i in 0 1 2; do
    gp=$(rack_pid "$i" gossamerd)
    [ "$(readlink "/proc/$gp/ns/net")" = "$(ip netns exec "$prefix-h$i" readlink /proc/self/ns/net)" ] ||
      fail "host $i's gossamerd is not in namespace $prefix-h$i"
    tr '\0' ' ' <"/proc/$gp/cmdline" | grep -q -- "--no-dataplane" || fail "host $i's gossamerd lacks --no-dataplane"
    [ "$(cpus_of "$gp")" = "$all_cpus" ] || fail "--float: host $i's gossamerd may run on CPUs $(cpus_of "$gp"), not all of $all_cpus"
    "$rack" exec "$i" -- "$ctl" status >"$tmp/ctl.out" 2>&1 ||
      fail "gossamerctl status on host $i exits non-zero: $(cat "$tmp/ctl.out")"
  done
  got=$("$rack" exec --pin 2 -- awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status)
  [ "$got" = "$all_cpus" ] || fail "--float: exec --pin 2 ran on CPUs '$got', not all of $all_cpus"
  "$rack" status | grep -E "^h2 .* $gp alive +all-up" >/dev/null || fail "status does not show h2's gossamerd: $("$rack" status)"
  if "$rack" pid 0 dataplane >/dev/null; then fail "pid 0 dataplane found a dataplane on a --no-dataplane rack"; fi
  ok "gossamerd --no-dataplane on every host, all hosts up, floating (--float)"
fi

# -- netem
if "$rack" netem "" >/dev/null 2>&1; then fail "netem with an empty spec succeeded"; fi
if "$rack" netem "loss 100%" >"$tmp/netem.out" 2>&1; then
  if grep -q "no netem qdisc" "$tmp/netem.out"; then
    # The kernel lacks sch_netem: the spec goes to the dataplanes instead.
    for i in 0 1 2; do
      [ "$(cat "$GOSSAMER_RACK_DIR/h$i/dataplane.sock.faults" 2>/dev/null)" = "loss 100%" ] \
        || fail "no netem: host $i has no faults file with the spec"
    done
    "$rack" netem off || fail "netem off failed"
    [ -e "$GOSSAMER_RACK_DIR/h0/dataplane.sock.faults" ] && fail "netem off left the faults file"
    ok "netem without the kernel qdisc: faults files for the dataplanes, removed by off"
  else
    if ping_from 0 198.18.0.2; then fail "ping went through with netem loss 100%"; fi
    "$rack" netem off || fail "netem off failed"
    ping_from 0 198.18.0.2 || fail "ping fails after netem off"
    "$rack" netem off || fail "a second netem off failed"
    ok "netem loss 100% and off"
  fi
else
  fail "netem 'loss 100%' failed: $(cat "$tmp/netem.out")"
fi

# -- down
"$rack" down || fail "down failed"
[ -z "$(our_namespaces)" ] || fail "down left namespaces: $(our_namespaces)"
[ ! -e "$GOSSAMER_RACK_DIR" ] || fail "down left $GOSSAMER_RACK_DIR"
"$rack" down || fail "a second down failed"
ok "down, twice"

# -- dataplane management, with a stub dataplane that creates its socket
stub=$tmp/build
mkdir -p "$stub/dataplane" "$stub/tools/gossamerctl"
ln -s "$ctl" "$stub/tools/gossamerctl/gossamerctl"
if [ "$have_gd" = 1 ]; then
  mkdir -p "$stub/controlplane"
  ln -s "$gd" "$stub/controlplane/gossamerd"
fi
cat >"$stub/dataplane/gossamer-dataplane" <<'EOF'
#!/usr/bin/env python3
# Stub dataplane: listens on the socket named in the config and waits for SIGTERM.
# RACK_STUB=fail exits at once; RACK_STUB=stubborn ignores SIGTERM.
import os, re, signal, socket, sys, time
cfg = sys.argv[sys.argv.index("--config") + 1]
path = re.search(r'socket: "([^"]+)"', open(cfg).read()).group(1)
mode = os.environ.get("RACK_STUB", "")
if mode == "fail":
    print("stub dataplane: failing on purpose")
    sys.exit(3)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
s = socket.socket(socket.AF_UNIX)
if os.path.exists(path):
    os.unlink(path)  # left by a killed predecessor, as the real dataplane does
s.bind(path)
s.listen(1)
print("stub dataplane: up", flush=True)
while True:
    time.sleep(1)
EOF
chmod +x "$stub/dataplane/gossamer-dataplane"

pid_of() { cat "$GOSSAMER_RACK_DIR/h$1/dataplane.pid"; }
# True if PID runs and is not a zombie (an orphaned dataplane stays a zombie
# until init reaps it).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

"$rack" up --hosts 2 --no-gossamerd --build "$stub" || fail "up --no-gossamerd with the stub dataplane failed"
p0=$(pid_of 0)
p1=$(pid_of 1)
pinned "$p0" 0; pinned "$p1" 1  # started directly, on their hosts' CPUs too
stub_pids+=("$p0" "$p1")
alive "$p0" || fail "dataplane 0 (pid $p0) is not running"
alive "$p1" || fail "dataplane 1 (pid $p1) is not running"
tr '\0' ' ' <"/proc/$p0/cmdline" | grep -q -- "--config $GOSSAMER_RACK_DIR/h0.yaml" ||
  fail "pid $p0 is not host 0's dataplane: $(tr '\0' ' ' <"/proc/$p0/cmdline")"
[ "$(readlink "/proc/$p0/ns/net")" = "$(ip netns exec "$prefix-h0" readlink /proc/self/ns/net)" ] ||
  fail "host 0's dataplane is not in namespace $prefix-h0"
"$rack" status | grep -E "^h0 .* $p0 alive" >/dev/null || fail "status does not show h0's dataplane alive"
"$rack" dataplane 0 restart || fail "dataplane 0 restart failed"
alive "$p0" && fail "the old dataplane $p0 survived restart"
[ "$(pid_of 0)" != "$p0" ] || fail "restart kept the pid"
if "$rack" dataplane 0 start >/dev/null 2>&1; then fail "starting a running dataplane succeeded"; fi
"$rack" dataplane 1 stop || fail "dataplane 1 stop failed"
alive "$p1" && fail "dataplane 1 ($p1) survived stop"
RACK_STUB=stubborn "$rack" dataplane 1 start || fail "starting a stubborn dataplane failed"
p1=$(pid_of 1)
p0=$(pid_of 0)
stub_pids+=("$p0" "$p1")
"$rack" down || fail "down with dataplanes failed"
alive "$p0" && fail "down left dataplane $p0"
alive "$p1" && fail "down left the stubborn dataplane $p1 (no SIGKILL?)"
[ -z "$(our_namespaces)" ] || fail "down left namespaces: $(our_namespaces)"
ok "--no-gossamerd: dataplane start/stop/restart, SIGKILL fallback, down"

# -- a dataplane that dies at start: up fails with its log, down cleans up
if RACK_STUB=fail "$rack" up --hosts 1 --no-gossamerd --build "$stub" >"$tmp/fail.out" 2>&1; then
  fail "up succeeded although the dataplane exited"
fi
grep -q "failing on purpose" "$tmp/fail.out" || fail "up did not show the dataplane's log: $(cat "$tmp/fail.out")"
"$rack" down >/dev/null || fail "down after a failed up failed"
[ -z "$(our_namespaces)" ] || fail "down after a failed up left namespaces: $(our_namespaces)"
ok "failed dataplane start reported with its log"

# -- gossamerd supervising the stub dataplane
if [ "$have_gd" = 1 ]; then
  # Every gossamerd and dataplane this section starts runs from $stub.
  "$rack" up --hosts 2 --build "$stub" || fail "up with gossamerd and the stub dataplane failed"
  g0=$(rack_pid 0 gossamerd)
  g1=$(rack_pid 1 gossamerd)
  d0=$(rack_pid 0 dataplane)
  d1=$(rack_pid 1 dataplane)
  stub_pids+=("$g0" "$g1" "$d0" "$d1")
  [ "$(awk '{print $4}' "/proc/$d0/stat")" = "$g0" ] || fail "dataplane $d0 is not gossamerd $g0's child"
  tr '\0' ' ' <"/proc/$g0/cmdline" | grep -q -- "--config $GOSSAMER_RACK_DIR/h0.yaml --dataplane $stub/dataplane/gossamer-dataplane" ||
    fail "gossamerd 0's command line: $(tr '\0' ' ' <"/proc/$g0/cmdline")"
  [ -S "$GOSSAMER_RACK_DIR/h0/gossamerd.sock" ] || fail "no gossamerd socket for host 0"
  grep -q "stub dataplane: up" "$GOSSAMER_RACK_DIR/h1/gossamerd.log" || fail "the dataplane's output is not in gossamerd.log"
  "$rack" status | grep -E "^h0 .* $g0 alive +all-up +$d0 alive" >/dev/null ||
    fail "status does not show h0's gossamerd and dataplane: $("$rack" status)"
  "$rack" exec 1 -- "$ctl" status >"$tmp/ctl.out" || fail "gossamerctl status on host 1: $(cat "$tmp/ctl.out")"
  # Each host's gossamerd and its dataplane run on the host's CPU (not with
  # --float); exec does not pin, exec --pin does.
  pinned "$g0" 0; pinned "$d0" 0; pinned "$g1" 1; pinned "$d1" 1
  [ "$("$rack" exec 1 -- awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status)" = "$all_cpus" ] ||
    fail "exec pinned its command"
  got=$("$rack" exec --pin 1 -- awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status)
  [ "$got" = "$(host_cpu 1)" ] || fail "exec --pin 1 ran on CPUs '$got', not host 1's CPU $(host_cpu 1)"
  ok "gossamerd on every host, supervising its dataplane, each host on its CPU"

  for a in start stop; do
    if "$rack" dataplane 0 "$a" >"$tmp/dp.out" 2>&1; then fail "dataplane 0 $a succeeded under gossamerd"; fi
    grep -q "supervised by its gossamerd" "$tmp/dp.out" || fail "dataplane 0 $a: unclear refusal: $(cat "$tmp/dp.out")"
  done
  alive "$d0" || fail "a refused dataplane command killed dataplane $d0"
  "$rack" dataplane 0 restart || fail "dataplane 0 restart under gossamerd failed"
  n0=$(rack_pid 0 dataplane)
  stub_pids+=("$n0")
  [ "$n0" != "$d0" ] || fail "restart kept dataplane pid $d0"
  alive "$d0" && fail "the old dataplane $d0 survived restart"
  [ "$("$rack" pid 0 gossamerd)" = "$g0" ] || fail "dataplane restart changed gossamerd"
  grep -q "dataplane killed by signal 9" "$GOSSAMER_RACK_DIR/h0/gossamerd.log" || fail "gossamerd did not log the dataplane's death"
  ok "dataplane start/stop refused under gossamerd; restart: SIGKILL, gossamerd started $n0"

  # Heartbeats: a paused gossamerd is seen down, then up again once resumed.
  "$rack" gossamerd 1 pause || fail "gossamerd 1 pause failed"
  [ "$(awk '{print $3}' "/proc/$g1/stat")" = T ] || fail "gossamerd $g1 is not stopped after pause"
  rc=0
  for _ in $(seq 50); do
    rc=0; timeout 5 "$rack" exec 0 -- "$ctl" status >"$tmp/ctl.out" 2>&1 || rc=$?
    [ "$rc" -eq 3 ] && break
    sleep 0.1
  done
  [ "$rc" -eq 3 ] || fail "host 0 does not see paused host 1 down (gossamerctl status exits $rc): $(cat "$tmp/ctl.out")"
  grep -qE "^1 +h1 +down" "$tmp/ctl.out" || fail "gossamerctl status does not show h1 down: $(cat "$tmp/ctl.out")"
  "$rack" gossamerd 1 resume || fail "gossamerd 1 resume failed"
  for _ in $(seq 50); do
    rc=0; timeout 5 "$rack" exec 0 -- "$ctl" status >"$tmp/ctl.out" 2>&1 || rc=$?
    [ "$rc" -eq 0 ] && break
    sleep 0.1
  done
  [ "$rc" -eq 0 ] || fail "host 1 is not up again after resume: $(cat "$tmp/ctl.out")"
  ok "gossamerd pause: heartbeats time out; resume: up again"

  # stop (even while paused) takes the dataplane along; start waits for the mesh.
  "$rack" gossamerd 1 pause
  "$rack" gossamerd 1 stop || fail "gossamerd 1 stop failed"
  alive "$g1" && fail "gossamerd $g1 survived stop"
  alive "$d1" && fail "dataplane $d1 survived its gossamerd's stop"
  [ -e "$GOSSAMER_RACK_DIR/h1/gossamerd.sock" ] && fail "gossamerd 1 left its socket"
  if "$rack" pid 1 gossamerd >/dev/null; then fail "pid 1 gossamerd found one after stop"; fi
  "$rack" gossamerd 1 stop || fail "a second gossamerd 1 stop failed"
  if "$rack" dataplane 1 restart >/dev/null 2>&1; then fail "dataplane restart succeeded without gossamerd"; fi
  "$rack" gossamerd 1 start >"$tmp/start.out" || fail "gossamerd 1 start failed"
  grep -q "every gossamerd sees all 2 hosts up" "$tmp/start.out" || fail "gossamerd 1 start did not wait for the mesh"
  g1=$(rack_pid 1 gossamerd)
  d1=$(rack_pid 1 dataplane)
  stub_pids+=("$g1" "$d1")
  if "$rack" gossamerd 1 start >/dev/null 2>&1; then fail "starting a running gossamerd succeeded"; fi
  "$rack" gossamerd 0 restart || fail "gossamerd 0 restart failed"
  alive "$g0" && fail "gossamerd $g0 survived restart"
  g0=$(rack_pid 0 gossamerd)
  d0=$(rack_pid 0 dataplane)
  stub_pids+=("$g0" "$d0")
  pinned "$g0" 0; pinned "$d0" 0; pinned "$g1" 1; pinned "$d1" 1  # started again: on their CPUs again
  ok "gossamerd stop (paused or not), start, restart"

  # down: gossamerds first (one paused, one whose pid file is lost).
  "$rack" gossamerd 0 pause
  rm -f "$GOSSAMER_RACK_DIR/h1/gossamerd.pid"
  "$rack" down || fail "down with gossamerds failed"
  for p in "$g0" "$g1" "$d0" "$d1"; do
    alive "$p" && fail "down left pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline")"
  done
  [ -z "$(our_namespaces)" ] || fail "down left namespaces: $(our_namespaces)"
  ok "down stops the gossamerds (paused, or without a pid file) and their dataplanes"

  # A dataplane that keeps failing: up gives up with the log, down cleans up.
  if RACK_STUB=fail "$rack" up --hosts 1 --build "$stub" >"$tmp/fail.out" 2>&1; then
    fail "up succeeded although gossamerd's dataplane keeps exiting"
  fi
  grep -q "failing on purpose" "$tmp/fail.out" || fail "up did not show the dataplane's log: $(cat "$tmp/fail.out")"
  "$rack" down >/dev/null || fail "down after a failed up failed"
  [ -z "$(our_namespaces)" ] || fail "down after a failed up left namespaces: $(our_namespaces)"
  ok "a dataplane failing under gossamerd reported with its log"
fi

# -- leftovers of a crashed run (no state directory) are removed by down
ip netns add "$prefix-h5"
ip netns add "$prefix-sw"
"$rack" down >/dev/null || fail "down of leftovers failed"
[ -z "$(our_namespaces)" ] || fail "down left crashed-run namespaces: $(our_namespaces)"
ok "down removes leftovers"

echo "PASS"
