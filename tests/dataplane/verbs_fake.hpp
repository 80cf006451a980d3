// A recording fake of the verbs calls (dataplane/src/verbs.hpp), for the
// unit tests of everything above them on machines without an RDMA device
// (issue 22). It records every call (the WR lists of each post_send, the
// state transitions, the receives posted) and, through a FakeFabric shared
// by several FakeVerbs (hosts), carries WRITE_WITH_IMMs between the QPs
// that were connected to each other: the bytes are copied into the
// registered memory the rkey names (checked), the receiver consumes a
// receive and gets a completion with the immediate and the length, the
// sender a completion for signaled WRs. WRs wait on the "wire" until
// deliver() (so tests can hold messages in flight), and fail_qp() puts a
// QP in the error state as hardware would (its WRs flushed in error).
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "verbs.hpp"

namespace gossamer::dataplane::verbs::fake {

struct Post {
  Handle qp;
  std::vector<SendWr> wrs;  // one doorbell
};

struct FakeQp {
  Handle handle = 0;
  std::uint32_t qpn = 0;
  Handle send_cq = 0, recv_cq = 0;
  QpState state = QpState::kReset;
  std::vector<QpState> transitions;
  std::vector<QpConfig> configs;       // as each transition was given it
  RemoteQp remote{};
  std::uint32_t local_psn = 0;
  std::uint64_t receives = 0;          // posted, not consumed
  std::deque<std::uint64_t> recv_ids;
  std::deque<std::uint64_t> send_ids;  // posted, not yet on the far side (or flushed)
  bool destroyed = false;
};

class FakeVerbs;

class FakeFabric {
 public:
  // Carries every WR on the wire (in order). Returns how many.
  std::size_t deliver() { return deliver(false); }
  // The same, but stops at the first WR whose responder exists and is not
  // connected back yet (INIT, RTR) or has no receive posted: real RC
  // retries those (a peer that connects later, RNR), it does not fail them.
  std::size_t deliver_ready() { return deliver(true); }
  // Drops every WR still on the wire (the link died with them).
  void drop_wire() { wire_.clear(); }
  std::size_t on_wire() const { return wire_.size(); }
  FakeQp* qp_by_num(std::uint32_t qpn);

 private:
  friend class FakeVerbs;
  std::size_t deliver(bool only_ready);
  struct OnWire {
    FakeVerbs* from;
    Handle qp;
    SendWr wr;
    std::vector<std::uint8_t> bytes;  // read from the sender's memory at post time
  };
  std::deque<OnWire> wire_;
  std::vector<FakeVerbs*> hosts_;
  std::uint32_t next_qpn_ = 0x100;
  Handle next_handle_ = 1;
};

class FakeVerbs final : public Verbs {
 public:
  FakeVerbs(FakeFabric& f, std::vector<std::string> devices);
  ~FakeVerbs() override;

  std::vector<std::string> list_devices() override { return devices_; }
  std::string open(const std::string& device, std::uint8_t port, std::uint32_t gid_index, PortInfo* out) override;
  std::string alloc_pd() override;
  std::string reg_mr(void* addr, std::size_t len, Mr* out) override;
  std::string create_cq(std::uint32_t depth, Handle* cq) override;
  std::string create_qp(Handle send_cq, Handle recv_cq, const QpConfig& c, Handle* qp, std::uint32_t* qpn) override;
  std::string modify_qp(Handle qp, QpState to, const QpConfig& c, std::uint32_t local_psn,
                        const RemoteQp* remote) override;
  void destroy_qp(Handle qp) override;
  int post_send(Handle qp, const SendWr* wrs, std::size_t n, std::size_t* posted) override;
  int post_recv(Handle qp, const std::uint64_t* wr_ids, std::size_t n) override;
  int poll_cq(Handle cq, Completion* out, int max) override;

  // Puts `qp` in the error state: its outstanding sends and its receives
  // complete as flushed errors, later posts fail.
  void fail_qp(Handle qp, const std::string& status = "retry exceeded");

  // The record.
  std::vector<Post> posts;
  std::vector<std::string> calls;      // "open mlx5_0", "reg_mr 524288", ...
  std::uint64_t polls = 0;
  std::map<Handle, FakeQp> qps;
  std::string fail_next_modify;        // non-empty: the next modify_qp fails with it
  int fail_next_post = 0;              // non-zero: the next post_send fails with it (nothing posted)
  Gid gid{};

 private:
  friend class FakeFabric;
  struct Region {
    std::uint8_t* addr;
    std::size_t len;
    std::uint32_t rkey;
  };
  bool in_region(std::uint64_t addr, std::size_t len, std::uint32_t key, bool remote) const;
  void complete(Handle cq, const Completion& c) { cqs_[cq].push_back(c); }

  FakeFabric& fabric_;
  std::vector<std::string> devices_;
  bool open_ = false, pd_ = false;
  std::vector<Region> regions_;
  std::map<Handle, std::deque<Completion>> cqs_;
};

}  // namespace gossamer::dataplane::verbs::fake
