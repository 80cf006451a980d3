// `gossamerctl top`: a live view, per host and trustee thread, of what a
// polling runtime hides from htop (every thread shows 100 % CPU there):
// utilization, requests/s and batching, from each host's gossamerd metrics
// (monitoring/README.md is the catalog).
//
// Where the metrics are. A rack file names each host's control address but
// not its metrics address, and every host shares the same configuration
// apart from `host`. So host i is scraped at
//     http://<rack.hosts[i].control IP>:<metrics.listen port of this config>/metrics
// i.e. we assume every gossamerd listens for metrics on all addresses (the
// default 0.0.0.0:9464) with the same port. The one exception is this host
// when its metrics.listen names a specific address: that address is used.
// `--endpoint NAME=ADDR:PORT` overrides a host whose exporter is elsewhere.
//
// Every refresh scrapes all hosts at once (non-blocking sockets, one poll
// loop, plain HTTP/1.0 with short timeouts), so an unreachable host costs
// at most the timeout, whatever the rack's size. A host that fails is shown
// with the error and scraped again at the next refresh.
//
// Rates come from counter deltas between two scrapes of the same host,
// divided by the wall-clock time between them; a counter that went down
// (gossamerd or the application restarted) counts from zero, as Prometheus'
// rate() does. A series seen for the first time has no rate yet ("-").
#include <sys/ioctl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gossamer/abi/metrics.hpp>

#include "commands.hpp"
#include "common.hpp"
#include "exposition.hpp"
#include "top_format.hpp"
#include "top_scrape.hpp"

namespace gossamer::ctl {

namespace {

using namespace scrape;  // endpoints, stopping, scraping (top_scrape.hpp)
using namespace numbers;  // numbers as `top` prints them (top_format.hpp)

// Exit statuses besides 0 (see the subcommand's help).
constexpr int kBadConfig = 1;
constexpr int kBadUsage = 2;
constexpr int kNoHostAnswered = 3;

// ---- from samples to rows --------------------------------------------------

// A series' identity: its name and its labels, sorted by name.
std::string series_key(const exposition::Sample& s) {
  std::vector<const exposition::Label*> labels;
  for (const auto& l : s.labels) labels.push_back(&l);
  std::sort(labels.begin(), labels.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::string key = s.name;
  for (const auto* l : labels) {
    key += '\0';
    key += l->name;
    key += '=';
    key += l->value;
  }
  return key;
}

// Counter values of one scrape of one host.
struct Snapshot {
  Clock::time_point at;
  std::unordered_map<std::string, double> counters;
};

// The increase of a sum of counter series between two scrapes. Unknown
// when any of them has no previous value (new series, first scrape).
struct Delta {
  double sum = 0;
  bool known = true;
  int series = 0;
  void add(std::optional<double> d) {
    ++series;
    if (d) sum += *d;
    else known = false;
  }
  std::optional<double> get() const { return series > 0 && known ? std::optional(sum) : std::nullopt; }
};

std::optional<double> increase(const Snapshot* prev, const std::string& key, double now) {
  if (!prev || !std::isfinite(now)) return std::nullopt;
  auto it = prev->counters.find(key);
  if (it == prev->counters.end() || !std::isfinite(it->second)) return std::nullopt;
  return now >= it->second ? now - it->second : now;  // went down: restarted from 0
}

void add_gauge(std::optional<double>& g, double v) {
  if (std::isfinite(v)) g = g.value_or(0) + v;
}

// Orders threads by application, then numerically by thread id.
struct ThreadKey {
  std::string app, thread;
  bool operator<(const ThreadKey& o) const {
    if (app != o.app) return app < o.app;
    if (thread.size() != o.thread.size()) return thread.size() < o.thread.size();
    return thread < o.thread;
  }
};

struct ThreadView {
  Delta busy, idle, serve, served, served_remote, slots, sent_local, sent_remote;
  std::optional<double> ready;
};

// One DPDK port of a host's dataplane (dataplane.ports).
struct PortView {
  Delta rx, tx;
  std::vector<std::string> peers;  // the hosts it reaches
};

struct HostView {
  std::string name;
  Endpoint endpoint;
  bool self = false;
  bool up = false;
  std::string error;
  double seconds = 0;  // since the previous scrape; 0 on the first
  std::vector<std::string> notes;
  std::optional<double> dataplane_up, apps;
  std::set<std::string> cores;
  std::map<std::string, double> core_cpu;  // by core label
  Delta dp_busy, dp_idle, messages_sent, messages_received, slots_sent, slots_received, retransmits, port_drops;
  Delta stages[4];  // kStages' order
  // transport: verbs (the core rows qps_*, wrs_*, cq_polls, qp_errors); unset on a UDP host
  std::optional<double> qps[3];  // kQps' order: active, idle, error
  Delta wrs_posted, wrs_signaled, cq_polls, qp_errors;
  std::map<ThreadKey, ThreadView> threads;
  std::map<std::string, PortView> ports;  // by label port (numbers: shorter first)
};

// The series read below, by their rows in the counter tables
// (gossamer/abi/counters.hpp): a row that is not there does not compile.
template <class S, std::size_t N>
constexpr abi::SeriesName series(const abi::Counter<S> (&table)[N], std::uint64_t S::*member) {
  return abi::counter_of(table, member).prom;
}
constexpr abi::SeriesName kThreadBusy = series(abi::kThreadCounters, &abi::ThreadCounters::busy_cycles);
constexpr abi::SeriesName kThreadIdle = series(abi::kThreadCounters, &abi::ThreadCounters::idle_cycles);
constexpr abi::SeriesName kThreadServe = series(abi::kThreadCounters, &abi::ThreadCounters::serve_cycles);
constexpr abi::SeriesName kSlotsServed = series(abi::kThreadCounters, &abi::ThreadCounters::slots_served);
constexpr abi::SeriesName kFibersReady = series(abi::kThreadCounters, &abi::ThreadCounters::fibers_ready);
constexpr abi::SeriesName kServedLocal = series(abi::kThreadCounters, &abi::ThreadCounters::requests_served_local);
constexpr abi::SeriesName kServedRemote = series(abi::kThreadCounters, &abi::ThreadCounters::requests_served_remote);
constexpr abi::SeriesName kSentLocal = series(abi::kThreadCounters, &abi::ThreadCounters::requests_sent_local);
constexpr abi::SeriesName kSentRemote = series(abi::kThreadCounters, &abi::ThreadCounters::requests_sent_remote);
constexpr abi::SeriesName kApps = series(abi::kHostCounters, &abi::HostCounters::apps);
constexpr abi::SeriesName kCoreBusy = series(abi::kCoreCounters, &abi::CoreCounters::busy_cycles);
constexpr abi::SeriesName kCoreIdle = series(abi::kCoreCounters, &abi::CoreCounters::idle_cycles);
constexpr abi::SeriesName kCoreCpu = series(abi::kCoreCounters, &abi::CoreCounters::cpu);
constexpr abi::SeriesName kMessagesSent = series(abi::kConnCounters, &abi::ConnCounters::frames_sent);
constexpr abi::SeriesName kMessagesReceived = series(abi::kConnCounters, &abi::ConnCounters::frames_received);
constexpr abi::SeriesName kRequestsSent = series(abi::kConnCounters, &abi::ConnCounters::requests_sent);
constexpr abi::SeriesName kResponsesSent = series(abi::kConnCounters, &abi::ConnCounters::responses_sent);
constexpr abi::SeriesName kRetransmits = series(abi::kConnCounters, &abi::ConnCounters::retransmits);
constexpr abi::SeriesName kRequestsReceived = series(abi::kConnCounters, &abi::ConnCounters::requests_received);
constexpr abi::SeriesName kResponsesReceived = series(abi::kConnCounters, &abi::ConnCounters::responses_received);
// The stages of the dataplane's loop; the first two per slot received, the
// others per slot sent.
constexpr abi::SeriesName kStages[4] = {
    series(abi::kCoreCounters, &abi::CoreCounters::stage_rx_cycles),
    series(abi::kCoreCounters, &abi::CoreCounters::stage_deliver_cycles),
    series(abi::kCoreCounters, &abi::CoreCounters::stage_doorbells_cycles),
    series(abi::kCoreCounters, &abi::CoreCounters::stage_tx_cycles)};

// The verbs transport's queue pairs (summed over cores).
constexpr abi::SeriesName kQps[3] = {series(abi::kCoreCounters, &abi::CoreCounters::qps_active),
                                     series(abi::kCoreCounters, &abi::CoreCounters::qps_idle),
                                     series(abi::kCoreCounters, &abi::CoreCounters::qps_errored)};
constexpr abi::SeriesName kWrsPosted = series(abi::kCoreCounters, &abi::CoreCounters::wrs_posted);
constexpr abi::SeriesName kWrsSignaled = series(abi::kCoreCounters, &abi::CoreCounters::wrs_signaled);
constexpr abi::SeriesName kCqPolls = series(abi::kCoreCounters, &abi::CoreCounters::cq_polls);
constexpr abi::SeriesName kQpErrors = series(abi::kCoreCounters, &abi::CoreCounters::qp_errors);
constexpr abi::SeriesName kPortRx = series(abi::kPortCounters, &abi::PortCounters::rx_frames);
constexpr abi::SeriesName kPortTx = series(abi::kPortCounters, &abi::PortCounters::tx_frames);
constexpr abi::SeriesName kPortDrops[] = {  // what the ports' devices dropped, every reason
    series(abi::kPortCounters, &abi::PortCounters::rx_missed),
    series(abi::kPortCounters, &abi::PortCounters::rx_errors),
    series(abi::kPortCounters, &abi::PortCounters::rx_no_buffer),
    series(abi::kPortCounters, &abi::PortCounters::tx_errors)};
constexpr std::string_view kPortPeer = "gossamer_dataplane_port_peer";  // gossamerd's, not a table row

// The sample is that series (its name, and its label if it has one).
bool is(const exposition::Sample& s, const abi::SeriesName& n) {
  return s.name == n.name && (n.key.empty() || s.label(n.key) == n.value);
}

// Files one sample into the view; other metrics are ignored.
void add_thread_sample(const exposition::Sample& s, std::optional<double> d, HostView& v) {
  const auto app = s.label("app"), thread = s.label("thread");
  if (!app || !thread) return;
  ThreadView& t = v.threads[{std::string(*app), std::string(*thread)}];
  if (is(s, kThreadBusy)) t.busy.add(d);
  else if (is(s, kThreadIdle)) t.idle.add(d);
  else if (is(s, kThreadServe)) t.serve.add(d);
  else if (is(s, kSlotsServed)) t.slots.add(d);
  else if (is(s, kFibersReady)) add_gauge(t.ready, s.value);
  else if (is(s, kServedLocal)) t.served.add(d);
  else if (is(s, kServedRemote)) {
    t.served.add(d);
    t.served_remote.add(d);
  } else if (is(s, kSentLocal)) t.sent_local.add(d);
  else if (is(s, kSentRemote)) t.sent_remote.add(d);
}

void add_dataplane_sample(const exposition::Sample& s, std::optional<double> d, HostView& v) {
  if (s.name == "gossamer_dataplane_up") add_gauge(v.dataplane_up, s.value);  // gossamerd's, not a counter
  else if (is(s, kApps)) add_gauge(v.apps, s.value);
  else if (is(s, kCoreBusy) || is(s, kCoreIdle)) {
    if (auto core = s.label("core")) v.cores.insert(std::string(*core));
    (is(s, kCoreBusy) ? v.dp_busy : v.dp_idle).add(d);
  } else if (is(s, kCoreCpu)) {
    if (auto core = s.label("core")) v.core_cpu[std::string(*core)] = s.value;
  } else if (is(s, kMessagesSent)) v.messages_sent.add(d);
  else if (is(s, kMessagesReceived)) v.messages_received.add(d);
  else if (is(s, kRequestsSent) || is(s, kResponsesSent)) v.slots_sent.add(d);
  else if (is(s, kRequestsReceived) || is(s, kResponsesReceived)) v.slots_received.add(d);
  else if (is(s, kRetransmits)) v.retransmits.add(d);
  else if (is(s, kWrsPosted)) v.wrs_posted.add(d);
  else if (is(s, kWrsSignaled)) v.wrs_signaled.add(d);
  else if (is(s, kCqPolls)) v.cq_polls.add(d);
  else if (is(s, kQpErrors)) v.qp_errors.add(d);
  else if (std::any_of(std::begin(kPortDrops), std::end(kPortDrops), [&](const auto& n) { return is(s, n); }))
    v.port_drops.add(d);
  else if (is(s, kPortRx) || is(s, kPortTx)) {
    if (auto port = s.label("port"); port && (v.ports.count(std::string(*port)) || v.ports.size() < 64))
      (is(s, kPortRx) ? v.ports[std::string(*port)].rx : v.ports[std::string(*port)].tx).add(d);
  } else if (s.name == kPortPeer) {
    auto port = s.label("port"), peer = s.label("peer");
    if (port && peer && (v.ports.count(std::string(*port)) || v.ports.size() < 64)) v.ports[std::string(*port)].peers.push_back(std::string(*peer));
  } else {
    for (std::size_t i = 0; i < std::size(kStages); ++i)
      if (is(s, kStages[i])) v.stages[i].add(d);
    for (std::size_t i = 0; i < std::size(kQps); ++i)
      if (is(s, kQps[i])) add_gauge(v.qps[i], s.value);
  }
}

// Reads one scrape into `v` and `cur`, with increases since `prev`.
void fill_view(const exposition::Document& doc, const Snapshot* prev, Snapshot& cur, HostView& v) {
  std::set<std::string> other_hosts;
  for (const auto& s : doc.samples) {
    if (!std::string_view(s.name).starts_with("gossamer_")) continue;
    if (auto h = s.label("host"); h && *h != v.name && other_hosts.size() < 4) other_hosts.insert(std::string(*h));
    std::optional<double> d;
    if (s.name.size() > 6 && s.name.compare(s.name.size() - 6, 6, "_total") == 0) {
      std::string key = series_key(s);
      d = increase(prev, key, s.value);
      cur.counters[std::move(key)] = s.value;
    }
    add_thread_sample(s, d, v);  // those with labels app and thread
    add_dataplane_sample(s, d, v);
  }
  if (prev) v.seconds = std::chrono::duration<double>(cur.at - prev->at).count();
  for (const auto& h : other_hosts) v.notes.push_back("serves metrics of host=" + printable(h, 32));
  if (doc.bad_lines && !doc.errors.empty())
    v.notes.push_back(std::to_string(doc.bad_lines) + " malformed lines skipped (first: " +
                      printable(doc.errors.front()) + ")");
  if (doc.truncated) v.notes.push_back("more samples than gossamerctl reads; the rest ignored");
  if (doc.samples.empty()) v.notes.push_back("no samples in the response");
}

// ---- rendering -------------------------------------------------------------

constexpr const char* kRowFormat = "  %6s %5s %6s %8s %8s %5s %8s %8s %5s  %s";

std::string row(const char* thread, const std::string& util, const std::string& serve, const std::string& served,
                const std::string& remote, const std::string& batch, const std::string& sent_local,
                const std::string& sent_remote, const std::string& ready, const std::string& app) {
  char buf[256];
  std::snprintf(buf, sizeof buf, kRowFormat, thread, util.c_str(), serve.c_str(), served.c_str(), remote.c_str(),
                batch.c_str(), sent_local.c_str(), sent_remote.c_str(), ready.c_str(), app.c_str());
  return buf;
}

void render_host(const HostView& v, std::vector<std::string>& out) {
  std::string head = "host " + v.name + (v.self ? " (this host)" : "") + "  " + v.endpoint.to_string();
  if (!v.up) {
    out.push_back(head + "  DOWN  " + v.error);
    return;
  }
  head += "  up  ";
  head += !v.dataplane_up ? "no dataplane metrics" : *v.dataplane_up > 0 ? "dataplane up" : "dataplane stale";
  if (!v.cores.empty()) {
    head += ", " + std::to_string(v.cores.size()) + (v.cores.size() == 1 ? " core " : " cores ");
    head += "busy " + with_unit(percent(v.dp_busy.get(), v.dp_busy.get(), v.dp_idle.get()), "%");
  }
  if (!v.core_cpu.empty()) {  // "on CPU 1" or "on CPUs 0,1" (core 0's first)
    std::vector<std::pair<double, double>> by_core;  // labels are numbers
    for (const auto& [core, cpu] : v.core_cpu) by_core.emplace_back(std::strtod(core.c_str(), nullptr), cpu);
    std::sort(by_core.begin(), by_core.end());
    head += by_core.size() == 1 ? " on CPU " : " on CPUs ";
    for (std::size_t i = 0; i < by_core.size(); ++i) head += (i ? "," : "") + count(by_core[i].second);
  }
  if (v.apps) head += ", " + count(*v.apps) + (*v.apps == 1 ? " app" : " apps");
  out.push_back(head);
  if (v.dataplane_up || v.messages_sent.series > 0)
    out.push_back("    messages/s " + per_second(v.messages_sent.get(), v.seconds) + " sent " +
                  per_second(v.messages_received.get(), v.seconds) + " received, coalescing " +
                  ratio(v.slots_sent.get(), v.messages_sent.get()) + " slots/message, retransmits/s " +
                  per_second(v.retransmits.get(), v.seconds) + ", port drops/s " +
                  per_second(v.port_drops.get(), v.seconds));
  // A verbs host: its queue pairs (a UDP host has none: the gauges are 0).
  if (v.qps[0].value_or(0) + v.qps[1].value_or(0) + v.qps[2].value_or(0) > 0)
    out.push_back("    queue pairs " + count(v.qps[0].value_or(0)) + " active " + count(v.qps[1].value_or(0)) +
                  " idle " + count(v.qps[2].value_or(0)) + " error; WRs/s " +
                  per_second(v.wrs_posted.get(), v.seconds) + " posted " +
                  per_second(v.wrs_signaled.get(), v.seconds) + " signaled, CQ polls/s " +
                  per_second(v.cq_polls.get(), v.seconds) + ", QP errors/s " +
                  per_second(v.qp_errors.get(), v.seconds));
  if (v.stages[0].series > 0)
    out.push_back("    time per slot: rx " + ns_per(v.stages[0].get(), v.slots_received.get()) + ", deliver " +
                  ns_per(v.stages[1].get(), v.slots_received.get()) + " (per slot received); doorbells " +
                  ns_per(v.stages[2].get(), v.slots_sent.get()) + ", tx " +
                  ns_per(v.stages[3].get(), v.slots_sent.get()) + " (per slot sent)");
  // Several ports (dataplane.ports): each one's frames, and whom it reaches.
  if (v.ports.size() > 1) {
    std::vector<std::pair<double, const std::pair<const std::string, PortView>*>> by_number;
    for (const auto& p : v.ports) by_number.emplace_back(std::strtod(p.first.c_str(), nullptr), &p);
    std::sort(by_number.begin(), by_number.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string line = "    ports (frames/s received/sent):";
    for (const auto& [n, p] : by_number) {
      std::string peers;
      for (const auto& h : p->second.peers) peers += (peers.empty() ? "" : ",") + printable(h, 32);
      line += " " + printable(p->first, 8) + (peers.empty() ? "" : " to " + peers) + " " +
              per_second(p->second.rx.get(), v.seconds) + "/" + per_second(p->second.tx.get(), v.seconds) + ";";
    }
    line.pop_back();
    out.push_back(line);
  }
  for (const auto& n : v.notes) out.push_back("    note: " + n);
  if (v.threads.empty()) {
    out.push_back("    no application threads (only applications attached to the dataplane are visible)");
    return;
  }
  out.push_back(
      row("THREAD", "UTIL%", "SERVE%", "SERVED/s", "REMOTE/s", "BATCH", "SENT-L/s", "SENT-R/s", "READY", "APP"));
  for (const auto& [key, t] : v.threads) {
    const auto busy = t.busy.get(), idle = t.idle.get();
    out.push_back(row(printable(key.thread, 6).c_str(), percent(busy, busy, idle), percent(t.serve.get(), busy, idle),
                      per_second(t.served.get(), v.seconds), per_second(t.served_remote.get(), v.seconds),
                      ratio(t.served.get(), t.slots.get()), per_second(t.sent_local.get(), v.seconds),
                      per_second(t.sent_remote.get(), v.seconds), t.ready ? count(*t.ready) : "-",
                      printable(key.app, 32)));
  }
}

std::string clock_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  char buf[16] = "";
  if (::localtime_r(&now, &tm)) std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

struct Terminal {
  bool tty = false;
  bool keys = false;  // `q` works
};

void write_all(const std::string& s) {
  for (std::size_t at = 0; at < s.size();) {
    const ssize_t n = ::write(STDOUT_FILENO, s.data() + at, s.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stdout gone: nothing useful left to do with this frame
    at += std::size_t(n);
  }
}

// On a terminal, from the top left, each line erasing its old tail and the
// frame erasing what is below it (no flicker of a full clear), cut to the
// window; otherwise plain lines, frames separated by a blank line.
void show(const std::vector<std::string>& lines, const Terminal& term) {
  std::string out;
  if (!term.tty) {
    for (const auto& l : lines) out += l + "\n";
    out += "\n";
    return write_all(out);
  }
  winsize ws{};
  const bool sized = ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 1 && ws.ws_col > 0;
  std::size_t shown = lines.size();
  if (sized && shown >= ws.ws_row) shown = ws.ws_row - 2u;
  out = "\x1b[H";
  for (std::size_t i = 0; i < shown; ++i) out += (sized ? lines[i].substr(0, ws.ws_col) : lines[i]) + "\x1b[K\n";
  if (shown < lines.size())
    out += "... " + std::to_string(lines.size() - shown) + " more lines (enlarge the window)\x1b[K\n";
  out += "\x1b[J";
  write_all(out);
}

// ---- the loop --------------------------------------------------------------

struct Options {
  double interval = 1;
  std::uint64_t iterations = 0;
  std::vector<std::string> endpoints;
};

struct Host {
  std::string name;
  Endpoint endpoint;
  bool self = false;
  std::optional<Snapshot> previous;  // the last successful scrape
};

std::vector<Host> hosts_of(const config::Config& cfg, const std::vector<std::string>& overrides) {
  std::vector<Host> hosts;
  for (std::size_t i = 0; i < cfg.rack.hosts.size(); ++i)
    hosts.push_back({cfg.rack.hosts[i].name, default_endpoint(cfg, i), i == cfg.host.index, std::nullopt});
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    auto ep = eq == std::string::npos ? std::nullopt : parse_endpoint(std::string_view(o).substr(eq + 1));
    if (!ep) {
      std::fprintf(stderr, "gossamerctl top: --endpoint %s: expected NAME=IP:PORT, e.g. h1=10.0.0.2:9464\n", o.c_str());
      throw CLI::RuntimeError(kBadUsage);
    }
    const std::string name = o.substr(0, eq);
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const Host& h) { return h.name == name; });
    if (it == hosts.end()) {
      std::fprintf(stderr, "gossamerctl top: --endpoint %s: no host named '%s' in rack.hosts\n", o.c_str(),
                   name.c_str());
      throw CLI::RuntimeError(kBadUsage);
    }
    it->endpoint = *ep;
  }
  return hosts;
}

// Scrapes every host once and renders the frame's lines. Returns the
// number of hosts that answered.
std::size_t refresh(std::vector<Host>& hosts, Stop& stop, std::vector<std::string>& lines) {
  std::vector<Endpoint> endpoints;
  for (const auto& h : hosts) endpoints.push_back(h.endpoint);
  std::vector<ScrapeResult> results = scrape_all(endpoints, stop);
  std::size_t up = 0;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    Host& h = hosts[i];
    ScrapeResult& r = results[i];
    HostView v;
    v.name = h.name;
    v.endpoint = h.endpoint;
    v.self = h.self;
    v.up = r.ok;
    v.error = r.error;
    if (r.ok) {
      ++up;
      Snapshot cur{r.at, {}};
      fill_view(exposition::parse(r.body), h.previous ? &*h.previous : nullptr, cur, v);
      h.previous = std::move(cur);
    }
    render_host(v, lines);
  }
  return up;
}

int top(const Common& c, const Options& o) {
  const config::Config cfg = load_config(c, kBadConfig);
  std::vector<Host> hosts = hosts_of(cfg, o.endpoints);

  StopSignals signals;
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  Keys keys(tty);
  Stop stop{signals, keys};
  Terminal term{tty, keys.fd() >= 0};
  if (term.tty) write_all("\x1b[?25l\x1b[2J");  // hide the cursor, clear once
  std::uint64_t frames = 0;
  bool any_up = false;
  const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.interval));
  auto next = Clock::now();
  while (!stop.check()) {
    std::vector<std::string> lines;
    lines.push_back("gossamerctl top  " + std::to_string(hosts.size()) + " host" + (hosts.size() == 1 ? "" : "s") +
                    ", every " + format("%g", o.interval) + " s, " + clock_now() + ", refresh " +
                    std::to_string(frames + 1) + (o.iterations ? " of " + std::to_string(o.iterations) : "") +
                    (term.keys ? "  (q or Ctrl-C quits)" : ""));
    if (!cfg.metrics.enabled) lines.push_back("note: metrics.enabled is false in this configuration");
    lines.emplace_back();
    const std::size_t up = refresh(hosts, stop, lines);
    if (stop.check()) break;
    any_up = any_up || up > 0;
    show(lines, term);
    if (++frames == o.iterations) break;
    next = std::max(next + period, Clock::now());
    std::vector<pollfd> none;
    wait_for(none, next, stop);
  }
  if (term.tty) write_all("\x1b[?25h");
  if (frames > 0 && !any_up) {
    std::fprintf(stderr,
                 "gossamerctl top: no host's metrics could be read on any refresh (is gossamerd running, "
                 "with metrics.enabled, on port %u of each host? see --endpoint)\n",
                 unsigned(cfg.metrics.listen.port));
    return kNoHostAnswered;
  }
  return 0;
}

}  // namespace

void add_top_commands(CLI::App& app, std::shared_ptr<const Common> common) {
  auto* cmd =
      app.add_subcommand("top",
                         "Live view per host and trustee thread: utilization, requests/s, batching, dataplane traffic "
                         "(from every host's gossamerd metrics)");
  cmd->footer(
      "The hosts are those of the configuration (gossamerctl -c FILE top; default $GOSSAMER_CONFIG,\n"
      "else /etc/gossamer/gossamer.yaml). Host i is scraped at\n"
      "  http://<rack.hosts[i].control IP>:<metrics.listen port of this configuration>/metrics\n"
      "assuming every gossamerd serves metrics on all its addresses with the same port (this host:\n"
      "at metrics.listen itself when that is not a wildcard address). --endpoint overrides a host.\n"
      "\n"
      "Columns, per thread, over the last interval:\n"
      "  UTIL%     busy / (busy + idle): the share of time in loop iterations that found work\n"
      "  SERVE%    serve / (busy + idle): time running delegated closures\n"
      "  SERVED/s  requests served (local and remote clients); REMOTE/s: of which from other hosts\n"
      "  BATCH     requests served per request slot\n"
      "  SENT-L/s, SENT-R/s  requests this thread sent to trustees on its host, on other hosts\n"
      "  READY     fibers ready to run (now)\n"
      "Per host: dataplane polling-core utilization, messages/s, coalescing (slots per message),\n"
      "retransmits/s, port drops/s (frames the ports' devices dropped, every reason), and\n"
      "the polling cores' time per slot in each stage of their loop (rx: frames from the port; deliver:\n"
      "records into slots; both per slot received; doorbells: the applications' rings; tx: frames built\n"
      "and sent; both per slot sent). With several ports (dataplane.ports): each port's frames/s\n"
      "received/sent and the hosts it reaches.\n"
      "\"-\": no rate yet (first refresh, or a series that just appeared).\n"
      "\n"
      "On a terminal the screen is redrawn in place and q quits; otherwise frames are printed one\n"
      "after another. Ctrl-C stops.\n"
      "Exit status: 0; 1 if the configuration cannot be loaded; 2 for a bad --endpoint; 3 if no\n"
      "host answered on any refresh.");
  auto o = std::make_shared<Options>();
  cmd->add_option("--interval", o->interval, "seconds between refreshes")
      ->default_val(1)
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--iterations", o->iterations, "stop after N refreshes (0: until Ctrl-C or q)")->default_val(0);
  cmd->add_option("--endpoint", o->endpoints, "NAME=IP:PORT: where host NAME's metrics are (repeatable)");
  cmd->callback([common, o] {
    if (const int s = top(*common, *o); s != 0) throw CLI::RuntimeError(s);
  });
}

}  // namespace gossamer::ctl
