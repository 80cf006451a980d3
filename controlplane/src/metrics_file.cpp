#include "metrics_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstring>

namespace gossamer::cp {

namespace {

// The file is a few MiB at most (64 hosts x 64 connections); refuse more.
constexpr std::size_t kMaxFileBytes = 16u << 20;

// A fixed-size, maybe unterminated name from the file, as a label value.
std::string clean_name(const char* p, std::size_t cap) {
  std::string s(p, strnlen(p, cap));
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
  return s;
}

}  // namespace

std::string parse_dataplane_metrics(const std::uint8_t* data, std::size_t len, DataplaneSample* out) {
  DataplaneSample s;
  if (len < sizeof s.header) return "file too short for its header";
  std::memcpy(&s.header, data, sizeof s.header);
  const abi::MetricsHeader& h = s.header;
  if (h.magic != abi::kMetricsMagic) return "bad magic number";
  if (h.version != abi::kMetricsVersion)
    return "version " + std::to_string(h.version) + ", this gossamerd reads " + std::to_string(abi::kMetricsVersion);
  if (h.seq & 1) return "sample being written";
  abi::MetricsLayout l{};
  if (!abi::metrics_layout(h.host_count, h.conns_per_host, &l)) return "host or connection count out of range";
  if (h.bytes != l.bytes || len != l.bytes)
    return "file is " + std::to_string(len) + " bytes, its layout needs " + std::to_string(l.bytes);
  if (h.host_index >= h.host_count) return "host index out of range";
  if (h.tsc_hz == 0) return "no cycle frequency";
  if (h.cores == 0 || h.cores > abi::kMetricsCores) return "core count out of range";
  if (h.drop_reasons > abi::kMetricsDropReasons) return "drop reason count out of range";
  if (h.apps > abi::kMetricsApps) return "application count out of range";
  if (h.ports == 0 || h.ports > abi::kMetricsPorts) return "port count out of range";

  std::memcpy(&s.host, data + abi::kMetricsHostOffset, sizeof s.host);
  s.cores.resize(h.cores);
  std::memcpy(s.cores.data(), data + abi::kMetricsCoreOffset, h.cores * sizeof(abi::CoreCounters));
  for (std::uint32_t d = 0; d < h.drop_reasons; ++d)
    s.drop_names.push_back(clean_name(
        reinterpret_cast<const char*>(data + abi::kMetricsDropNamesOffset + d * abi::kMetricsNameBytes),
        abi::kMetricsNameBytes));
  s.ports.resize(h.ports);
  std::memcpy(s.ports.data(), data + abi::kMetricsPortOffset, h.ports * sizeof(abi::PortCounters));
  const std::uint64_t hosts_mask = h.host_count >= 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << h.host_count) - 1;
  for (auto& p : s.ports) p.peers &= hosts_mask & ~(std::uint64_t(1) << h.host_index);
  const std::size_t conns = std::size_t(h.host_count) * h.conns_per_host;
  s.conns.resize(conns);
  std::memcpy(s.conns.data(), data + l.conns, conns * sizeof(abi::ConnCounters));
  for (std::uint32_t i = 0; i < h.apps; ++i) {
    DataplaneSample::App a;
    std::memcpy(&a.entry, data + l.apps + i * sizeof(abi::AppEntry), sizeof a.entry);
    const abi::AppEntry& e = a.entry;
    if (e.local_threads == 0 || e.local_threads > abi::kMetricsThreads ||
        e.first_row > abi::kMetricsThreads - e.local_threads)
      return "application " + std::to_string(i) + ": thread rows out of range";
    if (e.total_threads < e.local_threads || e.first_thread > e.total_threads - e.local_threads)
      return "application " + std::to_string(i) + ": thread ids out of range";
    a.name = clean_name(e.name, sizeof e.name);
    if (a.name.empty()) a.name = "unknown";
    a.threads.resize(e.local_threads);
    std::memcpy(a.threads.data(), data + l.threads + std::size_t(e.first_row) * sizeof(abi::ThreadCounters),
                e.local_threads * sizeof(abi::ThreadCounters));
    s.apps.push_back(std::move(a));
  }
  *out = std::move(s);
  return "";
}

std::string read_dataplane_metrics(const std::string& path, DataplaneSample* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return path + ": " + std::strerror(errno);
  std::vector<std::uint8_t> buf;
  std::string why = "the dataplane kept writing";
  // Sequence lock: keep a copy only if seq was even and unchanged around it.
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::uint64_t before = 0, after = 1;
    off_t size = ::lseek(fd, 0, SEEK_END);
    if (size < off_t(sizeof(abi::MetricsHeader)) || std::size_t(size) > kMaxFileBytes) {
      why = "file size " + std::to_string(size) + " out of range";
      break;
    }
    if (::pread(fd, &before, sizeof before, offsetof(abi::MetricsHeader, seq)) != sizeof before) break;
    if (before & 1) {
      ::usleep(1000);
      continue;
    }
    buf.resize(std::size_t(size));
    if (::pread(fd, buf.data(), buf.size(), 0) != ssize_t(buf.size())) {
      why = "short read";
      break;
    }
    if (::pread(fd, &after, sizeof after, offsetof(abi::MetricsHeader, seq)) != sizeof after) break;
    if (after != before) continue;
    ::close(fd);
    return parse_dataplane_metrics(buf.data(), buf.size(), out);
  }
  ::close(fd);
  return path + ": " + why;
}

}  // namespace gossamer::cp
