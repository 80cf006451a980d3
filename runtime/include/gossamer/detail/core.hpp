// What the header templates (trust.hpp, fiber.hpp, latch.hpp) need from the
// compiled runtime. Not a user API: names here may change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <gossamer/abi/slots.hpp>

namespace gossamer::detail {

using ThreadId = std::uint32_t;

// Names a property on its trustee: a table index and the generation the entry
// had when the property was entrusted (a stale handle fails the check).
struct PropertyHandle {
  std::uint64_t raw = 0;
  static constexpr PropertyHandle make(std::uint32_t index, std::uint32_t gen) {
    return {std::uint64_t(index) << 32 | gen};
  }
  constexpr std::uint32_t index() const { return std::uint32_t(raw >> 32); }
  constexpr std::uint32_t generation() const { return std::uint32_t(raw); }
};

class Fiber;
class Worker;

// ---- contexts -------------------------------------------------------------
// Where the calling code runs; blocking operations check it.
Worker* current_worker() noexcept;          // nullptr outside gossamer::run
ThreadId thread_count_() noexcept;
bool is_local_thread(ThreadId t) noexcept;  // on this host (always true standalone)
[[noreturn]] void fatal(std::string_view what);

// What the checks on every delegation call need, in one thread-local
// (written by the runtime, read inline by the headers).
struct ThreadState {
  Worker* worker = nullptr;
  Fiber* fiber = nullptr;       // the running fiber, null in the scheduler
  int delegated_depth = 0;      // > 0: in delegated context or a then-callback
  ThreadId id = 0;
  // Requests this thread sent whose completion has not run yet (the worker
  // counts them), and Options::max_outstanding (0 there: no bound).
  std::uint64_t outstanding = 0;
  std::uint64_t max_outstanding = UINT64_MAX;
  // Operations left before this fiber offers its thread a pass of the loop
  // (preempt_point); 1 when a response is ready and worth fetching.
  // preempt_ops: Options::preempt_ops (0: never).
  std::uint32_t budget = 1;
  std::uint32_t preempt_ops = 0;
  // run_local's lookup of the last property this thread applied to as its
  // own trustee, reused while that thread's property table is unchanged
  // (`*table_changes == lp_changes`: nothing made dying or destroyed since).
  // lp_handle 0 is no property (generations start at 1).
  std::uint64_t lp_handle = 0;
  std::uint64_t lp_type = 0;
  void* lp_obj = nullptr;
  std::uint64_t lp_changes = 0;
  const std::uint64_t* table_changes = nullptr;
  std::uint64_t local_applies = 0;  // published with the thread's counters
};
// initial-exec: no __tls_get_addr call per access inside libgossamer.so.
[[gnu::tls_model("initial-exec")]] extern thread_local constinit ThreadState tl_state;

inline ThreadId current_thread() noexcept { return tl_state.id; }

[[noreturn, gnu::noinline]] void fail_runtime(const char* op);
[[noreturn, gnu::noinline]] void fail_blocking(const char* op);
// Aborts with a message naming `op` unless the caller may block: it must be
// inside run, in a fiber, and not in delegated context or a `then` callback.
inline void require_blocking(const char* op) {
  const ThreadState& s = tl_state;
  if (!s.fiber || s.delegated_depth > 0) [[unlikely]] fail_blocking(op);
}
inline void require_runtime(const char* op) {
  if (!tl_state.worker) [[unlikely]] fail_runtime(op);
}

// Backpressure: before a fiber sends a request, it waits (suspended, woken
// by the responses) while its thread has max_outstanding requests awaiting
// responses. Delegated context and then-callbacks cannot wait: they send at
// once (and may pass the bound by what they send).
void wait_for_room_slow();
inline void wait_for_room() {
  const ThreadState& s = tl_state;
  if (s.outstanding >= s.max_outstanding) [[unlikely]] wait_for_room_slow();
}

// Cooperative preemption (Options::preempt_ops): a fiber that runs many
// operations without waiting (applies to its own trustee's properties,
// apply_then into a channel whose batch is out) would keep its thread from
// serving other threads' requests and from fetching its own responses
// until it blocks. Every preempt_ops of them (sooner when a response is
// ready, see Worker::record_closed), it yields if the loop has something
// to do there. Only a fiber outside delegated context yields; elsewhere,
// and with preempt_ops 0, it is a no-op.
void preempt_slow();
inline void preempt_point() {
  if (--tl_state.budget == 0) [[unlikely]] preempt_slow();
}

// RAII: marks delegated context (a closure running on behalf of a trustee).
struct DelegatedScope {
  DelegatedScope() noexcept { ++tl_state.delegated_depth; }
  ~DelegatedScope() { --tl_state.delegated_depth; }
  DelegatedScope(const DelegatedScope&) = delete;
  DelegatedScope& operator=(const DelegatedScope&) = delete;
};

// ---- fibers ----------------------------------------------------------------
inline Fiber* current_fiber() noexcept { return tl_state.fiber; }
void suspend_current();                 // the caller must arrange a later make_ready
void make_ready(Fiber* f) noexcept;     // owner thread only
void yield_current();

// Type-erased callable with an inline buffer; moves are memcpy-safe because
// anything that is not trivially copyable is kept on the heap.
class Task {
 public:
  Task() = default;
  template <class F>
  explicit Task(F&& f) {
    using Fn = std::decay_t<F>;
    if constexpr (std::is_trivially_copyable_v<Fn> && sizeof(Fn) <= kInline &&
                  alignof(Fn) <= alignof(std::max_align_t)) {
      ::new (buf_) Fn(std::forward<F>(f));
      call_ = [](void* p) { (*static_cast<Fn*>(p))(); };
      drop_ = nullptr;
    } else {
      Fn* heap = new Fn(std::forward<F>(f));
      std::memcpy(buf_, &heap, sizeof heap);
      call_ = [](void* p) { Fn* h; std::memcpy(&h, p, sizeof h); (*h)(); };
      drop_ = [](void* p) { Fn* h; std::memcpy(&h, p, sizeof h); delete h; };
    }
  }
  Task(Task&& o) noexcept { steal(o); }
  Task& operator=(Task&& o) noexcept {
    if (this != &o) { reset(); steal(o); }
    return *this;
  }
  ~Task() { reset(); }
  explicit operator bool() const { return call_ != nullptr; }
  void operator()() { call_(buf_); }
  void reset() noexcept {
    if (drop_) drop_(buf_);
    call_ = nullptr;
    drop_ = nullptr;
  }

 private:
  static constexpr std::size_t kInline = 48;
  void steal(Task& o) noexcept {
    std::memcpy(buf_, o.buf_, kInline);
    call_ = o.call_;
    drop_ = o.drop_;
    o.call_ = nullptr;
    o.drop_ = nullptr;
  }
  alignas(std::max_align_t) unsigned char buf_[kInline];
  void (*call_)(void*) = nullptr;
  void (*drop_)(void*) = nullptr;
};

// Shared between a spawned fiber (or a remote completion) and its handle.
// Touched only by the owning thread: plain counters, no atomics.
struct JoinState {
  bool done = false;
  int refs = 1;
  Fiber* waiter = nullptr;
  void release() { if (--refs == 0) delete this; }
};

// Starts a fiber on the calling thread. `join` may be null (detached).
void spawn_local(Task task, JoinState* join);

// ---- delegation: client side -----------------------------------------------
// What to do with a response: `fn` decodes it. Trivially relocatable.
struct Completion {
  using Fn = void (*)(Completion&, std::uint32_t status, const std::byte* data,
                      std::uint32_t len);
  Fn fn = nullptr;
  alignas(8) unsigned char storage[40];

  template <class C>
  static Completion make(Fn fn, C ctx) {
    static_assert(std::is_trivially_copyable_v<C> && sizeof(C) <= sizeof(storage));
    Completion c;
    c.fn = fn;
    std::memcpy(c.storage, &ctx, sizeof ctx);
    return c;
  }
  template <class C>
  C context() const {
    C c;
    std::memcpy(&c, storage, sizeof c);
    return c;
  }
};

// A blocking call's end of its request when the result is void or at most
// kWaitBytes of raw bytes (trust_complete.hpp, kSlotWait): the runtime
// copies the response into it and makes the fiber ready itself, in line
// with reading the response, instead of calling a type-erased completion
// (Completion::fn is wait_slot_fn(), its storage the slot's address). The
// fiber decodes the bytes after it resumes. Lives on that fiber's stack.
inline constexpr std::size_t kWaitBytes = 32;
struct WaitSlot {
  Fiber* fiber = nullptr;
  bool done = false;
  std::uint32_t status = abi::kOk;
  std::uint32_t len = 0;        // the response's length (its bytes are here if it is <= kWaitBytes)
  std::string* error = nullptr;  // a failed status's message: allocated by the runtime, freed by wait_failed
  alignas(8) std::byte bytes[kWaitBytes];
};
// Completion::fn of a WaitSlot: a marker, never called (the runtime checks
// for it where it runs completions). Not a function of the library: a
// function's address taken in a non-PIE program and in the library need
// not compare equal.
inline Completion::Fn wait_slot_fn() noexcept { return reinterpret_cast<Completion::Fn>(std::uintptr_t{1}); }
// The fiber found its slot failed: throws what throw_status throws for the
// status and message (and frees the message).
[[noreturn]] void wait_failed(WaitSlot& w, const char* op);
// The response does not have the result's size: throws the remote_error a
// response that does not decode gives (status kMalformed).
[[noreturn]] void wait_wrong_size(const char* op);

// Builds one request record straight into the channel to trustee `to`.
// Usage: open, append body bytes (append / stream), close. Nothing else may
// touch that channel in between (no yields: the caller is one fiber).
// append() and pad_to_align() copy into room the constructor reserved in
// the channel's queue, inline; only a record that outgrows it calls out.
class RecordWriter {
 public:
  RecordWriter(ThreadId to, std::uint32_t invoker, PropertyHandle prop);
  void append(const void* data, std::size_t len) {
    if (len == 0) return;  // cereal writes empty ranges with a null pointer
    if (len > std::size_t(lim_ - cur_)) [[unlikely]] make_room(len);
    std::memcpy(cur_, data, len);
    cur_ += len;
  }
  void pad_to_align() {
    // One 8-byte store of zeros covers any padding (no loop over 0-7 bytes).
    static_assert(abi::kRecordAlign == sizeof(std::uint64_t));
    if (std::size_t(lim_ - cur_) < sizeof(std::uint64_t)) [[unlikely]] make_room(sizeof(std::uint64_t));
    const std::uint64_t zero = 0;
    std::memcpy(cur_, &zero, sizeof zero);
    cur_ += std::size_t(rec_ - cur_) & (abi::kRecordAlign - 1);
  }
  // Finishes the record; `done` runs when its response arrives.
  void close(Completion done);
  // Drops the record instead (encoding it threw): nothing is sent, and the
  // Trust copies its arguments made while encoding are undone.
  void abandon() noexcept;
  ThreadId to() const { return to_; }

 private:
  void make_room(std::size_t len);  // grows the queue; moves the pointers
  ThreadId to_;
  std::byte* rec_;  // the record's header, in the channel's queue
  std::byte* cur_;  // where the next byte goes
  std::byte* lim_;  // the end of the queue's room
};

// The whole request in one call when its body is a closure without
// arguments (RecordWriter's open, append, pad and close, without the
// writer): `len` bytes at `body`, a multiple of abi::kRecordAlign (the
// closure and its zero padding, as append_closure writes them), copied
// in 8-byte words. At most kSmallBody bytes.
inline constexpr std::size_t kSmallBody = 240;
void send_record(ThreadId to, std::uint32_t invoker, PropertyHandle prop, const std::byte* body, std::uint32_t len,
                 const Completion& done);

// A response that arrives with a non-ok status; `data` may hold a message.
[[noreturn]] void throw_status(std::uint32_t status, const std::byte* data, std::uint32_t len,
                               const char* op);
// The same for apply_then/launch_then, which have no caller to throw to:
// ends the process with the error.
[[noreturn]] void report_async_failure(std::uint32_t status, const std::byte* data, std::uint32_t len);
// Inside a catch block, after encoding a request threw (and its record was
// abandoned): throws remote_error naming `op`, the caught exception nested.
[[noreturn]] void throw_send_failure(const char* op);
// A then-callback threw (`what`: null if not a std::exception): ends the
// process with that message, as an uncaught exception in a fiber does.
[[noreturn]] void then_callback_threw(const char* what);

// ---- delegation: trustee side -----------------------------------------------
// Where an invoker writes its response. A response that fits the room the
// writer has in [cur_, lim_) is written inline (header, then the payload
// the caller copies); the rest, and failures, go through the writer.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // Space for a response of `len` payload bytes; status kOk.
  std::byte* reserve(std::uint32_t len) {
    const std::size_t size = sizeof(abi::ResponseHeader) + abi::align_record(len);
    if (size > std::size_t(lim_ - cur_)) [[unlikely]] return reserve_slow(len);
    const abi::ResponseHeader h{len, abi::kOk};
    std::memcpy(cur_, &h, sizeof h);
    std::byte* p = cur_ + sizeof h;
    cur_ += size;
    ++written_;
    return p;
  }
  virtual void fail(std::uint32_t status, std::string_view message) = 0;
  std::uint32_t written() const { return written_; }

 protected:
  virtual std::byte* reserve_slow(std::uint32_t len) = 0;
  std::byte* cur_ = nullptr;  // room for inline responses (none: both null)
  std::byte* lim_ = nullptr;
  std::uint32_t written_ = 0;  // responses so far
};

struct Invocation {
  void* property;             // validated: right generation and type
  PropertyHandle handle;
  const std::byte* body;      // 8-aligned
  std::uint32_t length;
  ThreadId client;
  ResponseWriter* out;
};
using InvokeFn = void (*)(Invocation&);

// Type identity that is the same on every host running the same binary.
template <class T>
constexpr std::uint64_t type_key() {
  std::uint64_t h = 1469598103934665603ull;
  for (const char* p = __PRETTY_FUNCTION__; *p; ++p) h = (h ^ std::uint8_t(*p)) * 1099511628211ull;
  return h;
}

// Invoker registry: each invoker instantiated in the program registers itself
// during static initialisation; gossamer::run sorts them by (module, offset
// inside module), which is the same on every host with the same binary even
// with ASLR on, and assigns dense ids. An id read from a slot is an index,
// bounds-checked, never an address (DESIGN.md "Closures across hosts").
std::uint32_t register_invoker(InvokeFn fn, std::uint64_t property_type, std::uint32_t* id_out);

template <InvokeFn Fn, class T>
struct Invoker {
  static inline std::uint32_t value = abi::kBuiltinInvalid;
  static inline const bool registered = (register_invoker(Fn, type_key<T>(), &value), true);
  // Reading `registered` odr-uses it, so every invoker the program can send
  // is instantiated, hence registered before main.
  static std::uint32_t id() { return registered ? value : abi::kBuiltinInvalid; }
};

// Property table access for the local (same-thread) fast path and entrust.
void* local_property(PropertyHandle h, std::uint64_t type, std::uint32_t* status) noexcept;
PropertyHandle local_entrust(void* obj, void (*destroy)(void*), std::uint64_t type,
                             std::uint64_t first_trust_id);
ThreadId next_entrust_target() noexcept;  // round robin over (dedicated) trustees
void pin_property(PropertyHandle h) noexcept;
void unpin_property(PropertyHandle h) noexcept;

// ---- references (001 §5.4) -------------------------------------------------
std::uint64_t new_trust_id() noexcept;
void toggle_ref(ThreadId trustee, PropertyHandle h, std::uint64_t id) noexcept;
bool runtime_active() noexcept;

// ---- completions across threads (launch, spawn_on) --------------------------
// A token names a Completion parked on the calling thread until a
// kBuiltinComplete request addressed to it arrives.
std::uint64_t park_completion(Completion c);
// Runs the parked completion (on its own thread); a stale token is ignored.
void complete_parked(std::uint64_t token, std::uint32_t status, const std::byte* data,
                     std::uint32_t len);
// Response handler for the request that will later complete a parked token:
// if the request itself fails, the parked completion fails with it.
inline void parked_ack(Completion& c, std::uint32_t status, const std::byte* data,
                       std::uint32_t len) {
  if (status != abi::kOk) complete_parked(c.context<std::uint64_t>(), status, data, len);
}
// Sends kBuiltinComplete(token, bytes) to `client`; runs on the trustee thread.
void send_completion(ThreadId client, std::uint64_t token, std::uint32_t status,
                     const void* data, std::uint32_t len);

}  // namespace gossamer::detail
