// A port: the dataplane's frames in and out, one queue per polling core
// (DESIGN.md §2 "Inside the dataplane"). The stages above it never see the
// device: port_dpdk.cpp drives a DPDK ethdev (the only file that calls
// rte_eth_* and rte_pktmbuf_*), port_faults.cpp injects loss, duplication and
// reordering into another port's receive path, and port_loopback.cpp joins
// two dataplanes in one process (tests, no root, no EAL).
//
// A frame is a handle the port owns: `data` points at the Ethernet header,
// `len` is the frame's length (0 for a frame the port cannot present as one
// contiguous buffer, which no stage accepts). A received frame is released
// exactly once, by whoever holds it last; an allocated frame is either sent
// or released. Queue q is used by one core at a time; alloc and release may
// be called from any core. A frame to send names the rack host it goes to
// (`peer`): a dataplane with several ports (port_multi.hpp) sends it on the
// port that reaches that host.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gossamer::dataplane {

struct Frame {
  void* handle = nullptr;
  std::uint8_t* data = nullptr;
  std::uint32_t len = 0;
  std::uint32_t peer = UINT32_MAX;  // tx: the host it goes to (UINT32_MAX: not said)
};

class Port {
 public:
  virtual ~Port() = default;
  virtual std::uint16_t queues() const = 0;
  virtual std::array<std::uint8_t, 6> mac() const = 0;
  // Receives up to `n` frames on queue `q`.
  virtual std::uint16_t rx_burst(std::uint16_t q, Frame* out, std::uint16_t n) = 0;
  // A frame of `len` bytes to fill and send; false when none is left.
  virtual bool alloc(std::uint32_t len, Frame* out) = 0;
  // Sends frames on queue `q`; returns how many the port took, k: the first
  // k of the array (a port may reorder the array to put them first, as
  // MultiPort does when the frames go out on different links). The rest
  // stay the caller's.
  virtual std::uint16_t tx_burst(std::uint16_t q, Frame* frames, std::uint16_t n) = 0;
  virtual void release(const Frame& f) = 0;
  // One more reference to a received frame: it will be released twice.
  virtual void retain(const Frame& f) = 0;
  // The frame behind a handle (frames cross cores as handles).
  virtual Frame frame(void* handle) const = 0;
  // Sleeping without missing frames (loop.cpp): a descriptor that becomes
  // readable when a frame arrives on queue q after rx_wake_arm(q), or -1
  // when the port has none (a sleeping core must then wake on a timer to
  // look). A core arms it before its last look at the queue ahead of a
  // sleep; queue q's core only. False if it could not be armed (then the
  // core must not rely on it for this sleep). `quiet`: the host has had no
  // work for a while, so this sleep may be long; a port whose wake-up costs
  // the sender a system call per frame (memif's doorbell) arms only then,
  // and a busy host's short sleeps end on their timers instead.
  virtual int rx_wake_fd(std::uint16_t /*q*/) const { return -1; }
  virtual bool rx_wake_arm(std::uint16_t /*q*/, bool /*quiet*/) { return false; }
  // When a frame the port holds back will come out of rx_burst without a
  // new arrival (fault injection's reordering): a TSC time, or UINT64_MAX.
  virtual std::uint64_t rx_due(std::uint16_t /*q*/) const { return UINT64_MAX; }
  // The TSC frequency the port's environment measured, or 0.
  virtual std::uint64_t tsc_hz() const { return 0; }
  // What the device counted and the stages never saw, since it started:
  // frames it lost on receipt (its ring was full), received in error or
  // could not buffer, and frames it took to send but failed to. What a
  // driver counts is its own (dataplane/README.md, "Port errors"). Core 0,
  // once per metrics period; it may make a system call.
  struct DeviceErrors {
    std::uint64_t rx_missed = 0, rx_errors = 0, rx_no_buffer = 0, tx_errors = 0;
  };
  virtual DeviceErrors device_errors() const { return {}; }
  // A polling core other than the process's main thread starts or stops
  // (DPDK registers it for its per-core mempool cache).
  virtual void thread_started(std::uint32_t /*core*/) {}
  virtual void thread_stopped(std::uint32_t /*core*/) {}
  // Core 0, every second: look after the link (a memif client whose
  // server restarted connects again).
  virtual void maintain() {}
  // One line for the start-up log: driver, queues.
  virtual std::string describe() const = 0;
};

}  // namespace gossamer::dataplane
