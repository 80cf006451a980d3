// Starting the runtime and asking where you are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>

#include <gossamer/detail/core.hpp>

namespace gossamer {

enum class Polling {
  busy,      // spin forever: lowest latency, for dedicated cores and benchmarks
  adaptive,  // spin, then yield the core, then sleep until woken (default)
};

struct Options {
  std::size_t threads = 1;
  // The last `dedicated_trustees` threads only serve trustee requests (and
  // fibers started there by launch / spawn_on); entrust() places properties
  // on them. 0 = shared mode: every thread is both client and trustee.
  std::size_t dedicated_trustees = 0;
  Polling polling = Polling::adaptive;
  bool pin_threads = false;           // pin thread i to CPU i % nproc
  std::size_t stack_size = 64 * 1024; // per fiber, plus one guard page
  // Backpressure: a fiber that sends a request (apply_then, apply, ...)
  // while its thread has this many requests awaiting responses waits until
  // responses bring the count below it (Trust::apply_then). Bounds the
  // memory of pending requests (~280 B each). A loop that waits for more
  // than this many of its requests to be in flight never gets there: raise
  // the bound for it. 0 = no bound. Why 1024: runtime/PERFORMANCE.md.
  // runtime.max_outstanding in the GOSSAMER_CONFIG file, when set,
  // replaces this value (config/examples/defaults.yaml).
  std::size_t max_outstanding = 1024;
  // Polling::adaptive: an idle thread spins, then yields the core for this
  // long (microseconds), then sleeps until woken. The yield keeps a thread
  // that waits for a remote answer awake (a wake-up costs a futex, an IPI
  // and a context switch); 0 sleeps right after the spin. runtime.yield_us
  // in the GOSSAMER_CONFIG file, when set, replaces this value.
  std::uint32_t yield_us = 2000;
  // Cooperative preemption: a fiber that calls apply on a local property
  // or apply_then this many times without waiting yields if its thread
  // has other threads' requests to serve, responses to fetch or a batch
  // to send (sooner once a batch of its responses is ready), so that a
  // loop of local applies does not starve the thread's clients. 0 = off
  // (the default for now: it changes when Hydra's loop gets its rounds;
  // runtime/PERFORMANCE.md, third round). fetch_add uses 64.
  std::size_t preempt_ops = 0;
};

namespace detail {
int run_impl(const Options& opts, std::function<int()> main_fn);
}

// Starts opts.threads OS threads, each with a fiber scheduler and a trustee,
// runs `main_fn` as a fiber on thread 0 and returns when it and every fiber
// it spawned (on any thread) have finished and every request has been
// answered. Returns main_fn's result when it returns an int, else 0.
template <class F>
int run(const Options& opts, F&& main_fn) {
  if constexpr (std::is_same_v<std::invoke_result_t<F&>, int>) {
    return detail::run_impl(opts, std::function<int()>(std::forward<F>(main_fn)));
  } else {
    return detail::run_impl(opts, std::function<int()>([f = std::forward<F>(main_fn)]() mutable {
                              f();
                              return 0;
                            }));
  }
}

template <class F>
int run(std::size_t threads, F&& main_fn) {
  Options o;
  o.threads = threads;
  return run(o, std::forward<F>(main_fn));
}

std::size_t thread_index();   // this runtime thread, 0..thread_count()-1
std::size_t thread_count();
std::size_t host_index();     // 0 until the rack runtime
std::size_t host_count();     // 1 until the rack runtime
void yield();                 // let the other fibers of this thread run
// Requests this thread has sent whose completion (then-callback, or waking
// the blocked fiber) has not run yet; at most Options::max_outstanding when
// only fibers send.
std::size_t outstanding_requests();

// Measured at the source by each thread's poller with the cycle counter
// (DESIGN.md "Polling"): an iteration of the thread's loop that found no work
// counts as idle, one that did as busy. Utilization = busy / (busy + idle).
struct TrusteeStats {
  std::uint64_t busy_cycles = 0;     // loop iterations that found work (any kind)
  std::uint64_t serve_cycles = 0;    // of which: serving requests (running closures)
  std::uint64_t idle_cycles = 0;     // polling and finding nothing
  std::uint64_t requests_served = 0;
  std::uint64_t requests_served_remote = 0;  // of which from clients on other hosts
  std::uint64_t slots_served = 0;    // batches; requests_served / slots_served = batching
  std::uint64_t requests_sent = 0;   // as a client, to other threads
  std::uint64_t requests_sent_remote = 0;    // of which to trustees on other hosts
  std::uint64_t responses_received = 0;
  std::uint64_t local_applies = 0;   // ran directly on this thread's own trustee
  std::uint64_t fibers_ready = 0;    // ready queue length at the last sample
  // Request and response bodies over the large-request path (TCP between
  // the hosts' instances, bodies above controlplane.large_request_threshold_bytes)
  std::uint64_t tcp_bytes_sent = 0;
  std::uint64_t tcp_bytes_received = 0;
};
// Readable from any thread while run() is active, and after it returns (the
// last values).
TrusteeStats trustee_stats(std::size_t thread);

}  // namespace gossamer
