// Samples the dataplanes' metrics files (gossamer/abi/metrics.hpp) of a rack
// for issue 17 item 6: every INTERVAL_MS, each host's active inbound
// connections summed over its peers (what gossamerd exports as
// gossamer_dataplane_connection_active{direction="inbound"}), and its
// thread_moves counter. A file is rewritten every kMetricsPeriodMs; only new
// samples (sample_ns) count. Prints, per host and in total:
//   host H samples N over M max X values V:COUNT... changes B W A moves_per_s R
//   total samples N over M
// where `over` counts samples above LIMIT; B, W and A the samples whose
// active connections per peer differ from the previous sample's, before,
// within and after the window from FROM_S to TO_S seconds after the start;
// and moves_per_s the thread moves per second within the window.
//   active_sampler LIMIT INTERVAL_MS SECONDS FROM_S TO_S METRICS_FILE...
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gossamer/abi/metrics.hpp>

namespace {

using namespace gossamer::abi;

struct Sample {
  std::uint64_t sample_ns = 0, thread_moves = 0;
  std::uint64_t active = 0;           // inbound, summed over peers and connections
  std::vector<std::uint64_t> per_peer;  // inbound, per peer
};

// One consistent sample (sequence lock), or false.
bool read_sample(const std::string& path, Sample* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = false;
  for (int tries = 0; tries < 50 && !ok; ++tries) {
    MetricsHeader h{};
    if (::pread(fd, &h, sizeof h, 0) != ssize_t(sizeof h) || h.magic != kMetricsMagic || (h.seq & 1)) continue;
    MetricsLayout l{};
    if (!metrics_layout(h.host_count, h.conns_per_host, &l) || h.bytes != l.bytes) break;
    std::vector<std::uint8_t> buf(l.apps);
    if (::pread(fd, buf.data(), buf.size(), 0) != ssize_t(buf.size())) continue;
    std::uint64_t seq_after = 0;
    if (::pread(fd, &seq_after, sizeof seq_after, offsetof(MetricsHeader, seq)) != ssize_t(sizeof seq_after)) continue;
    MetricsHeader h2;
    std::memcpy(&h2, buf.data(), sizeof h2);
    if (h2.seq != h.seq || seq_after != h.seq) continue;
    HostCounters host;
    std::memcpy(&host, buf.data() + kMetricsHostOffset, sizeof host);
    Sample s;
    s.sample_ns = h2.sample_ns;
    s.thread_moves = host.thread_moves;
    s.per_peer.assign(h2.host_count, 0);
    for (std::uint32_t p = 0; p < h2.host_count; ++p) {
      if (p == h2.host_index) continue;
      for (std::uint32_t c = 0; c < h2.conns_per_host; ++c) {
        ConnCounters k;
        std::memcpy(&k, buf.data() + l.conns + (std::size_t(p) * h2.conns_per_host + c) * sizeof k, sizeof k);
        s.per_peer[p] += k.inbound_active;
      }
      s.active += s.per_peer[p];
    }
    *out = s;
    ok = true;
  }
  ::close(fd);
  return ok;
}

struct Host {
  std::string path;
  std::uint64_t last_ns = 0, samples = 0, over = 0, max = 0;
  std::uint64_t changes[3] = {};  // before, within, after the window
  std::map<std::uint64_t, std::uint64_t> values;
  Sample first_in_window{}, last_in_window{}, last{};
  bool have_first = false;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: active_sampler LIMIT INTERVAL_MS SECONDS FROM_S TO_S METRICS_FILE...\n");
    return 2;
  }
  using clock = std::chrono::steady_clock;
  const std::uint64_t limit = std::strtoull(argv[1], nullptr, 10);
  const auto interval = std::chrono::milliseconds(std::atoi(argv[2]));
  const auto start = clock::now();
  auto at = [&](const char* s) { return start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(std::atof(s))); };
  const auto end = at(argv[3]), from = at(argv[4]), to = at(argv[5]);
  std::vector<Host> hosts;
  for (int i = 6; i < argc; ++i) hosts.push_back(Host{argv[i]});
  while (clock::now() < end) {
    const auto now = clock::now();
    const bool in_window = now >= from && now < to;
    const int part = now < from ? 0 : in_window ? 1 : 2;
    for (Host& h : hosts) {
      Sample s;
      if (!read_sample(h.path, &s) || s.sample_ns == h.last_ns) continue;
      const bool changed = h.samples > 0 && s.per_peer != h.last.per_peer;
      h.last_ns = s.sample_ns;
      ++h.samples;
      ++h.values[s.active];
      if (s.active > limit) ++h.over;
      if (s.active > h.max) h.max = s.active;
      if (in_window && !h.have_first) {
        h.first_in_window = s, h.have_first = true;  // its change, if any, was before
        h.changes[0] += changed;
      } else {
        h.changes[part] += changed;
      }
      if (in_window) h.last_in_window = s;
      h.last = s;
    }
    std::this_thread::sleep_for(interval);
  }
  std::uint64_t samples = 0, over = 0;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const Host& h = hosts[i];
    std::string values;
    for (auto [v, n] : h.values) values += " " + std::to_string(v) + ":" + std::to_string(n);
    double rate = -1;
    if (h.have_first && h.last_in_window.sample_ns > h.first_in_window.sample_ns)
      rate = double(h.last_in_window.thread_moves - h.first_in_window.thread_moves) * 1e9 /
             double(h.last_in_window.sample_ns - h.first_in_window.sample_ns);
    std::printf("host %zu samples %llu over %llu max %llu values%s changes %llu %llu %llu moves_per_s %.1f\n", i,
                (unsigned long long)h.samples, (unsigned long long)h.over, (unsigned long long)h.max, values.c_str(),
                (unsigned long long)h.changes[0], (unsigned long long)h.changes[1], (unsigned long long)h.changes[2],
                rate);
    samples += h.samples;
    over += h.over;
  }
  std::printf("total samples %llu over %llu\n", (unsigned long long)samples, (unsigned long long)over);
  return 0;
}
