# shellcheck shell=bash
# Rack in a box: the network namespaces, the bridge and the veths
# (setup_network, for `up`), and the `netem` command (tc netem, or the
# dataplanes' own fault injection where the kernel has no sch_netem).
# Sourced by tools/rack-in-a-box (no behaviour of its own); it uses the
# globals set there (prog, repo, STATE, PREFIX and the limits).

setup_network() {
  local n=$1 sw i ns f
  local -a queues=()
  # up --cores C: C rx and tx queues on both ends of every veth (AF_XDP binds
  # one socket per queue).
  [ "$CORES" -eq 1 ] || queues=(numtxqueues "$CORES" numrxqueues "$CORES")
  sw=$(sw_ns)
  ip netns add "$sw"
  ip -n "$sw" link set dev lo up
  ip -n "$sw" link add name br0 type bridge
  ip -n "$sw" link set dev br0 up
  # A switch, not a firewall: with br_netfilter loaded (Docker and others
  # load it), every bridged frame would also go through iptables' hooks.
  # The sysctls are per namespace; a kernel without them has no such hooks.
  for f in /proc/sys/net/bridge/bridge-nf-call-iptables /proc/sys/net/bridge/bridge-nf-call-ip6tables \
    /proc/sys/net/bridge/bridge-nf-call-arptables; do
    ip netns exec "$sw" sh -c "[ ! -e $f ] || echo 0 > $f"
  done
  for ((i = 0; i < n; i++)); do
    ns=$(host_ns "$i")
    ip netns add "$ns"
    ip -n "$ns" link set dev lo up
    # Created in the switch namespace, the peer moved straight into the
    # host's: no interface ever exists in the root namespace.
    ip -n "$sw" link add name "h$i" "${queues[@]}" type veth peer name veth0 netns "$ns" "${queues[@]}"
    ip -n "$sw" link set dev "h$i" master br0
    ip -n "$sw" link set dev "h$i" up
    ip -n "$ns" link set dev veth0 address "$(host_mac "$i")"
    ip -n "$ns" addr add "$(host_ip "$i")/24" dev veth0
    link_set_mtu "$i" "$MTU"
    ip -n "$ns" link set dev veth0 up
    # DPDK's AF_PACKET/AF_XDP PMDs see raw frames: no checksum offload, no
    # GSO/GRO super-packets. One feature at a time, as a veth may refuse some.
    for f in rx tx tso gso gro; do
      ip netns exec "$ns" ethtool -K veth0 "$f" off >/dev/null 2>&1 || true
    done
  done
}

# True when tc can create a netem qdisc (probed on the switch namespace's lo).
kernel_has_netem() {
  local ns
  ns=$(sw_ns)
  if tc -n "$ns" qdisc replace dev lo root netem delay 0ms >/dev/null 2>&1; then
    tc -n "$ns" qdisc del dev lo root >/dev/null 2>&1 || true
    return 0
  fi
  return 1
}

cmd_netem() {
  require_root netem
  need_tool tc iproute2
  load_state
  if [ $# -eq 0 ] || [ -z "${*//[[:space:]]/}" ]; then
    die "netem: usage: $prog netem \"SPEC\" | $prog netem off (SPEC must not be empty)"
  fi
  local spec=$* i ns out
  local -a words
  read -r -a words <<<"$spec"
  if [ "$spec" != off ] && { link_bypasses_kernel || ! kernel_has_netem; }; then
    # No netem qdisc in this kernel, or frames that never meet it (memif):
    # the dataplanes inject the same faults in their receive path (they
    # read this file every second).
    for ((i = 0; i < NHOSTS; i++)); do
      printf '%s\n' "$spec" >"$STATE/h$i/dataplane.sock.faults"
    done
    note "$(link_bypasses_kernel && echo "the memif link bypasses the kernel" || echo "this kernel has no netem qdisc"): the dataplanes inject '$spec' in their receive path instead"
    sleep 1.2  # let every dataplane pick it up
    return 0
  fi
  if [ "$spec" = off ]; then
    for ((i = 0; i < NHOSTS; i++)); do rm -f "$STATE/h$i/dataplane.sock.faults"; done
  fi
  for ((i = 0; i < NHOSTS; i++)); do
    ns=$(host_ns "$i")
    if [ "$spec" = off ]; then
      if ! out=$(tc -n "$ns" qdisc del dev veth0 root 2>&1); then
        case "$out" in
          *"handle of zero"* | *"No such file or directory"* | *"Invalid handle"*) ;;  # no qdisc
          *) echo "$out" >&2; die "netem off: failed on host $i" ;;
        esac
      fi
    else
      if ! out=$(tc -n "$ns" qdisc replace dev veth0 root netem "${words[@]}" 2>&1); then
        echo "$out" >&2
        case "$out" in
          *"qdisc kind is unknown"*)
            die "netem: this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM / module sch_netem)" ;;
        esac
        die "netem: 'tc qdisc replace dev veth0 root netem $spec' failed on host $i"
      fi
    fi
  done
  if [ "$spec" = off ]; then
    note "netem removed on $NHOSTS hosts"
  else
    note "netem '$spec' on veth0 of $NHOSTS hosts"
  fi
}
