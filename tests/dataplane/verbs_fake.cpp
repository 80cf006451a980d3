#include "verbs_fake.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace gossamer::dataplane::verbs::fake {

FakeVerbs::FakeVerbs(FakeFabric& f, std::vector<std::string> devices) : fabric_(f), devices_(std::move(devices)) {
  fabric_.hosts_.push_back(this);
  gid[0] = 0xfe, gid[1] = 0x80, gid[15] = std::uint8_t(fabric_.hosts_.size());
}

FakeVerbs::~FakeVerbs() { std::erase(fabric_.hosts_, this); }

std::string FakeVerbs::open(const std::string& device, std::uint8_t port, std::uint32_t gid_index, PortInfo* out) {
  calls.push_back("open " + device);
  if (devices_.empty()) return "no RDMA device";
  if (!device.empty() && std::find(devices_.begin(), devices_.end(), device) == devices_.end())
    return "no RDMA device '" + device + "'";
  out->device = device.empty() ? devices_[0] : device;
  out->port = port;
  out->gid_index = gid_index;
  out->gid = gid;
  out->link_up = true;
  out->max_qp_wr = 32768;
  open_ = true;
  return "";
}

std::string FakeVerbs::alloc_pd() {
  calls.push_back("alloc_pd");
  if (!open_) return "device not open";
  pd_ = true;
  return "";
}

std::string FakeVerbs::reg_mr(void* addr, std::size_t len, Mr* out) {
  calls.push_back("reg_mr " + std::to_string(len));
  if (!pd_) return "no protection domain";
  const std::uint32_t key = 0x1000 + std::uint32_t(regions_.size()) + 0x100 * std::uint32_t(fabric_.hosts_.size());
  regions_.push_back({static_cast<std::uint8_t*>(addr), len, key});
  *out = Mr{reinterpret_cast<std::uint64_t>(addr), key, key, fabric_.next_handle_++};
  return "";
}

std::string FakeVerbs::create_cq(std::uint32_t depth, Handle* cq) {
  calls.push_back("create_cq " + std::to_string(depth));
  *cq = fabric_.next_handle_++;
  cqs_[*cq];
  return "";
}

std::string FakeVerbs::create_qp(Handle send_cq, Handle recv_cq, const QpConfig& c, Handle* qp, std::uint32_t* qpn) {
  calls.push_back("create_qp " + std::to_string(c.max_send_wr) + "/" + std::to_string(c.max_recv_wr));
  FakeQp q;
  q.handle = fabric_.next_handle_++;
  q.qpn = fabric_.next_qpn_++;
  q.send_cq = send_cq;
  q.recv_cq = recv_cq;
  qps[q.handle] = q;
  *qp = q.handle;
  *qpn = q.qpn;
  return "";
}

std::string FakeVerbs::modify_qp(Handle qp, QpState to, const QpConfig& c, std::uint32_t local_psn,
                                 const RemoteQp* remote) {
  calls.push_back(std::string("modify_qp ") + to_string(to));
  FakeQp& q = qps.at(qp);
  if (!fail_next_modify.empty()) return std::exchange(fail_next_modify, std::string());
  // The transitions of an RC QP (IB spec 10.3.1), the rest refused as ibv_modify_qp would.
  const bool ok = to == QpState::kReset || to == QpState::kError ||
                  (to == QpState::kInit && q.state == QpState::kReset) ||
                  (to == QpState::kRtr && q.state == QpState::kInit && remote) ||
                  (to == QpState::kRts && q.state == QpState::kRtr);
  if (!ok) return std::string("invalid transition ") + to_string(q.state) + " -> " + to_string(to);
  if (remote) q.remote = *remote;
  q.local_psn = local_psn;
  q.state = to;
  q.transitions.push_back(to);
  q.configs.push_back(c);
  return "";
}

void FakeVerbs::destroy_qp(Handle qp) {
  calls.push_back("destroy_qp");
  std::erase_if(fabric_.wire_, [&](const FakeFabric::OnWire& w) { return w.from == this && w.qp == qp; });
  qps.at(qp).destroyed = true;
  qps.at(qp).state = QpState::kReset;
}

bool FakeVerbs::in_region(std::uint64_t addr, std::size_t len, std::uint32_t key, bool) const {
  for (const Region& r : regions_) {
    const auto base = reinterpret_cast<std::uint64_t>(r.addr);
    if (r.rkey == key && addr >= base && addr + len <= base + r.len) return true;
  }
  return false;
}

int FakeVerbs::post_send(Handle qp, const SendWr* wrs, std::size_t n, std::size_t* posted) {
  if (posted) *posted = 0;
  FakeQp& q = qps.at(qp);
  if (fail_next_post) return std::exchange(fail_next_post, 0);
  if (q.state != QpState::kRts || q.destroyed) return EINVAL;
  posts.push_back({qp, std::vector<SendWr>(wrs, wrs + n)});
  for (std::size_t i = 0; i < n; ++i) {
    if (wrs[i].length && !in_region(wrs[i].local_addr, wrs[i].length, wrs[i].lkey, false)) return EINVAL;
    FakeFabric::OnWire w{this, qp, wrs[i], {}};
    const auto* p = reinterpret_cast<const std::uint8_t*>(wrs[i].local_addr);
    w.bytes.assign(p, p + wrs[i].length);
    fabric_.wire_.push_back(std::move(w));
    q.send_ids.push_back(wrs[i].wr_id);
    if (posted) ++*posted;
  }
  return 0;
}

int FakeVerbs::post_recv(Handle qp, const std::uint64_t* wr_ids, std::size_t n) {
  FakeQp& q = qps.at(qp);
  if (q.state == QpState::kError || q.destroyed) return EINVAL;
  for (std::size_t i = 0; i < n; ++i) q.recv_ids.push_back(wr_ids[i]);
  q.receives += n;
  return 0;
}

int FakeVerbs::poll_cq(Handle cq, Completion* out, int max) {
  ++polls;
  auto& d = cqs_[cq];
  int n = 0;
  for (; n < max && !d.empty(); ++n) out[n] = d.front(), d.pop_front();
  return n;
}

void FakeVerbs::fail_qp(Handle qp, const std::string& status) {
  FakeQp& q = qps.at(qp);
  if (q.state == QpState::kError) return;
  q.state = QpState::kError;
  // Its WRs still on the wire never arrive; every outstanding one completes flushed.
  std::erase_if(fabric_.wire_, [&](const FakeFabric::OnWire& w) { return w.from == this && w.qp == qp; });
  for (std::size_t i = 0; i < q.send_ids.size(); ++i) {
    Completion c;
    c.qp = qp;
    c.wr_id = q.send_ids[i];
    c.kind = Completion::Kind::kSend;
    c.status = i == 0 ? status : "flushed";
    c.flushed = i != 0;
    complete(q.send_cq, c);
  }
  if (q.send_ids.empty()) {  // nothing outstanding: the error shows on a receive
    Completion c;
    c.qp = qp;
    c.wr_id = q.recv_ids.empty() ? 0 : q.recv_ids.front();
    c.kind = Completion::Kind::kRecvImm;
    c.status = status;
    complete(q.recv_cq, c);
    if (!q.recv_ids.empty()) q.recv_ids.pop_front();
  }
  q.send_ids.clear();
  for (std::uint64_t id : q.recv_ids) {
    Completion c;
    c.qp = qp;
    c.wr_id = id;
    c.kind = Completion::Kind::kRecvImm;
    c.status = "flushed";
    c.flushed = true;
    complete(q.recv_cq, c);
  }
  q.recv_ids.clear();
  q.receives = 0;
}

FakeQp* FakeFabric::qp_by_num(std::uint32_t qpn) {
  for (FakeVerbs* h : hosts_)
    for (auto& [handle, q] : h->qps)
      if (q.qpn == qpn && !q.destroyed) return &q;
  return nullptr;
}

std::size_t FakeFabric::deliver(bool only_ready) {
  std::size_t n = 0;
  while (!wire_.empty()) {
    if (only_ready) {
      const FakeQp& s = wire_.front().from->qps.at(wire_.front().qp);
      const FakeQp* d = qp_by_num(s.remote.qpn);
      if (d && (((d->state == QpState::kInit || d->state == QpState::kRtr) && !d->destroyed) ||
                (d->state == QpState::kRts && d->remote.qpn == s.qpn && d->receives == 0)))
        break;
    }
    OnWire w = std::move(wire_.front());
    wire_.pop_front();
    FakeQp& src = w.from->qps.at(w.qp);
    if (!src.send_ids.empty()) src.send_ids.pop_front();
    if (w.wr.signaled) {
      Completion c;
      c.qp = w.qp;
      c.wr_id = w.wr.wr_id;
      c.kind = Completion::Kind::kSend;
      c.ok = true;
      w.from->complete(src.send_cq, c);
    }
    ++n;
    // The responder: the QP the sender is connected to, connected back.
    FakeQp* dst = qp_by_num(src.remote.qpn);
    FakeVerbs* host = nullptr;
    for (FakeVerbs* h : hosts_)
      if (dst && h->qps.count(dst->handle) && &h->qps.at(dst->handle) == dst) host = h;
    const bool ok = dst && host && dst->state == QpState::kRts && dst->remote.qpn == src.qpn && dst->receives > 0 &&
                    (w.wr.length == 0 || host->in_region(w.wr.remote_addr, w.wr.length, w.wr.rkey, true));
    if (!ok) {
      w.from->fail_qp(w.qp, dst ? "remote access or RNR error" : "retry exceeded");
      continue;
    }
    if (w.wr.length) std::memcpy(reinterpret_cast<void*>(w.wr.remote_addr), w.bytes.data(), w.wr.length);
    --dst->receives;
    Completion c;
    c.qp = dst->handle;
    c.wr_id = dst->recv_ids.front();
    dst->recv_ids.pop_front();
    c.kind = Completion::Kind::kRecvImm;
    c.ok = true;
    c.imm = w.wr.imm;
    c.byte_len = w.wr.length;
    host->complete(dst->recv_cq, c);
  }
  return n;
}

}  // namespace gossamer::dataplane::verbs::fake
