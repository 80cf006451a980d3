// Joining a rack: when GOSSAMER_CONFIG names a configuration with more than
// one host, the runtime builds its square in a sealed memfd, attaches to the
// host's dataplane over its unix socket (gossamer/abi/attach.hpp), and waits
// until every host's instance has attached (the start barrier). A monitor
// thread then watches the socket: if another host's instance goes away
// while the run is not finishing, this instance exits too (fate sharing).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <gossamer/abi/attach.hpp>

#include "bulk.hpp"

namespace gossamer::detail {

class Rack {
 public:
  // Reads GOSSAMER_CONFIG; returns null when it is unset or names a
  // single-host rack (the runtime then runs standalone). `threads` is the
  // rack-wide count (GOSSAMER_THREADS overrides it). Exits the process with
  // a message when the configuration or the attach fails. The file's
  // runtime.max_outstanding, when set, replaces *max_outstanding, and
  // runtime.yield_us *yield_us (single host or not).
  static std::unique_ptr<Rack> join(std::uint32_t threads, std::size_t* max_outstanding, std::uint32_t* yield_us);
  ~Rack();

  std::uint32_t host() const { return host_; }
  std::uint32_t hosts() const { return hosts_; }
  std::uint32_t total() const { return total_; }
  std::uint32_t first() const { return first_; }
  std::uint32_t local() const { return local_; }
  std::byte* segment() const { return seg_; }
  const abi::SegmentLayout& layout() const { return layout_; }
  std::uint32_t host_of(std::uint32_t g) const;

  // Blocks until the dataplane says every host is attached.
  void wait_start();
  // After the run: hand the doorbells back, wait for the dataplane to drain.
  void detach();
  // From now on, peers leaving is expected.
  void finishing() { finishing_.store(true, std::memory_order_release); }
  bool is_finishing() const { return finishing_.load(std::memory_order_acquire); }

  // Tells the dataplane (sleeping on its eventfd) that a doorbell rang.
  void kick();

  // TCP connections for large payloads (GOSSAMER_BULK), or null.
  Bulk* bulk() const { return bulk_.get(); }

 private:
  Rack() = default;
  void monitor();
  std::uint32_t host_ = 0, hosts_ = 1, total_ = 0, first_ = 0, local_ = 0;
  abi::SegmentLayout layout_{};
  std::byte* seg_ = nullptr;
  int memfd_ = -1, eventfd_ = -1, sock_ = -1;
  std::string socket_path_;
  std::atomic<bool> finishing_{false};   // the run is over here (stop received or sent)
  std::atomic<bool> detaching_{false};   // run() has returned
  std::unique_ptr<Bulk> bulk_;
  std::thread monitor_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool detached_ = false;
};

}  // namespace gossamer::detail
