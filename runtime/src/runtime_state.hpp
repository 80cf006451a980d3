// The state of one gossamer::run: options, workers, the square, the invoker
// table. One at a time per process.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include <gossamer/runtime.hpp>

#include "square.hpp"
#include "worker.hpp"

namespace gossamer::detail {

struct InvokerEntry {
  InvokeFn fn;
  std::uint64_t property_type;  // type_key<void>() when the invoker takes none
};

class Runtime {
 public:
  Runtime(const Options& opts);
  ~Runtime();

  const Options& options() const { return opts_; }
  std::uint32_t size() const { return n_; }
  Square& square() { return square_; }
  Worker& worker(ThreadId i) { return *workers_[i]; }
  bool stopping() const { return stop_.load(std::memory_order_acquire); }
  bool busy_polling() const { return opts_.polling == Polling::busy; }
  // Trustees that entrust() uses: all threads, or the dedicated ones.
  ThreadId first_trustee() const { return n_ - trustees_; }
  ThreadId trustees() const { return trustees_; }

  // Looked up by trustees for every request: an index, bounds-checked.
  const InvokerEntry* invoker(std::uint32_t id) const {
    std::uint32_t i = id - abi::kFirstUserInvoker;
    return id >= abi::kFirstUserInvoker && i < invokers_.size() ? &invokers_[i] : nullptr;
  }

  int run(std::function<int()> main_fn);
  // Worker 0, once main has finished: true when the whole runtime is quiet.
  bool quiescent();
  void stop();

 private:
  Options opts_;
  std::uint32_t n_;
  std::uint32_t trustees_;
  Square square_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<InvokerEntry> invokers_;
  std::atomic<bool> stop_{false};
  std::vector<std::uint64_t> scan_, last_scan_;
  bool have_scan_ = false;
  friend class Worker;

 public:
  bool main_done = false;
  int main_result = 0;
};

Runtime* runtime_or_null() noexcept;

}  // namespace gossamer::detail
