// libFuzzer target for gossamerd's reader of the dataplane's metrics file
// (controlplane/src/metrics_file.cpp; layout in gossamer/abi/metrics.hpp).
// The file is the dataplane's, but its application table comes from what
// applications said, and a reader must never go out of bounds whatever the
// bytes. Two inputs per run:
//   - the raw bytes as a whole file (any length);
//   - a valid file for (1 + in[0] % 64) hosts and (1 + in[1] % 64)
//     connections per host, with the rest of the input XORed over its header
//     (first 256 bytes) and then its application table: zeros leave it
//     valid, so the fuzzer starts from files that parse.
// When a file parses, the sample must be inside the contract's bounds.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "metrics_file.hpp"

namespace {

namespace abi = gossamer::abi;

void require(bool ok) {
  if (!ok) std::abort();
}

bool clean(const std::string& s) {
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

void check(const std::uint8_t* data, std::size_t len) {
  gossamer::cp::DataplaneSample s;
  if (!gossamer::cp::parse_dataplane_metrics(data, len, &s).empty()) return;
  const abi::MetricsHeader& h = s.header;
  abi::MetricsLayout l{};
  require(abi::metrics_layout(h.host_count, h.conns_per_host, &l) && l.bytes == len);
  require(h.host_index < h.host_count && h.tsc_hz > 0 && !(h.seq & 1));
  require(s.cores.size() == h.cores && h.cores >= 1 && h.cores <= abi::kMetricsCores);
  require(s.drop_names.size() == h.drop_reasons && h.drop_reasons <= abi::kMetricsDropReasons);
  for (const auto& n : s.drop_names) require(n.size() <= abi::kMetricsNameBytes && clean(n));
  require(s.conns.size() == std::size_t(h.host_count) * h.conns_per_host);
  require(s.apps.size() == h.apps && h.apps <= abi::kMetricsApps);
  for (const auto& a : s.apps) {
    const abi::AppEntry& e = a.entry;
    require(a.threads.size() == e.local_threads && e.local_threads >= 1);
    require(std::uint64_t(e.first_row) + e.local_threads <= abi::kMetricsThreads);
    require(std::uint64_t(e.first_thread) + e.local_threads <= e.total_threads);
    require(!a.name.empty() && a.name.size() <= abi::kMetricsNameBytes && clean(a.name));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* in, std::size_t size) {
  check(in, size);
  if (size < 2) return 0;
  const std::uint32_t hosts = 1 + in[0] % 64, conns = 1 + in[1] % 64;
  abi::MetricsLayout l{};
  require(abi::metrics_layout(hosts, conns, &l));
  std::vector<std::uint8_t> file(l.bytes, 0);
  abi::MetricsHeader h{};
  h.magic = abi::kMetricsMagic;
  h.version = abi::kMetricsVersion;
  h.bytes = l.bytes;
  h.tsc_hz = 2'000'000'000;
  h.host_index = hosts - 1;
  h.host_count = hosts;
  h.conns_per_host = conns;
  h.cores = 1;
  h.drop_reasons = 15;
  h.apps = 2;
  h.ports = 2;
  std::memcpy(file.data(), &h, sizeof h);
  abi::AppEntry apps[2] = {{1, 0, 2, 4, 0, 0, 7, "app"}, {2, 3, 1, 4, 2, 0, 8, "app"}};
  std::memcpy(file.data() + l.apps, apps, sizeof apps);
  std::size_t k = 2;
  for (std::size_t i = 0; i < sizeof h && k < size; ++i) file[i] ^= in[k++];
  for (std::size_t i = 0; i < abi::kMetricsApps * sizeof(abi::AppEntry) && k < size; ++i) file[l.apps + i] ^= in[k++];
  check(file.data(), file.size());
  return 0;
}
