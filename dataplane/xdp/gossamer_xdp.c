// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// XDP program for the af_xdp vdev (`net_af_xdp0,...,xdp_prog=<this .o>`):
// only Gossamer's frames go to the dataplane's AF_XDP sockets; everything
// else (ARP, the control plane's TCP, other UDP) goes on to the kernel.
// DPDK's default program redirects every frame of the queue, which cuts the
// host's kernel networking off the interface the dataplane uses.
//
// A Gossamer frame: Ethernet, IPv4 without options, UDP, then the frame
// header, whose first word is wire::kMagic ("GSMF", dataplane/src/wire.hpp).
// The dataplane validates everything else (wire::parse_frame).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define GOSSAMER_MAGIC 0x464d5347u  // wire::kMagic, little-endian in the frame

// DPDK's af_xdp driver puts each queue's socket here, keyed by queue.
struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, 64);
  __type(key, __u32);
  __type(value, __u32);
} xsks_map SEC(".maps");

SEC("xdp")
int gossamer_xdp(struct xdp_md* ctx) {
  void* data = (void*)(long)ctx->data;
  void* end = (void*)(long)ctx->data_end;
  struct ethhdr* eth = data;
  struct iphdr* ip = (void*)(eth + 1);
  struct udphdr* udp = (void*)(ip + 1);
  __u32* magic = (void*)(udp + 1);
  if ((void*)(magic + 1) > end) return XDP_PASS;
  if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 || ip->protocol != IPPROTO_UDP) return XDP_PASS;
  if (*magic != GOSSAMER_MAGIC) return XDP_PASS;
  return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "Dual BSD/GPL";
