// Two ports joined back to back in one process (port.hpp), for running two
// dataplanes without a NIC, root or the EAL (tests; Seastar's
// loopback_socket.hh is the model). Frames really move: a frame sent on one
// side is a buffer the other side receives, byte for byte. As a NIC with one
// flow between two hosts would (af_packet's fanout hash, RSS), every frame
// arrives on rx queue 0, so a dataplane with several cores steers most of
// them. A side whose receive ring is full drops what is sent to it (like a
// NIC out of descriptors) and counts it (device_errors().rx_missed): the
// connections retransmit.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "port.hpp"

namespace gossamer::dataplane {

// A third party on the link: `bytes` arrive on side `to`'s (0: a, 1: b)
// queue 0 as any frame would. False if its ring was full.
using LoopbackInjector = std::function<bool(int to, const std::vector<std::uint8_t>& bytes)>;
// A new port on side `side` of the same link, for a dataplane that restarts
// (the old port must be gone); frames sent to that side meanwhile wait in
// its ring, as in a NIC's.
using LoopbackReopener = std::function<std::unique_ptr<Port>(int side)>;

// Ports a and b, `queues` queues each, with MACs 02:00:00:00:00:0a and
// 02:00:00:00:00:0b. With `injector`, also a way in for forged frames; with
// `reopen`, a way to open a side again.
std::pair<std::unique_ptr<Port>, std::unique_ptr<Port>> make_loopback_pair(std::uint16_t queues,
                                                                          LoopbackInjector* injector = nullptr,
                                                                          LoopbackReopener* reopen = nullptr);

}  // namespace gossamer::dataplane
