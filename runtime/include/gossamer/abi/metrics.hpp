// The metrics contract between gossamer-dataplane (writer) and gossamerd
// (reader): the file `<dataplane.socket>.metrics`, a shared-memory sample of
// the dataplane's counters and of every attached application's thread
// counters (monitoring/README.md). Structs only, offsets not pointers
// (STYLE.md "Interfaces between processes").
//
// The dataplane maps the file and rewrites the whole sample every
// kMetricsPeriodMs under a sequence lock: `seq` is odd while it writes. A
// reader copies the file (pread is enough), and keeps the copy only if
// `seq` was even and unchanged before and after. Readers recompute every
// offset from (host_count, conns_per_host) and check the file's size: the
// file is the dataplane's, but a reader must not trust it further than that.
//
// Layout (offsets from the file start):
//
//   MetricsHeader                          at 0
//   HostCounters                           at kMetricsHostOffset
//   CoreCounters        [kMetricsCores]    at kMetricsCoreOffset
//   drop reason names   [kMetricsDropReasons][kMetricsNameBytes]
//   PortCounters        [kMetricsPorts]    the first `ports` in use
//   ConnCounters        [host][conn]       host_count * conns_per_host
//   AppEntry            [kMetricsApps]
//   ThreadCounters      [kMetricsThreads]  rows, AppEntry::first_row..+local_threads
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <gossamer/abi/attach.hpp>
#include <gossamer/abi/counters.hpp>

namespace gossamer::abi {

inline constexpr std::uint64_t kMetricsMagic = 0x3154454d53534f47ull;  // "GOSSMET1"
// 2: active connections, thread placement; 3: the rows of counters.hpp
// (per-core counters, credit probes); 4: 64-bit incarnation, core_cpu;
// 5: room for 24 host counters (apps_denied); 6: stage cycles per core;
// 7: verbs queue pairs per core (qps_*, wrs_*, cq_polls, qp_*), room for 32 core counters;
// 8: frames per port (PortCounters, header.ports).
// 9: the ports' device drops (PortCounters rx_missed..tx_errors, before peers).
inline constexpr std::uint32_t kMetricsVersion = 9;
inline constexpr std::uint32_t kMetricsPeriodMs = 100;
inline constexpr std::uint32_t kMetricsCores = 8;
inline constexpr std::uint32_t kMetricsDropReasons = 32;
inline constexpr std::uint32_t kMetricsNameBytes = 32;    // NUL-terminated
inline constexpr std::uint32_t kMetricsApps = 32;         // attached instances shown
inline constexpr std::uint32_t kMetricsThreads = 4096;    // thread rows, all instances
inline constexpr std::uint32_t kMetricsMaxConns = 64;     // connections.per_remote_host
inline constexpr std::uint32_t kMetricsPorts = 32;        // DPDK ports (dataplane.ports)

struct MetricsHeader {
  std::uint64_t magic;           // kMetricsMagic
  std::uint32_t version;         // kMetricsVersion
  std::uint32_t reserved0;
  std::uint64_t seq;             // sequence lock: odd while the dataplane writes
  std::uint64_t bytes;           // file size, = metrics_layout(...).bytes
  std::uint64_t tsc_hz;          // cycles per second of every *_cycles field
  std::uint64_t sample_ns;       // CLOCK_MONOTONIC when the sample was written
  std::uint64_t boot;            // the dataplane's incarnation (never reused, larger is newer)
  std::uint32_t host_index;
  std::uint32_t host_count;
  std::uint32_t conns_per_host;
  std::uint32_t cores;           // CoreCounters in use
  std::uint32_t drop_reasons;    // names in use
  std::uint32_t apps;            // AppEntry in use (the first `apps`)
  std::uint32_t apps_hidden;     // attached instances that did not fit
  std::uint32_t ports;           // PortCounters in use (1 to kMetricsPorts)
  std::uint8_t reserved[168];
};
static_assert(sizeof(MetricsHeader) == 256);
static_assert(offsetof(MetricsHeader, seq) == 16 && offsetof(MetricsHeader, boot) == 48 &&
              offsetof(MetricsHeader, host_index) == 56);
static_assert(std::is_trivially_copyable_v<MetricsHeader>);

// The counters' fields are the rows of the tables in counters.hpp, in
// order; each struct keeps its size (the rest is reserved).
inline constexpr std::size_t kHostCounterFields = 0 GOSSAMER_HOST_COUNTERS(GOSSAMER_COUNTER_ONE);
inline constexpr std::size_t kCoreCounterFields = 0 GOSSAMER_CORE_COUNTERS(GOSSAMER_COUNTER_ONE);
inline constexpr std::size_t kConnCounterFields = 0 GOSSAMER_CONN_COUNTERS(GOSSAMER_COUNTER_ONE);
inline constexpr std::size_t kPortCounterFields = 0 GOSSAMER_PORT_COUNTERS(GOSSAMER_COUNTER_ONE);

// Host-wide dataplane counters.
struct HostCounters {
  GOSSAMER_HOST_COUNTERS(GOSSAMER_COUNTER_FIELD)
  std::uint64_t reserved[24 - kHostCounterFields];
  std::uint64_t drops[kMetricsDropReasons];      // frames dropped, by reason (counters.hpp's kDroppedFrames)
};
static_assert(sizeof(HostCounters) == 192 + 8 * kMetricsDropReasons);
static_assert(offsetof(HostCounters, rx_frames) == 0);
static_assert(offsetof(HostCounters, drops) == 192);

// One polling core's counters.
struct CoreCounters {
  GOSSAMER_CORE_COUNTERS(GOSSAMER_COUNTER_FIELD)
  std::uint64_t reserved[32 - kCoreCounterFields];
};
static_assert(sizeof(CoreCounters) == 256);
static_assert(offsetof(CoreCounters, busy_cycles) == 0);

// One connection to one peer.
struct ConnCounters {
  GOSSAMER_CONN_COUNTERS(GOSSAMER_COUNTER_FIELD)
  std::uint64_t reserved[40 - kConnCounterFields];
};
static_assert(sizeof(ConnCounters) == 320);
static_assert(offsetof(ConnCounters, frames_sent) == 0);
static_assert(std::is_trivially_copyable_v<HostCounters> && std::is_trivially_copyable_v<CoreCounters> &&
              std::is_trivially_copyable_v<ConnCounters>);

// One DPDK port of the dataplane: its counters, and the hosts it reaches.
struct PortCounters {
  GOSSAMER_PORT_COUNTERS(GOSSAMER_COUNTER_FIELD)
  std::uint64_t peers;           // bit h: host h is reached through this port
  std::uint64_t reserved[8 - kPortCounterFields - 1];
};
static_assert(sizeof(PortCounters) == 64);
static_assert(kMaxRackHosts <= 64, "PortCounters::peers has a bit per host");
static_assert(std::is_trivially_copyable_v<PortCounters>);

struct AppEntry {
  std::uint32_t pid;
  std::uint32_t first_thread;    // rack-wide id of the instance's first local thread
  std::uint32_t local_threads;
  std::uint32_t total_threads;
  std::uint32_t first_row;       // its rows in the ThreadCounters table
  std::uint32_t reserved0;
  std::uint64_t run_key;
  char name[kMetricsNameBytes];  // /proc/PID/comm, NUL-terminated
};
static_assert(sizeof(AppEntry) == 64);

inline constexpr std::uint64_t kMetricsHostOffset = sizeof(MetricsHeader);
inline constexpr std::uint64_t kMetricsCoreOffset = kMetricsHostOffset + sizeof(HostCounters);
inline constexpr std::uint64_t kMetricsDropNamesOffset = kMetricsCoreOffset + kMetricsCores * sizeof(CoreCounters);
inline constexpr std::uint64_t kMetricsPortOffset = kMetricsDropNamesOffset + kMetricsDropReasons * kMetricsNameBytes;
inline constexpr std::uint64_t kMetricsConnOffset = page_round(kMetricsPortOffset + kMetricsPorts * sizeof(PortCounters));

struct MetricsLayout {
  std::uint64_t conns, apps, threads, bytes;
};

// Returns false when the counts are out of range.
constexpr bool metrics_layout(std::uint32_t host_count, std::uint32_t conns_per_host, MetricsLayout* out) {
  if (host_count == 0 || host_count > kMaxRackHosts || conns_per_host == 0 || conns_per_host > kMetricsMaxConns)
    return false;
  MetricsLayout l{};
  l.conns = kMetricsConnOffset;
  l.apps = l.conns + page_round(std::uint64_t(host_count) * conns_per_host * sizeof(ConnCounters));
  l.threads = l.apps + page_round(kMetricsApps * sizeof(AppEntry));
  l.bytes = l.threads + page_round(std::uint64_t(kMetricsThreads) * sizeof(ThreadCounters));
  *out = l;
  return true;
}

// The tables of counters.hpp, as data: one Counter per row, in order.
#define GOSSAMER_HOST_ROW(f, src, st, k, p, h) \
  Counter<HostCounters>{&HostCounters::f, #f, CounterSource::src, CounterKind::k, st, "", p, h},
#define GOSSAMER_CORE_ROW(f, st, total, k, p, h) \
  Counter<CoreCounters>{&CoreCounters::f, #f, CounterSource::kCounted, CounterKind::k, st, total, p, h},
#define GOSSAMER_CONN_ROW(f, src, st, k, p, h) \
  Counter<ConnCounters>{&ConnCounters::f, #f, CounterSource::src, CounterKind::k, st, "", p, h},
#define GOSSAMER_PORT_ROW(f, st, k, p, h) \
  Counter<PortCounters>{&PortCounters::f, #f, CounterSource::kCounted, CounterKind::k, st, "", p, h},
#define GOSSAMER_THREAD_ROW(f, k, p, h) \
  Counter<ThreadCounters>{&ThreadCounters::f, #f, CounterSource::kCounted, CounterKind::k, "", "", p, h},
inline constexpr Counter<HostCounters> kHostCounters[] = {GOSSAMER_HOST_COUNTERS(GOSSAMER_HOST_ROW)};
inline constexpr Counter<CoreCounters> kCoreCounters[] = {GOSSAMER_CORE_COUNTERS(GOSSAMER_CORE_ROW)};
inline constexpr Counter<ConnCounters> kConnCounters[] = {GOSSAMER_CONN_COUNTERS(GOSSAMER_CONN_ROW)};
inline constexpr Counter<PortCounters> kPortCounters[] = {GOSSAMER_PORT_COUNTERS(GOSSAMER_PORT_ROW)};
inline constexpr Counter<ThreadCounters> kThreadCounters[] = {GOSSAMER_THREAD_COUNTERS(GOSSAMER_THREAD_ROW)};
#undef GOSSAMER_HOST_ROW
#undef GOSSAMER_CORE_ROW
#undef GOSSAMER_CONN_ROW
#undef GOSSAMER_PORT_ROW
#undef GOSSAMER_THREAD_ROW

}  // namespace gossamer::abi
