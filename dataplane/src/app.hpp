// An attached application instance, seen from the dataplane: its socket, its
// mapped segment, and what the dataplane remembers about each slot so that
// nothing an application writes can make it act twice or out of bounds.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <gossamer/abi/attach.hpp>

#include "rack_keys.hpp"
#include "scheduler.hpp"

namespace gossamer::dataplane {

// What the handshake checks before anything is mapped. Pure, so that the
// fuzz target can call it. `msg_len` is what recv returned; `hdr` is a copy
// of the segment's first bytes (valid when `segment_size` >= its size).
struct AttachCheck {
  std::uint32_t host_index;
  std::uint32_t host_count;
  std::uint64_t segment_size;   // fstat of the memfd
  bool sealed;                  // F_SEAL_SHRINK and F_SEAL_GROW present
  int fds;                      // descriptors received
};
// Returns "" when the attach may proceed, else the reason sent back.
std::string check_attach(const void* msg, std::size_t msg_len, const abi::SegmentHeader& hdr,
                         const AttachCheck& c, abi::SegmentLayout* layout);

// The run an attach request names (abi::AttachRequest::run_id), once
// check_attach has accepted the request. Run keys of gossamerd's runs have
// kIssuedRunBit set, all others have it clear: an instance without a token
// can never land in a run gossamerd started, whatever id it claims.
inline constexpr std::uint64_t kIssuedRunBit = 1ull << 63;
struct RunClaim {
  std::string id;         // GOSSAMER_RUN_ID; "" when the build-id names the run
  std::uint64_t key = 0;  // the run key, in the records and announces
  bool issued = false;    // gossamerd's run, admitted by its token
};
// "" when the attacher may claim the run it names (*out set), else why not:
// a gossamerd run id without the token for this host, a token with any other
// run id, or no rack secret to check the token with. Such a refusal is a
// denial (counted as apps_denied).
std::string claim_run(const abi::AttachRequest& r, std::uint32_t host, const RunTokens& tokens, RunClaim* out);

// A run without a token is bound to its owner: the uid (SO_PEERCRED) of its
// first instance in the rack. Another instance may join it with that uid,
// or as root (which then joins under the run's owner).
constexpr bool may_join(std::uint32_t uid, std::uint32_t owner) { return uid == owner || uid == 0; }

struct App {
  int sock = -1;
  int memfd = -1;
  int eventfd = -1;
  std::uint32_t pid = 0;           // as the application says
  std::uint32_t peer_pid = 0;      // as the kernel says (SO_PEERCRED)
  std::uint32_t uid = 0;           // SO_PEERCRED
  std::uint32_t owner = 0;         // the uid its run is bound to (may_join); announced
  std::string name;                // /proc/<peer_pid>/comm, for metrics
  std::uint64_t key = 0;          // run key (RunClaim)
  bool issued = false;             // a gossamerd run, admitted by its token
  std::uint64_t build_hash = 0;
  std::uint32_t instance = 0;
  std::uint32_t total = 0, first = 0, local = 0;
  bool started = false;
  // Broke the contract or went away: detached at core 0's next chance. Any
  // core may set it (fail()); core 0 reads the reason.
  std::atomic<bool> bad{false};
  std::atomic<const char*> failure{nullptr};
  std::string bad_reason;          // core 0
  std::uint32_t drains_pending = 0;  // core 0: detaching, cores still serving its doorbells
  void fail(const char* why) {
    const char* none = nullptr;
    failure.compare_exchange_strong(none, why);
    bad.store(true);
  }
  std::uint8_t* base = nullptr;
  std::size_t bytes = 0;
  abi::SegmentLayout layout{};
  // Per local thread: dataplane's copy of its doorbell tail (the thread's
  // core only).
  std::vector<std::uint32_t> tail;
  // Slot bookkeeping, indexed [local][global]:
  //   out_resp: last response seq shipped for (trustee local, client remote)
  //   client_out: batches in flight (0 to kLanes) for (client local,
  //           trustee remote): shipped, not answered yet
  //   trustee_out: the same for (trustee local, client remote): delivered,
  //           not answered yet
  //   client_epoch, trustee_epoch: the peer's epoch (Peer::open) the
  //           pair's exchange was opened in, stored by the batch that
  //           took the count from 0 to 1, before the batch is published
  // and [lane][local][global]:
  //   out_req: last request seq shipped in the lane for (client local,
  //           trustee remote); 0 before the first
  //   in_req: last request seq written into the lane for (trustee local,
  //           client remote); 0 before the first
  // Ships (doorbells) come in seq order, from the local thread's core.
  // Deliveries, from the core of the connection a record arrived on, may
  // come out of order when a pair's batches take several connections: each
  // lane has at most one, so no two cores write the same word at once, but
  // they read each other's: every access is an atomic (get/set; relaxed
  // unless a caller orders it). The in-flight counts change on two cores
  // (shipping and delivery): read-modify-writes (batch_out, batch_back).
  std::vector<std::uint32_t> out_req, in_req, out_resp, client_out, trustee_out, client_epoch, trustee_epoch;
  std::uint32_t get(std::vector<std::uint32_t>& v, std::uint32_t local_i, std::uint32_t g, std::uint32_t lane = 0,
                    std::memory_order mo = std::memory_order_relaxed) {
    return std::atomic_ref<std::uint32_t>(at(v, local_i, g, lane)).load(mo);
  }
  void set(std::vector<std::uint32_t>& v, std::uint32_t local_i, std::uint32_t g, std::uint32_t x,
           std::uint32_t lane = 0, std::memory_order mo = std::memory_order_relaxed) {
    std::atomic_ref<std::uint32_t>(at(v, local_i, g, lane)).store(x, mo);
  }
  // The last request seq shipped to trustee g: the later of its lanes'
  // (serial arithmetic: seqs wrap at 2^32).
  std::uint32_t last_shipped(std::uint32_t local_i, std::uint32_t g) {
    std::uint32_t last = get(out_req, local_i, g, 0);
    for (std::uint32_t lane = 1; lane < abi::kLanes; ++lane) {
      const std::uint32_t l = get(out_req, local_i, g, lane);
      if (std::int32_t(l - last) > 0) last = l;
    }
    return last;
  }
  // Request q to trustee g is the one its lane shipped last (any lane's
  // answer may come first): a response to anything else is stale or
  // forged. Before the first, a lane's last is 0; a response numbered 0
  // then finds its slot's seq 0 as well, i.e. a duplicate (deliver.cpp).
  // Acquire: the ship counted the batch (client_out) before it stored q.
  bool lane_shipped(std::uint32_t local_i, std::uint32_t g, std::uint32_t q) {
    return get(out_req, local_i, g, q, std::memory_order_acquire) == q;
  }
  // A pair's batch goes out (v: client_out or trustee_out); true when it is
  // the pair's first in flight, which opens an exchange (Peer::open).
  bool batch_out(std::vector<std::uint32_t>& v, std::uint32_t local_i, std::uint32_t g) {
    return std::atomic_ref<std::uint32_t>(at(v, local_i, g, 0)).fetch_add(1, std::memory_order_relaxed) == 0;
  }
  // A pair's batch is answered; true when it was the pair's last in flight,
  // which closes its exchange. Never below 0 (a duplicate that got past the
  // checks would otherwise wrap it and keep the exchange open for good).
  bool batch_back(std::vector<std::uint32_t>& v, std::uint32_t local_i, std::uint32_t g) {
    std::atomic_ref<std::uint32_t> n(at(v, local_i, g, 0));
    std::uint32_t x = n.load(std::memory_order_relaxed);
    do {
      if (x == 0) return false;
    } while (!n.compare_exchange_weak(x, x - 1, std::memory_order_relaxed));
    return x == 1;
  }
  // Per (peer host, local thread): what the thread sent to that host lately
  // (sizes of its last slots; bytes and slots decaying over ~64 ms, see
  // flock.cpp), and the connection the thread scheduler put it on (papers
  // 002 §3.4.2).
  struct Flow {
    RunningMedian size;
    std::uint64_t bytes = 0, slots = 0;
    std::uint8_t conn = 0;  // written by the thread's core, read by any (get_conn)
    std::uint8_t get_conn() { return std::atomic_ref<std::uint8_t>(conn).load(std::memory_order_relaxed); }
    void set_conn(std::uint8_t c) { std::atomic_ref<std::uint8_t>(conn).store(c, std::memory_order_relaxed); }
  };
  std::vector<Flow> flows;  // [host * local + local thread]
  Flow& flow(std::uint32_t host, std::uint32_t local_i) { return flows[std::size_t(host) * local + local_i]; }

  bool is_local(std::uint32_t g) const { return g >= first && g < first + local; }
  // Request `q` may go into its lane, whose last was `last` (0: none yet):
  // the lane's next (kLanes batches on), or the lane's first (batch 1 to kLanes).
  static constexpr bool next_in_lane(std::uint32_t last, std::uint32_t q) {
    return q == last + abi::kLanes || (last == 0 && q != 0 && q <= abi::kLanes);
  }
  std::uint32_t& at(std::vector<std::uint32_t>& v, std::uint32_t local_i, std::uint32_t g, std::uint32_t lane) {
    return v[(std::size_t(lane % abi::kLanes) * local + local_i) * total + g];
  }
  // Batch seq of a pair uses lane seq % abi::kLanes (attach.hpp).
  std::size_t cell(std::uint32_t lane, std::uint32_t major, std::uint32_t minor) const {
    return abi::slot_cell(total, lane, major, minor);
  }
  std::uint8_t* request_primary(std::uint32_t trustee, std::uint32_t client, std::uint32_t lane) {
    return base + layout.request_primary + cell(lane, trustee, client) * abi::kPrimaryBytes;
  }
  std::uint8_t* request_overflow(std::uint32_t trustee, std::uint32_t client, std::uint32_t lane) {
    return base + layout.request_overflow + cell(lane, trustee, client) * abi::kOverflowBytes;
  }
  std::uint8_t* response_primary(std::uint32_t client, std::uint32_t trustee, std::uint32_t lane) {
    return base + layout.response_primary + cell(lane, client, trustee) * abi::kPrimaryBytes;
  }
  std::uint8_t* response_overflow(std::uint32_t client, std::uint32_t trustee, std::uint32_t lane) {
    return base + layout.response_overflow + cell(lane, client, trustee) * abi::kOverflowBytes;
  }
  std::uint32_t* wake_word(std::uint32_t local_i) {
    return reinterpret_cast<std::uint32_t*>(base + layout.wake_words + local_i * abi::kWakeStride);
  }
  abi::DoorbellRing* ring(std::uint32_t local_i) {
    return reinterpret_cast<abi::DoorbellRing*>(base + layout.doorbells + local_i * layout.doorbell_stride);
  }
  const abi::ThreadCounters* counters(std::uint32_t local_i) const {
    return reinterpret_cast<const abi::ThreadCounters*>(base + layout.counters + local_i * sizeof(abi::ThreadCounters));
  }
  std::uint32_t* sleeping() {
    return reinterpret_cast<std::uint32_t*>(base + offsetof(abi::SegmentHeader, dataplane_sleeping));
  }
  void wake_thread(std::uint32_t local_i);
};

std::uint64_t hash_build_id(const std::uint8_t* id, std::size_t len);
// The key of a run named by GOSSAMER_RUN_ID, before kIssuedRunBit.
std::uint64_t hash_run_id(std::string_view id);

}  // namespace gossamer::dataplane
