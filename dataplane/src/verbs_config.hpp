// The verbs transport's settings from the host's YAML (dataplane.verbs and
// connections.coalescing; config/examples/defaults.yaml), as the channels
// and their QPs take them (verbs_channel.hpp).
#pragma once

#include <gossamer/config.hpp>

#include "verbs_channel.hpp"

namespace gossamer::dataplane::verbs {

inline ChannelConfig channel_config(const config::Config& c) {
  const config::VerbsConfig& v = c.dataplane.verbs;
  ChannelConfig out;
  out.ring_units = v.ring_kib * 1024 / kUnitBytes;
  out.signal_interval = v.signal_interval;
  out.max_batch = v.post_batch;
  out.coalescing = c.connections.coalescing;
  out.qp.max_send_wr = v.max_send_wr;
  out.qp.path_mtu = v.path_mtu;
  out.qp.timeout = std::uint8_t(v.timeout);
  out.qp.retry_count = std::uint8_t(v.retry_count);
  out.qp.rnr_retry = std::uint8_t(v.rnr_retry);
  return out;
}

}  // namespace gossamer::dataplane::verbs
