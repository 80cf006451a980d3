// Reading the dataplane's metrics file (gossamer/abi/metrics.hpp) in
// gossamerd: a consistent copy under the sequence lock, then every count and
// offset checked. No Prometheus here, so that the fuzz target links it alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gossamer/abi/metrics.hpp>

namespace gossamer::cp {

// A consistent, validated copy of the dataplane's metrics file.
struct DataplaneSample {
  abi::MetricsHeader header{};
  abi::HostCounters host{};
  std::vector<abi::CoreCounters> cores;
  std::vector<std::string> drop_names;      // by reason index; "" = unused
  std::vector<abi::ConnCounters> conns;     // [peer * conns_per_host + conn]
  std::vector<abi::PortCounters> ports;     // [port]; peers only of hosts of the rack
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

}  // namespace gossamer::cp
