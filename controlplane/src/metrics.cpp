#include "metrics.hpp"

#include <time.h>

#include <map>
#include <string_view>

#include <spdlog/spdlog.h>

namespace gossamer::cp {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

// A dataplane sample older than this is not "up" (it writes every 100 ms).
constexpr std::uint64_t kFreshNs = 3'000'000'000ull;

std::uint64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000ull + std::uint64_t(ts.tv_nsec);
}

// Families in first-use order, one per name.
class Families {
 public:
  Families(std::vector<MetricFamily>& out, std::string host) : out_(out), host_(std::move(host)) {}

  void counter(const std::string& name, std::string_view help, Labels labels, double v) {
    ClientMetric m = metric(std::move(labels));
    m.counter.value = v;
    family(name, help, MetricType::Counter).metric.push_back(std::move(m));
  }
  void gauge(const std::string& name, std::string_view help, Labels labels, double v) {
    ClientMetric m = metric(std::move(labels));
    m.gauge.value = v;
    family(name, help, MetricType::Gauge).metric.push_back(std::move(m));
  }

 private:
  ClientMetric metric(Labels labels) {
    ClientMetric m;
    m.label.reserve(labels.size() + 1);
    m.label.push_back({"host", host_});
    for (auto& l : labels) m.label.push_back(std::move(l));
    return m;
  }
  MetricFamily& family(const std::string& name, std::string_view help, MetricType type) {
    auto [it, fresh] = index_.try_emplace(name, out_.size());
    if (fresh) {
      MetricFamily f;
      f.name = name;
      f.help = help;
      f.type = type;
      out_.push_back(std::move(f));
    }
    return out_[it->second];
  }

  std::vector<MetricFamily>& out_;
  std::string host_;
  std::map<std::string, std::size_t> index_;
};

// The rows of one table of gossamer/abi/counters.hpp for one struct: one
// series each, labelled `scope` and the row's own label.
template <class S, std::size_t N>
void add_rows(Families& f, const abi::Counter<S> (&table)[N], const S& values, const Labels& scope, double hz) {
  for (const abi::Counter<S>& c : table) {
    if (c.kind == abi::CounterKind::kPeerGauge) continue;  // add_peer_rows
    Labels l = scope;
    if (!c.prom.key.empty()) l.push_back({std::string(c.prom.key), std::string(c.prom.value)});
    const double v = double(values.*c.member) / (c.kind == abi::CounterKind::kCycles ? hz : 1);
    const std::string name(c.prom.name);
    if (c.is_counter()) f.counter(name, c.help, std::move(l), v);
    else f.gauge(name, c.help, std::move(l), v);
  }
}

// The kPeerGauge rows: summed over one peer's connections.
void add_peer_rows(Families& f, const abi::ConnCounters* conns, std::uint32_t count, const std::string& peer) {
  for (const auto& c : abi::kConnCounters) {
    if (c.kind != abi::CounterKind::kPeerGauge) continue;
    double sum = 0;
    for (std::uint32_t i = 0; i < count; ++i) sum += double(conns[i].*c.member);
    f.gauge(std::string(c.prom.name), c.help, {{"peer", peer}}, sum);
  }
}

}  // namespace

// An instance's `app` label: its name when no other instance here has it,
// else name-PID for each of them. A label never moves from one instance to
// another while both run (a series is one instance's counters), and no two
// instances share one.
std::vector<std::string> app_labels(const DataplaneSample& s) {
  std::map<std::string, int> count;
  for (const auto& a : s.apps) ++count[a.name];
  std::vector<std::string> out;
  std::map<std::string, int> taken;
  for (const auto& a : s.apps) {
    std::string l = count[a.name] == 1 ? a.name : a.name + "-" + std::to_string(a.entry.pid);
    // A name that already looks like name-PID (or a repeated pid): make it unique.
    const std::string base = l;
    for (int k = 2; taken.count(l); ++k) l = base + "-" + std::to_string(k);
    ++taken[l];
    out.push_back(l);
  }
  return out;
}

namespace {

void add_threads(Families& f, const DataplaneSample& s) {
  const double hz = double(s.header.tsc_hz);
  const std::vector<std::string> labels = app_labels(s);
  for (std::size_t i = 0; i < s.apps.size(); ++i) {
    const auto& a = s.apps[i];
    const std::string& app = labels[i];
    f.gauge("gossamer_app_threads", "This host's threads of the instance.", {{"app", app}},
            double(a.entry.local_threads));
    f.gauge("gossamer_app_rack_threads", "The run's threads across the rack.", {{"app", app}},
            double(a.entry.total_threads));
    for (std::size_t t = 0; t < a.threads.size(); ++t)
      add_rows(f, abi::kThreadCounters, a.threads[t],
               {{"app", app}, {"thread", std::to_string(std::uint64_t(a.entry.first_thread) + t)}}, hz);
  }
}

void add_dataplane(Families& f, const DataplaneSample& s, const std::vector<std::string>& names) {
  const double hz = double(s.header.tsc_hz);
  for (std::size_t i = 0; i < s.cores.size(); ++i)
    add_rows(f, abi::kCoreCounters, s.cores[i], {{"core", std::to_string(i)}}, hz);
  add_rows(f, abi::kHostCounters, s.host, {}, hz);
  for (std::size_t d = 0; d < s.drop_names.size(); ++d)
    if (!s.drop_names[d].empty())
      f.counter(std::string(abi::kDroppedFrames.prom), abi::kDroppedFrames.help,
                {{std::string(abi::kDroppedFrames.label), s.drop_names[d]}}, double(s.host.drops[d]));
  f.gauge("gossamer_dataplane_apps_hidden",
          "Attached applications whose threads are not reported (beyond 32 instances or 4096 threads).", {},
          double(s.header.apps_hidden));
  const std::uint32_t per = s.header.conns_per_host;
  for (std::uint32_t p = 0; p < s.header.host_count; ++p) {
    if (p == s.header.host_index) continue;
    const abi::ConnCounters* conns = &s.conns[std::size_t(p) * per];
    for (std::uint32_t c = 0; c < per; ++c)
      add_rows(f, abi::kConnCounters, conns[c], {{"peer", names[p]}, {"conn", std::to_string(c)}}, hz);
    add_peer_rows(f, conns, per, names[p]);
  }
  // Frames per port, and which peers each port reaches (one series per
  // port and peer, value 1: joins a peer's traffic to its port).
  for (std::size_t i = 0; i < s.ports.size(); ++i) {
    const std::string port = std::to_string(i);
    add_rows(f, abi::kPortCounters, s.ports[i], {{"port", port}}, hz);
    for (std::uint32_t h = 0; h < s.header.host_count && h < 64 && h < names.size(); ++h)
      if (s.ports[i].peers >> h & 1)
        f.gauge("gossamer_dataplane_port_peer", "1 for each peer a port of the dataplane reaches (dataplane.ports).",
                {{"port", port}, {"peer", names[h]}}, 1);
  }
}

}  // namespace

Exporter::Exporter(std::vector<std::string> host_names, std::uint32_t self, std::string metrics_path)
    : names_(std::move(host_names)), self_(self), path_(std::move(metrics_path)) {}

void Exporter::set_view(DaemonView v) {
  std::lock_guard<std::mutex> g(mu_);
  view_ = std::move(v);
}

void add_sample_families(const DataplaneSample& s, const std::vector<std::string>& host_names, std::uint32_t self,
                         std::vector<MetricFamily>& out) {
  Families f(out, host_names[self]);
  add_threads(f, s);
  add_dataplane(f, s, host_names);
}

// Runs on the HTTP server's thread, where nothing would catch an exception
// (it would end the daemon, and with it the host's dataplane and instances):
// a failure costs this scrape's dataplane part, or the whole scrape.
std::vector<MetricFamily> Exporter::Collect() const {
  try {
    return collect();
  } catch (const std::exception& e) {
    spdlog::error("metrics: scrape failed: {}", e.what());
    return {};
  }
}

std::vector<MetricFamily> Exporter::collect() const {
  DaemonView v;
  {
    std::lock_guard<std::mutex> g(mu_);
    v = view_;
  }
  std::vector<MetricFamily> out;
  Families f(out, names_[self_]);
  f.gauge("gossamer_build_info", "Always 1; the version is a label.", {{"version", GOSSAMER_VERSION}}, 1);
  const auto now = std::chrono::steady_clock::now();
  for (std::size_t h = 0; h < v.hosts.size() && h < names_.size(); ++h) {
    const bool self = h == self_;
    f.gauge("gossamer_host_up", "1 while the host's link is up and its heartbeats arrive (this host: 1).",
            {{"peer", names_[h]}}, self || v.hosts[h].up ? 1 : 0);
    if (!self && v.hosts[h].last_heard != std::chrono::steady_clock::time_point{})
      f.gauge("gossamer_host_heartbeat_age_seconds", "Time since the host's last heartbeat.", {{"peer", names_[h]}},
              std::chrono::duration<double>(now - v.hosts[h].last_heard).count());
  }
  f.counter("gossamer_dataplane_restarts_total", "Dataplane restarts by gossamerd.", {},
            double(v.dataplane_restarts));
  f.gauge("gossamer_runs", "Runs with an instance on this host.", {}, double(v.runs));
  f.counter("gossamer_controlplane_protocol_errors_total",
            "Connections gossamerd closed for bad input: failed handshakes, messages that failed their tags or "
            "did not decode, malformed gossamerctl requests.",
            {}, double(v.protocol_errors));

  DataplaneSample s;
  std::string why;
  try {
    why = read_dataplane_metrics(path_, &s);
  } catch (const std::exception& e) {
    why = path_ + ": " + e.what();
  }
  if (why.empty() && (s.header.host_index != self_ || s.header.host_count != names_.size()))
    why = path_ + ": written by the dataplane of host " + std::to_string(s.header.host_index) + " of " +
          std::to_string(s.header.host_count) + ", not this host's";
  if (why.empty() && monotonic_ns() - s.header.sample_ns >= kFreshNs) why = path_ + ": not updated for 3 s";
  {
    // Said once per change, not at every scrape.
    std::lock_guard<std::mutex> g(mu_);
    if (why != last_error_) {
      if (!why.empty()) spdlog::warn("metrics: dataplane not reported: {}", why);
      else if (!last_error_.empty()) spdlog::info("metrics: dataplane reported again");
      last_error_ = why;
    }
  }
  const bool up = why.empty();
  f.gauge("gossamer_dataplane_up", "1 when the dataplane's metrics are fresh.", {}, up ? 1 : 0);
  if (up) {
    const std::size_t daemon_part = out.size();
    try {
      add_sample_families(s, names_, self_, out);
    } catch (const std::exception& e) {
      out.resize(daemon_part);
      spdlog::error("metrics: dataplane part of the scrape dropped: {}", e.what());
    }
  }
  return out;
}

}  // namespace gossamer::cp
