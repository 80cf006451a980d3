# The data link of tools/rack-in-a-box (sourced by it): which DPDK vdev each
# host's dataplane drives, and the MTU of the rack's data network.
#
#   af_packet (default)  net_af_packet on veth0: frames go through the kernel
#                        (sendto, the bridge in PREFIX-sw).
#   af_xdp               net_af_xdp on veth0 with the rack's XDP program,
#                        which hands the dataplane only Gossamer's frames.
#   memif                net_memif: two dataplanes share rings in memory
#                        (memfd regions, no hugepages needed, so --no-huge
#                        works), set up over a unix socket STATE/memif.sock.
#                        Host 0 is the server (it creates the socket), host 1
#                        the client. No kernel on the data path; veth0 still
#                        carries gossamerd's TCP. A path socket (not DPDK's
#                        default abstract one, which lives in a network
#                        namespace) lets the two namespaces meet. One memif
#                        joins exactly two hosts: with N > 2 hosts, one memif
#                        per pair of hosts (N(N-1)/2), socket
#                        STATE/memif-I-J.sock for hosts I < J (I the server),
#                        and each dataplane serves N-1 ports
#                        (dataplane.ports, one per peer); 2 hosts keep the
#                        one vdev of dataplane.eal_args.
#
# --mtu N sets dataplane.mtu on every host and the MTU of every veth and of
# the bridge; af_packet gets ring frames large enough (framesz), memif ring
# buffers (bsize).

LINKS="af_packet af_xdp memif"

# `up --mtu jumbo`: the largest MTU of the usual jumbo frames that LINK
# carries, so that a full slot of small requests travels in one frame:
# 9000, but 3500 on af_xdp (DPDK's af_xdp driver carries at most 3542 on a
# veth: a frame must fit in one 4 KiB UMEM chunk with its headroom).
link_jumbo_mtu() {
  if [ "$1" = af_xdp ]; then echo 3500; else echo 9000; fi
}

# Checks `up`'s link options: link NAME, hosts N, cores C, mtu M.
link_check() {
  local link=$1 n=$2 cores=$3 mtu=$4
  case " $LINKS " in *" $link "*) ;; *) die "up: --link must be one of: $LINKS (got '$link')" ;; esac
  if ! [[ $mtu =~ ^[0-9]{3,4}$ ]] || [ "$((10#$mtu))" -lt 576 ] || [ "$((10#$mtu))" -gt 9216 ]; then
    die "up: --mtu must be a number in 576..9216 (dataplane.mtu), got '$mtu'"
  fi
  # DPDK 22.11's af_xdp driver takes queue_count from the interface's
  # combined channels, which a veth does not report.
  [ "$cores" -eq 1 ] || [ "$link" != af_xdp ] ||
    die "up: --cores $cores needs --link af_packet: the af_xdp driver cannot open $cores queues on a veth"
  [ "$link" != memif ] || [ "$n" -ge 2 ] ||
    die "up: --link memif joins hosts in pairs (one memif per pair of hosts): it needs at least 2 hosts"
  # The doorbell's sockets beside it (memif.sock.ws<q>, .wc<q>, q < 8 here)
  # are 4 bytes longer; the longest socket is the last pair's.
  local sock=$STATE/memif.sock
  [ "$n" -le 2 ] || sock=$(memif_sock "$((n - 2))" "$((n - 1))")
  [ "$link" != memif ] || [ "${#sock}" -le "$((MAX_SOCKET_PATH - 4))" ] ||
    die "up: the memif socket path $sock is ${#sock} bytes, at most $((MAX_SOCKET_PATH - 4)) (its doorbell's sockets add 4); use a shorter GOSSAMER_RACK_DIR"
}

# The memif socket of the link between hosts I < J of a rack of more than 2.
memif_sock() { echo "$STATE/memif-$1-$2.sock"; }

# True when host I's dataplane serves several ports (dataplane.ports):
# memif between more than 2 hosts.
link_ports() {  # LINK HOSTS
  [ "$1" = memif ] && [ "$2" -gt 2 ]
}

# The net_memif devargs of a memif whose SOCKET host I serves (server) or
# connects to (client), for its vdev NAME.
memif_devargs() {  # NAME I ROLE SOCKET MTU
  local a="$1,id=0,role=$3,socket=$4"
  # One ring buffer per frame (bsize): a jumbo frame that spans several
  # default 2048-byte buffers sometimes reached the peer merged with
  # the next one (counted as too_long) when the ring was full.
  a+=",socket-abstract=no,mac=$(host_mac "$2")"
  [ "$5" -le 2034 ] || a+=",bsize=$(( ($5 + 14 + 1023) / 1024 * 1024 ))"
  echo "$a"
}

# dataplane.ports of host I in a rack of N (link_ports): one memif per
# other host J, host min(I, J) the server. Every vdev of the host carries
# its MAC, so frames leave every port with the source MAC of rack.hosts.
link_ports_yaml() {  # I N MTU
  local i=$1 n=$2 mtu=$3 j k=0 lo hi
  echo "  ports:"
  for ((j = 0; j < n; j++)); do
    [ "$j" -ne "$i" ] || continue
    lo=$((i < j ? i : j)) hi=$((i < j ? j : i))
    echo "    - vdev: \"$(memif_devargs "net_memif$k" "$i" "$([ "$i" -eq "$lo" ] && echo server || echo client)" "$(memif_sock "$lo" "$hi")" "$mtu")\""
    echo "      peers: [h$j]"
    k=$((k + 1))
  done
}

# The --vdev EAL argument of host I (link, cores and MTU of the rack); none
# when the host serves several ports (link_ports_yaml).
link_vdev_arg() {
  local i=$1 link=$2 cores=$3 mtu=$4 a framesz
  case "$link" in
    af_packet)
      a="--vdev=net_af_packet0,iface=veth0"
      [ "$cores" -eq 1 ] || a+=",qpairs=$cores"
      # A frame lands 66 bytes into a ring frame (TPACKET_V2); the default
      # 2048-byte ring frames hold MTUs up to 1968. The driver lays frames
      # out back to back across blocks, so a block holds whole frames: both
      # a power of two.
      if [ "$mtu" -gt 1500 ]; then
        framesz=4096
        while [ "$framesz" -lt $((mtu + 80)) ]; do framesz=$((framesz * 2)); done
        a+=",framesz=$framesz,blocksz=$framesz"
      fi ;;
    # Our XDP program passes everything but Gossamer's frames to the kernel
    # (DPDK's default one would take the control plane's TCP too).
    af_xdp) a="--vdev=net_af_xdp0,iface=veth0,start_queue=0,queue_count=$cores,xdp_prog=$BUILD/dataplane/gossamer_xdp.o" ;;
    memif)
      a="--vdev=$(memif_devargs net_memif0 "$i" "$([ "$i" -eq 0 ] && echo server || echo client)" "$STATE/memif.sock" "$mtu")" ;;
  esac
  echo "$a"
}

# The MTU of host I's veth0 and of its port on the switch (the bridge
# follows its ports).
link_set_mtu() {
  local i=$1 mtu=$2
  [ "$mtu" -ne 1500 ] || return 0
  ip -n "$(sw_ns)" link set dev "h$i" mtu "$mtu"
  ip -n "$(host_ns "$i")" link set dev veth0 mtu "$mtu"
}

# True when `netem` must be done by the dataplanes (STATE/hI/dataplane.sock.faults):
# the link bypasses the kernel, so a qdisc on veth0 would not see its frames.
link_bypasses_kernel() { [ "$(cat "$STATE/vdev" 2>/dev/null)" = memif ]; }
