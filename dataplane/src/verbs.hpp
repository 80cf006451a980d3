// The ~10 RDMA verbs the verbs transport uses (issue 22), behind an
// interface so that everything above them (verbs_channel.hpp: WR building,
// ring positions, immediates, credits, selective signaling, the QP state
// machine, reconnects) runs in unit tests against a recording fake
// (tests/dataplane/verbs_fake.hpp) on machines without an RDMA device.
// verbs_ibv.cpp is the real implementation over rdma-core (ibv_*); it is
// the only file that includes <infiniband/verbs.h> besides main.cpp.
//
// Only what the transport needs: reliable-connected QPs, RDMA WRITE_WITH_IMM
// (with a zero-length form for credits alone), receives without buffers
// (a WRITE_WITH_IMM consumes one and reports the immediate and the length
// written), and completion queues polled in batches.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gossamer::dataplane::verbs {

using Handle = std::uint64_t;  // a CQ or a QP of this Verbs; 0 is none
using Gid = std::array<std::uint8_t, 16>;

// What open() learned of the port (and what a peer needs of it).
struct PortInfo {
  std::string device;
  std::uint8_t port = 1;
  std::uint32_t gid_index = 0;
  Gid gid{};
  std::uint16_t lid = 0;                 // InfiniBand; 0 on RoCE
  std::uint32_t active_mtu = 1024;       // bytes
  std::uint32_t max_qp_wr = 0;           // the device's limit on WRs per queue
  bool link_up = false;
};

struct Mr {
  std::uint64_t addr = 0;
  std::uint32_t lkey = 0, rkey = 0;
  Handle handle = 0;
};

// How a QP is created (queue depths) and brought up (the rest).
struct QpConfig {
  std::uint32_t max_send_wr = 256;
  std::uint32_t max_recv_wr = 1024;
  std::uint32_t path_mtu = 1024;        // bytes: 256, 512, 1024, 2048 or 4096
  std::uint8_t timeout = 14;            // local ACK timeout: 4.096 us * 2^timeout
  std::uint8_t retry_count = 7;         // transport retries before the QP fails
  std::uint8_t rnr_retry = 7;           // receiver-not-ready retries (7: forever)
  std::uint8_t min_rnr_timer = 12;      // IB encoding (12: 0.64 ms)
};

// The other end of a QP, as the peer sent it (the exchange: verbs_exchange.hpp).
struct RemoteQp {
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;                // its first packet sequence number
  Gid gid{};
  std::uint16_t lid = 0;
};

enum class QpState : std::uint8_t { kReset, kInit, kRtr, kRts, kError };
const char* to_string(QpState s);

// One RDMA WRITE_WITH_IMM: `length` bytes from `local_addr` (lkey) to
// `remote_addr` (rkey); length 0 sends the immediate alone.
struct SendWr {
  std::uint64_t wr_id = 0;
  std::uint64_t local_addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t imm = 0;                // host order here; the wire carries it big-endian
  bool signaled = false;
};

struct Completion {
  enum class Kind : std::uint8_t { kSend, kRecvImm, kOther };
  Handle qp = 0;                        // which QP of the CQ (0 if unknown)
  std::uint64_t wr_id = 0;
  Kind kind = Kind::kOther;
  bool ok = false;
  bool flushed = false;                 // failed because the QP is in the error state
  std::uint32_t imm = 0;                // kRecvImm: host order
  std::uint32_t byte_len = 0;           // kRecvImm: bytes the WRITE placed
  std::uint32_t vendor_err = 0;
  std::string status;                   // when !ok: the library's word for it
};

class Verbs {
 public:
  virtual ~Verbs() = default;
  // The names of the RDMA devices on this host (ibv_get_device_list).
  virtual std::vector<std::string> list_devices() = 0;
  // Opens `device` ("" = the first) and queries `port` and its GID at
  // `gid_index`. "" or why not; a missing device names the ones present.
  virtual std::string open(const std::string& device, std::uint8_t port, std::uint32_t gid_index,
                           PortInfo* out) = 0;
  virtual std::string alloc_pd() = 0;
  // Registers [addr, addr + len) for local access and remote writes.
  virtual std::string reg_mr(void* addr, std::size_t len, Mr* out) = 0;
  virtual std::string create_cq(std::uint32_t depth, Handle* cq) = 0;
  virtual std::string create_qp(Handle send_cq, Handle recv_cq, const QpConfig& c, Handle* qp,
                                std::uint32_t* qpn) = 0;
  // kInit (port, access), kRtr (needs `remote`: path, its QPN and PSN),
  // kRts (our PSN, timeout, retries), kReset. "" or why not.
  virtual std::string modify_qp(Handle qp, QpState to, const QpConfig& c, std::uint32_t local_psn,
                                const RemoteQp* remote) = 0;
  virtual void destroy_qp(Handle qp) = 0;
  // One doorbell for `n` WRs chained in a list. 0, or an errno; on failure
  // *posted (if not null) is how many of them went.
  virtual int post_send(Handle qp, const SendWr* wrs, std::size_t n, std::size_t* posted) = 0;
  // `n` receives without buffers (each takes one WRITE_WITH_IMM).
  virtual int post_recv(Handle qp, const std::uint64_t* wr_ids, std::size_t n) = 0;
  // Up to `max` completions; negative on a CQ error.
  virtual int poll_cq(Handle cq, Completion* out, int max) = 0;
};

// rdma-core's libibverbs (verbs_ibv.cpp), or null when this build has none.
std::unique_ptr<Verbs> make_ibv();

// Whether the verbs transport can run on this host with these settings,
// and why not, in one line (gossamer-dataplane --check): the devices `v`
// lists (v null: this build has no libibverbs), then `device` opened with
// its port and GID. Without a device it says whether this kernel has
// Soft-RoCE (rdma_rxe) or siw, which would make one.
std::string check_verbs(Verbs* v, const std::string& device, std::uint8_t port, std::uint32_t gid_index, bool* ok);

}  // namespace gossamer::dataplane::verbs
