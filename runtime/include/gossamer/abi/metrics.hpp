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
//   ConnCounters        [host][conn]       host_count * conns_per_host
//   AppEntry            [kMetricsApps]
//   ThreadCounters      [kMetricsThreads]  rows, AppEntry::first_row..+local_threads
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <gossamer/abi/attach.hpp>

namespace gossamer::abi {

inline constexpr std::uint64_t kMetricsMagic = 0x3154454d53534f47ull;  // "GOSSMET1"
inline constexpr std::uint32_t kMetricsVersion = 2;  // 2: active connections, thread placement
inline constexpr std::uint32_t kMetricsPeriodMs = 100;
inline constexpr std::uint32_t kMetricsCores = 8;
inline constexpr std::uint32_t kMetricsDropReasons = 32;
inline constexpr std::uint32_t kMetricsNameBytes = 32;    // NUL-terminated
inline constexpr std::uint32_t kMetricsApps = 32;         // attached instances shown
inline constexpr std::uint32_t kMetricsThreads = 4096;    // thread rows, all instances
inline constexpr std::uint32_t kMetricsMaxConns = 64;     // connections.per_remote_host

struct MetricsHeader {
  std::uint64_t magic;           // kMetricsMagic
  std::uint32_t version;         // kMetricsVersion
  std::uint32_t reserved0;
  std::uint64_t seq;             // sequence lock: odd while the dataplane writes
  std::uint64_t bytes;           // file size, = metrics_layout(...).bytes
  std::uint64_t tsc_hz;          // cycles per second of every *_cycles field
  std::uint64_t sample_ns;       // CLOCK_MONOTONIC when the sample was written
  std::uint32_t boot;            // the dataplane's incarnation
  std::uint32_t host_index;
  std::uint32_t host_count;
  std::uint32_t conns_per_host;
  std::uint32_t cores;           // CoreCounters in use
  std::uint32_t drop_reasons;    // names in use
  std::uint32_t apps;            // AppEntry in use (the first `apps`)
  std::uint32_t apps_hidden;     // attached instances that did not fit
  std::uint8_t reserved[176];
};
static_assert(sizeof(MetricsHeader) == 256);
static_assert(offsetof(MetricsHeader, seq) == 16);
static_assert(std::is_trivially_copyable_v<MetricsHeader>);

// Host-wide dataplane counters.
struct HostCounters {
  std::uint64_t rx_frames, tx_frames, tx_failed;
  std::uint64_t records_no_app, records_rejected;
  std::uint64_t apps_attached, apps_refused, apps_detached, apps_lost;
  std::uint64_t injected_loss, injected_duplicates, injected_reorders;
  std::uint64_t apps;                            // a gauge
  std::uint64_t thread_moves;                    // thread scheduler reassignments
  std::uint64_t max_active_qps;                  // the configured limit (a gauge)
  std::uint64_t reserved[1];
  std::uint64_t drops[kMetricsDropReasons];      // frames dropped, by reason
};
static_assert(sizeof(HostCounters) == 128 + 8 * kMetricsDropReasons);

struct CoreCounters {
  std::uint64_t busy_cycles, idle_cycles;
};

// One connection to one peer. Gauges: credits, established.
struct ConnCounters {
  std::uint64_t frames_sent, frames_received, acks_sent;
  std::uint64_t records_sent, records_received;
  std::uint64_t requests_sent, responses_sent;   // slots
  std::uint64_t retransmits, timeouts, fast_retransmits;
  std::uint64_t duplicates, out_of_order, stale_boot, wrong_incarnation, resets;
  std::uint64_t credit_stalls, renewals_requested, renewals_granted;
  std::uint64_t credits;
  std::uint64_t established;                     // 1: heard from the peer's current incarnation
  std::uint64_t fragments_sent, fragments_received, slots_reassembled;
  std::uint64_t frag_bad_offset, frag_oversize, frag_mismatch, frag_interrupted;
  std::uint64_t requests_received, responses_received;  // slots delivered
  // Gauges of the QP and thread schedulers (issue 7): this host grants the
  // peer credit here (inbound), the peer grants us (outbound); our threads
  // placed here.
  std::uint64_t inbound_active, outbound_active, threads_assigned;
  std::uint64_t renewals_declined;
  std::uint64_t reserved[7];
};
static_assert(sizeof(ConnCounters) == 320);

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
inline constexpr std::uint64_t kMetricsConnOffset =
    page_round(kMetricsDropNamesOffset + kMetricsDropReasons * kMetricsNameBytes);

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

}  // namespace gossamer::abi
