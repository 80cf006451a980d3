# shellcheck shell=bash
# Rack in a box: messages, argument checks, the names of the rack's
# namespaces, addresses, MACs and sockets, and its recorded state.
# Sourced by tools/rack-in-a-box (no behaviour of its own); it uses the
# globals set there (prog, repo, STATE, PREFIX and the limits).

die() {
  echo "$prog: $*" >&2
  exit 1
}
warn() { echo "$prog: $*" >&2; }
note() { echo "$prog: $*"; }

require_root() {
  [ "$(id -u)" -eq 0 ] || die "$1: must be run as root (network namespaces, DPDK); e.g. sudo $0 $1 ..."
}

need_tool() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found; install it (Debian package: $2)"
}

check_env() {
  [[ $PREFIX =~ ^[a-z][a-z0-9]{0,7}$ ]] ||
    die "GOSSAMER_RACK_PREFIX='$PREFIX' is invalid: use 1-8 of [a-z0-9], starting with a letter"
  [[ $STATE =~ ^/[A-Za-z0-9._/+-]+$ ]] ||
    die "GOSSAMER_RACK_DIR='$STATE' must be an absolute path of [A-Za-z0-9._/+-]"
  case "$STATE" in
    / | /run | /tmp | /var | /usr | /etc | /home | /root) die "GOSSAMER_RACK_DIR='$STATE' is too dangerous a state directory" ;;
  esac
}

sw_ns() { echo "$PREFIX-sw"; }
host_ns() { echo "$PREFIX-h$1"; }
host_ip() { echo "198.18.0.$(($1 + 1))"; }
host_mac() { printf '02:00:c6:12:00:%02x' $(($1 + 1)); }
dp_sock() { echo "$STATE/h$1/dataplane.sock"; }
gd_sock() { echo "$STATE/h$1/gossamerd.sock"; }

ns_exists() { [ -e "/run/netns/$1" ]; }

# Loads the rack's recorded state into NHOSTS, BUILD, MODE (gossamerd or
# direct) and DATAPLANE (1 or 0); fails if no rack is up. A rack records its
# prefix, which wins over GOSSAMER_RACK_PREFIX.
load_state() {
  [ -f "$STATE/hosts" ] || die "no rack is up (no $STATE/hosts); start one with: $prog up --hosts N"
  NHOSTS=$(cat "$STATE/hosts")
  [[ $NHOSTS =~ ^[0-9]+$ ]] || die "$STATE/hosts is corrupt ('$NHOSTS'); run: $prog down"
  BUILD=$(cat "$STATE/build" 2>/dev/null || true)
  if [ -f "$STATE/prefix" ]; then PREFIX=$(cat "$STATE/prefix"); fi
  MODE=$(cat "$STATE/mode" 2>/dev/null || echo direct)   # racks from before gossamerd: direct
  DATAPLANE=$(cat "$STATE/dataplane" 2>/dev/null || echo 1)
}

# True when gossamerd starts and restarts the dataplanes of this rack.
supervised() { [ "$MODE" = gossamerd ] && [ "$DATAPLANE" = 1 ]; }

check_host_arg() {
  [[ ${1:-} =~ ^[0-9]+$ ]] || die "host must be a number in 0..$((NHOSTS - 1)), got '${1:-}'"
  [ "$((10#$1))" -lt "$NHOSTS" ] || die "host $1 is out of range: the rack has $NHOSTS hosts (0..$((NHOSTS - 1)))"
}
