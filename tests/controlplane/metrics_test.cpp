// gossamerd's exporter, below the HTTP server: the dataplane metrics file
// parser (every check), the families built from a sample (names, labels,
// units), and the sequence-locked reader against a concurrent writer.
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "metrics.hpp"

namespace {

namespace abi = gossamer::abi;
namespace cp = gossamer::cp;
using gossamer::cp::DataplaneSample;

std::uint64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000ull + std::uint64_t(ts.tv_nsec);
}

// A valid file for host 1 of 3, 2 connections per peer, 2 applications
// named "kv" (2 threads from thread 2, then 3 threads from thread 7).
struct File {
  std::vector<std::uint8_t> bytes;
  abi::MetricsLayout l{};

  File() {
    EXPECT_TRUE(abi::metrics_layout(3, 2, &l));
    bytes.assign(l.bytes, 0);
    abi::MetricsHeader& h = header();
    h.magic = abi::kMetricsMagic;
    h.version = abi::kMetricsVersion;
    h.bytes = l.bytes;
    h.tsc_hz = 1'000'000'000;  // cycles are nanoseconds
    h.sample_ns = now_ns();
    h.host_index = 1;
    h.host_count = 3;
    h.conns_per_host = 2;
    h.cores = 1;
    h.drop_reasons = 3;
    h.apps = 2;
    h.ports = 2;
    std::strcpy(drop_name(1), "too_short");
    std::strcpy(drop_name(2), "bad_magic");
    host().drops[2] = 7;
    core(0).busy_cycles = 3'000'000'000;
    core(0).idle_cycles = 1'000'000'000;
    conn(0, 1).frames_sent = 10;
    conn(0, 1).requests_sent = 40;
    conn(0, 1).established = 1;
    conn(2, 0).retransmits = 5;
    // Port 0 reaches h0, port 1 h2; bits of this host (1) and beyond the
    // rack (5) are the file's nonsense, dropped by the reader.
    port(0) = abi::PortCounters{.rx_frames = 11, .tx_frames = 12, .tx_errors = 3, .peers = 0b100011};
    port(1) = abi::PortCounters{.rx_frames = 21, .tx_frames = 22, .rx_missed = 4, .peers = 0b000100};
    app(0) = {4242, 2, 2, 8, 0, 0, 0x1234, "kv"};
    app(1) = {4343, 7, 3, 12, 2, 0, 0x5678, "kv"};
    row(0).busy_cycles = 500'000'000;
    row(0).requests_served_local = 70;
    row(0).requests_served_remote = 30;
    row(0).requests_sent_local = 5;
    row(0).requests_sent_remote = 4;
  }
  abi::MetricsHeader& header() { return *reinterpret_cast<abi::MetricsHeader*>(bytes.data()); }
  abi::HostCounters& host() { return *reinterpret_cast<abi::HostCounters*>(bytes.data() + abi::kMetricsHostOffset); }
  abi::CoreCounters& core(int i) {
    return reinterpret_cast<abi::CoreCounters*>(bytes.data() + abi::kMetricsCoreOffset)[i];
  }
  char* drop_name(int i) {
    return reinterpret_cast<char*>(bytes.data() + abi::kMetricsDropNamesOffset + i * abi::kMetricsNameBytes);
  }
  abi::ConnCounters& conn(int peer, int c) {
    return reinterpret_cast<abi::ConnCounters*>(bytes.data() + l.conns)[peer * 2 + c];
  }
  abi::PortCounters& port(int i) {
    return reinterpret_cast<abi::PortCounters*>(bytes.data() + abi::kMetricsPortOffset)[i];
  }
  abi::AppEntry& app(int i) { return reinterpret_cast<abi::AppEntry*>(bytes.data() + l.apps)[i]; }
  abi::ThreadCounters& row(int i) { return reinterpret_cast<abi::ThreadCounters*>(bytes.data() + l.threads)[i]; }
  std::string parse(DataplaneSample* s) { return cp::parse_dataplane_metrics(bytes.data(), bytes.size(), s); }
};

const std::vector<std::string> kNames{"h0", "h1", "h2"};

// name{label=value,...} -> value, over every family.
std::map<std::string, double> flatten(const std::vector<prometheus::MetricFamily>& fams) {
  std::map<std::string, double> out;
  for (const auto& f : fams) {
    EXPECT_FALSE(f.help.empty()) << f.name;
    if (f.type == prometheus::MetricType::Counter) {
      EXPECT_EQ(f.name.substr(f.name.size() - 6), "_total") << f.name;
    }
    for (const auto& m : f.metric) {
      std::string key = f.name + "{";
      for (const auto& l : m.label) key += l.name + "=" + l.value + ",";
      key += "}";
      EXPECT_TRUE(out.emplace(key, f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value).second)
          << "duplicate series " << key;
    }
  }
  return out;
}

TEST(MetricsFile, ValidFileParses) {
  File f;
  DataplaneSample s;
  ASSERT_EQ(f.parse(&s), "");
  EXPECT_EQ(s.header.host_index, 1u);
  ASSERT_EQ(s.apps.size(), 2u);
  EXPECT_EQ(s.apps[0].name, "kv");
  EXPECT_EQ(s.apps[1].threads.size(), 3u);
  EXPECT_EQ(s.conns.size(), 6u);
  EXPECT_EQ(s.drop_names[2], "bad_magic");
}

TEST(MetricsFile, FamiliesFollowTheCatalog) {
  File f;
  DataplaneSample s;
  ASSERT_EQ(f.parse(&s), "");
  std::vector<prometheus::MetricFamily> fams;
  cp::add_sample_families(s, kNames, 1, fams);
  auto m = flatten(fams);
  // Cycles become seconds; every series carries host.
  EXPECT_DOUBLE_EQ(m.at("gossamer_trustee_busy_seconds_total{host=h1,app=kv-4242,thread=2,}"), 0.5);
  EXPECT_DOUBLE_EQ(m.at("gossamer_dataplane_busy_seconds_total{host=h1,core=0,}"), 3.0);
  // Served and sent split by where the other side is.
  EXPECT_EQ(m.at("gossamer_trustee_requests_served_total{host=h1,app=kv-4242,thread=2,source=local,}"), 70);
  EXPECT_EQ(m.at("gossamer_trustee_requests_served_total{host=h1,app=kv-4242,thread=2,source=remote,}"), 30);
  EXPECT_EQ(m.at("gossamer_client_requests_sent_total{host=h1,app=kv-4242,thread=2,dest=local,}"), 5);
  EXPECT_EQ(m.at("gossamer_client_requests_sent_total{host=h1,app=kv-4242,thread=2,dest=remote,}"), 4);
  // The second instance of the same name is told apart; its threads are
  // numbered from its first thread.
  EXPECT_EQ(m.at("gossamer_app_threads{host=h1,app=kv-4343,}"), 3);
  EXPECT_EQ(m.at("gossamer_app_threads{host=h1,app=kv-4242,}"), 2);
  EXPECT_EQ(m.count("gossamer_trustee_idle_seconds_total{host=h1,app=kv-4343,thread=9,}"), 1u);
  EXPECT_EQ(m.count("gossamer_trustee_idle_seconds_total{host=h1,app=kv-4343,thread=10,}"), 0u);
  // Peers by name, never this host; drops by reason name.
  EXPECT_EQ(m.at("gossamer_dataplane_slots_sent_total{host=h1,peer=h0,conn=1,kind=request,}"), 40);
  EXPECT_EQ(m.at("gossamer_dataplane_retransmits_total{host=h1,peer=h2,conn=0,}"), 5);
  EXPECT_EQ(m.at("gossamer_dataplane_connections_established{host=h1,peer=h0,}"), 1);
  EXPECT_EQ(m.at("gossamer_dataplane_connections_established{host=h1,peer=h2,}"), 0);
  for (const auto& [k, v] : m) EXPECT_EQ(k.find("peer=h1,"), std::string::npos) << k;
  EXPECT_EQ(m.at("gossamer_dataplane_dropped_frames_total{host=h1,reason=bad_magic,}"), 7);
  // Frames per port, what its device dropped, and the peers each port
  // reaches: only hosts of the rack other than this one, whatever bits the
  // file has.
  EXPECT_EQ(m.at("gossamer_dataplane_port_frames_total{host=h1,port=0,direction=received,}"), 11);
  EXPECT_EQ(m.at("gossamer_dataplane_port_frames_total{host=h1,port=1,direction=sent,}"), 22);
  EXPECT_EQ(m.at("gossamer_dataplane_port_dropped_frames_total{host=h1,port=0,reason=tx_error,}"), 3);
  EXPECT_EQ(m.at("gossamer_dataplane_port_dropped_frames_total{host=h1,port=1,reason=rx_missed,}"), 4);
  EXPECT_EQ(m.at("gossamer_dataplane_port_dropped_frames_total{host=h1,port=1,reason=rx_no_buffer,}"), 0);
  EXPECT_EQ(m.at("gossamer_dataplane_port_peer{host=h1,port=0,peer=h0,}"), 1);
  EXPECT_EQ(m.at("gossamer_dataplane_port_peer{host=h1,port=1,peer=h2,}"), 1);
  std::size_t peers = 0;
  for (const auto& [k, v] : m) peers += k.starts_with("gossamer_dataplane_port_peer{");
  EXPECT_EQ(peers, 2u);
}

TEST(MetricsFile, AppLabelsAreUniqueAndStable) {
  File f;
  DataplaneSample s;
  ASSERT_EQ(f.parse(&s), "");
  s.apps.push_back(s.apps[0]);
  s.apps.back().name = "kv-4343";  // an executable that happens to be named like a label
  s.apps.back().entry.pid = 99;
  s.apps.push_back(s.apps[0]);
  s.apps.back().name = "solo";
  s.apps.back().entry.pid = 5;
  EXPECT_EQ(cp::app_labels(s), (std::vector<std::string>{"kv-4242", "kv-4343", "kv-4343-2", "solo"}));
  // One instance left of a name: its plain name.
  s.apps.erase(s.apps.begin());
  EXPECT_EQ(cp::app_labels(s), (std::vector<std::string>{"kv", "kv-4343", "solo"}));
}

TEST(MetricsFile, EveryCheckRefuses) {
  const std::vector<std::pair<std::string, std::function<void(File&)>>> edits = {
      {"bad magic", [](File& f) { f.header().magic ^= 1; }},
      {"version", [](File& f) { f.header().version = 99; }},
      {"being written", [](File& f) { f.header().seq = 3; }},
      {"out of range", [](File& f) { f.header().host_count = 0; }},
      {"out of range", [](File& f) { f.header().conns_per_host = abi::kMetricsMaxConns + 1; }},
      {"its layout needs", [](File& f) { f.header().conns_per_host = 32; }},
      {"its layout needs", [](File& f) { f.header().bytes += 4096; }},
      {"host index", [](File& f) { f.header().host_index = 3; }},
      {"cycle frequency", [](File& f) { f.header().tsc_hz = 0; }},
      {"core count", [](File& f) { f.header().cores = 0; }},
      {"core count", [](File& f) { f.header().cores = abi::kMetricsCores + 1; }},
      {"drop reason", [](File& f) { f.header().drop_reasons = abi::kMetricsDropReasons + 1; }},
      {"application count", [](File& f) { f.header().apps = abi::kMetricsApps + 1; }},
      {"port count", [](File& f) { f.header().ports = 0; }},
      {"port count", [](File& f) { f.header().ports = abi::kMetricsPorts + 1; }},
      {"thread rows", [](File& f) { f.app(1).local_threads = 0; }},
      {"thread rows", [](File& f) { f.app(1).first_row = abi::kMetricsThreads - 2; }},
      {"thread rows", [](File& f) { f.app(1).first_row = 0xffffffffu; }},
      {"thread ids", [](File& f) { f.app(1).first_thread = 10; }},
      {"thread ids", [](File& f) { f.app(0).total_threads = 1; }},
  };
  for (const auto& [want, edit] : edits) {
    File f;
    edit(f);
    DataplaneSample s;
    std::string why = f.parse(&s);
    EXPECT_NE(why.find(want), std::string::npos) << "want '" << want << "', got '" << why << "'";
  }
  // Truncated anywhere: refused, never read past the end.
  File f;
  for (std::size_t len : {std::size_t(0), std::size_t(8), sizeof(abi::MetricsHeader) - 1, f.bytes.size() - 1}) {
    DataplaneSample s;
    EXPECT_NE(cp::parse_dataplane_metrics(f.bytes.data(), len, &s), "") << len;
  }
}

TEST(MetricsFile, NamesAreCleanedAndBounded) {
  File f;
  std::memset(f.app(0).name, 'x', sizeof f.app(0).name);  // no terminator
  std::strcpy(f.app(1).name, "a\"b}\nc");
  std::memset(f.drop_name(1), '!', abi::kMetricsNameBytes);
  DataplaneSample s;
  ASSERT_EQ(f.parse(&s), "");
  EXPECT_EQ(s.apps[0].name, std::string(abi::kMetricsNameBytes, 'x'));
  EXPECT_EQ(s.apps[1].name, "a_b__c");
  EXPECT_EQ(s.drop_names[1], std::string(abi::kMetricsNameBytes, '_'));
}

TEST(MetricsFile, ReaderGetsConsistentSamplesFromAConcurrentWriter) {
  // The dataplane's protocol (dataplane/src/metrics.cpp): seq odd while
  // writing. The writer sets every thread row's fields to one value per
  // sample; a torn copy would mix two.
  File f;
  for (int r = 0; r < 5; ++r) f.row(r) = abi::ThreadCounters{};  // consistent before the first write
  char path[] = "/tmp/gossamer-metrics-test-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, f.bytes.data(), f.bytes.size()), ssize_t(f.bytes.size()));
  auto* map = static_cast<std::uint8_t*>(::mmap(nullptr, f.bytes.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(map, MAP_FAILED);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    auto* hdr = reinterpret_cast<abi::MetricsHeader*>(map);
    auto* rows = reinterpret_cast<abi::ThreadCounters*>(map + f.l.threads);
    for (std::uint64_t v = 1; !stop.load(std::memory_order_relaxed); ++v) {
      std::atomic_ref<std::uint64_t> seq(hdr->seq);
      // The dataplane's store, release fence; a read-modify-write here, as
      // -fsanitize=thread (the TSan build) refuses atomic_thread_fence.
      const std::uint64_t s0 = seq.fetch_add(1, std::memory_order_acq_rel);
      // A slow write (a pause between rows) so that many copies overlap
      // one; then a gap long enough for a whole copy.
      for (int r = 0; r < 5; ++r) {
        for (std::uint64_t* w = &rows[r].busy_cycles; w <= &rows[r].tcp_bytes_received; ++w)
          std::atomic_ref<std::uint64_t>(*w).store(v, std::memory_order_relaxed);
        std::this_thread::sleep_for(std::chrono::microseconds(40));
      }
      std::atomic_ref<std::uint64_t>(hdr->sample_ns).store(now_ns(), std::memory_order_relaxed);
      seq.store(s0 + 2, std::memory_order_release);
      std::this_thread::sleep_for(std::chrono::microseconds(400));
    }
  });
  int good = 0, busy = 0, torn = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < end) {
    DataplaneSample s;
    std::string why = cp::read_dataplane_metrics(path, &s);
    if (!why.empty()) {
      EXPECT_NE(why.find("kept writing"), std::string::npos) << why;
      ++busy;
      continue;
    }
    ++good;
    const std::uint64_t v = s.apps[0].threads[0].busy_cycles;
    for (const auto& a : s.apps)
      for (const auto& t : a.threads) {
        const std::uint64_t* w = &t.busy_cycles;
        for (std::size_t i = 0; i < abi::kThreadCounterFields; ++i) torn += w[i] != v;
      }
  }
  stop = true;
  writer.join();
  EXPECT_EQ(torn, 0) << "fields from two samples in one copy";
  EXPECT_GT(good, 0) << busy << " reads found the writer busy";
  std::printf("%d consistent copies, %d reads gave up\n", good, busy);
  ::munmap(map, f.bytes.size());
  ::close(fd);
  DataplaneSample s;
  std::string why = cp::read_dataplane_metrics(path, &s);
  EXPECT_EQ(why, "");
  ::unlink(path);
  why = cp::read_dataplane_metrics(path, &s);
  EXPECT_NE(why.find("No such file"), std::string::npos) << why;
}

}  // namespace
