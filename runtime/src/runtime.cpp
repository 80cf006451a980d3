// gossamer::run: start the workers, run main as a fiber on thread 0, detect
// quiescence, stop. Also the small public functions that just ask the
// current worker.
#include "runtime_state.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include <gossamer/errors.hpp>

#include "invoker_registry.hpp"

namespace gossamer::detail {

namespace {
std::atomic<Runtime*> g_runtime{nullptr};
// initial-exec: libgossamer is linked, not dlopen'ed, and the general
// dynamic model costs a __tls_get_addr call on every access.
[[gnu::tls_model("initial-exec")]] thread_local Worker* tl_worker = nullptr;
// Last stats of the previous run, for trustee_stats() after run returns.
std::mutex g_final_mu;
std::vector<TrusteeStats> g_final_stats;

TrusteeStats read_stats(const abi::ThreadCounters& c) {
  auto get = [](const std::uint64_t& f) { return __atomic_load_n(&f, __ATOMIC_RELAXED); };
  TrusteeStats s;
  s.busy_cycles = get(c.busy_cycles);
  s.serve_cycles = get(c.serve_cycles);
  s.idle_cycles = get(c.idle_cycles);
  s.requests_served_remote = get(c.requests_served_remote);
  s.requests_served = get(c.requests_served_local) + s.requests_served_remote;
  s.slots_served = get(c.slots_served);
  s.requests_sent_remote = get(c.requests_sent_remote);
  s.requests_sent = get(c.requests_sent_local) + s.requests_sent_remote;
  s.responses_received = get(c.responses_received);
  s.local_applies = get(c.local_applies);
  s.fibers_ready = get(c.fibers_ready);
  s.tcp_bytes_sent = get(c.tcp_bytes_sent);
  s.tcp_bytes_received = get(c.tcp_bytes_received);
  return s;
}

void pin_to_cpu(std::uint32_t i) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(i % std::max(1u, std::thread::hardware_concurrency()), &set);
  ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
}
}  // namespace

Runtime* runtime_or_null() noexcept { return g_runtime.load(std::memory_order_acquire); }
Worker* worker_or_null() noexcept { return tl_worker; }

Runtime::Runtime(const Options& opts, std::unique_ptr<Rack> rack)
    : opts_(opts),
      rack_(std::move(rack)),
      n_(rack_ ? rack_->total() : std::uint32_t(opts.threads)),
      first_(rack_ ? rack_->first() : 0),
      local_(rack_ ? rack_->local() : n_),
      trustees_(opts.dedicated_trustees ? std::uint32_t(opts.dedicated_trustees) : local_),
      square_(rack_ ? Square(rack_->segment(), rack_->layout(), n_) : Square(n_)) {
  invokers_ = finalize_invokers();
  for (ThreadId i = 0; i < local_; ++i) workers_.push_back(std::make_unique<Worker>(*this, first_ + i));
}

Runtime::~Runtime() = default;

void Runtime::stop() {
  stop_.store(true, std::memory_order_release);
  for (auto& w : workers_) w->wake();
}

// Double collect: every worker idle (no fibers, no request without its
// response, no parked completion) in two scans with identical activity
// counters means nothing can create work any more. Work only comes from a
// fiber, an unanswered request or a parked completion, all counted before
// they become visible to another thread.
bool Runtime::quiescent() {
  std::vector<std::uint64_t>& scan = scan_;  // reused: this runs every loop of worker 0
  scan.resize(local_);
  bool idle = true;
  for (ThreadId i = 0; i < local_; ++i) {
    Published& p = workers_[i]->pub;
    scan[i] = p.activity.load(std::memory_order_seq_cst);
    if (p.live_fibers.load(std::memory_order_seq_cst) != 0 ||
        p.outstanding.load(std::memory_order_seq_cst) != 0 ||
        p.parked.load(std::memory_order_seq_cst) != 0)
      idle = false;
  }
  bool same = have_scan_ && scan == last_scan_;
  scan.swap(last_scan_);
  have_scan_ = idle;
  return idle && same;
}

abi::RackProbe Runtime::local_probe() {
  abi::RackProbe p{};
  p.idle = 1;
  for (auto& w : workers_) {
    Published& pub = w->pub;
    p.activity += pub.activity.load(std::memory_order_seq_cst);
    if (pub.live_fibers.load(std::memory_order_seq_cst) != 0 ||
        pub.outstanding.load(std::memory_order_seq_cst) != 0 ||
        pub.parked.load(std::memory_order_seq_cst) != 0)
      p.idle = 0;
  }
  return p;
}

namespace {
struct ProbeCtx {
  Runtime* rt;
  std::uint32_t host, round;
};
void probe_done(Completion& c, std::uint32_t status, const std::byte* data, std::uint32_t len) {
  auto ctx = c.context<ProbeCtx>();
  abi::RackProbe p{};
  if (status == abi::kOk && len == sizeof p) std::memcpy(&p, data, sizeof p);
  ctx.rt->probe_answered(ctx.host, ctx.round, p);
}
void stop_done(Completion& c, std::uint32_t, const std::byte*, std::uint32_t) {
  c.context<Runtime*>()->stop_answered();
}
}  // namespace

bool is_control_completion(Completion::Fn fn) { return fn == &probe_done || fn == &stop_done; }

void Runtime::probe_answered(std::uint32_t host, std::uint32_t round, const abi::RackProbe& p) {
  if (round != round_ || phase_ != Phase::kProbing) return;  // a stale round
  probes_[host] = p;
  if (!p.idle) all_idle_ = false;
  --pending_;
}

void Runtime::stop_answered() { --pending_; }

// Termination across the rack: host 0 is quiet (double collect over its
// threads), then it probes every other host for (idle, activity) twice;
// all idle in two consecutive rounds with unchanged activity means no host
// can create work any more (work only comes from a fiber, an unanswered
// request or a parked completion, each counted where it lives, and a
// request is counted by its sender until answered). Probes and stops are
// not counted themselves. Then every host is told to stop.
void Runtime::check_done(Worker& w) {
  if (phase_ == Phase::kStopping) {
    if (pending_ == 0) stop();
    return;
  }
  if (!quiescent()) {
    // Work appeared here: the round in flight proves nothing. Its answers
    // still arrive (the channel keeps them in order) and are discarded.
    have_last_probes_ = false;
    spoiled_ = true;
    return;
  }
  if (!rack_) return stop();
  std::uint32_t h0 = rack_->host();
  switch (phase_) {
    case Phase::kIdle: {
      ++round_;
      spoiled_ = false;
      probes_.assign(rack_->hosts(), abi::RackProbe{});
      all_idle_ = true;
      pending_ = rack_->hosts() - 1;
      phase_ = Phase::kProbing;
      for (std::uint32_t h = 0; h < rack_->hosts(); ++h) {
        if (h == h0) continue;
        std::uint32_t f, c;
        abi::host_threads(n_, rack_->hosts(), h, &f, &c);
        w.send_control(f, abi::kBuiltinProbe, Completion::make(&probe_done, ProbeCtx{this, h, round_}));
      }
      return;
    }
    case Phase::kProbing: {
      if (pending_) return;
      phase_ = Phase::kIdle;
      if (spoiled_) {
        spoiled_ = false;
        have_last_probes_ = false;
        return;
      }
      if (!all_idle_) {
        have_last_probes_ = false;
        return;
      }
      bool same = have_last_probes_;
      for (std::uint32_t h = 0; same && h < probes_.size(); ++h)
        same = probes_[h].activity == last_probes_[h].activity;
      last_probes_ = probes_;
      have_last_probes_ = true;
      if (!same) return;
      rack_->finishing();
      phase_ = Phase::kStopping;
      pending_ = rack_->hosts() - 1;
      for (std::uint32_t h = 0; h < rack_->hosts(); ++h) {
        if (h == h0) continue;
        std::uint32_t f, c;
        abi::host_threads(n_, rack_->hosts(), h, &f, &c);
        w.send_control(f, abi::kBuiltinStop, Completion::make(&stop_done, this));
      }
      return;
    }
    case Phase::kStopping:
      return;
  }
}

ThreadState Runtime::thread_state(Worker* w, ThreadId id) const {
  ThreadState s;
  s.worker = w;
  s.id = id;
  s.max_outstanding = opts_.max_outstanding ? opts_.max_outstanding : UINT64_MAX;
  s.preempt_ops = std::uint32_t(std::min<std::size_t>(opts_.preempt_ops, UINT32_MAX));
  s.table_changes = w->properties().changes_word();
  return s;
}

int Runtime::run(std::function<int()> main_fn) {
  std::vector<std::thread> threads;
  auto body = [this](ThreadId i) {
    tl_worker = workers_[i].get();
    tl_state = thread_state(tl_worker, first_ + i);
    if (opts_.pin_threads) pin_to_cpu(i);
    workers_[i]->loop();
    workers_[i]->shutdown_local();
    tl_worker = nullptr;
    tl_state = ThreadState{};
  };
  if (rack_) rack_->wait_start();
  if (Bulk* b = rack_ ? rack_->bulk() : nullptr)
    b->start([this](std::uint32_t li) { workers_[li]->wake(); }, [this] { return rack_->is_finishing(); });
  for (ThreadId i = 1; i < local_; ++i) threads.emplace_back(body, i);
  if (host() == 0) {
    tl_worker = workers_[0].get();
    tl_state = thread_state(tl_worker, first_);
    workers_[0]->spawn(Task([this, f = std::move(main_fn)]() mutable {
                         main_result = f();
                         main_done = true;
                       }),
                       nullptr);
    tl_worker = nullptr;
    tl_state = ThreadState{};
  }
  body(0);
  for (auto& t : threads) t.join();
  if (rack_) rack_->detach();
  return host() == 0 ? main_result : 0;
}

// ---- contexts -------------------------------------------------------------

[[gnu::tls_model("initial-exec")]] thread_local constinit ThreadState tl_state;

Worker* current_worker() noexcept { return tl_worker; }
ThreadId thread_count_() noexcept {
  Runtime* rt = runtime_or_null();
  return rt ? rt->size() : 0;
}
bool is_local_thread(ThreadId t) noexcept {
  Runtime* rt = runtime_or_null();
  return !rt || rt->is_local(t);
}
bool runtime_active() noexcept {
  Runtime* rt = runtime_or_null();
  return rt && tl_worker && !rt->stopping();
}

void fatal(std::string_view what) {
  std::fprintf(stderr, "gossamer: fatal: %.*s\n", int(what.size()), what.data());
  std::fflush(stderr);
  std::abort();
}

void fail_runtime(const char* op) {
  fatal(std::string(op) + " called outside gossamer::run (no runtime on this thread)");
}

void fail_blocking(const char* op) {
  if (!tl_state.worker) fail_runtime(op);
  if (tl_state.delegated_depth > 0)
    fatal(std::string(op) +
          " would block in delegated context (inside a closure running on a trustee, or a "
          "then-callback), which would stall the trustee. Use apply_then() to delegate "
          "without blocking, or launch() on a Trust<Latch<T>> to run code that may block in "
          "a fiber of its own.");
  fatal(std::string(op) + " called outside a fiber");
}

// ---- fibers ----------------------------------------------------------------

void wait_for_room_slow() {
  if (!tl_state.fiber || tl_state.delegated_depth > 0) return;  // cannot wait: send
  tl_worker->wait_for_room();
}
void make_ready(Fiber* f) noexcept { tl_worker->make_ready(f); }
void preempt_slow() {
  ThreadState& s = tl_state;
  s.budget = s.preempt_ops ? s.preempt_ops : UINT32_MAX;
  if (!s.preempt_ops || !s.fiber || s.delegated_depth > 0) return;  // only a fiber may yield
  if (tl_worker->loop_has_work()) {
    // Work waits between fibers: to the loop, not to the pass's next fiber
    // (suspend() looks only every kSuspendCheck handoffs).
    tl_worker->check_at_next_suspend();
    tl_worker->yield();
  }
}
void yield_current() {
  require_blocking("yield()");
  tl_worker->yield();
}
void spawn_local(Task task, JoinState* join) { tl_worker->spawn(std::move(task), join); }

// ---- properties ------------------------------------------------------------

void* local_property(PropertyHandle h, std::uint64_t type, std::uint32_t* status) noexcept {
  ThreadState& s = tl_state;
  ++s.local_applies;
  PropertyTable& t = tl_worker->properties();
  void* p = t.find(h, type, status);
  if (p) {
    s.lp_handle = h.raw;
    s.lp_type = type;
    s.lp_obj = p;
    s.lp_changes = t.changes();
  }
  return p;
}

PropertyHandle local_entrust(void* obj, void (*destroy)(void*), std::uint64_t type,
                             std::uint64_t first_trust_id) {
  return tl_worker->properties().add(obj, destroy, type, first_trust_id);
}

void pin_property(PropertyHandle h) noexcept { tl_worker->properties().pin(h); }
void unpin_property(PropertyHandle h) noexcept { tl_worker->properties().unpin(h); }

ThreadId next_entrust_target() noexcept {
  Runtime* rt = runtime_or_null();
  Worker* w = tl_worker;
  ThreadId t = rt->first_trustee() + (w->id() + w->entrust_cursor++) % rt->trustees();
  return t;
}

// Unique across the rack: thread (and later host) in the high bits.
std::uint64_t new_trust_id() noexcept {
  return (std::uint64_t(tl_worker->id()) + 1) << 44 | ++tl_worker->trust_counter;
}

void toggle_ref(ThreadId trustee, PropertyHandle h, std::uint64_t id) noexcept {
  if (!runtime_active()) return;
  // A Trust serialized as an apply_with argument copies itself while that
  // request's record is still open. The copy belongs to the bytes: its
  // toggle waits until the record closes, or goes with it if the record is
  // abandoned (encoding a later argument threw).
  if (tl_worker->record_open()) {
    tl_worker->defer_toggle(trustee, h, id);
    return;
  }
  if (trustee == tl_worker->id()) {
    tl_worker->properties().toggle(h, id);
    return;
  }
  send_toggle(trustee, h, id);
}

void send_toggle(ThreadId trustee, PropertyHandle h, std::uint64_t id) {
  RecordWriter w(trustee, abi::kBuiltinToggleRef, h);
  w.append(&id, sizeof id);
  w.close({});
}

// ---- errors ----------------------------------------------------------------

void throw_status(std::uint32_t status, const std::byte* data, std::uint32_t len, const char* op) {
  std::string detail(reinterpret_cast<const char*>(data), data ? len : 0);
  switch (status) {
    case abi::kStaleProperty:
      throw stale_trust(std::string("gossamer: ") + op +
                        ": the property is gone (a TrustRef used after every Trust of its "
                        "property was dropped)");
    case abi::kException:
      throw remote_error(detail);
    default:
      throw remote_error(std::string("gossamer: ") + op + " failed with status " +
                         std::to_string(status) + (detail.empty() ? "" : ": " + detail));
  }
}

void report_async_failure(std::uint32_t status, const std::byte* data, std::uint32_t len) {
  std::string detail(reinterpret_cast<const char*>(data), data ? len : 0);
  std::string m = "a request sent with apply_then/launch_then failed (status " +
                  std::to_string(status) + ")";
  if (status == abi::kStaleProperty) m += ": the property is gone (TrustRef used after its last Trust was dropped)";
  if (!detail.empty()) m += ": " + detail;
  m += "; use apply() to receive such errors as exceptions";
  fatal(m);
}

void throw_send_failure(const char* op) {
  std::string what;
  try {
    throw;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "something that is not a std::exception";
  }
  std::throw_with_nested(remote_error(std::string("gossamer: ") + op +
                                      ": the arguments could not be encoded, nothing was sent: " + what));
}

void then_callback_threw(const char* what) {
  fatal(std::string("an apply_then/launch_then callback threw: ") +
        (what ? what : "something that is not a std::exception") +
        " (a callback has no caller to throw to: catch inside it)");
}

}  // namespace gossamer::detail

namespace gossamer {

namespace detail {
int run_impl(const Options& given, std::function<int()> main_fn) {
  Options opts = given;
  if (opts.threads == 0) fatal("run(): threads must be at least 1");
  if (opts.dedicated_trustees >= opts.threads)
    fatal("run(): dedicated_trustees must leave at least one client thread");
  if (opts.threads > 4096) fatal("run(): at most 4096 threads");
  if (tl_worker) fatal("run() called inside gossamer::run");
  std::unique_ptr<Rack> rack = Rack::join(std::uint32_t(opts.threads), &opts.max_outstanding, &opts.yield_us);
  if (rack && opts.dedicated_trustees)
    fatal("run(): dedicated_trustees is not supported in a rack yet");
  Runtime rt(opts, std::move(rack));
  Runtime* expected = nullptr;
  if (!g_runtime.compare_exchange_strong(expected, &rt)) fatal("run(): another run is active");
  int r = rt.run(std::move(main_fn));
  {
    std::lock_guard<std::mutex> g(g_final_mu);
    g_final_stats.clear();
    for (ThreadId i = 0; i < rt.size(); ++i)
      g_final_stats.push_back(rt.is_local(i) ? read_stats(rt.worker(i).counters()) : TrusteeStats{});
  }
  g_runtime.store(nullptr, std::memory_order_release);
  return r;
}
}  // namespace detail

std::size_t thread_index() { return detail::current_thread(); }
std::size_t thread_count() { return detail::thread_count_(); }
std::size_t host_index() {
  detail::Runtime* rt = detail::runtime_or_null();
  return rt ? rt->host() : 0;
}
std::size_t host_count() {
  detail::Runtime* rt = detail::runtime_or_null();
  return rt ? rt->hosts() : 1;
}
void yield() { detail::yield_current(); }

std::size_t outstanding_requests() {
  detail::require_runtime("outstanding_requests()");
  return detail::tl_state.outstanding;
}

TrusteeStats trustee_stats(std::size_t thread) {
  if (detail::Runtime* rt = detail::runtime_or_null()) {
    if (thread < rt->size() && rt->is_local(detail::ThreadId(thread)))
      return detail::read_stats(rt->worker(detail::ThreadId(thread)).counters());
    return {};
  }
  std::lock_guard<std::mutex> g(detail::g_final_mu);
  return thread < detail::g_final_stats.size() ? detail::g_final_stats[thread] : TrusteeStats{};
}

}  // namespace gossamer
