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

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "metrics_file.hpp"

namespace gossamer::cp {

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
  std::uint64_t protocol_errors = 0;        // connections closed for bad input
};

class Exporter : public prometheus::Collectable {
 public:
  // `host_names`: rack.hosts' names, by index; `self`: this host's index.
  Exporter(std::vector<std::string> host_names, std::uint32_t self, std::string metrics_path);
  void set_view(DaemonView v);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::vector<prometheus::MetricFamily> collect() const;
  std::vector<std::string> names_;
  std::uint32_t self_;
  std::string path_;
  mutable std::mutex mu_;
  DaemonView view_;
  mutable std::string last_error_;  // why the dataplane's file was not used
};

// The `app` label of each of the sample's instances, in order.
std::vector<std::string> app_labels(const DataplaneSample& s);

// The dataplane and application families of a sample (pure, for tests):
// every series labelled host=<host_names[self]>.
void add_sample_families(const DataplaneSample& s, const std::vector<std::string>& host_names,
                         std::uint32_t self, std::vector<prometheus::MetricFamily>& out);

}  // namespace gossamer::cp
