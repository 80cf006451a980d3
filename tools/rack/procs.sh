# shellcheck shell=bash
# The processes of tools/rack-in-a-box (sourced by it): telling the rack's
# own gossamerds and dataplanes from any other process (a pid is signalled
# only once its command line names this rack's config), stopping them, and
# starting them: dataplanes directly (--no-gossamerd) or under gossamerd,
# which supervises its dataplane. The functions use the script's globals
# (STATE, PREFIX, BUILD, MODE, ...), set before any of them runs.
# ---------------------------------------------------------------- processes

# True if PID is a live (not zombie) process.
pid_alive() {
  local pid=$1 stat
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# The state letter of PID (R, S, T, Z...), or nothing.
pid_state() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }
  echo "${stat%% *}"
}

# True if PID is alive and is host I's NAME (gossamerd or gossamer-dataplane)
# of this rack: its command line holds ".../NAME --config STATE/hI.yaml".
# So a recycled pid, or another rack's process, is never signalled.
is_ours() {
  local pid=$1 i=$2 name=$3 cl
  pid_alive "$pid" || return 1
  cl=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  case " $cl" in
    *" $name --config $STATE/h$i.yaml "* | *"/$name --config $STATE/h$i.yaml "*) return 0 ;;
  esac
  return 1
}

# The direct children of PID, one per line.
children_of() {
  if command -v pgrep >/dev/null 2>&1; then
    pgrep -P "$1" || true
    return 0
  fi
  local f stat state ppid
  for f in /proc/[0-9]*/stat; do
    stat=$(cat "$f" 2>/dev/null) || continue
    read -r state ppid _ <<<"${stat##*) }"
    if [ "$ppid" = "$1" ] && [ "$state" != Z ]; then
      f=${f#/proc/}
      echo "${f%/stat}"
    fi
  done
  return 0
}

# True if PID's network namespace has a listening unix socket bound to PATH
# (a socket file left by a killed process does not count).
listening() {
  awk -v p="$2" '$NF == p && $4 == "00010000" { found = 1 } END { exit !found }' "/proc/$1/net/unix" 2>/dev/null
}

gd_pid() { cat "$STATE/h$1/gossamerd.pid" 2>/dev/null || true; }
dp_pid() { cat "$STATE/h$1/dataplane.pid" 2>/dev/null || true; }

# Host I's gossamerd pid if it runs, else nothing.
gd_running() {
  local pid
  pid=$(gd_pid "$1")
  if [ -n "$pid" ] && is_ours "$pid" "$1" gossamerd; then echo "$pid"; fi
}

# The dataplane child of host I's gossamerd, if any.
gd_dataplane() {
  local i=$1 g c
  g=$(gd_running "$i")
  [ -n "$g" ] || return 0
  for c in $(children_of "$g"); do
    if is_ours "$c" "$i" gossamer-dataplane; then
      echo "$c"
      return 0
    fi
  done
}

# Host I's running dataplane, whoever started it.
dp_running() {
  local pid
  if supervised; then
    gd_dataplane "$1"
  else
    pid=$(dp_pid "$1")
    if [ -n "$pid" ] && is_ours "$pid" "$1" gossamer-dataplane; then echo "$pid"; fi
  fi
}

# Sends SIGTERM to PIDS (SIGCONT too: a paused process handles SIGTERM only
# once resumed), waits up to TIMEOUT seconds, then SIGKILLs what is left.
# WHAT names them in messages. Only call it with pids checked by is_ours.
terminate() {
  local what=$1 timeout=$2 p n=0 left
  shift 2
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null || true
  kill -CONT "$@" 2>/dev/null || true
  while :; do
    left=()
    for p in "$@"; do
      if pid_alive "$p"; then left+=("$p"); fi
    done
    if [ ${#left[@]} -eq 0 ] || [ "$n" -ge $((timeout * 10)) ]; then break; fi
    sleep 0.1
    n=$((n + 1))
  done
  [ ${#left[@]} -gt 0 ] || return 0
  warn "$what (pid ${left[*]}) ignored SIGTERM for ${timeout}s; sending SIGKILL"
  kill -KILL "${left[@]}" 2>/dev/null || true
  n=0
  for p in "${left[@]}"; do
    while pid_alive "$p" && [ "$n" -lt 50 ]; do
      sleep 0.1
      n=$((n + 1))
    done
  done
}

# Prints the last lines of LOG from byte OFFSET on (to stderr).
log_tail() {
  local log=$1 offset=${2:-0}
  tail -c +"$((offset + 1))" "$log" 2>/dev/null | tail -n 30 >&2 || true
}

# ---------------------------------------------------------------- dataplanes (direct)

# Sets PIN_ARGV to the argv prefix that runs a process of host I on the
# host's CPUs ($STATE/hI.cpus, written by `up` unless --float): empty when
# the host is not pinned. taskset execs, so $! stays the process's own pid.
pin_argv() {
  local f=$STATE/h$1.cpus cpus
  PIN_ARGV=()
  [ -r "$f" ] || return 0
  cpus=$(cat "$f")
  [[ $cpus =~ ^[0-9]+(,[0-9]+)*$ ]] || die "$f: not a CPU list ('$cpus'); run: $prog down && $prog up ..."
  PIN_ARGV=(taskset -c "$cpus")
}

dp_start() {
  local i=$1 ns exe sock log pid waited=0
  ns=$(host_ns "$i")
  exe=$BUILD/dataplane/gossamer-dataplane
  sock=$(dp_sock "$i")
  log=$STATE/h$i/dataplane.log
  [ -x "$exe" ] || die "dataplane binary $exe not found or not executable (build it, or pass --build DIR)"
  ns_exists "$ns" || die "namespace $ns does not exist; run: $prog down && $prog up ..."
  pid=$(dp_pid "$i")
  if [ -n "$pid" ] && is_ours "$pid" "$i" gossamer-dataplane; then
    die "host $i's dataplane is already running (pid $pid)"
  fi
  mkdir -p "$STATE/h$i"
  rm -f "$sock"
  # `ip netns exec` execs the dataplane, so $! is the dataplane's own pid.
  pin_argv "$i"
  ${PIN_ARGV[@]+"${PIN_ARGV[@]}"} ip netns exec "$ns" "$exe" --config "$STATE/h$i.yaml" </dev/null >"$log" 2>&1 &
  pid=$!
  echo "$pid" >"$STATE/h$i/dataplane.pid"
  while [ ! -S "$sock" ]; do
    if ! pid_alive "$pid"; then
      local rc=0
      wait "$pid" 2>/dev/null || rc=$?
      warn "host $i: dataplane (pid $pid) exited with status $rc before creating $sock; last 30 lines of $log:"
      tail -n 30 "$log" >&2 || true
      die "host $i: dataplane failed to start; fix it and run: $prog dataplane $i start (or $prog down)"
    fi
    if [ "$waited" -ge $((DP_START_TIMEOUT * 10)) ]; then
      warn "host $i: dataplane (pid $pid) did not create $sock within ${DP_START_TIMEOUT}s; last 30 lines of $log:"
      tail -n 30 "$log" >&2 || true
      die "host $i: dataplane failed to start; run: $prog down"
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  note "host $i: dataplane running (pid $pid, socket $sock)"
}

dp_stop() {
  local i=$1 pid
  pid=$(dp_pid "$i")
  [ -n "$pid" ] || return 0
  if is_ours "$pid" "$i" gossamer-dataplane; then
    terminate "host $i: dataplane" "$DP_STOP_TIMEOUT" "$pid"
    note "host $i: dataplane (pid $pid) stopped"
  fi
  rm -f "$STATE/h$i/dataplane.pid"
}

# ---------------------------------------------------------------- gossamerd

# Starts host I's gossamerd in the background and records its pid; prints
# the log size before the start (where this start's messages begin).
gd_launch() {
  local i=$1 ns exe log pid offset
  local -a args
  ns=$(host_ns "$i")
  exe=$BUILD/controlplane/gossamerd
  log=$STATE/h$i/gossamerd.log
  [ -x "$exe" ] || die "gossamerd binary $exe not found or not executable (build it, pass --build DIR, or use up --no-gossamerd)"
  ns_exists "$ns" || die "namespace $ns does not exist; run: $prog down && $prog up ..."
  pid=$(gd_running "$i")
  [ -z "$pid" ] || die "host $i's gossamerd is already running (pid $pid)"
  args=(--config "$STATE/h$i.yaml")
  if supervised; then
    [ -x "$BUILD/dataplane/gossamer-dataplane" ] ||
      die "dataplane binary $BUILD/dataplane/gossamer-dataplane not found or not executable"
    args+=(--dataplane "$BUILD/dataplane/gossamer-dataplane")
  else
    args+=(--no-dataplane)
  fi
  mkdir -p "$STATE/h$i"
  offset=$(stat -c %s "$log" 2>/dev/null || echo 0)
  # `ip netns exec` execs gossamerd, so $! is gossamerd's own pid. Its
  # dataplane writes to the same log (it inherits gossamerd's stderr), and
  # it and the instances it starts inherit its CPUs (pin_argv).
  pin_argv "$i"
  ${PIN_ARGV[@]+"${PIN_ARGV[@]}"} ip netns exec "$ns" "$exe" "${args[@]}" </dev/null >>"$log" 2>&1 &
  pid=$!
  echo "$pid" >"$STATE/h$i/gossamerd.pid"
  echo "$offset"
}

# Waits until host I's gossamerd (started at log offset OFFSET) listens on
# its socket and, when it supervises one, its dataplane listens on its own.
gd_wait_sockets() {
  local i=$1 offset=$2 pid log gs ds d="" crashes waited=0
  pid=$(gd_pid "$i")
  log=$STATE/h$i/gossamerd.log
  gs=$(gd_sock "$i")
  ds=$(dp_sock "$i")
  while :; do
    if ! is_ours "$pid" "$i" gossamerd; then
      warn "host $i: gossamerd (pid $pid) exited while starting; last lines of $log:"
      log_tail "$log" "$offset"
      die "host $i: gossamerd failed to start; fix it and run: $prog gossamerd $i start (or $prog down)"
    fi
    if supervised; then
      d=$(gd_dataplane "$i")
      crashes=$(tail -c +"$((offset + 1))" "$log" 2>/dev/null |
        grep -cE 'dataplane (exited|killed).*restarting it|cannot start the dataplane' || true)
      if [ "$crashes" -ge "$DP_CRASH_LIMIT" ]; then
        warn "host $i: the dataplane exited $crashes times while starting (gossamerd pid $pid keeps restarting it, with back-off); last lines of $log:"
        log_tail "$log" "$offset"
        die "host $i: dataplane failed to start; run: $prog down (or $prog gossamerd $i stop)"
      fi
    fi
    if listening "$pid" "$gs" && { ! supervised || { [ -n "$d" ] && listening "$d" "$ds"; }; }; then
      break
    fi
    if [ "$waited" -ge $((DP_START_TIMEOUT * 10)) ]; then
      warn "host $i: gossamerd (pid $pid) did not listen on $gs$(supervised && echo " with its dataplane on $ds") within ${DP_START_TIMEOUT}s; last lines of $log:"
      log_tail "$log" "$offset"
      die "host $i: gossamerd failed to start; run: $prog down"
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  if supervised; then
    note "host $i: gossamerd running (pid $pid, socket $gs), dataplane pid $d (socket $ds)"
  else
    note "host $i: gossamerd running (pid $pid, socket $gs, no dataplane)"
  fi
}

# Waits until `gossamerctl status` on each host I given exits 0 (it sees
# every host up).
gd_wait_mesh() {
  local ctl=$BUILD/tools/gossamerctl/gossamerctl i rc out deadline
  if [ ! -x "$ctl" ]; then
    warn "note: $ctl not found; not waiting for the gossamerds to see each other"
    return 0
  fi
  deadline=$((SECONDS + MESH_TIMEOUT))
  for i in "$@"; do
    while :; do
      rc=0
      out=$(timeout 5 ip netns exec "$(host_ns "$i")" "$ctl" -c "$STATE/h$i.yaml" status 2>&1) || rc=$?
      [ "$rc" -ne 0 ] || break
      if [ "$SECONDS" -ge "$deadline" ]; then
        warn "host $i: gossamerctl status still exits $rc after ${MESH_TIMEOUT}s:"
        printf '    %s\n' "${out//$'\n'/$'\n'    }" >&2
        warn "last lines of $STATE/h$i/gossamerd.log:"
        tail -n 15 "$STATE/h$i/gossamerd.log" >&2 || true
        die "host $i: its gossamerd does not see every host up; run: $prog down"
      fi
      sleep 0.2
    done
  done
  note "every gossamerd sees all $NHOSTS hosts up"
}

gd_start() {
  local i=$1 offset j others=1
  offset=$(gd_launch "$i")
  gd_wait_sockets "$i" "$offset"
  for ((j = 0; j < NHOSTS; j++)); do
    [ "$j" -ne "$i" ] || continue
    local g
    g=$(gd_running "$j")
    if [ -z "$g" ] || [ "$(pid_state "$g")" = T ]; then others=0; fi
  done
  if [ "$others" -eq 1 ]; then
    gd_wait_mesh "$i"
  else
    note "host $i: not waiting for the mesh: another host's gossamerd is stopped or paused"
  fi
}

# Stops the gossamerds of hosts I... together (each stops its applications
# and its dataplane), then whatever dataplane child is left.
gd_stop() {
  local i g d
  local -a gs=() ds=() hs=() dis=()
  for i in "$@"; do
    g=$(gd_pid "$i")
    [ -n "$g" ] || continue
    if is_ours "$g" "$i" gossamerd; then
      gs+=("$g")
      hs+=("$i")
      d=$(gd_dataplane "$i")
      if [ -n "$d" ]; then ds+=("$d"); dis+=("$i"); fi
    fi
  done
  if [ ${#gs[@]} -gt 0 ]; then
    terminate "gossamerd of host(s) ${hs[*]}" "$GD_STOP_TIMEOUT" "${gs[@]}"
    # A killed gossamerd's dataplane gets SIGKILL from the kernel (parent
    # death signal); a dataplane still here is stuck: make sure.
    local -a left=()
    local k
    for k in "${!ds[@]}"; do
      if is_ours "${ds[k]}" "${dis[k]}" gossamer-dataplane; then left+=("${ds[k]}"); fi
    done
    terminate "dataplane left by gossamerd" "$DP_STOP_TIMEOUT" "${left[@]}"
    for k in "${!gs[@]}"; do
      note "host ${hs[k]}: gossamerd (pid ${gs[k]}) stopped"
    done
  fi
  for i in "$@"; do
    rm -f "$STATE/h$i/gossamerd.pid"
  done
}

gd_signal() {  # I STOP|CONT
  local i=$1 sig=$2 g
  g=$(gd_running "$i")
  [ -n "$g" ] || die "host $i's gossamerd is not running (start it with: $prog gossamerd $i start)"
  kill -"$sig" "$g"
  if [ "$sig" = STOP ]; then
    note "host $i: gossamerd (pid $g) paused (SIGSTOP); its peers will see its heartbeats stop"
  else
    note "host $i: gossamerd (pid $g) resumed (SIGCONT)"
  fi
}

# `dataplane H restart` under gossamerd: SIGKILL the dataplane, wait for the
# one gossamerd starts instead.
dp_restart_supervised() {
  local i=$1 g old new log offset waited=0 ds
  g=$(gd_running "$i")
  [ -n "$g" ] || die "host $i's gossamerd is not running, so nothing would restart its dataplane; start both with: $prog gossamerd $i start"
  [ "$(pid_state "$g")" != T ] || die "host $i's gossamerd (pid $g) is paused and could not restart its dataplane; resume it first: $prog gossamerd $i resume"
  log=$STATE/h$i/gossamerd.log
  ds=$(dp_sock "$i")
  offset=$(stat -c %s "$log" 2>/dev/null || echo 0)
  old=$(gd_dataplane "$i")
  if [ -n "$old" ]; then
    kill -KILL "$old" 2>/dev/null || true
    while pid_alive "$old" && [ "$waited" -lt 50 ]; do sleep 0.1; waited=$((waited + 1)); done
    pid_alive "$old" && die "host $i: dataplane (pid $old) survived SIGKILL for 5 s"
  else
    note "host $i: no dataplane is running (gossamerd pid $g is restarting it); waiting for it"
  fi
  # gossamerd waits 200 ms before a restart, doubling up to 10 s when the
  # dataplane keeps dying.
  waited=0
  while :; do
    new=$(gd_dataplane "$i")
    if [ -n "$new" ] && [ "$new" != "$old" ] && listening "$new" "$ds"; then break; fi
    if ! is_ours "$g" "$i" gossamerd; then
      warn "host $i: gossamerd (pid $g) exited; last lines of $log:"
      log_tail "$log" "$offset"
      die "host $i: no gossamerd to restart the dataplane; run: $prog gossamerd $i start"
    fi
    if [ "$waited" -ge $(((DP_START_TIMEOUT + 10) * 10)) ]; then
      warn "host $i: gossamerd (pid $g) did not bring up a new dataplane within $((DP_START_TIMEOUT + 10))s; last lines of $log:"
      log_tail "$log" "$offset"
      die "host $i: dataplane restart failed"
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  note "host $i: dataplane restarted by gossamerd (pid ${old:-none} -> $new, socket $ds)"
}
