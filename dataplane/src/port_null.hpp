// A port that carries nothing: the dataplane with transport: verbs, whose
// records go over RDMA queue pairs (verbs_transport.hpp), needs no DPDK port,
// but its loop and counters are written over one. `queues` queues, no frames,
// no wake descriptor (a sleeping core wakes on its timer or a kick).
#pragma once

#include <string>

#include "port.hpp"

namespace gossamer::dataplane {

class NullPort final : public Port {
 public:
  explicit NullPort(std::uint16_t queues, std::string why) : queues_(queues), why_(std::move(why)) {}
  std::uint16_t queues() const override { return queues_; }
  std::array<std::uint8_t, 6> mac() const override { return {}; }
  std::uint16_t rx_burst(std::uint16_t, Frame*, std::uint16_t) override { return 0; }
  bool alloc(std::uint32_t, Frame*) override { return false; }
  std::uint16_t tx_burst(std::uint16_t, Frame*, std::uint16_t) override { return 0; }
  void release(const Frame&) override {}
  void retain(const Frame&) override {}
  Frame frame(void*) const override { return {}; }
  std::string describe() const override { return "no port (" + why_ + ")"; }

 private:
  std::uint16_t queues_;
  std::string why_;
};

}  // namespace gossamer::dataplane
