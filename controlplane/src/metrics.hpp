// gossamerd's Prometheus exporter (issue 6; the catalog is
// monitoring/README.md). At each scrape it reads the dataplane's metrics
// file (gossamer/abi/metrics.hpp) and adds what the daemon knows: hosts up,
// heartbeat ages, dataplane restarts, runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <gossamer/abi/metrics.hpp>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace gossamer::cp {

// A consistent, validated copy of the dataplane's metrics file.
struct DataplaneSample {
  abi::MetricsHeader header{};
  abi::HostCounters host{};
  std::vector<abi::CoreCounters> cores;
  std::vector<std::string> drop_names;      // by reason index; "" = unused
  std::vector<abi::ConnCounters> conns;     // [peer * conns_per_host + conn]
  struct App {
    abi::AppEntry entry{};
    std::string name;                       // sanitized, not yet made unique
    std::vector<abi::ThreadCounters> threads;
  };
  std::vector<App> apps;
};

// Checks a copy of the file (`len` bytes) and fills *out; returns "" or why
// the copy is unusable. Pure: the fuzz target calls it.
std::string parse_dataplane_metrics(const std::uint8_t* data, std::size_t len, DataplaneSample* out);

// Reads `path` under its sequence lock and parses it. Returns "" or why not
// (no file: the dataplane is not running).
std::string read_dataplane_metrics(const std::string& path, DataplaneSample* out);

// What the daemon knows, refreshed by its loop (set_view) and read at
// scrapes on the exporter's thread.
struct DaemonView {
  struct Host {
    bool up = false;
    std::chrono::steady_clock::time_point last_heard{};  // {} = never
  };
  std::vector<Host> hosts;                  // by index; self is up
  std::uint64_t dataplane_restarts = 0;
  std::uint32_t runs = 0;                   // runs with an instance here
};

class Exporter : public prometheus::Collectable {
 public:
  // `host_names`: rack.hosts' names, by index; `self`: this host's index.
  Exporter(std::vector<std::string> host_names, std::uint32_t self, std::string metrics_path);
  void set_view(DaemonView v);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::vector<std::string> names_;
  std::uint32_t self_;
  std::string path_;
  mutable std::mutex mu_;
  DaemonView view_;
  mutable std::string last_error_;  // why the dataplane's file was not used
};

// The dataplane and application families of a sample (pure, for tests):
// every series labelled host=<host_names[self]>.
void add_sample_families(const DataplaneSample& s, const std::vector<std::string>& host_names,
                         std::uint32_t self, std::vector<prometheus::MetricFamily>& out);

}  // namespace gossamer::cp
