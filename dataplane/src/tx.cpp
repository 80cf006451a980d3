// The tx stage (dataplane.hpp): each core's connections to frames on its
// port queue.
#include "dataplane.hpp"

#include <cstring>

#include "clock.hpp"

namespace gossamer::dataplane {

void Dataplane::transmit(Core& k, std::uint32_t peer, const std::uint8_t* payload, std::size_t len) {
  Frame fr;
  if (!port_->alloc(std::uint32_t(wire::kL2L4Bytes + len), &fr)) {
    ++k.stats.tx_failed;  // the retransmission timer covers it
    return;
  }
  std::uint8_t* f = fr.data;
  std::memcpy(f + wire::kL2L4Bytes, payload, len);
  if (!k.mac_known[peer]) [[unlikely]] {
    if (const std::uint64_t l = peers_[peer].learned_mac.load(std::memory_order_relaxed); l >> 63) {
      for (int b = 0; b < 6; ++b) k.macs[peer][std::size_t(b)] = std::uint8_t(l >> (8 * b));
      k.mac_known[peer] = true;
    }
  }
  wire::write_l2l4(f, mac_.data(), k.macs[peer].data(), self_ep_, peers_[peer].ep, len);
  k.tx_batch.push_back(fr);
  if (k.tx_batch.size() >= kBurst) flush_tx(k);
}

void Dataplane::flush_tx(Core& k) {
  std::size_t off = 0;
  int tries = 0;
  while (off < k.tx_batch.size() && tries++ < 8) {
    off += port_->tx_burst(std::uint16_t(k.index), k.tx_batch.data() + off, std::uint16_t(k.tx_batch.size() - off));
  }
  k.stats.tx_frames += off;
  for (std::size_t i = off; i < k.tx_batch.size(); ++i) {
    port_->release(k.tx_batch[i]);
    ++k.stats.tx_failed;
  }
  k.tx_batch.clear();
}

// This core's connections: send what credits allow, timers, owed acks.
bool Dataplane::pump(Core& k) {
  bool worked = false;
  const std::uint64_t now = tsc_now();
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
