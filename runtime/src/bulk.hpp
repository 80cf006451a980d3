// Large payloads over TCP (papers 001 §4.5; DESIGN.md "Large request").
// A request or response whose body is larger than
// `controlplane.large_request_threshold_bytes` sends only a reference
// (abi::BulkRef) through its slot; the body travels over a TCP connection
// between this run's instances on the two hosts. gossamerd brokers those
// connections (authenticated with the rack key) and hands them to the
// instance it starts, with the instances' session keys for each:
// GOSSAMER_BULK=<host>:<fd>:<send key>:<receive key>,... (controlplane/README.md).
// An instance started any other way has none, and large messages then go
// through the dataplane in pieces, as before.
//
// One I/O thread per process reads every payload and writes those the
// workers leave to it; a sending worker writes a payload of up to 16 KiB
// itself (never blocking) when nothing is queued before it. Workers never block on a
// socket. The stream on each connection is a sequence of
// transfers: a BulkWireHeader then `length` bytes, each authenticated as
// gossamer/abi/session.hpp says (header, its tag, the bytes, their tag; a
// tag that fails closes the connection, as a malformed header does). A
// sender hands a payload to send() and puts the reference in its slot (a
// batch may name several); the receiving worker finds
// the slot, then take()s the payload once it has arrived (either may come
// first). The worker waits without blocking anything: the slot stays
// unserved (or the response unconsumed) until the payload is there, and the
// I/O thread wakes it when it is.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gossamer/abi/session.hpp>

namespace gossamer::detail {

struct BulkWireHeader {
  std::uint32_t magic;   // kBulkMagic
  std::uint8_t kind;     // Bulk::Kind
  std::uint8_t pad[3];   // 0
  std::uint32_t from;    // sending thread (global id, on the sending host)
  std::uint32_t to;      // receiving thread (global id, on the receiving host)
  std::uint64_t id;      // the sender's transfer id, named by the slot's BulkRef
  std::uint64_t length;  // bytes that follow
};
static_assert(sizeof(BulkWireHeader) == 32);
inline constexpr std::uint32_t kBulkMagic = 0x4b4c5542;  // "BULK"
// The largest payload accepted (the runtime refuses larger requests before
// sending them, and the piece path refuses them too).
inline constexpr std::uint64_t kMaxBulkBytes = std::uint64_t(1) << 30;

class Bulk {
 public:
  enum Kind : std::uint8_t { kRequest = 1, kResponse = 2 };
  struct Rack {
    std::uint32_t host, hosts, total;  // this host, the rack's hosts and threads
  };

  // Parses GOSSAMER_BULK (nullptr or "" = no connections: returns null).
  // Every other host must be named once, with an fd that is a connected
  // stream socket and two keys (64 hex digits each); anything else is an
  // error (*error says what).
  static std::unique_ptr<Bulk> from_env(const char* env, const Rack& rack, std::uint32_t threshold,
                                        std::string* error);
  ~Bulk();

  // Starts the I/O thread; `wake(li)` wakes this host's worker li;
  // `finishing()` is true once the run is over on this host (a peer that
  // closes its connection then is done, not lost).
  void start(std::function<void(std::uint32_t)> wake, std::function<bool()> finishing);
  // Stops the I/O thread and closes the connections (after the run).
  void stop();

  // Bodies larger than this go over TCP.
  std::uint32_t threshold() const { return threshold_; }
  // The largest body a sending worker writes itself, on its own stack
  // (send()); larger ones the I/O thread writes.
  static constexpr std::size_t kDirectMax = 16 * 1024;
  // A connection to that host is open.
  bool usable(std::uint32_t host) const;
  // Queues a payload for host `host`; returns the id to name in the slot.
  std::uint64_t send(std::uint32_t host, Kind kind, std::uint32_t from, std::uint32_t to,
                     std::vector<std::byte> payload);
  // This host's worker li: takes the payload (kind, from, id) if it has arrived.
  bool take(std::uint32_t li, Kind kind, std::uint32_t from, std::uint64_t id, std::vector<std::byte>* out);
  // All or none: the payloads (kind, from, ids[i]) into out[0..n) once every
  // one of them has arrived (true); false, and nothing taken, until then.
  // `out` must hold n vectors.
  bool take_all(std::uint32_t li, Kind kind, std::uint32_t from, const std::uint64_t* ids, std::size_t n,
                std::vector<std::byte>* out);

  // Totals, for tests and the benchmark (any thread).
  std::uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  std::uint64_t bytes_received() const { return bytes_received_.load(std::memory_order_relaxed); }

 private:
  struct Out {
    BulkWireHeader h;
    std::vector<std::byte> payload;
    abi::SessionTag header_tag{}, body_tag{};  // set by the I/O thread, in wire order
  };
  struct Peer {
    std::uint32_t host = 0;
    int fd = -1;
    std::atomic<bool> open{false};
    std::mutex mu;              // guards `queue`
    std::deque<Out> queue;      // handed over by workers
    // Writing: the I/O thread, or a sending worker that finds nothing
    // queued before it (send()). Guards fd's closing too.
    std::mutex send_mu;
    std::deque<Out> sending;    // tagged, in wire order
    std::size_t sent = 0;       // bytes of sending.front() (header, tags, payload) written
    abi::SessionDirection out_tags;
    // I/O thread only
    std::deque<Out> taken;      // the queue as drain() took it
    bool want_out = false;
    abi::SessionDirection in_tags;
    // What is being read: the header and its tag, the body, the body's tag.
    struct {
      BulkWireHeader h;
      abi::SessionTag tag;
    } in{};
    std::size_t in_got = 0;     // bytes of `in` read
    decltype(in) ahead{};       // the next header and tag, read with a body's tag
    std::vector<std::byte> body;  // grows as the transfer's bytes arrive
    std::size_t body_got = 0;
    abi::SessionTag body_tag{};
    std::size_t tag_got = 0;
  };
  struct Arrival {
    Kind kind;
    std::uint32_t from;
    std::uint64_t id;
    std::vector<std::byte> payload;
  };
  struct Inbox {
    std::mutex mu;
    std::vector<Arrival> items;
  };

  Bulk() = default;
  void loop();
  void drain(Peer& p);        // takes the queue, writes what it can
  void push_tagged(Peer& p, Out&& o);  // under send_mu
  int write_some(Peer& p);    // under send_mu; 0 or the errno that ends the connection
  void kick();                // wakes the I/O thread unless it is woken already
  // Reads what it can; false: the peer is gone. Marks the workers that got
  // a payload in woken_; wake_marked() wakes them, once each, after the
  // round's reads (and before a connection is closed).
  bool receive(Peer& p);
  void wake_marked();
  void close_peer(Peer& p, const std::string& why);
  void watch(Peer& p);        // epoll interest: in, plus out while something waits

  // Global thread g is on host `host`.
  bool on_host(std::uint32_t g, std::uint32_t host) const;

  Rack rack_{};
  std::uint32_t first_ = 0, local_ = 0;  // this host's threads
  std::uint32_t threshold_ = 0;
  std::vector<std::unique_ptr<Peer>> peers_;  // by host; null for this host
  std::vector<std::unique_ptr<Inbox>> inbox_;  // by local thread
  std::function<void(std::uint32_t)> wake_;
  std::vector<bool> woken_;  // by local thread; I/O thread only
  std::function<bool()> finishing_;
  std::atomic<std::uint64_t> next_id_{1};
  std::atomic<std::uint64_t> bytes_sent_{0}, bytes_received_{0};
  std::atomic<bool> stop_{false};
  // Set by the first send() after the I/O thread last looked at the queues:
  // only that one writes the eventfd (one syscall per burst, not per body).
  std::atomic<bool> kicked_{false};
  int epoll_ = -1, event_ = -1;
  std::thread thread_;
};

}  // namespace gossamer::detail
