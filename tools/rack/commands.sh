# shellcheck shell=bash
# Rack in a box: the commands that act on a rack that is up: exec,
# dataplane, gossamerd, pid and status.
# Sourced by tools/rack-in-a-box (no behaviour of its own); it uses the
# globals set there (prog, repo, STATE, PREFIX and the limits).

cmd_exec() {
  require_root exec
  load_state
  local pin=0
  if [ "${1:-}" = "--pin" ]; then pin=1; shift; fi
  [ $# -ge 1 ] || die "exec: usage: $prog exec [--pin] H -- CMD [ARGS...]"
  local h=$1
  shift
  check_host_arg "$h"
  h=$((10#$h))
  [ "${1:-}" = "--" ] || die "exec: usage: $prog exec [--pin] H -- CMD [ARGS...] (the -- is required)"
  shift
  [ $# -ge 1 ] || die "exec: no command given after --"
  ns_exists "$(host_ns "$h")" || die "exec: namespace $(host_ns "$h") does not exist; run: $prog down"
  export GOSSAMER_CONFIG="$STATE/h$h.yaml"
  PIN_ARGV=()
  [ "$pin" -eq 0 ] || pin_argv "$h"
  exec ${PIN_ARGV[@]+"${PIN_ARGV[@]}"} ip netns exec "$(host_ns "$h")" "$@"
}

cmd_dataplane() {
  require_root dataplane
  load_state
  [ $# -eq 2 ] || die "dataplane: usage: $prog dataplane H start|stop|restart"
  check_host_arg "$1"
  local h=$((10#$1)) g
  case "$2" in start | stop | restart) ;; *) die "dataplane: action must be start, stop or restart, got '$2'" ;; esac
  if supervised; then
    case "$2" in
      restart) dp_restart_supervised "$h" ;;
      *)
        g=$(gd_running "$h")
        die "dataplane $h $2: refused: host $h's dataplane is supervised by its gossamerd ($([ -n "$g" ] && echo "pid $g" || echo "not running now")), which starts it and restarts it whenever it exits. Use '$prog dataplane $h restart' (SIGKILL; gossamerd starts a new one), '$prog gossamerd $h stop|start' (gossamerd with its dataplane), or bring the rack up with --no-gossamerd" ;;
    esac
    return 0
  fi
  case "$2" in
    start) dp_start "$h" ;;
    stop) dp_stop "$h" ;;
    restart) dp_stop "$h"; dp_start "$h" ;;
  esac
}

cmd_gossamerd() {
  require_root gossamerd
  load_state
  [ $# -eq 2 ] || die "gossamerd: usage: $prog gossamerd H start|stop|restart|pause|resume"
  check_host_arg "$1"
  local h=$((10#$1))
  case "$2" in
    start | restart)
      if [ "$MODE" != gossamerd ] && [ "$2" = start ]; then
        local d
        d=$(dp_running "$h")
        note "host $h: the rack is up --no-gossamerd: starting gossamerd --no-dataplane${d:+ (the dataplane, pid $d, stays as it is)}"
      fi
      [ "$2" = start ] || gd_stop "$h"
      gd_start "$h"
      ;;
    stop)
      [ -n "$(gd_running "$h")" ] || note "host $h: gossamerd is not running"
      gd_stop "$h"
      ;;
    pause) gd_signal "$h" STOP ;;
    resume) gd_signal "$h" CONT ;;
    *) die "gossamerd: action must be start, stop, restart, pause or resume, got '$2'" ;;
  esac
}

cmd_pid() {
  require_root pid
  load_state
  [ $# -eq 2 ] || die "pid: usage: $prog pid H gossamerd|dataplane"
  check_host_arg "$1"
  local h=$((10#$1)) p
  case "$2" in
    gossamerd) p=$(gd_running "$h") ;;
    dataplane) p=$(dp_running "$h") ;;
    *) die "pid: the process must be gossamerd or dataplane, got '$2'" ;;
  esac
  [ -n "$p" ] || exit 1
  echo "$p"
}

cmd_status() {
  require_root status
  if [ ! -f "$STATE/hosts" ]; then
    echo "no rack is up (state directory $STATE)"
    local ns left=()
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
      if [ "$ns" = "$(sw_ns)" ] || [[ $ns =~ ^$PREFIX-h[0-9]+$ ]]; then left+=("$ns"); fi
    done
    [ ${#left[@]} -eq 0 ] || echo "leftover namespaces: ${left[*]} (remove with: $prog down)"
    return 0
  fi
  load_state
  local i ns pid gstate dstate mesh qd rc ctl=$BUILD/tools/gossamerctl/gossamerctl mode
  mode="gossamerd supervises the dataplanes"
  if [ "$MODE" != gossamerd ]; then mode="no gossamerd (dataplanes started directly)"
  elif [ "$DATAPLANE" != 1 ]; then mode="gossamerd without dataplanes"; fi
  echo "rack: $NHOSTS hosts, state $STATE, build $BUILD, prefix $PREFIX, link $(cat "$STATE/vdev" 2>/dev/null || echo '?'), MTU $(cat "$STATE/mtu" 2>/dev/null || echo 1500), dataplane cores $(cat "$STATE/cores" 2>/dev/null || echo 1)"
  echo "mode: $mode"
  echo "switch: $(sw_ns) $(ns_exists "$(sw_ns)" && echo present || echo MISSING)"
  printf '%-5s %-12s %-9s %-15s %-19s %-13s %-10s %-12s %s\n' HOST NAMESPACE NS ADDRESS MAC GOSSAMERD MESH DATAPLANE QDISC
  for ((i = 0; i < NHOSTS; i++)); do
    ns=$(host_ns "$i")
    pid=$(gd_pid "$i")
    mesh="-"
    if [ -z "$pid" ]; then
      gstate="-"
    elif is_ours "$pid" "$i" gossamerd; then
      if [ "$(pid_state "$pid")" = T ]; then
        gstate="$pid paused"
      else
        gstate="$pid alive"
        if [ -x "$ctl" ]; then
          rc=0
          timeout 3 ip netns exec "$ns" "$ctl" -c "$STATE/h$i.yaml" status >/dev/null 2>&1 || rc=$?
          case "$rc" in 0) mesh="all-up" ;; 3) mesh="hosts-down" ;; *) mesh="no-answer" ;; esac
        fi
      fi
    else
      gstate="$pid dead"
    fi
    if supervised; then
      pid=$(gd_dataplane "$i")
      if [ -n "$pid" ]; then dstate="$pid alive"
      elif [ "$gstate" = "-" ] || [[ $gstate == *dead ]]; then dstate="-"
      else dstate="restarting"; fi
    else
      pid=$(dp_pid "$i")
      if [ -z "$pid" ]; then
        dstate="-"
      elif is_ours "$pid" "$i" gossamer-dataplane; then
        dstate="$pid alive"
      else
        dstate="$pid dead"
      fi
    fi
    qd=$(tc -n "$ns" qdisc show dev veth0 root 2>/dev/null | head -n1 || true)
    printf '%-5s %-12s %-9s %-15s %-19s %-13s %-10s %-12s %s\n' "h$i" "$ns" \
      "$(ns_exists "$ns" && echo present || echo MISSING)" "$(host_ip "$i")/24" "$(host_mac "$i")" \
      "$gstate" "$mesh" "$dstate" "${qd:--}"
  done
}
