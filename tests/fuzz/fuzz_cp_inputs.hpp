// The input format of fuzz_cp (the control plane's message codec), shared by
// the target and by make_seeds.cpp. Test scaffolding only.
//
// fuzz_cp input: byte 0 selects the message struct (byte 0 % kCpMessages, an
// index into CpMessages), the rest is its body, as after the 8-byte header.
// The first 8 bytes of the whole input also go to parse_header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "proto.hpp"

namespace gossamer::fuzz {

// Every message struct of proto.hpp (HostStatus and RunStatus travel inside
// StatusReply). The order is the selector's: append, do not reorder, or the
// corpus and regressions/fuzz_cp/ change meaning.
// (BulkReady's body is a RunRef.)
using CpMessages = std::tuple<cp::Hello, cp::Challenge, cp::Proof, cp::Heartbeat, cp::Prepare, cp::Prepared,
                              cp::RunRef, cp::Output, cp::Exited, cp::Stop, cp::CtlRun, cp::StatusReply,
                              cp::CtlOutput, cp::CtlDone, cp::BulkHello>;
inline constexpr std::size_t kCpMessages = std::tuple_size_v<CpMessages>;
inline constexpr const char* kCpMessageNames[kCpMessages] = {
    "hello", "challenge", "proof", "heartbeat", "prepare", "prepared", "runref",
    "output", "exited", "stop", "ctlrun", "statusreply", "ctloutput", "ctldone", "bulkhello"};

// The selector byte of message M.
template <class M, std::size_t I = 0>
constexpr std::uint8_t cp_selector() {
  static_assert(I < kCpMessages, "not in CpMessages");
  if constexpr (std::is_same_v<M, std::tuple_element_t<I, CpMessages>>)
    return std::uint8_t(I);
  else
    return cp_selector<M, I + 1>();
}

// Calls f(M{}) for the message struct that `selector` picks.
template <class F>
void with_cp_message(std::uint8_t selector, F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    const std::size_t want = selector % kCpMessages;
    ((want == I ? (f(std::tuple_element_t<I, CpMessages>{}), 0) : 0), ...);
  }(std::make_index_sequence<kCpMessages>{});
}

}  // namespace gossamer::fuzz
