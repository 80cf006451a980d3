#include "address.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <charconv>

namespace gossamer::config::detail {

namespace {

constexpr std::string_view kFormat = "expected IP:PORT, e.g. 10.0.0.1:7700";

// inet_pton wants a NUL-terminated string; inet_ntop gives the canonical form
// so that equal addresses compare equal however they were written.
bool canonical_ip(std::string_view text, int family, std::string& out) {
  std::string ip(text);
  unsigned char buf[sizeof(in6_addr)];
  if (inet_pton(family, ip.c_str(), buf) != 1) return false;
  char str[INET6_ADDRSTRLEN];
  if (inet_ntop(family, buf, str, sizeof str) == nullptr) return false;
  out = str;
  return true;
}

}  // namespace

std::optional<SocketAddress> parse_address(std::string_view text, AddressUse use,
                                           std::string& why) {
  why = kFormat;
  std::string_view ip;
  std::string_view port;
  bool ipv6 = false;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() ||
        text[close + 1] != ':')
      return std::nullopt;
    ip = text.substr(1, close - 1);
    port = text.substr(close + 2);
    ipv6 = true;
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    ip = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (ip.find(':') != std::string_view::npos) return std::nullopt;  // IPv6 needs []
  }

  SocketAddress out;
  out.ipv6 = ipv6;
  if (!canonical_ip(ip, ipv6 ? AF_INET6 : AF_INET, out.ip)) return std::nullopt;

  const unsigned min_port = use == AddressUse::listen ? 0 : 1;
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || port.size() > 5 || ec != std::errc{} ||
      end != port.data() + port.size() || value < min_port || value > 65535) {
    why = "port must be in [" + std::to_string(min_port) + ", 65535]";
    return std::nullopt;
  }
  out.port = static_cast<std::uint16_t>(value);

  if (use == AddressUse::dataplane && ipv6) {
    why = "the dataplane needs an IPv4 address";
    return std::nullopt;
  }
  return out;
}

std::optional<MacAddress> parse_mac(std::string_view text) {
  // "xx:xx:xx:xx:xx:xx" is exactly 17 characters.
  if (text.size() != 17) return std::nullopt;
  MacAddress mac{};
  for (std::size_t i = 0; i < mac.size(); ++i) {
    const char* p = text.data() + 3 * i;
    if (i > 0 && p[-1] != ':') return std::nullopt;
    const auto [end, ec] = std::from_chars(p, p + 2, mac[i], 16);
    if (ec != std::errc{} || end != p + 2) return std::nullopt;
  }
  return mac;
}

}  // namespace gossamer::config::detail
