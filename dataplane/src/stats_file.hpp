// The `<socket>.stats` text file: the metrics file's counters as lines
// `name value` or `name{label="value",...} value`, one per row of the tables
// of gossamer/abi/counters.hpp (and per core, per connection, per port). Pure, so the
// counters test renders it too (tests/metrics/counters_test.cpp).
#pragma once

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include <gossamer/abi/metrics.hpp>

namespace gossamer::dataplane {

struct StatsSample {
  std::uint32_t self = 0, hosts = 0, conns_per_host = 0;
  const abi::HostCounters* host = nullptr;
  std::span<const abi::CoreCounters> cores;
  std::span<const abi::ConnCounters> conns;  // [peer * conns_per_host + conn]
  std::span<const std::string_view> drop_names;  // by reason; "" for none
  std::span<const std::uint32_t> conn_core;      // [conn]: the core that owns it
  std::span<const abi::PortCounters> ports;      // [port]
};

namespace stats_file {

// `labels` is "" or `key="value",...` without braces.
inline void line(std::ostream& o, const abi::SeriesName& n, const std::string& labels, std::uint64_t v) {
  o << n.name;
  if (!labels.empty() || !n.key.empty()) {
    o << '{' << labels;
    if (!n.key.empty()) o << (labels.empty() ? "" : ",") << n.key << "=\"" << n.value << '"';
    o << '}';
  }
  o << ' ' << v << '\n';
}

}  // namespace stats_file

inline void write_stats_text(std::ostream& o, const StatsSample& s) {
  using stats_file::line;
  for (const auto& c : abi::kHostCounters) line(o, c.stats, "", s.host->*c.member);
  for (std::size_t d = 0; d < s.drop_names.size(); ++d)
    if (!s.drop_names[d].empty())
      o << abi::kDroppedFrames.stats << '{' << abi::kDroppedFrames.label << "=\"" << s.drop_names[d] << "\"} "
        << s.host->drops[d] << '\n';
  o << "cores " << s.cores.size() << '\n';
  for (const auto& c : abi::kCoreCounters) {
    if (c.stats_total.empty()) continue;
    std::uint64_t sum = 0;
    for (const auto& k : s.cores) sum += k.*c.member;
    line(o, abi::SeriesName(c.stats_total), "", sum);
  }
  for (std::size_t k = 0; k < s.cores.size(); ++k)
    for (const auto& c : abi::kCoreCounters)
      line(o, c.stats, "core=\"" + std::to_string(k) + '"', s.cores[k].*c.member);
  for (std::uint32_t h = 0; h < s.hosts; ++h) {
    if (h == s.self) continue;
    for (std::uint32_t j = 0; j < s.conns_per_host; ++j) {
      const std::string l = "peer=\"" + std::to_string(h) + "\",conn=\"" + std::to_string(j) + '"';
      const abi::ConnCounters& k = s.conns[std::size_t(h) * s.conns_per_host + j];
      for (const auto& c : abi::kConnCounters) line(o, c.stats, l, k.*c.member);
      line(o, abi::SeriesName("core"), l, s.conn_core[j]);
    }
  }
  for (std::size_t i = 0; i < s.ports.size(); ++i)
    for (const auto& c : abi::kPortCounters) line(o, c.stats, "port=\"" + std::to_string(i) + '"', s.ports[i].*c.member);
}

}  // namespace gossamer::dataplane
