# Shared by the tests that bring up a rack in a box (tests/*/...sh). Source
# it with the build directory, after `set -uo pipefail`:
#   . "$(dirname "$0")/../rack/lib.sh" "$1"
# It sets build, root, rib (tools/rack-in-a-box), ctl (gossamerctl) and
# failures, and defines pass, fail, skip_unless_rack and own_rack.

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

# A rack of our own: namespace prefix LETTERS + pid (at most 8 characters,
# rack-in-a-box's limit), state in /tmp/gossamer-rack-NAME-PID.
own_rack() {  # LETTERS NAME
  export GOSSAMER_RACK_PREFIX="$1$(($$ % 1000000))"
  export GOSSAMER_RACK_DIR="/tmp/gossamer-rack-$2-$$"
  export GOSSAMER_BUILD="$build"
  export GOSSAMER_START_TIMEOUT=30
}
