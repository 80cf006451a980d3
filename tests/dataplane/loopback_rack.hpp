// Two dataplanes in one process over the loopback port (port_loopback.hpp)
// behind the fault injector, and fake application instances that attach
// through the real unix socket and drive the shared-memory contract
// (gossamer/abi/attach.hpp, slots.hpp) by hand. No root, no EAL.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gossamer/abi/attach.hpp>
#include <gossamer/abi/slots.hpp>

#include "dataplane.hpp"
#include "port_loopback.hpp"

namespace gossamer::dataplane::testing {

// A rack of two hosts ("a", "b"), each a Dataplane on its own thread; the
// ports are a loopback pair behind FaultPorts. Files go to a fresh
// directory under /tmp (the incarnation files too: <dir>/<host>.incarnation).
class LoopbackRack {
 public:
  struct Options {
    std::uint32_t cores_a = 1, cores_b = 1;
    std::uint32_t conns = 2;
    std::string faults;  // written to both hosts' <socket>.faults before start
    bool authenticate = true;
    std::uint32_t max_applications = 64;
    std::uint32_t mtu = 1500;  // dataplane.mtu of both hosts
    std::uint32_t mtu_b = 0;   // host b's, when not 0 (hosts that disagree)
    std::int64_t yield_us = -1;  // dataplane.yield_us of both hosts; -1: the default
    // What host b's incarnation file holds before it starts; "": no file.
    std::string incarnation_b;
    // dataplane.transport: verbs (records go over the queue pairs of the
    // Verbs that `prepare` gives each host's Dataplane with set_verbs; the
    // loopback port stays idle).
    bool verbs = false;
    std::string verbs_device;       // dataplane.verbs.device ("": the first)
    std::uint32_t verbs_gid = 0;    // dataplane.verbs.gid_index
    std::function<void(int host, Dataplane&)> prepare;
    // Called as host h's port is handed to its dataplane, before it polls
    // (host a's dataplane runs when b's is called): `inject` puts a frame
    // into a host's receive ring (false: full); `rack` reads the stats of
    // the hosts already running.
    std::function<void(int host, const LoopbackRack& rack, const LoopbackInjector& inject)> before_start;
  };
  // Throws std::runtime_error with the start-up error if a host fails to start.
  explicit LoopbackRack(const Options& o);
  ~LoopbackRack();  // stops both, removes the directory
  void stop();      // joins the dataplanes (they write their stats files)
  // Stops host h's dataplane and starts a new one (a new incarnation) on the
  // same side of the link, as gossamerd restarts one that exited.
  void restart(int host);
  std::string socket(int host) const;
  std::string incarnation_file(int host) const { return dir_ + (host == 0 ? "/a" : "/b") + ".incarnation"; }
  // Host h's incarnation, from its metrics file.
  std::uint64_t incarnation(int host) const;
  // A frame from a third party on the link, to host `to`.
  bool inject(int to, const std::vector<std::uint8_t>& frame) { return inject_(to, frame); }
  // A counter of host h's <socket>.stats file, summed over its label sets
  // (or one labelled line, when `name` has labels).
  std::uint64_t stat(int host, const std::string& name) const;
  const std::string& dir() const { return dir_; }
  // Host h's exchanges open with the other host (Dataplane::exchanges_open).
  std::int64_t exchanges_open(int host) const { return dp_[host]->exchanges_open(std::uint32_t(1 - host)); }
  // The token gossamerd would give run `id`'s instance on `host`, as hex
  // (GOSSAMER_RUN_TOKEN).
  std::string run_token(const std::string& id, int host) const;

 private:
  void start(int host, std::unique_ptr<Port> port);

  Options o_;
  std::string dir_;
  std::atomic<bool> stop_[2]{false, false};
  std::unique_ptr<Dataplane> dp_[2];
  std::thread threads_[2];
  LoopbackInjector inject_;
  LoopbackReopener reopen_;
  bool stopped_ = false;
};

// One application instance: a sealed memfd segment laid out as the
// runtime lays it out, attached over the dataplane's socket.
class FakeApp {
 public:
  // `run_id` and `run_token` as GOSSAMER_RUN_ID and GOSSAMER_RUN_TOKEN
  // ("": unset).
  FakeApp(std::string socket, std::uint32_t host, std::uint32_t hosts, std::uint32_t total, std::string run_id,
          std::string run_token = "");
  ~FakeApp();
  // Sends the attach request; returns the answer (kMsgAttachOk or kMsgRefused).
  abi::DataplaneMessage attach();
  // Waits for a message of `type`; false after `timeout_ms` or another message.
  bool wait_message(std::uint32_t type, int timeout_ms, abi::DataplaneMessage* out = nullptr);
  void send_detach();

  std::uint32_t first() const { return first_; }
  std::uint32_t local() const { return local_; }

  // Client side: local thread `li` publishes batch `seq` to remote trustee
  // `trustee` (in the slots of lane seq % abi::kLanes) and rings its
  // doorbell. The readers take the seq whose lane they read.
  void request(std::uint32_t li, std::uint32_t trustee, std::uint32_t seq, const std::vector<std::uint8_t>& body);
  std::uint32_t response_seq(std::uint32_t li, std::uint32_t trustee, std::uint32_t lane_of) const;
  std::vector<std::uint8_t> response_body(std::uint32_t li, std::uint32_t trustee, std::uint32_t lane_of) const;
  // Trustee side: the request slot of (local trustee li, remote client).
  std::uint32_t request_seq(std::uint32_t li, std::uint32_t client, std::uint32_t lane_of) const;
  std::vector<std::uint8_t> request_body(std::uint32_t li, std::uint32_t client, std::uint32_t lane_of) const;
  // flags: the response slot's (abi::kResponseMore: the answer's rest
  // comes with a later one).
  void respond(std::uint32_t li, std::uint32_t client, std::uint32_t seq, const std::vector<std::uint8_t>& body,
               std::uint16_t flags = 0);
  std::uint16_t response_flags(std::uint32_t li, std::uint32_t trustee, std::uint32_t lane_of) const;
  // Whether the dataplane has taken every doorbell local thread `li` rang.
  bool doorbells_taken(std::uint32_t li) const;
  // The segment's dataplane_sleeping word: non-zero while a polling core of
  // our dataplane sleeps (a doorbell then kicks it).
  bool dataplane_sleeping() const;

 private:
  std::uint8_t* slot(std::uint64_t region, std::uint32_t row, std::uint32_t col, std::size_t size,
                     std::uint32_t lane_of) const;
  void ring(std::uint32_t li, std::uint32_t entry);
  std::string socket_;
  std::uint32_t host_, hosts_, total_, first_ = 0, local_ = 0;
  std::string run_id_, run_token_;
  abi::SegmentLayout layout_{};
  int memfd_ = -1, eventfd_ = -1, sock_ = -1;
  std::uint8_t* base_ = nullptr;
};

// A body of `len` bytes that names (client, trustee, seq, direction).
std::vector<std::uint8_t> pattern(std::uint32_t client, std::uint32_t trustee, std::uint32_t seq, bool response,
                                  std::size_t len);

}  // namespace gossamer::dataplane::testing
