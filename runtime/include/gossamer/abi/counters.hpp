// Every counter of the metrics contract, declared once (STYLE.md "One
// declaration per fact"). Each output is generated from these tables:
//   - the contract's structs (HostCounters, CoreCounters, ConnCounters,
//     PortCounters in metrics.hpp; ThreadCounters in attach.hpp), one field per row in
//     layout order, and the tables kHostCounters... at the end of metrics.hpp;
//   - the dataplane's own counters (dataplane::Stats per core,
//     dataplane::ConnectionStats per connection) and their copies into the
//     metrics file (dataplane/src/metrics.cpp);
//   - the dataplane's `<socket>.stats` lines (dataplane/src/stats_file.hpp);
//   - gossamerd's Prometheus families (controlplane/src/metrics.cpp);
//   - the names `gossamerctl top` reads (tools/gossamerctl/top_cmd.cpp).
// tests/metrics/counters_test.cpp fails when one of them misses a row, or
// when monitoring/README.md's catalog misses a Prometheus name.
//
// Adding a row changes the layout of the metrics file: bump kMetricsVersion
// (a thread row: kAttachVersion).
//
// Columns (a table lists only those its scope needs):
//   field   the struct member (std::uint64_t)
//   source  kCounted: the dataplane counts it in a member of the same name
//             (Stats per core, summed for the host; ConnectionStats), copied
//           kSummed: host only, the sum over cores of the core row of the
//             same name
//           kSet: the metrics writer sets it (gauges, configuration)
//   stats   its `<socket>.stats` line: "name" or "name{key=value}"; core
//           rows are per core (label core), connection rows per connection
//           (labels peer, conn)
//   total   core only: the line of the sum over cores, or ""
//   kind    kCounter, kGauge, kCycles (a counter of TSC cycles, in seconds
//           for Prometheus), kPeerGauge (a gauge per connection, summed per
//           peer for Prometheus)
//   prom    the Prometheus series: "name" or "name{key=value}"; besides
//           label host, and the scope's (core; peer, conn; app, thread)
//   help    the family's HELP; "" for the rows after a family's first
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

// Host-wide (metrics: HostCounters; .stats: unlabelled).
#define GOSSAMER_HOST_COUNTERS(X)                                                                                     \
  X(rx_frames, kSummed, "rx_frames", kCounter, "gossamer_dataplane_frames_received_total", "Frames from the NIC.")    \
  X(tx_frames, kCounted, "tx_frames", kCounter, "gossamer_dataplane_frames_sent_total", "Frames handed to the NIC.")  \
  X(tx_failed, kCounted, "tx_failed", kCounter, "gossamer_dataplane_transmit_failures_total",                         \
    "Frames the NIC did not take.")                                                                                   \
  X(records_no_app, kCounted, "records_no_app", kCounter, "gossamer_dataplane_dropped_records_total{reason=no_app}",  \
    "Records dropped, by reason.")                                                                                    \
  X(records_rejected, kCounted, "records_rejected", kCounter,                                                         \
    "gossamer_dataplane_dropped_records_total{reason=rejected}", "")                                                  \
  X(apps_attached, kCounted, "apps_attached", kCounter, "gossamer_dataplane_attaches_total{result=accepted}",         \
    "Attach requests, by result.")                                                                                    \
  X(apps_refused, kCounted, "apps_refused", kCounter, "gossamer_dataplane_attaches_total{result=refused}", "")        \
  /* the attacher may not join the run it names: no or a wrong run token, another uid's run */                        \
  X(apps_denied, kCounted, "apps_denied", kCounter, "gossamer_dataplane_attaches_total{result=denied}", "")           \
  X(apps_detached, kCounted, "apps_detached", kCounter, "gossamer_dataplane_detaches_total{how=clean}",               \
    "Applications gone, by how.")                                                                                     \
  X(apps_lost, kCounted, "apps_lost", kCounter, "gossamer_dataplane_detaches_total{how=lost}", "")                    \
  X(injected_loss, kCounted, "injected_loss", kCounter, "gossamer_dataplane_injected_faults_total{kind=loss}",        \
    "Frames affected by test fault injection, by kind.")                                                              \
  X(injected_duplicates, kCounted, "injected_duplicates", kCounter,                                                   \
    "gossamer_dataplane_injected_faults_total{kind=duplicate}", "")                                                   \
  X(injected_reorders, kCounted, "injected_reorders", kCounter,                                                       \
    "gossamer_dataplane_injected_faults_total{kind=reorder}", "")                                                     \
  X(apps, kSet, "apps", kGauge, "gossamer_dataplane_apps", "Applications attached.")                                  \
  X(thread_moves, kCounted, "thread_moves", kCounter, "gossamer_dataplane_thread_moves_total",                        \
    "Threads the thread scheduler moved to another connection.")                                                      \
  X(max_active_qps, kSet, "max_active_qps", kGauge, "gossamer_dataplane_max_active_connections",                      \
    "The QP scheduler's limit (connections.max_active_qps).")

// Per polling core (metrics: CoreCounters; .stats: label core). All counted
// by the core in dataplane::Stats.
#define GOSSAMER_CORE_COUNTERS(X)                                                                                     \
  X(busy_cycles, "core_busy_cycles", "busy_cycles", kCycles, "gossamer_dataplane_busy_seconds_total",                 \
    "Dataplane polling core: iterations that found work.")                                                            \
  X(idle_cycles, "core_idle_cycles", "idle_cycles", kCycles, "gossamer_dataplane_idle_seconds_total",                 \
    "Dataplane polling core: finding nothing, or asleep.")                                                            \
  X(rx_frames, "core_rx_frames", "", kCounter, "gossamer_dataplane_core_frames_received_total",                       \
    "Frames from the core's NIC queue.")                                                                              \
  X(frames_processed, "core_frames_processed", "", kCounter, "gossamer_dataplane_core_frames_processed_total",        \
    "Frames of the connections the core owns, processed by it.")                                                      \
  X(doorbells, "core_doorbells", "", kCounter, "gossamer_dataplane_core_doorbells_total",                             \
    "Doorbell entries the core served.")                                                                              \
  X(steered, "core_steered", "", kCounter, "gossamer_dataplane_core_steered_frames_total{result=handed_over}",        \
    "Frames from the core's queue for a connection another core owns, by result (dropped: that core's ring was "      \
    "full).")                                                                                                         \
  X(steer_dropped, "core_steer_dropped", "steer_dropped", kCounter,                                                   \
    "gossamer_dataplane_core_steered_frames_total{result=dropped}", "")                                               \
  X(handoffs, "core_handoffs", "", kCounter, "gossamer_dataplane_core_handoffs_total",                                \
    "Records handed to a connection another core owns.")                                                              \
  X(cpu, "core_cpu", "", kGauge, "gossamer_dataplane_core_cpu",                                                       \
    "The CPU the polling core ran on when it last woke (dataplane.cpus).")                                            \
  /* the stages of the loop, counted only while they find work: divided by */                                       \
  /* the slots received (rx, deliver) or sent (doorbells, tx), a cost per */                                          \
  /* slot that names the stage a regression is in */                                                                 \
  X(stage_rx_cycles, "core_stage_rx_cycles", "stage_rx_cycles", kCycles,                                              \
    "gossamer_dataplane_stage_seconds_total{stage=rx}",                                                               \
    "Dataplane polling core: time in each stage of the loop while it had work (rx: frames from the port, checked "    \
    "and acknowledged; deliver: records written into slots; doorbells: the applications' rings read; tx: frames "     \
    "built and sent, timers).")                                                                                       \
  X(stage_deliver_cycles, "core_stage_deliver_cycles", "stage_deliver_cycles", kCycles,                               \
    "gossamer_dataplane_stage_seconds_total{stage=deliver}", "")                                                      \
  X(stage_doorbells_cycles, "core_stage_doorbells_cycles", "stage_doorbells_cycles", kCycles,                         \
    "gossamer_dataplane_stage_seconds_total{stage=doorbells}", "")                                                    \
  X(stage_tx_cycles, "core_stage_tx_cycles", "stage_tx_cycles", kCycles,                                              \
    "gossamer_dataplane_stage_seconds_total{stage=tx}", "")                                                           \
  /* transport: verbs only (0 with udp): the core's RC queue pairs (dataplane/src/verbs_transport.hpp) */            \
  X(qps_active, "core_qps_active", "qps_active", kGauge, "gossamer_dataplane_queue_pairs{state=active}",              \
    "Verbs queue pairs of the core, by state (active: connected with records queued or unretired; idle: the "        \
    "others not in error; error: failed, being created again).")                                                     \
  X(qps_idle, "core_qps_idle", "qps_idle", kGauge, "gossamer_dataplane_queue_pairs{state=idle}", "")                 \
  X(qps_errored, "core_qps_errored", "qps_errored", kGauge, "gossamer_dataplane_queue_pairs{state=error}", "")       \
  X(wrs_posted, "core_wrs_posted", "wrs_posted", kCounter, "gossamer_dataplane_verbs_work_requests_total{kind=posted}", \
    "Verbs send work requests (RDMA WRITE_WITH_IMM), posted and signaled (selective signaling).")                   \
  X(wrs_signaled, "core_wrs_signaled", "wrs_signaled", kCounter,                                                     \
    "gossamer_dataplane_verbs_work_requests_total{kind=signaled}", "")                                               \
  X(verbs_doorbells, "core_verbs_doorbells", "verbs_doorbells", kCounter, "gossamer_dataplane_verbs_doorbells_total", \
    "Verbs send doorbells (ibv_post_send calls, each a list of work requests).")                                     \
  X(cq_polls, "core_cq_polls", "cq_polls", kCounter, "gossamer_dataplane_verbs_cq_polls_total",                      \
    "Completion queue polls (batches of up to 32).")                                                                 \
  X(qp_errors, "core_qp_errors", "qp_errors", kCounter, "gossamer_dataplane_queue_pair_errors_total",                \
    "Verbs queue pairs that went to the error state (each torn down and created again).")                          \
  X(qp_in_doubt_records, "core_qp_in_doubt_records", "qp_in_doubt_records", kCounter,                                \
    "gossamer_dataplane_queue_pair_in_doubt_records_total",                                                          \
    "Records on a failed queue pair that may or may not have arrived: never sent again, their runs fail.")          \
  X(qp_reconnects, "core_qp_reconnects", "qp_reconnects", kCounter, "gossamer_dataplane_queue_pair_reconnects_total", \
    "Verbs queue pairs created again (after an error or the peer's new queue pair).")

// Per connection to a peer (metrics: ConnCounters; .stats: labels peer, conn).
#define GOSSAMER_CONN_COUNTERS(X)                                                                                     \
  X(frames_sent, kCounted, "frames_sent", kCounter, "gossamer_dataplane_messages_sent_total",                         \
    "Data frames sent (first transmissions).")                                                                        \
  X(frames_received, kCounted, "frames_received", kCounter, "gossamer_dataplane_messages_received_total",             \
    "Frames received (data and acknowledgements).")                                                                   \
  X(acks_sent, kCounted, "acks_sent", kCounter, "gossamer_dataplane_acks_sent_total",                                 \
    "Acknowledgement-only frames sent.")                                                                              \
  X(records_sent, kCounted, "records_sent", kCounter, "gossamer_dataplane_records_sent_total",                        \
    "Records sent (slots and fragments).")                                                                            \
  X(records_received, kCounted, "records_received", kCounter, "gossamer_dataplane_records_received_total",            \
    "Records received in order.")                                                                                     \
  X(requests_sent, kCounted, "requests_sent", kCounter, "gossamer_dataplane_slots_sent_total{kind=request}",          \
    "Slots sent, by kind; slots per message = coalescing.")                                                           \
  X(responses_sent, kCounted, "responses_sent", kCounter, "gossamer_dataplane_slots_sent_total{kind=response}", "")   \
  X(requests_received, kCounted, "requests_received", kCounter,                                                       \
    "gossamer_dataplane_slots_received_total{kind=request}", "Slots received and delivered, by kind.")                \
  X(responses_received, kCounted, "responses_received", kCounter,                                                     \
    "gossamer_dataplane_slots_received_total{kind=response}", "")                                                     \
  X(retransmits, kCounted, "retransmits", kCounter, "gossamer_dataplane_retransmits_total", "Frames sent again.")     \
  X(timeouts, kCounted, "timeouts", kCounter, "gossamer_dataplane_retransmit_timeouts_total",                         \
    "Retransmission timer expiries.")                                                                                 \
  X(fast_retransmits, kCounted, "fast_retransmits", kCounter, "gossamer_dataplane_fast_retransmits_total",            \
    "Retransmissions on duplicate acknowledgements.")                                                                 \
  X(duplicates, kCounted, "duplicates", kCounter, "gossamer_dataplane_duplicates_dropped_total",                      \
    "Frames received twice, dropped.")                                                                                \
  X(out_of_order, kCounted, "out_of_order", kCounter, "gossamer_dataplane_out_of_order_dropped_total",                \
    "Frames ahead of the next expected, dropped.")                                                                    \
  /* a frame naming another incarnation of this host */                                                               \
  X(wrong_incarnation, kCounted, "wrong_incarnation", kCounter,                                                       \
    "gossamer_dataplane_stale_frames_total{reason=wrong_incarnation}", "Frames for another incarnation, by reason.")  \
  /* a frame from the peer's previous incarnation */                                                                  \
  X(stale_boot, kCounted, "stale_boot", kCounter, "gossamer_dataplane_stale_frames_total{reason=stale_boot}", "")     \
  X(resets, kCounted, "resets", kCounter, "gossamer_dataplane_connection_resets_total",                               \
    "Resets because the peer restarted.")                                                                             \
  X(credits, kSet, "credits", kGauge, "gossamer_dataplane_credits", "Credits left.")                                  \
  X(credit_stalls, kCounted, "credit_stalls", kCounter, "gossamer_dataplane_credit_stalls_total",                     \
    "Times the sender ran out of credit with data waiting.")                                                          \
  X(credit_probes, kCounted, "credit_probes", kCounter, "gossamer_dataplane_credit_probes_total",                     \
    "Renewals asked again in an acknowledgement-only frame: out of credit with nothing in flight for a "              \
    "retransmission timeout (the grant may have been lost).")                                                         \
  X(renewals_requested, kCounted, "renewals_requested", kCounter,                                                     \
    "gossamer_dataplane_credit_renewals_requested_total", "Credit renewals this side asked for.")                     \
  X(renewals_granted, kCounted, "renewals_granted", kCounter, "gossamer_dataplane_credit_renewals_granted_total",     \
    "Credit renewals this side granted.")                                                                             \
  X(renewals_declined, kCounted, "renewals_declined", kCounter,                                                       \
    "gossamer_dataplane_credit_renewals_declined_total",                                                              \
    "Credit renewals this side declined (the connection is inactive).")                                               \
  X(inbound_active, kSet, "inbound_active", kGauge, "gossamer_dataplane_connection_active{direction=inbound}",        \
    "1 while the connection is active: inbound, this host grants the peer credit (QP scheduler); outbound, the "      \
    "peer grants this host credit.")                                                                                  \
  X(outbound_active, kSet, "outbound_active", kGauge, "gossamer_dataplane_connection_active{direction=outbound}", "") \
  X(threads_assigned, kSet, "threads_assigned", kGauge, "gossamer_dataplane_threads_assigned",                        \
    "Application threads the thread scheduler put on the connection.")                                                \
  X(established, kSet, "established", kPeerGauge, "gossamer_dataplane_connections_established",                       \
    "Connections that have heard from the peer's current incarnation.")                                               \
  X(fragments_sent, kCounted, "fragments_sent", kCounter, "gossamer_dataplane_fragments_sent_total",                  \
    "Fragment records sent (slots larger than a frame).")                                                             \
  X(fragments_received, kCounted, "fragments_received", kCounter, "gossamer_dataplane_fragments_received_total",      \
    "Fragment records received.")                                                                                     \
  X(slots_reassembled, kCounted, "slots_reassembled", kCounter, "gossamer_dataplane_large_slots_total",               \
    "Slots reassembled from fragments.")                                                                              \
  /* not where the previous fragment ended, or no slot begun */                                                       \
  X(frag_bad_offset, kCounted, "fragments_dropped{reason=bad_offset}", kCounter,                                      \
    "gossamer_dataplane_fragments_dropped_total{reason=bad_offset}", "Fragment records dropped, by reason.")          \
  /* the slot is larger than its destination slot */                                                                  \
  X(frag_oversize, kCounted, "fragments_dropped{reason=oversize}", kCounter,                                          \
    "gossamer_dataplane_fragments_dropped_total{reason=oversize}", "")                                                \
  /* other kind, ids, seq, lengths or flags than its slot's */                                                        \
  X(frag_mismatch, kCounted, "fragments_dropped{reason=mismatch}", kCounter,                                          \
    "gossamer_dataplane_fragments_dropped_total{reason=mismatch}", "")                                                \
  /* a whole record arrived in the middle of a slot */                                                                \
  X(frag_interrupted, kCounted, "fragments_dropped{reason=interrupted}", kCounter,                                    \
    "gossamer_dataplane_fragments_dropped_total{reason=interrupted}", "")

// Per DPDK port of the dataplane (metrics: PortCounters; .stats: label
// port): with dataplane.ports, one per peer link (a memif mesh, a dual-port
// NIC); with dataplane.port, the one port 0. Counted per queue by
// MultiPort (dataplane/src/port_multi.hpp) and summed by the metrics writer.
#define GOSSAMER_PORT_COUNTERS(X)                                                                                     \
  X(rx_frames, "port_rx_frames", kCounter, "gossamer_dataplane_port_frames_total{direction=received}",                \
    "Frames through each port of the dataplane, by direction (received: after injected faults).")                    \
  X(tx_frames, "port_tx_frames", kCounter, "gossamer_dataplane_port_frames_total{direction=sent}", "")              \
  /* the device's own counters (rte_eth_stats; each driver fills its own: dataplane/README.md, "Port errors") */     \
  X(rx_missed, "port_rx_missed", kCounter, "gossamer_dataplane_port_dropped_frames_total{reason=rx_missed}",          \
    "Frames each port's device dropped, by reason: rx_missed (its receive ring was full), rx_error, rx_no_buffer, "  \
    "tx_error.")                                                                                                      \
  X(rx_errors, "port_rx_errors", kCounter, "gossamer_dataplane_port_dropped_frames_total{reason=rx_error}", "")       \
  X(rx_no_buffer, "port_rx_no_buffer", kCounter, "gossamer_dataplane_port_dropped_frames_total{reason=rx_no_buffer}", \
    "")                                                                                                               \
  X(tx_errors, "port_tx_errors", kCounter, "gossamer_dataplane_port_dropped_frames_total{reason=tx_error}", "")

// Per application thread (ThreadCounters, written by the thread itself; not
// in the .stats file). Prometheus labels app, thread.
#define GOSSAMER_THREAD_COUNTERS(X)                                                                                   \
  X(busy_cycles, kCycles, "gossamer_trustee_busy_seconds_total",                                                      \
    "Time in loop iterations that found work (fibers, requests, responses).")                                         \
  X(serve_cycles, kCycles, "gossamer_trustee_serve_seconds_total",                                                    \
    "Part of busy time spent serving delegated requests.")                                                            \
  X(idle_cycles, kCycles, "gossamer_trustee_idle_seconds_total",                                                      \
    "Time polling and finding nothing, yielding or asleep.")                                                          \
  X(requests_served_local, kCounter, "gossamer_trustee_requests_served_total{source=local}",                          \
    "Requests served, by where the client is.")                                                                       \
  X(requests_served_remote, kCounter, "gossamer_trustee_requests_served_total{source=remote}", "")                    \
  X(slots_served, kCounter, "gossamer_trustee_slots_served_total", "Request slots (batches) served.")                 \
  X(requests_sent_local, kCounter, "gossamer_client_requests_sent_total{dest=local}",                                 \
    "Requests sent to a trustee, by where it is.")                                                                    \
  X(requests_sent_remote, kCounter, "gossamer_client_requests_sent_total{dest=remote}", "")                           \
  X(responses_received, kCounter, "gossamer_client_responses_received_total", "Responses received.")                  \
  X(local_applies, kCounter, "gossamer_client_direct_applies_total",                                                  \
    "Applies on the thread's own trustee, run in place with no request.")                                             \
  X(fibers_ready, kGauge, "gossamer_trustee_fibers_ready", "Fibers ready to run at the last loop iteration.")         \
  X(tcp_bytes_sent, kCounter, "gossamer_thread_tcp_bytes_total{direction=sent}",                                      \
    "Request and response bodies above the large-request threshold that crossed hosts over gossamerd's TCP "          \
    "connections, by direction.")                                                                                     \
  X(tcp_bytes_received, kCounter, "gossamer_thread_tcp_bytes_total{direction=received}", "")

// Declares `std::uint64_t field;` for each row (the contract's structs).
#define GOSSAMER_COUNTER_FIELD(field, ...) std::uint64_t field;
// 1 per row: `0 GOSSAMER_X_COUNTERS(GOSSAMER_COUNTER_ONE)` counts a table.
#define GOSSAMER_COUNTER_ONE(...) +1

// `__VA_ARGS__` for the rows whose source is kCounted (the dataplane's
// struct declares the member), resp. kCounted or kSummed (copied from it).
#define GOSSAMER_IF_OWN_kCounted(...) __VA_ARGS__
#define GOSSAMER_IF_OWN_kSummed(...)
#define GOSSAMER_IF_OWN_kSet(...)
#define GOSSAMER_IF_OWN(source, ...) GOSSAMER_IF_OWN_##source(__VA_ARGS__)
#define GOSSAMER_IF_COPIED_kCounted(...) __VA_ARGS__
#define GOSSAMER_IF_COPIED_kSummed(...) __VA_ARGS__
#define GOSSAMER_IF_COPIED_kSet(...)
#define GOSSAMER_IF_COPIED(source, ...) GOSSAMER_IF_COPIED_##source(__VA_ARGS__)

namespace gossamer::abi {

enum class CounterSource : std::uint8_t { kCounted, kSummed, kSet };
enum class CounterKind : std::uint8_t { kCounter, kGauge, kCycles, kPeerGauge };

// "name" or "name{key=value}", split.
struct SeriesName {
  std::string_view name, key, value;
  constexpr SeriesName(const char* s) : SeriesName(std::string_view(s)) {}
  constexpr explicit SeriesName(std::string_view s) : name(s.substr(0, s.find('{'))) {
    if (name.size() == s.size()) return;
    const std::string_view label = s.substr(name.size() + 1, s.size() - name.size() - 2);
    key = label.substr(0, label.find('='));
    value = label.substr(key.size() + 1);
  }
};

// One row of a table; S is the contract's struct that holds it.
template <class S>
struct Counter {
  std::uint64_t S::*member;
  std::string_view field;
  CounterSource source;
  CounterKind kind;
  SeriesName stats;              // name "" (threads): no .stats line
  std::string_view stats_total;  // core rows: the sum's .stats line, or ""
  SeriesName prom;
  std::string_view help;         // "" after the family's first row

  constexpr bool is_counter() const { return kind == CounterKind::kCounter || kind == CounterKind::kCycles; }
};

// HostCounters::drops: one series per reason, the names being the metrics
// file's (the dataplane's wire::Drop).
struct CounterArray {
  std::string_view stats, prom, label, help;
};
inline constexpr CounterArray kDroppedFrames{"dropped", "gossamer_dataplane_dropped_frames_total", "reason",
                                             "Malformed or unexpected frames dropped, by reason."};

// The row of `table` for `member`; not a constant expression (a compile
// error where one is required) when the table has none.
template <class S, std::size_t N>
constexpr const Counter<S>& counter_of(const Counter<S> (&table)[N], std::uint64_t S::*member) {
  for (const Counter<S>& c : table)
    if (c.member == member) return c;
  throw "no such row in the counter table";
}

}  // namespace gossamer::abi
