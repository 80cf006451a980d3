// The seam between the dataplane's stages and the wire (DESIGN.md §2 "Inside
// the dataplane"), one instance per polling core over the connections that
// core owns. The stages above it see records for (peer, connection), never
// frames or queue pairs:
//   - UdpTransport (udp_transport.hpp): Connection (sequence numbers, acks,
//     credits, retransmission) over a Port: today's behaviour.
//   - a verbs backend: one RC queue pair per connection. The NIC orders and
//     retransmits, so no Connection: enqueue() coalesces records into a
//     registered buffer that pump() posts as RDMA WRITE_WITH_IMM into the
//     peer's ring, the immediate carrying the credits granted back (papers
//     002 §3.4.1: FLOCK's credits without a separate message); completions
//     are signalled every n-th send (selective signaling, 002 §3.3), and
//     poll() reads the receive completions and hands the records to the
//     sink. usable() is the QP scheduler's grant, next_deadline() is
//     UINT64_MAX (nothing to retransmit), counters() fills the same
//     ConnCounters from the QP's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gossamer/abi/metrics.hpp>

#include "wire.hpp"

namespace gossamer::dataplane {

// Where a transport hands what arrived (the dataplane's deliver stage).
class DeliverySink {
 public:
  // A whole record of `peer` (a slot, or an application announce), in the
  // order its connection carried it. Fragments are reassembled first.
  virtual void deliver(std::uint32_t peer, const wire::RecordView& v) = 0;
  // `peer` restarted as incarnation `boot`: this transport's connections to
  // it started over; whatever was in flight to the old one is gone.
  virtual void peer_restarted(std::uint32_t peer, std::uint64_t boot) = 0;
  // A link to `peer` failed with `records` records in flight that may or
  // may not have arrived (in doubt) (a verbs QP in the error state; verbs_channel.hpp):
  // they are not sent again, so the runs that share `peer` fail (fate
  // sharing) rather than run a request twice. `why` is for the log.
  virtual void link_failed(std::uint32_t peer, std::uint64_t records, const std::string& why) = 0;

 protected:
  ~DeliverySink() = default;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Queues one record on (peer, conn), a connection of this transport's
  // core; `payload` is primary_len + overflow_len bytes.
  virtual void enqueue(std::uint32_t peer, std::uint32_t conn, const wire::WireRecord& r, const void* payload) = 0;
  // Takes what arrived for this core's connections; every whole record goes
  // to `sink`. True if anything arrived.
  virtual bool poll(DeliverySink& sink) = 0;
  // Sends what credits allow, runs the timers, sends owed acks. True if it
  // sent data.
  virtual bool pump() = 0;
  // New slots may go on (peer, conn): the peer grants it credit.
  virtual bool usable(std::uint32_t peer, std::uint32_t conn) const = 0;
  // The next time (TSC) pump() has timer work for, or UINT64_MAX.
  virtual std::uint64_t next_deadline() const = 0;
  // Another core learned that `peer` restarted as `boot`: start this core's
  // connections to it over too.
  virtual void peer_restarted(std::uint32_t peer, std::uint64_t boot) = 0;
  // The counters of (peer, conn), as the metrics contract has them.
  virtual void counters(std::uint32_t peer, std::uint32_t conn, abi::ConnCounters* out) const = 0;

  // FLOCK's schedulers (flock.cpp) drive every transport's connections
  // through these, once per scheduler interval (not per record).
  // Receiver side: the load the peer put on (peer, conn) since the last
  // call (UDP: the coalescing degrees its renewals reported; verbs: the
  // records it wrote); *data: whether it sent data at all.
  virtual std::uint64_t take_utilization(std::uint32_t peer, std::uint32_t conn, bool* data) = 0;
  // The QP scheduler's grant for the peer's sending on (peer, conn);
  // connection 0 stays active whatever is asked.
  virtual void set_inbound_active(std::uint32_t peer, std::uint32_t conn, bool active) = 0;
  // Every interval: a grant the peer may have missed is said again.
  virtual void remind_activation(std::uint32_t peer, std::uint32_t conn) = 0;
  // Records wait on (peer, conn), not yet sent.
  virtual bool has_pending(std::uint32_t peer, std::uint32_t conn) const = 0;
  // Moves what waits on (peer, conn) (whole slots) to *out, records back to
  // back; enqueue_records() queues them on another connection.
  virtual void take_pending(std::uint32_t peer, std::uint32_t conn, std::vector<std::uint8_t>* out) = 0;
  virtual void enqueue_records(std::uint32_t peer, std::uint32_t conn, const std::uint8_t* records,
                               std::size_t len) = 0;
  // The incarnation of `peer` this transport heard of (0: none yet), on a
  // connection of this core's (the QP scheduler asks core 0: connection 0).
  virtual std::uint64_t peer_boot(std::uint32_t peer) const = 0;
};

}  // namespace gossamer::dataplane
