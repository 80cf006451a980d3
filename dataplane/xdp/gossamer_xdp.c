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
//
// Waking a sleeping core (dataplane/src/xdp_wake.hpp): the AF_XDP PMD has
// no receive interrupts, so before every sleep a core sets its queue's word
// in gsm_sleeping; the first of our frames on that queue afterwards clears
// it and writes the queue number to the gsm_wake ring buffer, whose
// descriptor is in every core's epoll set. One record per sleep at most.
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

// Per queue: non-zero while that queue's core sleeps and wants a frame to
// wake it. Memory-mapped by the dataplane (no system call to set it).
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 64);
  __uint(map_flags, BPF_F_MMAPABLE);
  __type(key, __u32);
  __type(value, __u32);
} gsm_sleeping SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 4096);
} gsm_wake SEC(".maps");

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
  __u32 q = ctx->rx_queue_index;
  __u32* sleeping = bpf_map_lookup_elem(&gsm_sleeping, &q);
  if (sleeping && *sleeping) {  // a queue's frames run here on one CPU at a time (NAPI)
    *sleeping = 0;
    bpf_ringbuf_output(&gsm_wake, &q, sizeof q, BPF_RB_FORCE_WAKEUP);
  }
  return bpf_redirect_map(&xsks_map, q, XDP_PASS);
}

char _license[] SEC("license") = "Dual BSD/GPL";
