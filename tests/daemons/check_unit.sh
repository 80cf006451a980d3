#!/usr/bin/env bash
# The generated gossamerd.service passes `systemd-analyze verify` without a
# single warning (unknown keys only warn, so any output fails), with its
# binaries pointed at this build. Skips, saying so, without systemd-analyze.
set -uo pipefail
unit=$1 gossamerd=$(realpath "$2") dataplane=$(realpath "$3")
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze is not installed"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed -e "s#ExecStart=[^ ]*/gossamerd #ExecStart=$gossamerd #" -e "s#--dataplane [^ ]*#--dataplane $dataplane#" \
  "$unit" >"$dir/gossamerd.service"
grep -q "ExecStart=$gossamerd " "$dir/gossamerd.service" || { echo "FAILED: no ExecStart to rewrite"; exit 1; }
out=$(systemd-analyze verify "$dir/gossamerd.service" 2>&1)
rc=$?
if [ $rc -ne 0 ] || [ -n "$out" ]; then
  echo "FAILED: systemd-analyze verify (rc $rc):"
  echo "$out"
  exit 1
fi
for key in LimitMEMLOCK=infinity KillMode=mixed RuntimeDirectory=gossamer; do
  grep -q "^$key" "$unit" || { echo "FAILED: $key missing"; exit 1; }
done
echo "ok: gossamerd.service verifies cleanly"
