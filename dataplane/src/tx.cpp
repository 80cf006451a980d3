// The tx stage (dataplane.hpp): each core's connections to frames on its
// tx queue.
#include "dataplane.hpp"

#include <cstring>

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

namespace gossamer::dataplane {

void Dataplane::transmit(Core& k, std::uint32_t peer, const std::uint8_t* payload, std::size_t len) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (!m) {
    ++k.stats.tx_failed;  // the retransmission timer covers it
    return;
  }
  auto* f = static_cast<std::uint8_t*>(static_cast<void*>(rte_pktmbuf_append(m, std::uint16_t(wire::kL2L4Bytes + len))));
  std::memcpy(f + wire::kL2L4Bytes, payload, len);
  if (!k.mac_known[peer]) [[unlikely]] {
    if (const std::uint64_t l = peers_[peer].learned_mac.load(std::memory_order_relaxed); l >> 63) {
      for (int b = 0; b < 6; ++b) k.macs[peer][std::size_t(b)] = std::uint8_t(l >> (8 * b));
      k.mac_known[peer] = true;
    }
  }
  wire::write_l2l4(f, mac_.data(), k.macs[peer].data(), self_ep_, peers_[peer].ep, len);
  k.tx_batch.push_back(m);
  if (k.tx_batch.size() >= kBurst) flush_tx(k);
}

void Dataplane::flush_tx(Core& k) {
  std::size_t off = 0;
  int tries = 0;
  while (off < k.tx_batch.size() && tries++ < 8) {
    off += rte_eth_tx_burst(port_id_, std::uint16_t(k.index), k.tx_batch.data() + off,
                            std::uint16_t(k.tx_batch.size() - off));
  }
  k.stats.tx_frames += off;
  for (std::size_t i = off; i < k.tx_batch.size(); ++i) {
    rte_pktmbuf_free(k.tx_batch[i]);
    ++k.stats.tx_failed;
  }
  k.tx_batch.clear();
}

// This core's connections: send what credits allow, timers, owed acks.
bool Dataplane::pump(Core& k) {
  bool worked = false;
  std::uint64_t now = rte_rdtsc();
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    Peer& p = peers_[h];
    auto emit = [this, &k, h](const std::uint8_t* b, std::size_t n) { transmit(k, h, b, n); };
    for (std::uint32_t j = k.index; j < conns_per_host_; j += ncores_) {
      Connection& c = *p.conns[j];
      worked |= c.pump(now, emit) != 0;
      c.timers(now, emit);
      c.flush_ack(emit);
      if (const bool u = c.usable(); u != p.usable[j].load(std::memory_order_relaxed))
        p.usable[j].store(u, std::memory_order_relaxed);
    }
  }
  flush_tx(k);
  return worked;
}

}  // namespace gossamer::dataplane
