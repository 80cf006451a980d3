// The verbs transport (verbs_transport.hpp).
#include "verbs_transport.hpp"

#include <cstdlib>
#include <cstring>
#include <utility>

namespace gossamer::dataplane::verbs {

namespace {
// Delivers a channel's records as (peer, record).
struct PeerSink final : RecordSink {
  DeliverySink& sink;
  std::uint32_t peer;
  PeerSink(DeliverySink& s, std::uint32_t p) : sink(s), peer(p) {}
  void record(const wire::RecordView& v) override { sink.deliver(peer, v); }
};
}  // namespace

VerbsTransport::VerbsTransport(Verbs& v, const TransportConfig& c, Publish publish)
    : v_(v), cfg_(c), publish_(std::move(publish)) {
  peers_.resize(c.hosts);
  index_.assign(std::size_t(c.hosts) * c.conns_per_host, -1);
}

VerbsTransport::~VerbsTransport() {
  slots_.clear();  // the QPs go before the memory they point into
  std::free(mem_);
}

std::string VerbsTransport::start() {
  const std::size_t ring = std::size_t(cfg_.channel.ring_units) * kUnitBytes;
  for (std::uint32_t h = 0; h < cfg_.hosts; ++h)
    for (std::uint32_t c = cfg_.core; h != cfg_.self && c < cfg_.conns_per_host; c += cfg_.cores)
      slots_.push_back(Slot{h, c, nullptr});
  if (slots_.empty()) return "";
  // One registration for every ring and staging area of this core.
  mem_bytes_ = slots_.size() * 2 * ring;
  if (::posix_memalign(reinterpret_cast<void**>(&mem_), 4096, mem_bytes_) != 0)
    return "cannot allocate " + std::to_string(mem_bytes_) + " bytes of rings";
  std::memset(mem_, 0, mem_bytes_);
  if (std::string e = v_.reg_mr(mem_, mem_bytes_, &mr_); !e.empty())
    return "registering " + std::to_string(mem_bytes_ >> 10) + " KiB of rings: " + e;
  const std::uint64_t n = slots_.size();
  const std::uint64_t send_depth = n * cfg_.channel.qp.max_send_wr, recv_depth = n * (cfg_.channel.ring_units + 16);
  if (std::string e = v_.create_cq(std::uint32_t(std::min<std::uint64_t>(send_depth, 1u << 22)), &send_cq_); !e.empty())
    return "send CQ: " + e;
  if (std::string e = v_.create_cq(std::uint32_t(std::min<std::uint64_t>(recv_depth, 1u << 22)), &recv_cq_); !e.empty())
    return "receive CQ: " + e;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    std::uint8_t* base = mem_ + i * 2 * ring;
    s.ch = std::make_unique<QpChannel>(v_, send_cq_, recv_cq_, mr_, base, base + ring, cfg_.channel, std::uint32_t(i),
                                       cfg_.seed * 7919u + std::uint32_t(i));
    index_[std::size_t(s.peer) * cfg_.conns_per_host + s.conn] = std::int32_t(i);
    if (std::string e = s.ch->create(); !e.empty())
      return "peer " + std::to_string(s.peer) + " connection " + std::to_string(s.conn) + ": " + e;
    publish_(s.peer, s.conn, s.ch->local());
  }
  return "";
}

VerbsTransport::Slot* VerbsTransport::slot(std::uint32_t peer, std::uint32_t conn) {
  if (peer >= cfg_.hosts || conn >= cfg_.conns_per_host) return nullptr;
  const std::int32_t i = index_[std::size_t(peer) * cfg_.conns_per_host + conn];
  return i < 0 ? nullptr : &slots_[std::size_t(i)];
}

QpChannel* VerbsTransport::channel(std::uint32_t peer, std::uint32_t conn) {
  Slot* s = slot(peer, conn);
  return s ? s->ch.get() : nullptr;
}

const QpChannel* VerbsTransport::channel(std::uint32_t peer, std::uint32_t conn) const {
  return const_cast<VerbsTransport*>(this)->channel(peer, conn);
}

void VerbsTransport::remote(std::uint32_t peer, std::uint64_t boot, const Gid& gid, std::uint16_t lid,
                            std::uint32_t conn, const Endpoint& e, DeliverySink& sink) {
  Slot* s = slot(peer, conn);
  if (!s || boot < peers_[peer].boot) return;  // not ours, or from a previous incarnation
  PeerState& p = peers_[peer];
  if (boot > p.boot) {
    const bool restarted = p.boot != 0;
    p.boot = boot;
    if (restarted) {
      restart_peer(peer);
      sink.peer_restarted(peer, boot);
    }
  }
  p.gid = gid;
  p.lid = lid;
  if (s->ch->connect(gid, lid, e) == "reconnect") {
    handle_failures(sink);  // counted, reported, a new QP published
    s->ch->connect(gid, lid, e);
  }
}

// The peer's new incarnation: its QPs are gone; ours to it start over, and
// their next endpoint from it, whatever its generation, is the one to use.
void VerbsTransport::restart_peer(std::uint32_t peer) {
  for (Slot& s : slots_) {
    if (s.peer != peer) continue;
    s.ch->forget_remote();
    if (s.ch->state() != QpState::kInit) {
      s.ch->recreate();
      publish_(s.peer, s.conn, s.ch->local());
    }
  }
}

void VerbsTransport::peer_restarted(std::uint32_t peer, std::uint64_t boot) {
  if (peer >= cfg_.hosts || boot <= peers_[peer].boot) return;
  peers_[peer].boot = boot;
  restart_peer(peer);
}

void VerbsTransport::enqueue(std::uint32_t peer, std::uint32_t conn, const wire::WireRecord& r, const void* payload) {
  if (Slot* s = slot(peer, conn)) s->ch->enqueue(r, payload);
}

bool VerbsTransport::usable(std::uint32_t peer, std::uint32_t conn) const {
  const QpChannel* c = channel(peer, conn);
  return c && c->usable();
}

bool VerbsTransport::poll(DeliverySink& sink) {
  Completion cs[kPollBatch];
  bool worked = false;
  for (Handle cq : {recv_cq_, send_cq_}) {
    if (!cq) continue;
    // A bounded number of batches, so that sending is not starved.
    for (int round = 0; round < 4; ++round) {
      ++cq_polls_;
      const int n = v_.poll_cq(cq, cs, kPollBatch);
      if (n <= 0) break;
      completions_ += std::uint64_t(n);
      worked = true;
      for (int i = 0; i < n; ++i) {
        const std::uint32_t owner = QpChannel::owner_of(cs[i].wr_id);
        if (owner >= slots_.size()) continue;
        Slot& s = slots_[owner];
        PeerSink ps(sink, s.peer);
        s.ch->on_completion(cs[i], ps);
        s.touched |= cs[i].kind == Completion::Kind::kRecvImm;
      }
      if (n < kPollBatch) break;
    }
  }
  for (Slot& s : slots_)
    if (std::exchange(s.touched, false)) s.ch->repost_receives();
  handle_failures(sink);
  return worked;
}

void VerbsTransport::handle_failures(DeliverySink& sink) {
  for (Slot& s : slots_) {
    if (s.ch->state() != QpState::kError) continue;
    const std::string why = s.ch->take_failure();
    const std::uint64_t lost = s.ch->stats().in_doubt_records - s.lost_reported;
    s.lost_reported = s.ch->stats().in_doubt_records;
    // Fate sharing: reported even with nothing lost, since the peer may
    // have lost what it was sending us on this QP.
    sink.link_failed(s.peer, lost, "queue pair of connection " + std::to_string(s.conn) + ": " + why);
    if (s.ch->recreate().empty()) publish_(s.peer, s.conn, s.ch->local());
  }
}

bool VerbsTransport::pump() {
  bool sent = false;
  for (Slot& s : slots_) sent |= s.ch->pump() != 0;
  return sent;
}

void VerbsTransport::counters(std::uint32_t peer, std::uint32_t conn, abi::ConnCounters* out) const {
  const QpChannel* c = channel(peer, conn);
  if (!c) return;
  const ChannelStats& s = c->stats();
  out->frames_sent = s.messages_sent;
  out->frames_received = s.messages_received;
  out->records_sent = s.records_sent;
  out->records_received = s.records_received;
  out->credits = c->usable() ? c->credits() : 0;
  out->credit_stalls = s.credit_stalls;
  out->outbound_active = c->usable();
  out->inbound_active = c->state() == QpState::kRts && c->inbound_active();
  out->established = c->usable();
  out->resets = s.reconnects;
}

std::uint64_t VerbsTransport::take_utilization(std::uint32_t peer, std::uint32_t conn, bool* data) {
  QpChannel* c = channel(peer, conn);
  *data = false;
  return c ? c->take_utilization(data) : 0;
}

void VerbsTransport::set_inbound_active(std::uint32_t peer, std::uint32_t conn, bool active) {
  if (QpChannel* c = channel(peer, conn)) c->set_inbound_active(active || conn == 0);
}

bool VerbsTransport::has_pending(std::uint32_t peer, std::uint32_t conn) const {
  const QpChannel* c = channel(peer, conn);
  return c && c->has_pending();
}

void VerbsTransport::take_pending(std::uint32_t peer, std::uint32_t conn, std::vector<std::uint8_t>* out) {
  if (QpChannel* c = channel(peer, conn)) c->take_pending(out);
}

void VerbsTransport::enqueue_records(std::uint32_t peer, std::uint32_t conn, const std::uint8_t* records,
                                     std::size_t len) {
  if (QpChannel* c = channel(peer, conn)) c->enqueue_records(records, len);
}

QpTotals VerbsTransport::totals() const {
  QpTotals t;
  t.cq_polls = cq_polls_;
  t.completions = completions_;
  for (const Slot& s : slots_) {
    ++t.qps;
    const ChannelStats& c = s.ch->stats();
    if (s.ch->state() == QpState::kError) ++t.errored;
    else if (s.ch->usable() && (s.ch->has_pending() || s.ch->sq_outstanding())) ++t.active;
    else ++t.idle;
    t.sum.wrs_posted += c.wrs_posted;
    t.sum.wrs_signaled += c.wrs_signaled;
    t.sum.doorbells += c.doorbells;
    t.sum.qp_errors += c.qp_errors;
    t.sum.in_doubt_records += c.in_doubt_records;
    t.sum.reconnects += c.reconnects;
    t.sum.protocol_errors += c.protocol_errors;
  }
  return t;
}

}  // namespace gossamer::dataplane::verbs
