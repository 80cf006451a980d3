// The per-thread loop, fibers on Boost.Context, and adaptive polling.
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <ctime>
#include <exception>
#include <utility>

#include "runtime_state.hpp"
#include "worker.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define GOSSAMER_ASAN 1
#endif
// ThreadSanitizer: fibers never move between OS threads, so TSan need not
// know about them, as long as it does not track function entry and exit
// (a stack switch unbalances them). TSan builds therefore use
// --param=tsan-instrument-func-entry-exit=0 (tools/run-tests).
#if defined(__SANITIZE_THREAD__)
#define GOSSAMER_TSAN 1
#endif

namespace gossamer::detail {

namespace {
inline std::uint64_t cycles() { return __builtin_ia32_rdtsc(); }
inline void cpu_relax() { __builtin_ia32_pause(); }

// Adaptive polling: spin this many empty iterations, then yield the core
// for Options::yield_us (runtime.yield_us), then sleep (woken by whoever
// gives us work, or the timeout). The yield phase is timed, not counted: a thread waiting for an
// answer that takes longer than the spin (a remote request, a busy
// trustee on a shared core) must not fall asleep in the middle of a load,
// or every answer then waits for a wake-up (futex, IPI, context switch);
// the dataplane had the same cost and the same cure (dataplane/src/loop.cpp).
constexpr std::uint32_t kSpinIterations = 512;
// In a rack the answers to our remote requests, and the requests we serve,
// come through the host's dataplane, a polling process that may need this
// very CPU to deliver them (a 2-core host runs two applications' threads and
// a dataplane core, or a rack in a box four pollers): a worker that spins
// keeps it waiting until the spin ends. There (a worker with a shared wake
// word), the yield phase starts at the first idle pass: tools/bench/echo-rack
// side by side, dataplane/POLLING.md ("The runtime's spin in a rack").
constexpr std::uint32_t kRackSpinIterations = 1;
constexpr long kSleepNanos = 2'000'000;
constexpr std::uint32_t kIdlePublish = 64;

long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t val, const timespec* ts) {
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, val, ts, nullptr, 0);
}
}  // namespace

Worker::Worker(Runtime& rt, ThreadId id)
    : rt_(rt), id_(id), li_(id - rt.first()), square_(rt.square()), stacks_(rt.options().stack_size) {
  std::uint32_t n = rt.size();
  served_seq_.assign(n, 0);
  // Where each client's next batch will be: lane 0 on this host; across
  // hosts batch 1's lane (then seq % abi::kLanes).
  for (ThreadId c = 0; c < n; ++c)
    request_words_.push_back(
        reinterpret_cast<const std::uint32_t*>(square_.request_primary(id_, c, rt.is_local(c) ? 0 : 1)));
  channels_.resize(n);
  for (ThreadId to = 0; to < n; ++to) {
    channels_[to].response_seq = square_.response_primary(id_, to);
    channels_[to].max_out = rt.is_local(to) ? 1 : abi::kLanes;
  }
  is_dirty_.assign(n, 0);
  entrust_cursor = 0;
  wake_word_ = &own_wake_;
  if (std::byte* seg = square_.segment()) {
    // In a rack the dataplane writes our slots and wakes us: the wake word
    // and our doorbell ring live in the shared segment.
    const abi::SegmentLayout& l = square_.layout();
    wake_word_ = reinterpret_cast<std::atomic<std::uint32_t>*>(seg + l.wake_words + li_ * abi::kWakeStride);
    shared_wake_ = true;
    ring_ = reinterpret_cast<abi::DoorbellRing*>(seg + l.doorbells + li_ * l.doorbell_stride);
    ring_entries_ = reinterpret_cast<std::uint32_t*>(ring_ + 1);
    ring_mask_ = l.doorbell_entries - 1;
    dataplane_sleeping_ = reinterpret_cast<std::uint32_t*>(seg + offsetof(abi::SegmentHeader, dataplane_sleeping));
    counters_ = reinterpret_cast<abi::ThreadCounters*>(seg + l.counters + li_ * sizeof(abi::ThreadCounters));
    remote_clients_.resize(n);
    if (Bulk* b = rt.rack()->bulk()) {
      bulk_ = b;
      bulk_threshold_ = b->threshold();
    }
  }
}

// Tells the dataplane about a slot it must carry: one entry in this
// thread's ring, then (Dekker, as for threads) a kick if it sleeps.
void Worker::ring_doorbell(std::uint32_t entry) {
  std::atomic_ref<std::uint32_t> tail(ring_->tail);
  while (ring_head_ - tail.load(std::memory_order_acquire) > ring_mask_) cpu_relax();  // never full in practice
  std::atomic_ref<std::uint32_t>(ring_entries_[ring_head_ & ring_mask_]).store(entry, std::memory_order_relaxed);
  ++ring_head_;
  std::atomic_ref<std::uint32_t>(ring_->head).store(ring_head_, std::memory_order_release);
  std::atomic_ref<std::uint32_t> sleeping(*dataplane_sleeping_);
#if GOSSAMER_TSAN
  const bool asleep = sleeping.fetch_or(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const bool asleep = sleeping.load(std::memory_order_relaxed);
#endif
  if (asleep) rt_.rack()->kick();
  rang_ = true;
}

Worker::~Worker() {
  for (Fiber* f : free_fibers_) delete f;
}

// ---- the loop ----------------------------------------------------------------

void Worker::loop() {
  // One TSC read per iteration that works (rdtsc costs tens of cycles, and
  // a loaded thread runs a pass every few dozen operations), two per idle
  // one; serve_requests times the batches it serves.
  std::uint64_t last = cycles();
  while (!rt_.stopping()) {
    bool worked = false;
    // After a yield to the dataplane (yield_to_dataplane), what it brought
    // meanwhile first: the fibers may compute for a while.
    if (std::exchange(serve_first_, false)) worked = serve_requests() | flush_and_poll();
    worked |= run_ready_fibers();       // every fiber that is ready now, once
    worked |= serve_requests();         // trustee: requests from every client
    worked |= flush_and_poll();         // client: responses in, requests out
    if (li_ == 0 && rt_.main_done) rt_.check_done(*this);  // all done?

    std::uint64_t now = cycles();
    // The fibers' yields to the dataplane (remote_eager_flush) were idle.
    // (Clamped: a thread that moved between CPUs may read a skewed TSC.)
    const std::uint64_t gave = std::min(std::exchange(eager_yield_cycles_, 0), now - last);
    idle_cycles_ += gave;
    (worked ? busy_cycles_ : idle_cycles_) += now - last - gave;
    last = now;
    // Everything quiescence reads changes only in an iteration that worked;
    // idle ones publish the cycle counters every kIdlePublish iterations.
    if (worked || (idle_streak_ + 1) % kIdlePublish == 0) publish_counters();
    // Pausing, yielding the core or asleep is idle; when the look for work
    // before a sleep found some, doing it was busy (serve_cycles counts the
    // batches it served, and must stay within busy_cycles).
    const bool found = idle_backoff(worked);
    // serve_first_ is set here only by this pass's yield_to_dataplane (the
    // pass cleared it first): the time that yield gave away is idle.
    if (!worked || serve_first_) {
      last = cycles();
      (found ? busy_cycles_ : idle_cycles_) += last - now;
    }
  }
  publish_counters();
}

namespace {
// A plain store of a whole word that a reader in another thread or process
// may load at any time (no read-modify-write: only this thread writes).
inline void put(std::uint64_t& field, std::uint64_t v) {
  std::atomic_ref<std::uint64_t>(field).store(v, std::memory_order_relaxed);
}
}  // namespace

void Worker::publish_counters() {
  pub.live_fibers.store(live_fibers_, std::memory_order_relaxed);
  pub.outstanding.store(std::int64_t(tl_state.outstanding), std::memory_order_relaxed);
  pub.parked.store(parked_.in_use, std::memory_order_relaxed);
  abi::ThreadCounters& c = *counters_;
  put(c.busy_cycles, busy_cycles_);
  put(c.serve_cycles, serve_cycles_);
  put(c.idle_cycles, idle_cycles_);
  put(c.requests_served_local, requests_served_ - requests_served_remote_);
  put(c.requests_served_remote, requests_served_remote_);
  put(c.slots_served, slots_served_);
  put(c.requests_sent_local, requests_sent_ - requests_sent_remote_);
  put(c.requests_sent_remote, requests_sent_remote_);
  put(c.responses_received, responses_received_);
  put(c.local_applies, tl_state.local_applies);  // always this worker's thread
  put(c.fibers_ready, ready_count_);
  put(c.tcp_bytes_sent, tcp_bytes_sent_);
  put(c.tcp_bytes_received, tcp_bytes_received_);
  // Release: whoever sees this activity value sees the counters above.
  pub.activity.store(activity_, std::memory_order_release);
}

bool Worker::idle_backoff(bool worked) {
  // Activity counts what can create work (fibers, requests, completions),
  // where it happens; serving a request or polling does not bump it, so
  // that rack probes, which are served like requests, leave it unchanged.
  if (worked) {
    idle_streak_ = 0;
    if (shared_wake_ && !rt_.busy_polling()) yield_to_dataplane();
    return false;
  }
  ++idle_streak_;
  if (std::exchange(rang_, false) && !rt_.busy_polling()) {
    // The dataplane that must carry what we rang for may run on this CPU,
    // woken by our kick or yielding in its own loop, and wait for us to
    // stop (the scheduler does not preempt a thread for a waker that keeps
    // running): let it run now rather than after the spin, which added
    // ~20 us to each hop of the first request after an idle period
    // (PERFORMANCE.md "The first request after an idle period"). This
    // pass is not one of the spin's: the spin (and in a rack, the yield
    // phase, which the spin's last pass starts) comes after it.
    idle_streak_ = 0;
    ::sched_yield();
    return false;
  }
  const std::uint32_t spin = shared_wake_ ? kRackSpinIterations : kSpinIterations;
  if (rt_.busy_polling() || idle_streak_ < spin) {
    cpu_relax();
    return false;
  }
  if (idle_streak_ == spin)
    yield_until_ = std::chrono::steady_clock::now() + std::chrono::microseconds(rt_.options().yield_us);
  if (std::chrono::steady_clock::now() < yield_until_) {
    ::sched_yield();
    return false;
  }
  // Sleep. Announce it first, then look for work once more: a thread that
  // hands us work publishes it, fences, then reads wake_word_ (Dekker), so
  // either we see its work here or it sees our announcement and wakes us.
  wake_word_->store(1, std::memory_order_seq_cst);
  bool found = serve_requests() | flush_and_poll() | (ready_head_ != nullptr);
  if (found || rt_.stopping()) {
    wake_word_->store(0, std::memory_order_relaxed);
    idle_streak_ = 0;
    publish_counters();  // what it found may have changed what quiescence reads
    return found;
  }
  publish_counters();  // the last idle cycles, before sleeping
  // Worker 0 re-checks quiescence on its own after the timeout.
  timespec ts{0, kSleepNanos};
  futex(wake_word_, shared_wake_ ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, 1, &ts);
  wake_word_->store(0, std::memory_order_relaxed);
  return false;
}

// A pass that worked, in a rack (whose dataplane shares the CPUs with the
// applications), gives the CPU to the dataplane now and then:
// - after a ring (rang_, this pass or an earlier one), at most every
//   kRingYield. The idle pass below yields to the dataplane after a ring;
//   a thread whose fibers are always ready (an event loop that yields every
//   round, as Hydra's; a computation that yields now and then) never has
//   one, and a dataplane on this CPU then waits with what we rang for
//   until the kernel preempts us. A switch costs ~1.5 us on this VM, and a
//   Hydra that yielded after every round with batches for another host lost
//   11 % of its pipelined GETs on a rack (tools/apps/kvstore/README.md,
//   "Yielding to the dataplane"). Until it yields, rang_ stays set for the
//   idle pass.
// - without a ring, at most every kRackYield while the dataplane is awake:
//   frames for this host (requests for our trustee, answers for our
//   clients) wait in the port until the dataplane runs, and a dataplane in
//   its yield phase is runnable but never preempts a thread that computes
//   (the kernel let SSSP's partitions compute for milliseconds before it;
//   a chunk of updates took 0.8-1 ms to reach the other host, 0.25 ms
//   between two threads of one host: tools/apps/sssp/SCALING.md, "A CPU
//   per host"). A sleeping dataplane needs no yield: the frame's wake-up
//   preempts us. (The word has a bit per sleeping polling core: with
//   several cores, one asleep stops these yields for every thread.)
// Then the next pass serves what came in before its fibers run (serve_first_).
// The time the yield gives away counts as idle (loop()).
void Worker::yield_to_dataplane() {
  constexpr auto kRingYield = std::chrono::microseconds(50);
  constexpr auto kRackYield = std::chrono::microseconds(120);
  if (!rang_ && std::atomic_ref<std::uint32_t>(*dataplane_sleeping_).load(std::memory_order_relaxed)) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - dp_yield_ < (rang_ ? kRingYield : kRackYield)) return;
  dp_yield_ = now;
  rang_ = false;
  serve_first_ = true;
  ::sched_yield();
}

// A fiber is about to block (suspend_current) while kRemoteEagerBatch
// records wait for a trustee on another host with none of the channel's
// batches out: publish them now, and in a rack whose dataplane may share
// this CPU, let it carry them before the other fibers queue more, so that
// the other host works on them meanwhile (with busy polling the dataplane
// has a CPU of its own: no yield). Only when a fiber blocks: a fiber that
// goes on queueing (Hydra's loop, apply_then) has work without the
// answers, and splitting its batches cost a pipelined 2-host Hydra 5-8 %
// (runtime/PERFORMANCE.md, "Two batches in flight to another host"). Not
// in delegated context (a closure or completion that blocks is an error
// anyway), and not when a body of the batch may go over TCP written by
// this thread (a large-request threshold below Bulk::kDirectMax): that
// write, its iovecs and its tag would run on the fiber's stack.
void Worker::remote_eager_flush() {
  const ThreadId to = std::exchange(eager_to_, kNoEager);
  if (!eager_due(channels_[to])) return;  // sent since
  if (tl_state.delegated_depth > 0 || bulk_threshold_ < Bulk::kDirectMax || !flush(to)) return;
  if (!shared_wake_ || rt_.busy_polling()) return;
  const std::uint64_t t0 = cycles();
  rang_ = false;  // this yield is the one the ring asked for
  ::sched_yield();
  eager_yield_cycles_ += cycles() - t0;
}

void Worker::wake() {
  if (rt_.busy_polling() && !rt_.stopping()) return;
  // StoreLoad barrier between the caller's publishing store and this load.
#if GOSSAMER_TSAN
  if (wake_word_->fetch_or(0, std::memory_order_seq_cst)) {  // TSan has no fences
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (wake_word_->load(std::memory_order_relaxed)) {
#endif
    wake_word_->store(0, std::memory_order_relaxed);
    futex(wake_word_, shared_wake_ ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, 1, nullptr);
  }
}

// ---- fibers ------------------------------------------------------------------

bool Worker::run_ready_fibers() {
  // Only the fibers ready at the start: polling must not starve. A fiber
  // that suspends hands the core straight to the next of them unless the
  // loop has something to do between the two (looked at every
  // kSuspendCheck handoffs, in suspend): the scheduler sees the pass again
  // only at its end, or when such a look found work.
  const std::size_t n = ready_count_;
  pass_left_ = n;
  while (pass_left_ != 0) {
    --pass_left_;
    switch_to(pop_ready());
    // Between fibers: serve what came in, fetch responses that arrived and
    // send what the fibers queued, so that the other threads work while the
    // rest of the fibers run instead of after them.
    if (pass_left_ != 0) {
      serve_requests();
      if (!dirty_.empty()) flush_and_poll(kEagerBatch);
    }
  }
  return n != 0;
}

// Whether a pass of the loop would find something to do now: a request
// slot to serve, a response to fetch, or a batch to send (preempt_slow);
// with min_batch kEagerBatch, what run_ready_fibers does between two
// fibers (suspend). One load per request slot and per dirty channel.
bool Worker::loop_has_work(std::uint32_t min_batch) {
  const std::size_t n = request_words_.size();
  for (std::size_t c = 0; c < n; ++c)
    if (std::atomic_ref<std::uint32_t>(*const_cast<std::uint32_t*>(request_words_[c])).load(std::memory_order_relaxed) ==
        served_seq_[c] + 1)
      return true;
  for (ThreadId to : dirty_) {
    const Channel& ch = channels_[to];
    // As flush_and_poll: an answer to take, or room for a batch to send.
    if ((ch.inflight && response_ready(ch)) || (ch.inflight < ch.max_out && would_flush(to, ch, min_batch)))
      return true;
  }
  return false;
}

void Worker::spawn(Task task, JoinState* join) {
  Fiber* f;
  if (!free_fibers_.empty()) {
    f = free_fibers_.back();
    free_fibers_.pop_back();
  } else {
    f = new Fiber;
  }
  f->task = std::move(task);
  f->join = join;
  f->stack = stacks_.get();
  // Boost.Context places its control record at the top of the stack we
  // hand it; the preallocated overload lets us keep the stack for reuse.
  StackPool::Stack sc = f->stack;
  f->ctx = boost::context::fiber(
      std::allocator_arg, boost::context::preallocated(sc.sp, sc.size, sc),
      PooledStackAllocator(stacks_),
      [f](boost::context::fiber&& sched) { return fiber_entry(f, std::move(sched)); });
  ++live_fibers_;
  ++activity_;
  pub.live_fibers.store(live_fibers_, std::memory_order_relaxed);
  make_ready(f);
}

void Worker::fiber_main_fail(const char* what) {
  std::fprintf(stderr, "gossamer: fatal: uncaught exception in a fiber: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

// Fiber switches. A context is resumed either by the scheduler
// (switch_to) or, directly, by a fiber that suspends (suspend): whoever
// jumps sets jumped_from_ (nullptr: the scheduler) and tl_state.fiber (the
// fiber it resumes), and the side that wakes up stores the context it was
// handed in the jumper's place (take_from).
inline void Worker::take_from(boost::context::fiber&& from) {
  if (jumped_from_) jumped_from_->ctx = std::move(from);
  else sched_ctx_ = std::move(from);
}

boost::context::fiber Worker::fiber_entry(Fiber* f, boost::context::fiber&& from) {
  Worker* w = worker_or_null();
#if GOSSAMER_ASAN
  const void* bottom = nullptr;
  std::size_t size = 0;
  __sanitizer_finish_switch_fiber(nullptr, &bottom, &size);
  if (!w->jumped_from_) {  // the stack we came from is the scheduler's
    w->sched_stack_bottom_ = bottom;
    w->sched_stack_size_ = size;
  }
#endif
  w->take_from(std::move(from));
  try {
    f->task();
  } catch (const std::exception& e) {
    fiber_main_fail(e.what());
  } catch (...) {
    fiber_main_fail("(not a std::exception)");
  }
  f->task.reset();
  if (JoinState* j = f->join) {
    j->done = true;
    if (Fiber* waiter = std::exchange(j->waiter, nullptr)) w->make_ready(waiter);
    j->release();
  }
  f->join = nullptr;
  // A fiber that ends goes back to the scheduler, which recycles it.
  w->jumped_from_ = f;
#if GOSSAMER_ASAN
  __sanitizer_start_switch_fiber(nullptr, w->sched_stack_bottom_, w->sched_stack_size_);
#endif
  return std::move(w->sched_ctx_);
}

void Worker::switch_to(Fiber* f) {
  tl_state.fiber = f;
  jumped_from_ = nullptr;
#if GOSSAMER_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, static_cast<char*>(f->stack.sp) - f->stack.size,
                                 f->stack.size);
#endif
  boost::context::fiber from = std::move(f->ctx).resume();
#if GOSSAMER_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  // Back from `f`, or from a fiber it handed the core to.
  Fiber* back = jumped_from_;
  tl_state.fiber = nullptr;
  back->ctx = std::move(from);
  if (!back->ctx) recycle(back);  // the fiber returned: its stack is back in the pool
}

void Worker::recycle(Fiber* f) {
  --live_fibers_;
  ++activity_;
  free_fibers_.push_back(f);
}

// Called by the running fiber; it runs again after make_ready. While the
// scheduler's pass has fibers left and nothing waits to be done between
// two fibers, the next one is resumed straight from here: one context
// switch per suspension instead of two (fiber -> scheduler -> fiber).
// Whether something waits is looked at every kSuspendCheck handoffs.
void Worker::suspend() {
  Fiber* me = tl_state.fiber;
  jumped_from_ = me;
  boost::context::fiber from;
  bool handoff = pass_left_ != 0;
  if (handoff && --check_in_ == 0) {
    check_in_ = kSuspendCheck;
    handoff = !loop_has_work(kEagerBatch);
  }
  if (handoff) {
    Fiber* next = pop_ready();
    --pass_left_;
    if (next == me) return;  // made ready meanwhile, and next in line
    tl_state.fiber = next;
#if GOSSAMER_ASAN
    __sanitizer_start_switch_fiber(&me->fake_stack, static_cast<char*>(next->stack.sp) - next->stack.size,
                                   next->stack.size);
#endif
    from = std::move(next->ctx).resume();
  } else {
#if GOSSAMER_ASAN
    __sanitizer_start_switch_fiber(&me->fake_stack, sched_stack_bottom_, sched_stack_size_);
#endif
    from = std::move(sched_ctx_).resume();
  }
#if GOSSAMER_ASAN
  __sanitizer_finish_switch_fiber(me->fake_stack, nullptr, nullptr);
#endif
  take_from(std::move(from));
}

// How a blocking call (wait_for) suspends its fiber: Worker::suspend
// inlined, so that one call frame fewer lies between the fiber's code and
// its context switch (each is a return that the resumed fiber takes).
[[gnu::flatten]] void suspend_current() {
  Worker* w = tl_state.worker;
  w->before_block();
  w->suspend();
}

void Worker::yield() {
  make_ready(tl_state.fiber);
  suspend();
}

void Worker::shutdown_local() {
  // Properties whose Trusts were leaked (or live in other properties) are
  // destroyed here, exactly once, on their own trustee thread.
  props_.destroy_all();
}

}  // namespace gossamer::detail
