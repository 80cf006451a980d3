// One runtime thread: a fiber scheduler, a trustee serving its column of the
// square, and a client side with one channel per trustee. Private to
// libgossamer. Every member is touched only by the owning OS thread, except
// the ones in `Published` and `wake_word_` (atomics, loads and stores only).
#pragma once

#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/context/fiber.hpp>

#include <gossamer/abi/attach.hpp>
#include <gossamer/abi/slots.hpp>
#include <gossamer/detail/core.hpp>
#include <gossamer/runtime.hpp>

#include "bulk.hpp"
#include "property_table.hpp"
#include "square.hpp"
#include "stack_pool.hpp"

namespace gossamer::detail {

class Runtime;

// Requests queued to a trustee of this host that are sent in the middle of
// a pass (by record_closed, or between fibers) when the slot is free, and
// that make a fiber yield early when the batch in the slot is answered.
// Fewer wait for the end of the pass: a batch of one or two costs the
// trustee and the client a cache-line round trip each for little work.
constexpr std::uint32_t kEagerBatch = 16;

// Requests queued to a trustee on another host that go in the middle of a
// pass, when a fiber blocks while that many wait and none of the channel's
// batches is out; in a rack (unless polling is busy) the thread then hands
// the CPU to the dataplane at once (remote_eager_flush). The other host,
// which has nothing of ours to work on, serves them while this one runs
// the fibers that queue the rest, instead of receiving the whole pass's
// requests in one batch after it. A 2-host echo (64 blocking fibers, the
// hosts' processes pinned to one CPU each) keeps two batches of 32 in
// flight instead of one of 64: memif 3.2-3.5 M requests/s against 2.6-2.8 M
// before, in alternating runs; the flush without the yield gave 2.5-2.7 M,
// the dataplane carrying both halves in one frame after the pass
// (runtime/PERFORMANCE.md, "Two batches in flight to another host"). A
// fiber that goes on queueing (Hydra's loop) does not split its batches:
// that cost a pipelined 2-host Hydra 5-8 %. With a first version, 24 and 48
// did as well as 32; smaller batches pay more of a batch's fixed cost (a
// slot's rx and tx, two context switches) per request.
constexpr std::uint32_t kRemoteEagerBatch = 32;

// A fiber that suspends mid-pass hands the core straight to the next ready
// fiber; only every kSuspendCheck-th such handoff first looks whether the
// loop has work between fibers (loop_has_work: a load of every request
// slot's and every busy channel's ready word, lines the other threads
// write). With 32 blocking fibers the check cost ~50 instructions per
// request, a tenth of the client's work per blocking apply
// (PERFORMANCE.md, "Blocking apply: the client's cost").
constexpr std::uint32_t kSuspendCheck = 8;

class Fiber {
 public:
  boost::context::fiber ctx;  // the suspended fiber, while it is not running
  Fiber* next = nullptr;      // ready-queue link
  Task task;
  JoinState* join = nullptr;
  StackPool::Stack stack{};
  void* fake_stack = nullptr;  // AddressSanitizer bookkeeping
};

// Bytes appended at the end and consumed from the front. It grows
// geometrically and never shrinks, so steady state allocates nothing.
class ByteQueue {
 public:
  std::byte* grow(std::size_t n) {
    if (end_ + n > cap_) [[unlikely]] expand(end_ + n);
    std::byte* p = buf_.get() + end_;
    end_ += n;
    return p;
  }
  // Room for `n` more bytes after the end, without appending them: the
  // bytes up to limit() may be written, then appended with truncate().
  std::byte* reserve(std::size_t n) {
    if (end_ + n > cap_) [[unlikely]] expand(end_ + n);
    return buf_.get() + end_;
  }
  std::byte* limit() { return buf_.get() + cap_; }
  bool fits(std::size_t n) const { return end_ + n <= cap_; }  // reserve(n) would not grow
  std::byte* data() { return buf_.get(); }
  std::size_t size() const { return end_; }
  void truncate(std::size_t n) { end_ = n; }
  // Drops the first `n` bytes (already consumed).
  void consume_front(std::size_t n);

 private:
  void expand(std::size_t need);
  std::unique_ptr<std::byte[]> buf_;
  std::size_t end_ = 0, cap_ = 0;
};

// Requests from this thread to one trustee, in order.
struct Channel {
  ByteQueue queue;               // encoded records not yet in the slot
  std::size_t head = 0;          // first unsent byte of `queue`
  std::uint32_t queued = 0;      // records in queue[head..]
  // Same host: records in the slot awaiting responses, and `seq` the
  // batch's. Another host: batches awaiting responses (up to max_out, one
  // per lane, abi::kLanes), `seq` the oldest's and `sent` the newest's.
  std::uint32_t inflight = 0;
  std::uint32_t seq = 0;
  std::uint32_t sent = 0;
  std::uint32_t max_out = 1;
  const std::byte* response_seq = nullptr;  // the ready word of seq's response slot
  // To a trustee on another host: the trustee may hold responses back when
  // they do not fit the slot (abi::kResponseMore); the next batch then
  // fetches them, even if empty. Pieces of a response that spans slots
  // gather in `partial`.
  bool need_fetch = false;
  std::vector<std::byte> partial;
  // Completions of inflight then queued records, in order (a ring whose
  // size is a power of two).
  std::vector<Completion> ring;
  // mask: ring.size() - 1; cap: ring.size() (kept apart: a vector's size
  // is a division by sizeof(Completion), 48, on every push)
  std::size_t ring_head = 0, ring_size = 0, ring_mask = 0, ring_cap = 0;

  void push(const Completion& c) {
    if (ring_size == ring_cap) [[unlikely]] grow_ring();
    push_into_room(c);
  }
  void push_into_room(const Completion& c) {  // the caller saw ring_size < ring_cap
    ring[(ring_head + ring_size) & ring_mask] = c;
    ++ring_size;
  }
  Completion pop() {
    Completion c = ring[ring_head];
    drop_front();
    return c;
  }
  void drop_front() {
    ring_head = (ring_head + 1) & ring_mask;
    --ring_size;
  }
  void grow_ring();
};

// Parked completions wait for a kBuiltinComplete addressed to this thread.
struct ParkedTable {
  struct Entry {
    Completion c;
    std::uint32_t gen = 1;
    bool used = false;
  };
  std::vector<Entry> entries;
  std::vector<std::uint32_t> free;
  std::uint64_t park(const Completion& c);
  bool take(std::uint64_t token, Completion* out);
  std::size_t in_use = 0;
};

// State other threads of the process read for quiescence: the owner
// stores, others load. (The metrics are in abi::ThreadCounters.)
struct alignas(64) Published {
  std::atomic<std::uint64_t> activity{0};     // bumped with every change below
  std::atomic<std::int64_t> live_fibers{0};
  std::atomic<std::int64_t> outstanding{0};   // requests sent, response not yet handled
  std::atomic<std::uint64_t> parked{0};
};

// A trustee's state for one client on another host.
struct RemoteClient {
  ByteQueue out;                 // encoded responses not yet in a slot
  std::size_t out_head = 0;      // first unsent byte of `out`
  std::uint32_t front_sent = 0;  // body bytes of the front response already sent
  std::vector<std::byte> in_partial;  // kBuiltinPiece bodies so far
  bool discarding = false;  // pieces past 1 GiB: dropped until the record that ends them
};

bool is_control_completion(Completion::Fn fn);

// A block of a batch as its reader sees it.
struct BlockView {
  const std::byte* p;
  std::uint32_t len;
};

class Worker {
 public:
  Worker(Runtime& rt, ThreadId id);  // id: the rack-wide thread id
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void loop();  // until the runtime stops
  void shutdown_local();  // after the loop: destroy leftover properties

  ThreadId id() const { return id_; }
  Runtime& rt() { return rt_; }

  // scheduler (scheduler.cpp)
  void spawn(Task task, JoinState* join);
  void suspend();
  void make_ready(Fiber* f) {  // inline: every blocking call's completion calls it
    f->next = nullptr;
    if (ready_tail_) ready_tail_->next = f;
    else ready_head_ = f;
    ready_tail_ = f;
    ++ready_count_;
  }
  void yield();
  // The next suspend() looks for work between fibers (loop_has_work), so a
  // yield for such work goes back to the loop (preempt_slow).
  void check_at_next_suspend() { check_in_ = 1; }
  Fiber* current() const { return tl_state.fiber; }
  // Backpressure (client.cpp): suspends the running fiber until this
  // thread has fewer than max_outstanding requests awaiting responses.
  void wait_for_room();
  // Cooperative preemption (preempt_slow): true when a pass of the loop
  // has something to do (requests to serve, responses, batches to send;
  // min_batch as for flush_and_poll).
  bool loop_has_work(std::uint32_t min_batch = 1);

  // client side (client.cpp)
  Channel& channel(ThreadId to) { return channels_[to]; }
  // Always inlined into its two callers (close, send_record): left to GCC,
  // send_record called it through the PLT.
  [[gnu::always_inline]] inline void record_closed(ThreadId to, Channel& ch, bool remote);
  std::uint64_t park(const Completion& c);
  bool is_dirty(ThreadId to) const { return is_dirty_[to] != 0; }
  // An application's request closed (record_closed, and send_record's path
  // that calls nothing): counted.
  void count_sent() {
    ++tl_state.outstanding;
    ++requests_sent_;
    ++activity_;
  }
  void count_sent_remote() {
    count_sent();
    ++requests_sent_remote_;
  }
  bool record_open() const { return record_open_; }
  void set_record_open(bool open) { record_open_ = open; }
  void defer_toggle(ThreadId trustee, PropertyHandle h, std::uint64_t id) {
    deferred_toggles_.push_back({trustee, h, id});
  }
  bool has_deferred_toggles() const { return !deferred_toggles_.empty(); }
  void send_deferred_toggles();
  void drop_deferred_toggles() noexcept { deferred_toggles_.clear(); }
  void complete_parked(std::uint64_t token, std::uint32_t status, const std::byte* data,
                       std::uint32_t len);
  // A request that is not the application's (rack probes and stops): not
  // counted in outstanding/activity, so it does not disturb quiescence.
  void send_control(ThreadId to, std::uint32_t invoker, Completion done);
  bool control_send() const { return control_send_; }
  void publish_counters();

  // trustee side (trustee.cpp)
  PropertyTable& properties() { return props_; }

  // counters
  Published pub;
  // Metrics, stored once per loop iteration (publish_counters): in the
  // rack segment, where the dataplane samples them, or in own_counters_.
  const abi::ThreadCounters& counters() const { return *counters_; }
  std::uint64_t trust_counter = 0;
  ThreadId entrust_cursor = 0;

  // wake-up (scheduler.cpp): 1 while the thread sleeps or is about to
  std::atomic<std::uint32_t>* wake_word_;  // own_wake_, or in the rack segment
  std::atomic<std::uint32_t> own_wake_{0};
  bool shared_wake_ = false;
  void wake();

 private:
  friend class Runtime;
  // stages of loop()
  bool run_ready_fibers();
  bool serve_requests();      // trustee.cpp
  // client.cpp; min_batch: a channel to this host with fewer queued
  // requests is not flushed (between fibers: kEagerBatch)
  bool flush_and_poll(std::uint32_t min_batch = 1);
  // Spin, yield or sleep after a pass that found nothing; true when the
  // look for work before a sleep found some (and did it) instead.
  bool idle_backoff(bool worked);
  bool flush(ThreadId to);
  bool poll_responses(ThreadId to, std::uint32_t min_batch = 1);
  // flush_and_poll sends the channel's queue now (its slot is free).
  // (runtime_state.hpp)
  bool would_flush(ThreadId to, const Channel& ch, std::uint32_t min_batch) const;
  // The channel's batch has its responses (one load of the ready word).

 public:
  static bool response_ready(const Channel& ch) {
    auto* word = reinterpret_cast<std::uint32_t*>(const_cast<std::byte*>(ch.response_seq));
    return std::atomic_ref<std::uint32_t>(*word).load(std::memory_order_acquire) == ch.seq;
  }

 private:
  void serve_slot(ThreadId client, const abi::RequestSlotHeader& h);
  bool serve_remote_slot(ThreadId client, const abi::RequestSlotHeader& h);
  void emit_remote(ThreadId client, std::uint32_t seq);
  bool poll_remote_responses(ThreadId to);
  // The bodies sent over TCP that a batch's records name (records whose
  // `flags` field has `bit` and whose body is a BulkRef, anywhere in the
  // batch): kNone when it names none, kWaiting until every one has arrived
  // (nothing is taken meanwhile), else kTaken with them in *bodies in record
  // order and *whole saying whether each has its reference's length.
  enum class BulkBody { kNone, kWaiting, kTaken };
  template <class Header>
  BulkBody take_bulk_bodies(const BlockView (&blocks)[2], std::uint32_t count, std::uint32_t Header::*flags,
                            std::uint32_t bit, Bulk::Kind kind, ThreadId peer,
                            std::vector<std::vector<std::byte>>* bodies, bool* whole);
  // Both inlined where responses are read (client.cpp): per response.
  [[gnu::always_inline]] inline void complete_next(Channel& ch, std::uint32_t status, const std::byte* data,
                                                   std::uint32_t len);
  [[gnu::always_inline]] inline void fill_wait_slot(WaitSlot& w, std::uint32_t status, const std::byte* data,
                                                    std::uint32_t len);
  void ring_doorbell(std::uint32_t entry);

  [[noreturn]] static void fiber_main_fail(const char* what);
  static boost::context::fiber fiber_entry(Fiber* f, boost::context::fiber&& sched);
  void switch_to(Fiber* f);
  void take_from(boost::context::fiber&& from);
  Fiber* pop_ready() {
    Fiber* f = ready_head_;
    ready_head_ = f->next;
    if (!ready_head_) ready_tail_ = nullptr;
    f->next = nullptr;
    --ready_count_;
    return f;
  }
  void recycle(Fiber* f);

  Runtime& rt_;
  ThreadId id_;
  std::uint32_t li_;  // index among this host's workers
  Square& square_;
  // doorbell ring (rack only)
  abi::DoorbellRing* ring_ = nullptr;
  std::uint32_t* ring_entries_ = nullptr;
  std::uint32_t ring_head_ = 0, ring_mask_ = 0;
  std::uint32_t* dataplane_sleeping_ = nullptr;
  // We rang a doorbell: the next pass that finds nothing yields at once
  // instead of spinning (scheduler.cpp, idle_backoff), and so does one
  // that worked, at most every 50 us (yield_to_dataplane).
  bool rang_ = false;
  // This pass's yield_to_dataplane yielded: its time is idle, and the next
  // pass serves what came in meanwhile before the fibers run.
  bool serve_first_ = false;
  // Cycles that remote_eager_flush's yields gave away during this pass's
  // fibers: idle, not busy (loop()).
  std::uint64_t eager_yield_cycles_ = 0;
  bool control_send_ = false;
  std::uint32_t control_pending_ = 0;  // control requests awaiting responses

  // scheduler
  Fiber* ready_head_ = nullptr;
  Fiber* ready_tail_ = nullptr;
  std::size_t ready_count_ = 0;
  boost::context::fiber sched_ctx_;  // the scheduler, while a fiber runs
  std::size_t pass_left_ = 0;        // fibers of run_ready_fibers' pass not yet run
  std::uint32_t check_in_ = kSuspendCheck;  // handoffs until suspend() next calls loop_has_work
  Fiber* jumped_from_ = nullptr;     // who resumed the running context (nullptr: the scheduler)
  StackPool stacks_;
  std::vector<Fiber*> free_fibers_;
  std::int64_t live_fibers_ = 0;
  const void* sched_stack_bottom_ = nullptr;
  std::size_t sched_stack_size_ = 0;
  std::uint32_t idle_streak_ = 0;
  std::chrono::steady_clock::time_point yield_until_{};  // end of the yield phase (idle_backoff)
  std::chrono::steady_clock::time_point dp_yield_{};     // the last yield_to_dataplane
  void yield_to_dataplane();

 public:
  // A remote channel whose queue remote_eager_flush sends: kRemoteEagerBatch
  // records, none of its batches out.
  static bool eager_due(const Channel& ch) { return ch.queued >= kRemoteEagerBatch && !ch.inflight; }
  // A record for the remote channel `to` was queued (encode.cpp).
  void note_remote_queued(ThreadId to, const Channel& ch) {
    if (eager_due(ch)) [[unlikely]] eager_to_ = to;
  }
  // A fiber is about to block (suspend_current).
  void before_block() {
    if (eager_to_ != kNoEager) [[unlikely]] remote_eager_flush();
  }

 private:
  // The channel note_remote_queued saw due (kNoEager: none); the next
  // fiber that blocks sends it first (remote_eager_flush).
  static constexpr ThreadId kNoEager = ~ThreadId{0};
  ThreadId eager_to_ = kNoEager;
  void remote_eager_flush();

  // large payloads over TCP (rack, started by gossamerd): bodies larger
  // than bulk_threshold_ (UINT32_MAX: never)
  Bulk* bulk_ = nullptr;
  std::uint32_t bulk_threshold_ = UINT32_MAX;
  // The bodies of the batch being served (trustee) or taken (client), and
  // the ids and lengths its references name: reused from batch to batch.
  std::vector<std::vector<std::byte>> bulk_requests_, bulk_responses_;
  std::vector<abi::BulkRef> bulk_refs_;

  // trustee
  PropertyTable props_;
  std::vector<std::uint32_t> served_seq_;  // per client
  std::vector<const std::uint32_t*> request_words_;  // per client: its request slot's ready word
  std::vector<std::unique_ptr<RemoteClient>> remote_clients_;  // per client, lazily

  // client
  std::vector<Channel> channels_;
  std::vector<ThreadId> dirty_;            // channels with queued or inflight records
  std::vector<std::uint8_t> is_dirty_;
  ParkedTable parked_;
  std::vector<std::byte> response_copy_ =
      std::vector<std::byte>(abi::kResponsePrimaryData + abi::kOverflowBytes);
  bool record_open_ = false;
  struct DeferredToggle {
    ThreadId trustee;
    PropertyHandle handle;
    std::uint64_t id;
  };
  std::vector<DeferredToggle> deferred_toggles_;
  // Requests awaiting responses: tl_state.outstanding (read inline by
  // wait_for_room()). Fibers waiting for it to drop below the bound:
  std::vector<Fiber*> room_waiters_;
  std::uint64_t requests_sent_ = 0, responses_received_ = 0;
  std::uint64_t requests_served_ = 0, requests_served_remote_ = 0, slots_served_ = 0;
  std::uint64_t requests_sent_remote_ = 0;
  std::uint64_t tcp_bytes_sent_ = 0, tcp_bytes_received_ = 0;
  abi::ThreadCounters own_counters_{};
  abi::ThreadCounters* counters_ = &own_counters_;
  std::uint64_t busy_cycles_ = 0, serve_cycles_ = 0, idle_cycles_ = 0;
  std::uint64_t activity_ = 0;
};

template <class Header>
Worker::BulkBody Worker::take_bulk_bodies(const BlockView (&blocks)[2], std::uint32_t count,
                                          std::uint32_t Header::*flags, std::uint32_t bit, Bulk::Kind kind,
                                          ThreadId peer, std::vector<std::vector<std::byte>>* bodies, bool* whole) {
  if (!bulk_) return BulkBody::kNone;
  // The records walked as the readers walk them (a record that overruns its
  // block ends that block): what they will take for references.
  bulk_refs_.clear();
  std::uint32_t seen = 0;
  for (const BlockView& b : blocks) {
    std::uint32_t off = 0;
    while (seen < count && off + sizeof(Header) <= b.len) {
      Header rh;
      std::memcpy(&rh, b.p + off, sizeof rh);
      const std::uint32_t size = sizeof rh + abi::align_record(rh.length);
      if (rh.length > b.len || off + size > b.len) break;
      if ((rh.*flags & bit) && rh.length == sizeof(abi::BulkRef)) {
        abi::BulkRef ref;
        std::memcpy(&ref, b.p + off + sizeof rh, sizeof ref);
        bulk_refs_.push_back(ref);
      }
      off += size;
      ++seen;
    }
  }
  if (bulk_refs_.empty()) return BulkBody::kNone;
  const std::size_t n = bulk_refs_.size();
  std::uint64_t stack_ids[64];
  std::vector<std::uint64_t> heap_ids;
  std::uint64_t* ids = stack_ids;
  if (n > 64) {
    heap_ids.resize(n);
    ids = heap_ids.data();
  }
  for (std::size_t i = 0; i < n; ++i) ids[i] = bulk_refs_[i].id;
  if (bodies->size() < n) bodies->resize(n);
  if (!bulk_->take_all(li_, kind, peer, ids, n, bodies->data())) return BulkBody::kWaiting;
  *whole = true;
  for (std::size_t i = 0; i < n; ++i) {
    *whole &= (*bodies)[i].size() == bulk_refs_[i].length;
    tcp_bytes_received_ += (*bodies)[i].size();
  }
  return BulkBody::kTaken;
}

Worker* worker_or_null() noexcept;
void send_toggle(ThreadId trustee, PropertyHandle h, std::uint64_t id);

}  // namespace gossamer::detail
