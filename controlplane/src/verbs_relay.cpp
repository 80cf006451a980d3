// gossamerd's part of the verbs endpoint exchange (verbs_relay.hpp).
#include "verbs_relay.hpp"

namespace gossamer::cp {

namespace dv = dataplane::verbs;

namespace {
bool same(const VerbsQp& a, const VerbsQp& b) {
  return a.conn == b.conn && a.qpn == b.qpn && a.psn == b.psn && a.rkey == b.rkey && a.ring_addr == b.ring_addr &&
         a.ring_units == b.ring_units && a.generation == b.generation;
}
}  // namespace

VerbsRelay::VerbsRelay(std::uint32_t self, std::uint32_t hosts, std::uint32_t conns)
    : self_(self), hosts_(hosts), conns_(conns) {}

std::vector<VerbsEndpoints> VerbsRelay::local(const std::string& text) {
  std::string why;
  std::uint64_t bad = 0;
  const auto entries = dv::parse_entries(text, hosts_, conns_, &bad, &why);
  local_bad_ += bad;
  if (bad) last_why_ = "the dataplane's file: " + why;
  std::map<std::uint32_t, VerbsEndpoints> now;
  for (const dv::ExchangeEntry& e : entries) {
    if (e.host == self_) {
      ++local_bad_;
      last_why_ = "the dataplane's file: a queue pair to this host";
      continue;
    }
    VerbsEndpoints& m = now[e.host];
    if (!m.qps.empty() && (m.boot != e.boot || m.gid != e.gid || m.lid != e.lid)) {
      // Two incarnations in one file cannot happen; keep the newer.
      if (e.boot < m.boot) continue;
      if (e.boot > m.boot) m.qps.clear();
    }
    m.from = self_;
    m.to = e.host;
    m.boot = e.boot;
    m.gid = e.gid;
    m.lid = e.lid;
    VerbsQp q{e.conn, e.ep.qpn, e.ep.psn, e.ep.rkey, e.ep.ring_addr, e.ep.ring_units, e.ep.generation};
    bool replaced = false;
    for (VerbsQp& old : m.qps)
      if (old.conn == q.conn) old = q, replaced = true;
    if (!replaced) m.qps.push_back(q);
  }
  std::vector<VerbsEndpoints> changed;
  for (auto& [h, m] : now) {
    auto it = out_.find(h);
    if (it != out_.end() && encode(it->second) == encode(m)) continue;
    out_[h] = m;
    changed.push_back(m);
  }
  return changed;
}

bool VerbsRelay::message_for(std::uint32_t h, VerbsEndpoints* out) const {
  auto it = out_.find(h);
  if (it == out_.end()) return false;
  *out = it->second;
  return true;
}

bool VerbsRelay::on_message(std::uint32_t sender, std::string_view body) {
  ++received_;
  VerbsEndpoints m;
  if (!decode(body, m)) {
    ++rejected_;
    last_why_ = "host " + std::to_string(sender) + ": a VerbsEndpoints of " + std::to_string(body.size()) +
                " bytes that does not decode";
    return false;
  }
  if (std::string why = check_verbs_endpoints(m, sender, self_, hosts_, conns_); !why.empty()) {
    ++rejected_;
    last_why_ = "host " + std::to_string(sender) + ": " + why;
    return false;
  }
  PeerQps& p = in_[sender];
  if (m.boot < p.boot) return false;  // from an earlier incarnation: late
  bool changed = false;
  if (m.boot > p.boot || m.gid != p.gid || m.lid != p.lid) {
    p.qps.clear();
    p.boot = m.boot;
    p.gid = m.gid;
    p.lid = m.lid;
    changed = true;
  }
  for (const VerbsQp& q : m.qps) {
    auto it = p.qps.find(q.conn);
    if (it != p.qps.end() && q.generation < it->second.generation) continue;  // an older QP
    if (it != p.qps.end() && same(it->second, q)) continue;
    p.qps[q.conn] = q;
    changed = true;
  }
  return changed;
}

std::string VerbsRelay::remote_text() const {
  std::vector<dv::ExchangeEntry> es;
  for (const auto& [h, p] : in_)
    for (const auto& [c, q] : p.qps) {
      dv::ExchangeEntry e;
      e.host = h;
      e.boot = p.boot;
      e.gid = p.gid;
      e.lid = std::uint16_t(p.lid);
      e.conn = c;
      e.ep = dv::Endpoint{q.qpn, q.psn, q.ring_addr, q.rkey, q.ring_units, q.generation};
      es.push_back(e);
    }
  return dv::format_entries(es);
}

}  // namespace gossamer::cp
