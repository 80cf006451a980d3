# shellcheck shell=bash
# Rack in a box: the `up` command.
# Sourced by tools/rack-in-a-box (no behaviour of its own); it uses the
# globals set there (prog, repo, STATE, PREFIX and the limits).

cmd_up() {
  local n="" build="${GOSSAMER_BUILD:-$repo/build}" dataplane=1 gossamerd=1 vdev=af_packet i
  CONFIG_EXTRA="" LARGE_THRESHOLD="" CORES=1 SOCKET_GROUP="" AUTH=1 MTU=1500 PIN=1
  # The CPUs this process may run on (not 0..nproc-1: a cpuset may start
  # elsewhere); host_cpus (config.sh) hands them out.
  allowed_cpus
  NCPUS=${#ALLOWED_CPUS[@]}
  YIELD_US="" RUNTIME_YIELD_US=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --hosts) [ $# -ge 2 ] || die "--hosts needs a value"; n=$2; shift 2 ;;
      --hosts=*) n=${1#*=}; shift ;;
      --build) [ $# -ge 2 ] || die "--build needs a value"; build=$2; shift 2 ;;
      --build=*) build=${1#*=}; shift ;;
      --no-dataplane) dataplane=0; shift ;;
      --no-gossamerd) gossamerd=0; shift ;;
      --vdev | --link) [ $# -ge 2 ] || die "$1 needs a value"; vdev=$2; shift 2 ;;
      --vdev=* | --link=*) vdev=${1#*=}; shift ;;
      --mtu) [ $# -ge 2 ] || die "--mtu needs a value"; MTU=$2; shift 2 ;;
      --mtu=*) MTU=${1#*=}; shift ;;
      --config-extra) [ $# -ge 2 ] || die "--config-extra needs a file"; CONFIG_EXTRA=$2; shift 2 ;;
      --config-extra=*) CONFIG_EXTRA=${1#*=}; shift ;;
      --large-threshold) [ $# -ge 2 ] || die "--large-threshold needs a byte count"; LARGE_THRESHOLD=$2; shift 2 ;;
      --cores) [ $# -ge 2 ] || die "--cores needs a value"; CORES=$2; shift 2 ;;
      --cores=*) CORES=${1#*=}; shift ;;
      --socket-group) [ $# -ge 2 ] || die "--socket-group needs a group"; SOCKET_GROUP=$2; shift 2 ;;
      --socket-group=*) SOCKET_GROUP=${1#*=}; shift ;;
      --no-auth) AUTH=0; shift ;;
      --float) PIN=0; shift ;;
      --yield-us) [ $# -ge 2 ] || die "--yield-us needs a value"; YIELD_US=$2; shift 2 ;;
      --yield-us=*) YIELD_US=${1#*=}; shift ;;
      --runtime-yield-us) [ $# -ge 2 ] || die "--runtime-yield-us needs a value"; RUNTIME_YIELD_US=$2; shift 2 ;;
      --runtime-yield-us=*) RUNTIME_YIELD_US=${1#*=}; shift ;;
      *) die "up: unknown argument '$1' (see $prog --help)" ;;
    esac
  done
  [ -n "$n" ] || die "up: --hosts N is required (see $prog --help)"
  if ! [[ $n =~ ^[0-9]{1,3}$ ]] || [ "$((10#$n))" -lt 1 ] || [ "$((10#$n))" -gt "$MAX_HOSTS" ]; then
    die "up: --hosts must be a number in 1..$MAX_HOSTS, got '$n'"
  fi
  n=$((10#$n))
  if ! [[ $CORES =~ ^[0-9]{1,2}$ ]] || [ "$((10#$CORES))" -lt 1 ] || [ "$((10#$CORES))" -gt "$MAX_CORES" ]; then
    die "up: --cores must be a number in 1..$MAX_CORES, got '$CORES'"
  fi
  CORES=$((10#$CORES))
  # Their range is the config's (checked with the generated files).
  [[ $YIELD_US =~ ^[0-9]{0,7}$ ]] || die "up: --yield-us must be microseconds (0..1000000), got '$YIELD_US'"
  [[ $RUNTIME_YIELD_US =~ ^[0-9]{0,7}$ ]] ||
    die "up: --runtime-yield-us must be microseconds (0..1000000), got '$RUNTIME_YIELD_US'"
  [ "$MTU" != jumbo ] || MTU=$(link_jumbo_mtu "$vdev")
  link_check "$vdev" "$n" "$CORES" "$MTU"
  MTU=$((10#$MTU))
  [ -z "$CONFIG_EXTRA" ] || [ -r "$CONFIG_EXTRA" ] || die "up: --config-extra: cannot read '$CONFIG_EXTRA'"
  [ -z "$SOCKET_GROUP" ] || getent group "$SOCKET_GROUP" >/dev/null || die "up: --socket-group: no group '$SOCKET_GROUP'"
  require_root up
  need_tool ip iproute2
  need_tool ethtool ethtool
  [ "$PIN" -eq 0 ] || need_tool taskset util-linux
  [ -d "$build" ] || die "up: build directory '$build' does not exist (build first, or pass --build DIR)"
  build=$(cd "$build" && pwd)
  [[ $build =~ ^/[A-Za-z0-9._/+-]+$ ]] || die "up: build directory '$build' must be a path of [A-Za-z0-9._/+-]"
  [ "$vdev" != af_xdp ] || [ "$dataplane" -eq 0 ] || [ -r "$build/dataplane/gossamer_xdp.o" ] ||
    die "up: --vdev af_xdp needs $build/dataplane/gossamer_xdp.o (built when clang and libbpf-dev are installed)"
  if [ "$dataplane" -eq 1 ] && [ ! -x "$build/dataplane/gossamer-dataplane" ]; then
    die "up: $build/dataplane/gossamer-dataplane not found (build it, or use --no-dataplane)"
  fi
  if [ "$gossamerd" -eq 1 ] && [ ! -x "$build/controlplane/gossamerd" ]; then
    die "up: $build/controlplane/gossamerd not found (build it, or use --no-gossamerd)"
  fi
  # The unix sockets live in the state directory; h<N-1> has the longest paths.
  local sock
  for sock in "$STATE/h$((n - 1))/dataplane.sock" "$STATE/h$((n - 1))/gossamerd.sock"; do
    [ "${#sock}" -le "$MAX_SOCKET_PATH" ] ||
      die "up: the socket path $sock is ${#sock} bytes, a unix socket path holds at most $MAX_SOCKET_PATH; use a shorter GOSSAMER_RACK_DIR"
  done

  if [ -f "$STATE/hosts" ]; then
    die "a rack is already up ($STATE/hosts exists, $(cat "$STATE/hosts") hosts); run '$prog down' first"
  fi
  local ns
  for ns in $(ip netns list | awk '{print $1}'); do
    if [ "$ns" = "$(sw_ns)" ] || [[ $ns =~ ^$PREFIX-h[0-9]+$ ]]; then
      die "namespace $ns already exists (a crashed or foreign rack?); run '$prog down' first"
    fi
  done

  # Record the rack before creating anything, so that `down` can always undo
  # a half-built one.
  mkdir -p "$STATE"
  echo "$PREFIX" >"$STATE/prefix"
  echo "$build" >"$STATE/build"
  echo "$vdev" >"$STATE/vdev"
  echo "$CORES" >"$STATE/cores"
  echo "$MTU" >"$STATE/mtu"
  if [ "$gossamerd" -eq 1 ]; then echo gossamerd >"$STATE/mode"; else echo direct >"$STATE/mode"; fi
  echo "$dataplane" >"$STATE/dataplane"
  echo "$n" >"$STATE/hosts"
  BUILD=$build
  NHOSTS=$n
  MODE=$(cat "$STATE/mode")
  DATAPLANE=$dataplane
  # A failure from here on leaves the rack for `down` (the starts say so themselves).
  trap 'rc=$?; if [ "$rc" -ne 0 ] && [ "$UP_PHASE" = network ]; then warn "up failed; the partial rack is left in place: run $prog down"; fi' EXIT
  UP_PHASE=network

  # One pre-shared key for the rack's gossamerds (controlplane.psk_file).
  rm -f "$STATE/psk"
  (umask 077 && head -c 32 /dev/urandom | base64 >"$STATE/psk")
  chmod 600 "$STATE/psk"

  setup_network "$n"
  for ((i = 0; i < n; i++)); do
    mkdir -p "$STATE/h$i"
    write_config "$i" "$n" "$vdev"
  done
  check_configs "$n"
  note "rack of $n hosts up: namespaces $(host_ns 0)..$(host_ns $((n - 1))), switch $(sw_ns), configs $STATE/h<i>.yaml"
  UP_PHASE=daemons
  if [ "$gossamerd" -eq 1 ]; then
    # Start them all, then wait: the dataplanes start in parallel.
    local -a offsets=()
    for ((i = 0; i < n; i++)); do
      offsets[i]=$(gd_launch "$i")
    done
    for ((i = 0; i < n; i++)); do
      gd_wait_sockets "$i" "${offsets[i]}"
    done
    local -a all=()
    for ((i = 0; i < n; i++)); do all+=("$i"); done
    gd_wait_mesh "${all[@]}"
  elif [ "$dataplane" -eq 1 ]; then
    for ((i = 0; i < n; i++)); do
      dp_start "$i"
    done
  fi
  trap - EXIT
}
