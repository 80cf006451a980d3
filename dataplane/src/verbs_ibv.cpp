// The verbs calls over rdma-core's libibverbs (verbs.hpp). Nothing else in
// the dataplane calls ibv_*. Untested on this project's CI machine, which
// has no RDMA device (and no rxe or siw): the integration test
// (tests/dataplane/verbs_rdma_test.cpp) runs it where a device exists.
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "verbs.hpp"

namespace gossamer::dataplane::verbs {

namespace {

ibv_mtu to_ibv_mtu(std::uint32_t bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default: return IBV_MTU_1024;
  }
}

std::uint32_t from_ibv_mtu(ibv_mtu m) { return 128u << int(m); }

std::string err(const char* what, int e) { return std::string(what) + ": " + std::strerror(e); }

class Ibv final : public Verbs {
 public:
  ~Ibv() override {
    for (auto& [h, qp] : qps_) ibv_destroy_qp(qp);
    for (auto& [h, cq] : cqs_) ibv_destroy_cq(cq);
    for (ibv_mr* mr : mrs_) ibv_dereg_mr(mr);
    if (pd_) ibv_dealloc_pd(pd_);
    if (ctx_) ibv_close_device(ctx_);
  }

  std::vector<std::string> list_devices() override {
    std::vector<std::string> out;
    int n = 0;
    ibv_device** devs = ibv_get_device_list(&n);
    for (int i = 0; devs && i < n; ++i) out.emplace_back(ibv_get_device_name(devs[i]));
    if (devs) ibv_free_device_list(devs);
    return out;
  }

  std::string open(const std::string& device, std::uint8_t port, std::uint32_t gid_index, PortInfo* out) override {
    if (ctx_) return "a device is open already";
    int n = 0;
    ibv_device** devs = ibv_get_device_list(&n);
    if (!devs)  // ENOSYS: the kernel has no RDMA subsystem at all
      return (device.empty() ? std::string("no RDMA device") : "no RDMA device '" + device + "'") +
             " (this host has none: libibverbs says " + std::strerror(errno) + ")";
    std::string names;
    ibv_device* found = nullptr;
    for (int i = 0; i < n; ++i) {
      const char* name = ibv_get_device_name(devs[i]);
      names += (names.empty() ? "" : ", ") + std::string(name);
      if (!found && (device.empty() || device == name)) found = devs[i];
    }
    if (found) ctx_ = ibv_open_device(found);
    const int open_errno = errno;
    ibv_free_device_list(devs);
    if (!found)
      return (device.empty() ? std::string("no RDMA device") : "no RDMA device '" + device + "'") +
             (names.empty() ? " (this host has none)" : " (this host has: " + names + ")");
    if (!ctx_) return err("ibv_open_device", open_errno);
    ibv_port_attr pa{};
    if (int e = ibv_query_port(ctx_, port, &pa); e) return err(("ibv_query_port " + std::to_string(port)).c_str(), e);
    ibv_gid gid{};
    if (int e = ibv_query_gid(ctx_, port, int(gid_index), &gid); e)
      return err(("ibv_query_gid index " + std::to_string(gid_index)).c_str(), e);
    ibv_device_attr da{};
    ibv_query_device(ctx_, &da);
    out->device = ibv_get_device_name(ctx_->device);
    out->port = port;
    out->gid_index = gid_index;
    std::memcpy(out->gid.data(), gid.raw, 16);
    out->lid = pa.lid;
    out->active_mtu = from_ibv_mtu(pa.active_mtu);
    out->max_qp_wr = std::uint32_t(da.max_qp_wr);
    out->link_up = pa.state == IBV_PORT_ACTIVE;
    port_ = port;
    gid_index_ = gid_index;
    return "";
  }

  std::string alloc_pd() override {
    pd_ = ibv_alloc_pd(ctx_);
    return pd_ ? "" : err("ibv_alloc_pd", errno);
  }

  std::string reg_mr(void* addr, std::size_t len, Mr* out) override {
    ibv_mr* mr = ibv_reg_mr(pd_, addr, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!mr) return err("ibv_reg_mr", errno);
    mrs_.push_back(mr);
    *out = Mr{reinterpret_cast<std::uint64_t>(addr), mr->lkey, mr->rkey, Handle(mrs_.size())};
    return "";
  }

  std::string create_cq(std::uint32_t depth, Handle* cq) override {
    ibv_cq* c = ibv_create_cq(ctx_, int(depth), nullptr, nullptr, 0);
    if (!c) return err("ibv_create_cq", errno);
    *cq = ++next_;
    cqs_[*cq] = c;
    return "";
  }

  std::string create_qp(Handle send_cq, Handle recv_cq, const QpConfig& c, Handle* qp, std::uint32_t* qpn) override {
    ibv_qp_init_attr a{};
    a.send_cq = cqs_.at(send_cq);
    a.recv_cq = cqs_.at(recv_cq);
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = 0;  // selective signaling
    a.cap.max_send_wr = c.max_send_wr;
    a.cap.max_recv_wr = c.max_recv_wr;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    ibv_qp* q = ibv_create_qp(pd_, &a);
    if (!q) return err("ibv_create_qp", errno);
    *qp = ++next_;
    qps_[*qp] = q;
    by_num_[q->qp_num] = *qp;
    *qpn = q->qp_num;
    return "";
  }

  std::string modify_qp(Handle qp, QpState to, const QpConfig& c, std::uint32_t local_psn,
                        const RemoteQp* remote) override {
    ibv_qp_attr a{};
    int mask = IBV_QP_STATE;
    switch (to) {
      case QpState::kReset: a.qp_state = IBV_QPS_RESET; break;
      case QpState::kError: a.qp_state = IBV_QPS_ERR; break;
      case QpState::kInit:
        a.qp_state = IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = port_;
        a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
        mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        break;
      case QpState::kRtr:
        if (!remote) return "RTR needs the remote QP";
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = to_ibv_mtu(c.path_mtu);
        a.dest_qp_num = remote->qpn;
        a.rq_psn = remote->psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = c.min_rnr_timer;
        a.ah_attr.is_global = 1;  // RoCE needs the GRH; InfiniBand takes it too
        std::memcpy(a.ah_attr.grh.dgid.raw, remote->gid.data(), 16);
        a.ah_attr.grh.sgid_index = std::uint8_t(gid_index_);
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.dlid = remote->lid;
        a.ah_attr.port_num = port_;
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                IBV_QP_MIN_RNR_TIMER;
        break;
      case QpState::kRts:
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = local_psn;
        a.timeout = c.timeout;
        a.retry_cnt = c.retry_count;
        a.rnr_retry = c.rnr_retry;
        a.max_rd_atomic = 1;
        mask |= IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        break;
    }
    if (int e = ibv_modify_qp(qps_.at(qp), &a, mask); e)
      return err((std::string("ibv_modify_qp to ") + to_string(to)).c_str(), e);
    return "";
  }

  void destroy_qp(Handle qp) override {
    auto it = qps_.find(qp);
    if (it == qps_.end()) return;
    by_num_.erase(it->second->qp_num);
    ibv_destroy_qp(it->second);
    qps_.erase(it);
  }

  int post_send(Handle qp, const SendWr* wrs, std::size_t n, std::size_t* posted) override {
    ibv_send_wr w[64];
    ibv_sge s[64];
    std::size_t done = 0;
    int e = 0;
    for (std::size_t base = 0; base < n && !e; base += 64) {
      const std::size_t k = std::min<std::size_t>(64, n - base);
      for (std::size_t i = 0; i < k; ++i) {
        const SendWr& x = wrs[base + i];
        s[i] = ibv_sge{x.local_addr, x.length, x.lkey};
        w[i] = ibv_send_wr{};
        w[i].wr_id = x.wr_id;
        w[i].next = i + 1 < k ? &w[i + 1] : nullptr;
        w[i].sg_list = x.length ? &s[i] : nullptr;
        w[i].num_sge = x.length ? 1 : 0;
        w[i].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        w[i].send_flags = x.signaled ? IBV_SEND_SIGNALED : 0;
        w[i].imm_data = htonl(x.imm);
        w[i].wr.rdma.remote_addr = x.remote_addr;
        w[i].wr.rdma.rkey = x.rkey;
      }
      ibv_send_wr* bad = nullptr;
      e = ibv_post_send(qps_.at(qp), w, &bad);
      done += e ? std::size_t(bad ? bad - w : 0) : k;
    }
    if (posted) *posted = done;
    return e;
  }

  int post_recv(Handle qp, const std::uint64_t* ids, std::size_t n) override {
    ibv_recv_wr w[64];
    for (std::size_t base = 0; base < n; base += 64) {
      const std::size_t k = std::min<std::size_t>(64, n - base);
      for (std::size_t i = 0; i < k; ++i) {
        w[i] = ibv_recv_wr{};
        w[i].wr_id = ids[base + i];
        w[i].next = i + 1 < k ? &w[i + 1] : nullptr;
      }
      ibv_recv_wr* bad = nullptr;
      if (int e = ibv_post_recv(qps_.at(qp), w, &bad); e) return e;
    }
    return 0;
  }

  int poll_cq(Handle cq, Completion* out, int max) override {
    ibv_wc wc[32];
    const int n = ibv_poll_cq(cqs_.at(cq), std::min(max, 32), wc);
    for (int i = 0; i < n; ++i) {
      Completion& c = out[i];
      c = Completion{};
      auto q = by_num_.find(wc[i].qp_num);
      c.qp = q == by_num_.end() ? 0 : q->second;
      c.wr_id = wc[i].wr_id;
      c.ok = wc[i].status == IBV_WC_SUCCESS;
      c.flushed = wc[i].status == IBV_WC_WR_FLUSH_ERR;
      if (!c.ok) c.status = ibv_wc_status_str(wc[i].status);
      c.vendor_err = wc[i].vendor_err;
      // An error completion's opcode is undefined: the wr_id tells a send
      // from a receive (receives have sequence 0, verbs_channel.hpp).
      if (c.ok) {
        c.kind = wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM ? Completion::Kind::kRecvImm
                 : wc[i].opcode == IBV_WC_RDMA_WRITE      ? Completion::Kind::kSend
                                                          : Completion::Kind::kOther;
      } else {
        c.kind = std::uint32_t(wc[i].wr_id) == 0 ? Completion::Kind::kRecvImm : Completion::Kind::kSend;
      }
      c.imm = c.kind == Completion::Kind::kRecvImm && (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
      c.byte_len = wc[i].byte_len;
    }
    return n;
  }

 private:
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::uint8_t port_ = 1;
  std::uint32_t gid_index_ = 0;
  std::vector<ibv_mr*> mrs_;
  std::map<Handle, ibv_cq*> cqs_;
  std::map<Handle, ibv_qp*> qps_;
  std::map<std::uint32_t, Handle> by_num_;
  Handle next_ = 0;
};

}  // namespace

std::unique_ptr<Verbs> make_ibv() { return std::make_unique<Ibv>(); }

}  // namespace gossamer::dataplane::verbs
