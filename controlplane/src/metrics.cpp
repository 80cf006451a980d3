#include "metrics.hpp"

#include <time.h>

#include <map>

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

  void counter(const std::string& name, const char* help, Labels labels, double v) {
    ClientMetric m = metric(std::move(labels));
    m.counter.value = v;
    family(name, help, MetricType::Counter).metric.push_back(std::move(m));
  }
  void gauge(const std::string& name, const char* help, Labels labels, double v) {
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
  MetricFamily& family(const std::string& name, const char* help, MetricType type) {
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
    for (std::size_t t = 0; t < a.threads.size(); ++t) {
      const abi::ThreadCounters& c = a.threads[t];
      const std::string thread = std::to_string(std::uint64_t(a.entry.first_thread) + t);
      auto l = [&](Labels extra = {}) {
        Labels ls{{"app", app}, {"thread", thread}};
        for (auto& e : extra) ls.push_back(std::move(e));
        return ls;
      };
      f.counter("gossamer_trustee_busy_seconds_total",
                "Time in loop iterations that found work (fibers, requests, responses).", l(),
                double(c.busy_cycles) / hz);
      f.counter("gossamer_trustee_idle_seconds_total", "Time polling and finding nothing, yielding or asleep.",
                l(), double(c.idle_cycles) / hz);
      f.counter("gossamer_trustee_serve_seconds_total", "Part of busy time spent serving delegated requests.",
                l(), double(c.serve_cycles) / hz);
      f.counter("gossamer_trustee_requests_served_total", "Requests served, by where the client is.",
                l({{"source", "local"}}), double(c.requests_served_local));
      f.counter("gossamer_trustee_requests_served_total", "Requests served, by where the client is.",
                l({{"source", "remote"}}), double(c.requests_served_remote));
      f.counter("gossamer_trustee_slots_served_total", "Request slots (batches) served.", l(),
                double(c.slots_served));
      f.gauge("gossamer_trustee_fibers_ready", "Fibers ready to run at the last loop iteration.", l(),
              double(c.fibers_ready));
      f.counter("gossamer_client_requests_sent_total", "Requests sent to a trustee, by where it is.",
                l({{"dest", "local"}}), double(c.requests_sent_local));
      f.counter("gossamer_client_requests_sent_total", "Requests sent to a trustee, by where it is.",
                l({{"dest", "remote"}}), double(c.requests_sent_remote));
      f.counter("gossamer_client_responses_received_total", "Responses received.", l(),
                double(c.responses_received));
      f.counter("gossamer_client_direct_applies_total",
                "Applies on the thread's own trustee, run in place with no request.", l(),
                double(c.local_applies));
      f.counter("gossamer_thread_tcp_bytes_total",
                "Request and response bodies above the large-request threshold that crossed hosts over "
                "gossamerd's TCP connections, by direction.",
                l({{"direction", "sent"}}), double(c.tcp_bytes_sent));
      f.counter("gossamer_thread_tcp_bytes_total",
                "Request and response bodies above the large-request threshold that crossed hosts over "
                "gossamerd's TCP connections, by direction.",
                l({{"direction", "received"}}), double(c.tcp_bytes_received));
    }
  }
}

void add_dataplane(Families& f, const DataplaneSample& s, const std::vector<std::string>& names) {
  const double hz = double(s.header.tsc_hz);
  for (std::size_t i = 0; i < s.cores.size(); ++i) {
    Labels core{{"core", std::to_string(i)}};
    f.counter("gossamer_dataplane_busy_seconds_total", "Dataplane polling core: iterations that found work.",
              core, double(s.cores[i].busy_cycles) / hz);
    f.counter("gossamer_dataplane_idle_seconds_total", "Dataplane polling core: finding nothing, or asleep.",
              core, double(s.cores[i].idle_cycles) / hz);
  }
  const abi::HostCounters& h = s.host;
  f.counter("gossamer_dataplane_frames_received_total", "Frames from the NIC.", {}, double(h.rx_frames));
  f.counter("gossamer_dataplane_frames_sent_total", "Frames handed to the NIC.", {}, double(h.tx_frames));
  f.counter("gossamer_dataplane_transmit_failures_total", "Frames the NIC did not take.", {}, double(h.tx_failed));
  for (std::size_t d = 0; d < s.drop_names.size(); ++d)
    if (!s.drop_names[d].empty())
      f.counter("gossamer_dataplane_dropped_frames_total", "Malformed or unexpected frames dropped, by reason.",
                {{"reason", s.drop_names[d]}}, double(h.drops[d]));
  f.counter("gossamer_dataplane_dropped_records_total", "Records dropped, by reason.", {{"reason", "no_app"}},
            double(h.records_no_app));
  f.counter("gossamer_dataplane_dropped_records_total", "Records dropped, by reason.", {{"reason", "rejected"}},
            double(h.records_rejected));
  f.gauge("gossamer_dataplane_apps", "Applications attached.", {}, double(h.apps));
  f.counter("gossamer_dataplane_thread_moves_total", "Threads the thread scheduler moved to another connection.", {},
            double(h.thread_moves));
  f.gauge("gossamer_dataplane_max_active_connections", "The QP scheduler's limit (connections.max_active_qps).", {},
          double(h.max_active_qps));
  f.gauge("gossamer_dataplane_apps_hidden",
          "Attached applications whose threads are not reported (beyond 32 instances or 4096 threads).", {},
          double(s.header.apps_hidden));
  f.counter("gossamer_dataplane_attaches_total", "Attach requests, by result.", {{"result", "accepted"}},
            double(h.apps_attached));
  f.counter("gossamer_dataplane_attaches_total", "Attach requests, by result.", {{"result", "refused"}},
            double(h.apps_refused));
  f.counter("gossamer_dataplane_detaches_total", "Applications gone, by how.", {{"how", "clean"}},
            double(h.apps_detached));
  f.counter("gossamer_dataplane_detaches_total", "Applications gone, by how.", {{"how", "lost"}},
            double(h.apps_lost));
  const char* faults = "Frames affected by test fault injection, by kind.";
  f.counter("gossamer_dataplane_injected_faults_total", faults, {{"kind", "loss"}}, double(h.injected_loss));
  f.counter("gossamer_dataplane_injected_faults_total", faults, {{"kind", "duplicate"}},
            double(h.injected_duplicates));
  f.counter("gossamer_dataplane_injected_faults_total", faults, {{"kind", "reorder"}},
            double(h.injected_reorders));

  const std::uint32_t per = s.header.conns_per_host;
  for (std::uint32_t p = 0; p < s.header.host_count; ++p) {
    if (p == s.header.host_index) continue;
    const std::string& peer = names[p];
    std::uint64_t active = 0;
    for (std::uint32_t c = 0; c < per; ++c) {
      const abi::ConnCounters& k = s.conns[std::size_t(p) * per + c];
      active += k.established ? 1 : 0;
      auto l = [&](Labels extra = {}) {
        Labels ls{{"peer", peer}, {"conn", std::to_string(c)}};
        for (auto& e : extra) ls.push_back(std::move(e));
        return ls;
      };
      f.counter("gossamer_dataplane_messages_sent_total", "Data frames sent (first transmissions).", l(),
                double(k.frames_sent));
      f.counter("gossamer_dataplane_messages_received_total", "Frames received (data and acknowledgements).", l(),
                double(k.frames_received));
      f.counter("gossamer_dataplane_acks_sent_total", "Acknowledgement-only frames sent.", l(), double(k.acks_sent));
      f.counter("gossamer_dataplane_slots_sent_total", "Slots sent, by kind; slots per message = coalescing.",
                l({{"kind", "request"}}), double(k.requests_sent));
      f.counter("gossamer_dataplane_slots_sent_total", "Slots sent, by kind; slots per message = coalescing.",
                l({{"kind", "response"}}), double(k.responses_sent));
      const char* received = "Slots received and delivered, by kind.";
      f.counter("gossamer_dataplane_slots_received_total", received, l({{"kind", "request"}}),
                double(k.requests_received));
      f.counter("gossamer_dataplane_slots_received_total", received, l({{"kind", "response"}}),
                double(k.responses_received));
      f.counter("gossamer_dataplane_records_sent_total", "Records sent (slots and fragments).", l(),
                double(k.records_sent));
      f.counter("gossamer_dataplane_records_received_total", "Records received in order.", l(),
                double(k.records_received));
      f.gauge("gossamer_dataplane_credits", "Credits left.", l(), double(k.credits));
      f.counter("gossamer_dataplane_credit_stalls_total", "Times the sender ran out of credit with data waiting.",
                l(), double(k.credit_stalls));
      f.counter("gossamer_dataplane_credit_renewals_requested_total", "Credit renewals this side asked for.", l(),
                double(k.renewals_requested));
      f.counter("gossamer_dataplane_credit_renewals_granted_total", "Credit renewals this side granted.", l(),
                double(k.renewals_granted));
      f.counter("gossamer_dataplane_credit_renewals_declined_total",
                "Credit renewals this side declined (the connection is inactive).", l(), double(k.renewals_declined));
      const char* act = "1 while the connection is active: inbound, this host grants the peer credit (QP "
                        "scheduler); outbound, the peer grants this host credit.";
      f.gauge("gossamer_dataplane_connection_active", act, l({{"direction", "inbound"}}), double(k.inbound_active));
      f.gauge("gossamer_dataplane_connection_active", act, l({{"direction", "outbound"}}), double(k.outbound_active));
      f.gauge("gossamer_dataplane_threads_assigned", "Application threads the thread scheduler put on the connection.",
              l(), double(k.threads_assigned));
      f.counter("gossamer_dataplane_retransmits_total", "Frames sent again.", l(), double(k.retransmits));
      f.counter("gossamer_dataplane_retransmit_timeouts_total", "Retransmission timer expiries.", l(),
                double(k.timeouts));
      f.counter("gossamer_dataplane_fast_retransmits_total", "Retransmissions on duplicate acknowledgements.", l(),
                double(k.fast_retransmits));
      f.counter("gossamer_dataplane_duplicates_dropped_total", "Frames received twice, dropped.", l(),
                double(k.duplicates));
      f.counter("gossamer_dataplane_out_of_order_dropped_total", "Frames ahead of the next expected, dropped.",
                l(), double(k.out_of_order));
      const char* stale = "Frames for another incarnation, by reason.";
      f.counter("gossamer_dataplane_stale_frames_total", stale, l({{"reason", "wrong_incarnation"}}),
                double(k.wrong_incarnation));
      f.counter("gossamer_dataplane_stale_frames_total", stale, l({{"reason", "stale_boot"}}),
                double(k.stale_boot));
      f.counter("gossamer_dataplane_connection_resets_total", "Resets because the peer restarted.", l(),
                double(k.resets));
      f.counter("gossamer_dataplane_fragments_sent_total", "Fragment records sent (slots larger than a frame).",
                l(), double(k.fragments_sent));
      f.counter("gossamer_dataplane_fragments_received_total", "Fragment records received.", l(),
                double(k.fragments_received));
      f.counter("gossamer_dataplane_large_slots_total", "Slots reassembled from fragments.", l(),
                double(k.slots_reassembled));
      const char* fd = "Fragment records dropped, by reason.";
      f.counter("gossamer_dataplane_fragments_dropped_total", fd, l({{"reason", "bad_offset"}}),
                double(k.frag_bad_offset));
      f.counter("gossamer_dataplane_fragments_dropped_total", fd, l({{"reason", "oversize"}}),
                double(k.frag_oversize));
      f.counter("gossamer_dataplane_fragments_dropped_total", fd, l({{"reason", "mismatch"}}),
                double(k.frag_mismatch));
      f.counter("gossamer_dataplane_fragments_dropped_total", fd, l({{"reason", "interrupted"}}),
                double(k.frag_interrupted));
    }
    f.gauge("gossamer_dataplane_connections_established",
            "Connections that have heard from the peer's current incarnation.", {{"peer", peer}}, double(active));
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
