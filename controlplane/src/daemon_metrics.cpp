// What gossamerd reports to its Prometheus exporter (metrics.cpp) besides the
// dataplane's file (issue 6).
#include <spdlog/spdlog.h>

#include "daemon.hpp"
#include "internal.hpp"

namespace gossamer::cp {

bool Daemon::start_metrics() {
  if (!cfg_.metrics.enabled) return true;
  std::vector<std::string> names;
  for (const auto& h : cfg_.rack.hosts) names.push_back(h.name);
  exporter_ = std::make_shared<Exporter>(std::move(names), self_, cfg_.dataplane_socket() + ".metrics");
  publish_view();
  const std::string addr = cfg_.metrics.listen.to_string();
  try {
    // CivetWeb serves one connection per thread and waits request_timeout_ms
    // (default 30 s) for a request to arrive: with one thread, one client
    // that never finished its request stalled every scrape. Several threads
    // and a 2 s limit bound what a slow or hostile client can hold.
    exposer_ = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", addr, "num_threads", "8", "request_timeout_ms", "2000", "enable_keep_alive", "no"});
  } catch (const std::exception& e) {
    spdlog::error("cannot serve metrics on {} (metrics.listen): {}", addr, e.what());
    return false;
  }
  exposer_->RegisterCollectable(exporter_);
  spdlog::info("metrics on http://{}/metrics", addr);
  return true;
}

// Refreshed every heartbeat interval: scrapes see at most that much delay.
void Daemon::publish_view() {
  if (!exporter_) return;
  DaemonView v;
  v.hosts.resize(hosts_);
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    v.hosts[h].up = h == self_ || peers_[h].up;
    v.hosts[h].last_heard = peers_[h].last_heard;
  }
  v.dataplane_restarts = dataplane_restarts_;
  v.runs = local_instances();
  v.protocol_errors = protocol_errors_;
  exporter_->set_view(std::move(v));
}
}  // namespace gossamer::cp
