// Counters declared once (issue 17): every row of the tables of
// gossamer/abi/counters.hpp reaches every output, with its value, and no
// output has a counter the tables do not declare. The outputs: the
// dataplane's `.stats` text (dataplane/src/stats_file.hpp), gossamerd's
// Prometheus families (controlplane/src/metrics.cpp) and the catalog in
// monitoring/README.md. (gossamerctl top names its series through the
// tables: a row it reads that is missing does not compile.)
//
// The sample gives every field of every struct, in every core, connection
// and thread, its own value, so a row rendered from the wrong field or the
// wrong instance shows too.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "metrics.hpp"
#include "stats_file.hpp"

namespace {

namespace abi = gossamer::abi;
namespace cp = gossamer::cp;

constexpr std::uint32_t kHosts = 3, kSelf = 1, kConns = 2, kCores = 2, kThreads = 2, kPorts = 2;
constexpr std::uint64_t kHz = 1000;  // cycles are milliseconds
const std::vector<std::string> kNames{"h0", "h1", "h2"};
const std::vector<std::string> kDrops{"", "too_short", "bad_magic"};

// A distinct value for row `row` of scope `scope` in instance `instance`.
std::uint64_t value_of(int scope, std::size_t row, std::size_t instance) {
  return 1'000'000ull * std::uint64_t(scope) + 1000ull * instance + row + 1;
}

template <class S, std::size_t N>
void fill(S& s, const abi::Counter<S> (&table)[N], int scope, std::size_t instance) {
  for (std::size_t r = 0; r < N; ++r) s.*table[r].member = value_of(scope, r, instance);
}

std::size_t conn_index(std::uint32_t peer, std::uint32_t conn) { return std::size_t(peer) * kConns + conn; }

// The same numbers as the metrics file has them, for both renderers.
struct Sample {
  abi::HostCounters host{};
  std::vector<abi::CoreCounters> cores = std::vector<abi::CoreCounters>(kCores);
  std::vector<abi::ConnCounters> conns = std::vector<abi::ConnCounters>(kHosts * kConns);
  std::vector<abi::ThreadCounters> threads = std::vector<abi::ThreadCounters>(kThreads);
  std::vector<std::uint32_t> conn_core{0, 1};
  // Two ports, as a memif mesh of 3 hosts has them: port i reaches host
  // 2i (host 0 and host 2; host 1 is this one).
  std::vector<abi::PortCounters> ports = std::vector<abi::PortCounters>(kPorts);

  Sample() {
    fill(host, abi::kHostCounters, 1, 0);
    for (std::size_t d = 0; d < kDrops.size(); ++d) host.drops[d] = value_of(5, d, 0);
    for (std::size_t k = 0; k < kCores; ++k) fill(cores[k], abi::kCoreCounters, 2, k);
    for (std::size_t i = 0; i < conns.size(); ++i) fill(conns[i], abi::kConnCounters, 3, i);
    for (std::size_t t = 0; t < kThreads; ++t) fill(threads[t], abi::kThreadCounters, 4, t);
    for (std::size_t i = 0; i < kPorts; ++i) {
      fill(ports[i], abi::kPortCounters, 6, i);
      ports[i].peers = std::uint64_t(1) << (2 * i);
    }
  }

  std::string stats_text() const {
    std::vector<std::string_view> drops(kDrops.begin(), kDrops.end());
    gossamer::dataplane::StatsSample s;
    s.self = kSelf;
    s.hosts = kHosts;
    s.conns_per_host = kConns;
    s.host = &host;
    s.cores = cores;
    s.conns = conns;
    s.drop_names = drops;
    s.conn_core = conn_core;
    s.ports = ports;
    std::ostringstream o;
    gossamer::dataplane::write_stats_text(o, s);
    return o.str();
  }

  std::vector<prometheus::MetricFamily> families() const {
    cp::DataplaneSample s;
    s.header.tsc_hz = kHz;
    s.header.host_index = kSelf;
    s.header.host_count = kHosts;
    s.header.conns_per_host = kConns;
    s.header.cores = kCores;
    s.host = host;
    s.cores = cores;
    s.drop_names = kDrops;
    s.conns = conns;
    s.ports = ports;
    cp::DataplaneSample::App a;
    a.entry.first_thread = 4;
    a.entry.local_threads = kThreads;
    a.entry.total_threads = 6;
    a.name = "kv";
    a.threads = threads;
    s.apps.push_back(a);
    std::vector<prometheus::MetricFamily> out;
    cp::add_sample_families(s, kNames, kSelf, out);
    return out;
  }
};

// ---- the tables themselves ---------------------------------------------------

struct Row {
  std::string scope, field;
  abi::SeriesName stats, prom;
  std::string_view total, help;
  abi::CounterKind kind;
};

template <class S, std::size_t N>
void add(std::vector<Row>& out, const char* scope, const abi::Counter<S> (&table)[N]) {
  for (const auto& c : table)
    out.push_back({scope, std::string(c.field), c.stats, c.prom, c.stats_total, c.help, c.kind});
}

std::vector<Row> all_rows() {
  std::vector<Row> rows;
  add(rows, "host", abi::kHostCounters);
  add(rows, "core", abi::kCoreCounters);
  add(rows, "conn", abi::kConnCounters);
  add(rows, "port", abi::kPortCounters);
  add(rows, "thread", abi::kThreadCounters);
  return rows;
}

bool is_counter(abi::CounterKind k) { return k == abi::CounterKind::kCounter || k == abi::CounterKind::kCycles; }

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

TEST(CounterTables, AreWellFormed) {
  std::map<std::string, const Row*> family;  // Prometheus name -> its first row
  std::set<std::string> series, stats;
  for (const Row& r : all_rows()) {
    const std::string where = r.scope + " row " + r.field;
    const std::string name(r.prom.name);
    EXPECT_TRUE(name.starts_with("gossamer_")) << where;
    EXPECT_EQ(ends_with(name, "_total"), is_counter(r.kind)) << where << ": counters, and only they, end in _total";
    EXPECT_EQ(r.prom.key.empty(), r.prom.value.empty()) << where;
    EXPECT_TRUE(series.insert(name + "{" + std::string(r.prom.key) + "=" + std::string(r.prom.value) + "}").second)
        << where << ": a second row for the same series";
    auto [first, fresh] = family.try_emplace(name, &r);
    if (fresh) {
      EXPECT_FALSE(r.help.empty()) << where << ": the first row of a family has its help";
    } else {
      const Row& f = *first->second;
      EXPECT_TRUE(r.help.empty()) << where << ": help is given once, on the family's first row (" << f.field << ")";
      EXPECT_EQ(r.scope, f.scope) << where << ": one family, one scope";
      EXPECT_EQ(is_counter(r.kind), is_counter(f.kind)) << where;
      EXPECT_EQ(r.prom.key, f.prom.key) << where << ": a family's rows differ by one label, the same key";
      EXPECT_FALSE(r.prom.key.empty()) << where << ": rows of one family need a label to tell them apart";
    }
    if (r.scope == "thread") {
      EXPECT_TRUE(r.stats.name.empty()) << where << ": no application counters in .stats";
      continue;
    }
    EXPECT_FALSE(r.stats.name.empty()) << where << ": every dataplane counter has a .stats line";
    EXPECT_TRUE(stats.insert(r.scope + ":" + std::string(r.stats.name) + "{" + std::string(r.stats.value) + "}").second)
        << where << ": a second row for the same .stats line";
    if (!r.total.empty()) {
      EXPECT_TRUE(stats.insert("host:" + std::string(r.total) + "{}").second) << where << ": total " << r.total;
    }
  }
  EXPECT_FALSE(family.count(std::string(abi::kDroppedFrames.prom))) << "the drops' family is a row's too";
  EXPECT_FALSE(stats.count("host:" + std::string(abi::kDroppedFrames.stats) + "{}"))
      << "the drops' line is a row's too";
}

// ---- the .stats text ---------------------------------------------------------

// `name{labels} value` lines, by name{labels}.
std::map<std::string, std::uint64_t> parse_stats(const std::string& text) {
  std::map<std::string, std::uint64_t> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto sp = line.rfind(' ');
    EXPECT_NE(sp, std::string::npos) << line;
    if (sp == std::string::npos) continue;
    EXPECT_TRUE(out.emplace(line.substr(0, sp), std::stoull(line.substr(sp + 1))).second) << "twice: " << line;
  }
  return out;
}

std::string stats_key(const abi::SeriesName& n, std::string labels) {
  if (!n.key.empty()) labels += (labels.empty() ? "" : ",") + std::string(n.key) + "=\"" + std::string(n.value) + "\"";
  return std::string(n.name) + (labels.empty() ? "" : "{" + labels + "}");
}

TEST(StatsFile, HasEveryRowWithItsValue) {
  const Sample s;
  auto lines = parse_stats(s.stats_text());
  std::map<std::string, std::uint64_t> want;
  for (std::size_t r = 0; r < std::size(abi::kHostCounters); ++r)
    want[stats_key(abi::kHostCounters[r].stats, "")] = value_of(1, r, 0);
  for (std::size_t d = 1; d < kDrops.size(); ++d)
    want[std::string(abi::kDroppedFrames.stats) + "{reason=\"" + kDrops[d] + "\"}"] = value_of(5, d, 0);
  want["cores"] = kCores;
  for (std::size_t r = 0; r < std::size(abi::kCoreCounters); ++r) {
    const auto& c = abi::kCoreCounters[r];
    std::uint64_t total = 0;
    for (std::size_t k = 0; k < kCores; ++k) {
      want[stats_key(c.stats, "core=\"" + std::to_string(k) + "\"")] = value_of(2, r, k);
      total += value_of(2, r, k);
    }
    if (!c.stats_total.empty()) want[std::string(c.stats_total)] = total;
  }
  for (std::uint32_t p = 0; p < kHosts; ++p) {
    if (p == kSelf) continue;
    for (std::uint32_t j = 0; j < kConns; ++j) {
      const std::string l = "peer=\"" + std::to_string(p) + "\",conn=\"" + std::to_string(j) + "\"";
      for (std::size_t r = 0; r < std::size(abi::kConnCounters); ++r)
        want[stats_key(abi::kConnCounters[r].stats, l)] = value_of(3, r, conn_index(p, j));
      want["core{" + l + "}"] = s.conn_core[j];
    }
  }
  for (std::size_t i = 0; i < kPorts; ++i)
    for (std::size_t r = 0; r < std::size(abi::kPortCounters); ++r)
      want[stats_key(abi::kPortCounters[r].stats, "port=\"" + std::to_string(i) + "\"")] = value_of(6, r, i);
  for (const auto& [key, v] : want) {
    auto it = lines.find(key);
    if (it == lines.end()) ADD_FAILURE() << ".stats misses " << key;
    else EXPECT_EQ(it->second, v) << key;
  }
  for (const auto& [key, v] : lines) EXPECT_TRUE(want.count(key)) << ".stats has a line no table declares: " << key;
}

// The names scripts read (tests/rack/*.sh, tools/bench/echo-*): the file
// keeps them.
TEST(StatsFile, KeepsTheNamesScriptsRead) {
  std::set<std::string> names;
  for (const auto& [key, v] : parse_stats(Sample().stats_text())) names.insert(key.substr(0, key.find('{')));
  for (const char* n : {"rx_frames", "tx_frames", "injected_duplicates", "busy_cycles", "idle_cycles", "steer_dropped",
                        "thread_moves", "dropped", "cores", "core", "core_rx_frames", "core_frames_processed",
                        "core_doorbells", "core_steered", "core_handoffs", "frames_sent", "requests_sent",
                        "responses_sent", "retransmits", "renewals_declined", "fragments_dropped",
                        "port_rx_frames", "port_tx_frames"})
    EXPECT_TRUE(names.count(n)) << n;
}

// ---- Prometheus ---------------------------------------------------------------

// name{label=value,...} (labels sorted) -> value.
std::map<std::string, double> flatten(const std::vector<prometheus::MetricFamily>& fams,
                                      std::map<std::string, prometheus::MetricType>* types) {
  std::map<std::string, double> out;
  for (const auto& f : fams) {
    EXPECT_FALSE(f.help.empty()) << f.name;
    EXPECT_TRUE(types->emplace(f.name, f.type).second) << "family twice: " << f.name;
    for (const auto& m : f.metric) {
      std::vector<std::string> ls;
      for (const auto& l : m.label) ls.push_back(l.name + "=" + l.value);
      std::sort(ls.begin(), ls.end());
      std::string key = f.name + "{";
      for (const auto& l : ls) key += l + ",";
      key += "}";
      const double v = f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
      EXPECT_TRUE(out.emplace(key, v).second) << "series twice: " << key;
    }
  }
  return out;
}

std::string prom_key(const abi::SeriesName& n, std::vector<std::string> labels) {
  labels.push_back("host=h1");
  if (!n.key.empty()) labels.push_back(std::string(n.key) + "=" + std::string(n.value));
  std::sort(labels.begin(), labels.end());
  std::string key = std::string(n.name) + "{";
  for (const auto& l : labels) key += l + ",";
  return key + "}";
}

template <class S, std::size_t N>
void want_rows(std::map<std::string, double>& want, std::map<std::string, bool>& counter,
               const abi::Counter<S> (&table)[N], int scope, std::size_t instance,
               const std::vector<std::string>& labels) {
  for (std::size_t r = 0; r < N; ++r) {
    const auto& c = table[r];
    counter[std::string(c.prom.name)] = c.is_counter();
    if (c.kind == abi::CounterKind::kPeerGauge) continue;
    const double v = double(value_of(scope, r, instance));
    want[prom_key(c.prom, labels)] = c.kind == abi::CounterKind::kCycles ? v / kHz : v;
  }
}

TEST(Prometheus, HasEveryRowWithItsValue) {
  std::map<std::string, prometheus::MetricType> types;
  const auto series = flatten(Sample().families(), &types);
  std::map<std::string, double> want;
  std::map<std::string, bool> counter;  // family -> is a counter
  want_rows(want, counter, abi::kHostCounters, 1, 0, {});
  for (std::size_t d = 1; d < kDrops.size(); ++d)
    want[prom_key(abi::SeriesName(abi::kDroppedFrames.prom), {"reason=" + kDrops[d]})] = double(value_of(5, d, 0));
  counter[std::string(abi::kDroppedFrames.prom)] = true;
  for (std::size_t k = 0; k < kCores; ++k)
    want_rows(want, counter, abi::kCoreCounters, 2, k, {"core=" + std::to_string(k)});
  for (std::uint32_t p = 0; p < kHosts; ++p) {
    if (p == kSelf) continue;
    for (std::uint32_t j = 0; j < kConns; ++j)
      want_rows(want, counter, abi::kConnCounters, 3, conn_index(p, j),
                {"peer=" + kNames[p], "conn=" + std::to_string(j)});
    for (std::size_t r = 0; r < std::size(abi::kConnCounters); ++r) {
      if (abi::kConnCounters[r].kind != abi::CounterKind::kPeerGauge) continue;
      double sum = 0;
      for (std::uint32_t j = 0; j < kConns; ++j) sum += double(value_of(3, r, conn_index(p, j)));
      want[prom_key(abi::kConnCounters[r].prom, {"peer=" + kNames[p]})] = sum;
    }
  }
  for (std::size_t t = 0; t < kThreads; ++t)
    want_rows(want, counter, abi::kThreadCounters, 4, t, {"app=kv", "thread=" + std::to_string(4 + t)});
  for (std::size_t i = 0; i < kPorts; ++i) {
    want_rows(want, counter, abi::kPortCounters, 6, i, {"port=" + std::to_string(i)});
    // The peer each port reaches (Sample: port i, host 2i).
    want[prom_key(abi::SeriesName("gossamer_dataplane_port_peer"), {"port=" + std::to_string(i), "peer=" + kNames[2 * i]})] = 1;
  }
  counter["gossamer_dataplane_port_peer"] = false;

  for (const auto& [key, v] : want) {
    auto it = series.find(key);
    if (it == series.end()) ADD_FAILURE() << "Prometheus misses " << key;
    else EXPECT_DOUBLE_EQ(it->second, v) << key;
  }
  for (const auto& [name, is_counter] : counter) {
    auto it = types.find(name);
    if (it == types.end()) ADD_FAILURE() << "no family " << name;
    else EXPECT_EQ(it->second, is_counter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge) << name;
  }
  // What is not a counter of the file: an instance's thread counts, the
  // header's hidden instances.
  const std::set<std::string> others{"gossamer_app_threads", "gossamer_app_rack_threads",
                                     "gossamer_dataplane_apps_hidden"};
  for (const auto& [key, v] : series) {
    if (others.count(key.substr(0, key.find('{')))) continue;
    EXPECT_TRUE(want.count(key)) << "a series no table declares: " << key;
  }
}

// ---- monitoring/README.md ---------------------------------------------------------

TEST(MonitoringReadme, CatalogsEveryFamilyWithItsType) {
  std::ifstream in(GOSSAMER_MONITORING_README);
  ASSERT_TRUE(in) << GOSSAMER_MONITORING_README;
  // Rows "| `gossamer_name` | type | meaning |" (no std::regex: GCC 12's
  // warns under the sanitizers, and -Werror).
  std::map<std::string, std::string> catalog;  // name -> type
  std::string line;
  while (std::getline(in, line)) {
    const std::string head = "| `gossamer_";
    if (!line.starts_with(head)) continue;
    const auto name_end = line.find('`', 3);
    const auto type_start = line.find('|', name_end);
    const auto type_end = line.find('|', type_start + 1);
    if (name_end == std::string::npos || type_start == std::string::npos || type_end == std::string::npos) continue;
    std::string type = line.substr(type_start + 1, type_end - type_start - 1);  // " counter "
    type.erase(std::remove(type.begin(), type.end(), ' '), type.end());
    catalog[line.substr(3, name_end - 3)] = type;
  }
  std::map<std::string, bool> families{{std::string(abi::kDroppedFrames.prom), true},
                                       {"gossamer_dataplane_port_peer", false}};
  for (const Row& r : all_rows()) families[std::string(r.prom.name)] = is_counter(r.kind);
  for (const auto& [name, counter] : families) {
    auto it = catalog.find(name);
    if (it == catalog.end()) ADD_FAILURE() << "monitoring/README.md does not list " << name;
    else EXPECT_EQ(it->second, counter ? "counter" : "gauge") << name;
  }
}

}  // namespace
