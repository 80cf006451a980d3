// The state of one gossamer::run: options, workers, the square, the invoker
// table, and (in a rack) the attach to the dataplane. One at a time per
// process. Thread ids are rack-wide ("global"); this host's workers hold
// [first(), first() + local_count()).
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include <gossamer/runtime.hpp>

#include "rack.hpp"
#include "square.hpp"
#include "worker.hpp"

namespace gossamer::detail {

struct InvokerEntry {
  InvokeFn fn;
  std::uint64_t property_type;  // type_key<void>() when the invoker takes none
};

class Runtime {
 public:
  Runtime(const Options& opts, std::unique_ptr<Rack> rack);
  ~Runtime();

  const Options& options() const { return opts_; }
  std::uint32_t size() const { return n_; }            // threads of the rack
  std::uint32_t first() const { return first_; }
  std::uint32_t local_count() const { return local_; }
  bool is_local(ThreadId g) const { return g - first_ < local_; }
  std::uint32_t host() const { return rack_ ? rack_->host() : 0; }
  std::uint32_t hosts() const { return rack_ ? rack_->hosts() : 1; }
  Rack* rack() const { return rack_.get(); }
  Square& square() { return square_; }
  Worker& worker(ThreadId g) { return *workers_[g - first_]; }
  bool stopping() const { return stop_.load(std::memory_order_acquire); }
  bool busy_polling() const { return opts_.polling == Polling::busy; }
  // Trustees that entrust() uses: this host's threads, or its dedicated ones.
  ThreadId first_trustee() const { return first_ + local_ - trustees_; }
  ThreadId trustees() const { return trustees_; }

  // Looked up by trustees for every request: an index, bounds-checked.
  const InvokerEntry* invoker(std::uint32_t id) const {
    std::uint32_t i = id - abi::kFirstUserInvoker;
    return id >= abi::kFirstUserInvoker && i < invokers_.size() ? &invokers_[i] : nullptr;
  }

  int run(std::function<int()> main_fn);
  // A worker thread's ThreadState at its start.
  ThreadState thread_state(Worker* w, ThreadId id) const;
  // Worker 0, once main has finished: true when this host is quiet.
  bool quiescent();
  // Host 0's first worker, after main: stop when the whole rack is quiet.
  void check_done(Worker& w);
  void stop();
  // This host's state for a rack probe.
  abi::RackProbe local_probe();

  // Rack probes and stops (runtime.cpp) answer here.
  void probe_answered(std::uint32_t host, std::uint32_t round, const abi::RackProbe& p);
  void stop_answered();

 private:
  Options opts_;
  std::unique_ptr<Rack> rack_;
  std::uint32_t n_;
  std::uint32_t first_ = 0, local_;
  std::uint32_t trustees_;
  Square square_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<InvokerEntry> invokers_;
  std::atomic<bool> stop_{false};
  std::vector<std::uint64_t> scan_, last_scan_;
  bool have_scan_ = false;
  // Rack termination (host 0's first worker only).
  enum class Phase { kIdle, kProbing, kStopping } phase_ = Phase::kIdle;
  std::uint32_t round_ = 0, pending_ = 0;
  std::vector<abi::RackProbe> probes_, last_probes_;
  bool have_last_probes_ = false;
  bool all_idle_ = true;
  bool spoiled_ = false;
  friend class Worker;

 public:
  bool main_done = false;
  int main_result = 0;
};

Runtime* runtime_or_null() noexcept;

// Whether flush_and_poll(min_batch) sends the channel's queue once its
// slot is free: mid-pass (min_batch > 1), batches to other hosts wait for
// the pass's end.
inline bool Worker::would_flush(ThreadId to, const Channel& ch, std::uint32_t min_batch) const {
  return ch.need_fetch || (ch.queued && (rt_.is_local(to) ? ch.queued >= min_batch : min_batch == 1));
}

}  // namespace gossamer::detail
