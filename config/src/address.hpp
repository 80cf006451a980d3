// Internal: parsing of "IP:PORT" and MAC address values.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "gossamer/config.hpp"

namespace gossamer::config::detail {

// How an address value is checked.
//   listen     any IP, port 0..65535 (0 = any free port)
//   peer       any IP, port 1..65535
//   dataplane  IPv4 only (the wire is UDP/IPv4), port 1..65535
enum class AddressUse { listen, peer, dataplane };

// Parses "A.B.C.D:PORT" or "[IPv6]:PORT". On failure returns nullopt and sets
// `why` to the parenthesised reason of the "bad address" message.
std::optional<SocketAddress> parse_address(std::string_view text, AddressUse use,
                                           std::string& why);

// Parses six colon-separated hex bytes, "02:00:00:00:00:01".
std::optional<MacAddress> parse_mac(std::string_view text);

}  // namespace gossamer::config::detail
