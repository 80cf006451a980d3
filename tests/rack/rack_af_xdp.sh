#!/usr/bin/env bash
# The dataplane on the af_xdp vdev (issue 4: "net_af_packet / net_af_xdp
# vdevs must work"), with gossamerd on every host: the rack's XDP program
# (dataplane/xdp/gossamer_xdp.c, `xdp_prog=` in the vdev) hands only
# Gossamer's frames to the dataplane, so the control plane's TCP, which
# shares veth0, keeps working:
#   - the gossamerds' mesh forms (up waits for it);
#   - rack_app on 2 hosts with exact totals, started on each host, and again
#     with `gossamerctl run` (gossamerd's TCP carries its output and statuses);
#   - the same under injected loss, reordering and duplication;
#   - every frame the dataplanes received was a Gossamer frame (the kernel
#     kept the rest): none dropped as not IPv4 or not UDP.
#   rack_af_xdp.sh BUILD_DIR
# Needs root and network namespaces; exits 77 (skip) otherwise.
set -uo pipefail
. "$(dirname "$0")/lib.sh" "$1"
app="$build/tests/rack/rack_app"

skip_unless_rack "$app"
skip_unless_bpf_loads
# Not a skip: setup installs clang and libbpf-dev, so a missing program is a
# broken build.
[ -r "$build/dataplane/gossamer_xdp.o" ] || { echo "FAIL: $build/dataplane/gossamer_xdp.o was not built"; exit 1; }
own_rack xd afxdp
cleanup() { [ -n "${KEEP_RACK:-}" ] || "$rib" down >/dev/null 2>&1 || true; }
trap cleanup EXIT
run_timeout=45

if ! timeout 90 "$rib" up --hosts 2 --vdev af_xdp >"$GOSSAMER_RACK_DIR.up" 2>&1; then
  tail -20 "$GOSSAMER_RACK_DIR.up"; rm -f "$GOSSAMER_RACK_DIR.up"; echo "FAIL: rack up with af_xdp"; exit 1
fi
rm -f "$GOSSAMER_RACK_DIR.up"
pass "af_xdp rack up: both gossamerds see each other over veth0"
grep -q "xdp_prog=$build/dataplane/gossamer_xdp.o" "$GOSSAMER_RACK_DIR/h0.yaml" ||
  fail "h0.yaml does not name the XDP program"

run_everywhere 2 6 300 af-xdp
run_with_gossamerctl 2 6 300 af-xdp-gossamerctl

"$rib" netem "loss 2% reorder 10% duplicate 2%" >/dev/null || fail "netem"
run_everywhere 2 6 300 af-xdp-faults
faults_seen 2 af-xdp-faults
"$rib" netem off >/dev/null || fail "netem off"

sleep 1.2  # the stats files are rewritten every second
for h in 0 1; do
  rx=$(stat_of "$h" rx_frames) other=$(( $(stat_of "$h" dropped) ))
  if [ "$rx" -gt 0 ] && [ "$(grep -c '^dropped{reason="not_ipv4"} 0$\|^dropped{reason="not_udp"} 0$' \
        "$GOSSAMER_RACK_DIR/h$h/dataplane.sock.stats")" -eq 2 ]; then
    pass "host $h: $rx frames reached the dataplane, none of them ARP or TCP ($other dropped for other reasons)"
  else
    fail "host $h: rx_frames $rx; the kernel's frames reached the dataplane:"
    grep '^dropped' "$GOSSAMER_RACK_DIR/h$h/dataplane.sock.stats" | grep -v ' 0$'
  fi
done

if [ $failures -eq 0 ]; then echo "rack af_xdp: all checks passed"; exit 0; fi
echo "rack af_xdp: $failures check(s) failed"; exit 1
