// The dataplane with dataplane.transport: verbs (dataplane/README.md
// "Verbs"): the device opened at start, one VerbsTransport per polling core
// (make_cores), and the endpoint exchange with gossamerd through the files
// of verbs_exchange.hpp: every QP a core creates is written to
// <socket>.verbs (core 0, job_verbs), and the peers' QPs that gossamerd
// writes to <socket>.verbs-peers go to the core owning each connection
// (VerbsTransport::remote), which connects its QP (INIT -> RTR -> RTS).
#include <cstring>

#include <spdlog/spdlog.h>

#include "dataplane.hpp"
#include "verbs_config.hpp"
#include "verbs_transport.hpp"

namespace gossamer::dataplane {

// The device, its port and GID, and the protection domain. A missing device
// is an error that names the devices this host has (Verbs::open).
std::string Dataplane::open_verbs() {
  if (cfg_.dataplane.transport != config::Transport::verbs) return "";
  verbs_mode_ = true;
  verbs_ = verbs_factory_ ? verbs_factory_() : nullptr;
  if (!verbs_) return "dataplane.transport is verbs, but this build has no libibverbs";
  const auto& vc = cfg_.dataplane.verbs;
  if (std::string e = verbs_->open(vc.device, std::uint8_t(vc.port), vc.gid_index, &verbs_port_); !e.empty())
    return "dataplane.transport is verbs: " + e;
  if (!verbs_port_.link_up)
    spdlog::warn("{} port {}: the link is down; the queue pairs connect once it is up", verbs_port_.device,
                 unsigned(verbs_port_.port));
  if (std::string e = verbs_->alloc_pd(); !e.empty()) return verbs_port_.device + ": protection domain: " + e;
  verbs_local_.assign(std::size_t(hosts_) * conns_per_host_, verbs::Endpoint{});
  verbs_applied_.assign(std::size_t(hosts_) * conns_per_host_, verbs::ExchangeEntry{});
  // What a previous incarnation wrote is not ours.
  ::unlink((socket_path_ + verbs::kLocalSuffix).c_str());
  spdlog::info("transport verbs: {} port {}, GID index {}, MTU {}", verbs_port_.device, unsigned(verbs_port_.port),
               vc.gid_index, verbs_port_.active_mtu);
  return "";
}

std::string Dataplane::make_verbs_transport(Core& k) {
  verbs::TransportConfig tc;
  tc.self = self_;
  tc.hosts = hosts_;
  tc.conns_per_host = conns_per_host_;
  tc.cores = ncores_;
  tc.core = k.index;
  tc.channel = verbs::channel_config(cfg_);
  tc.channel.qp.path_mtu = std::min(tc.channel.qp.path_mtu, verbs_port_.active_mtu);
  tc.seed = std::uint32_t(boot_ ^ (boot_ >> 32)) + k.index;
  auto t = std::make_unique<verbs::VerbsTransport>(
      *verbs_, tc, [this](std::uint32_t peer, std::uint32_t conn, const verbs::Endpoint& e) {
        verbs_publish(peer, conn, e);
      });
  if (std::string e = t->start(); !e.empty()) return "core " + std::to_string(k.index) + ": " + e;
  k.transport = std::move(t);
  return "";
}

// Any core, whenever it creates a QP (start, failure, the peer's restart).
void Dataplane::verbs_publish(std::uint32_t peer, std::uint32_t conn, const verbs::Endpoint& e) {
  std::lock_guard<std::mutex> g(verbs_mu_);
  verbs_local_[std::size_t(peer) * conns_per_host_ + conn] = e;
  verbs_dirty_ = true;
}

// Core 0, every 20 ms (loop.cpp): our QPs to gossamerd, the peers' QPs to
// their owners.
void Dataplane::job_verbs(Core& k) {
  std::string text;
  {
    std::lock_guard<std::mutex> g(verbs_mu_);
    if (verbs_dirty_) {
      std::vector<verbs::ExchangeEntry> es;
      for (std::uint32_t h = 0; h < hosts_; ++h)
        for (std::uint32_t c = 0; c < conns_per_host_; ++c) {
          const verbs::Endpoint& e = verbs_local_[std::size_t(h) * conns_per_host_ + c];
          if (e.qpn == 0) continue;
          es.push_back({h, boot_, verbs_port_.gid, verbs_port_.lid, c, e});
        }
      text = verbs::format_entries(es);
      verbs_dirty_ = false;
    }
  }
  if (!text.empty())
    if (std::string e = verbs::write_file_atomically(socket_path_ + verbs::kLocalSuffix, text); !e.empty())
      spdlog::error("cannot write our verbs endpoints for gossamerd: {}", e);

  std::string peers;
  if (!verbs::read_small_file(socket_path_ + verbs::kPeersSuffix, &peers) || peers == verbs_peers_text_) return;
  verbs_peers_text_ = peers;
  std::uint64_t bad = 0;
  std::string why;
  for (const verbs::ExchangeEntry& e : verbs::parse_entries(peers, hosts_, conns_per_host_, &bad, &why)) {
    if (e.host == self_) {
      ++bad;
      continue;
    }
    verbs::ExchangeEntry& last = verbs_applied_[std::size_t(e.host) * conns_per_host_ + e.conn];
    if (e == last) continue;
    last = e;
    auto* m = new CoreMsg{CoreMsg::Kind::kVerbsRemote};
    m->peer = e.host;
    m->conn = e.conn;
    m->bytes.resize(sizeof e);
    std::memcpy(m->bytes.data(), &e, sizeof e);
    post(k, conn_owner(e.conn), m);
  }
  if (bad) {
    k.stats.records_rejected += bad;
    spdlog::warn("{}{}: {} lines skipped ({})", socket_path_, verbs::kPeersSuffix, bad, why);
  }
}

// The owner of the connection: connect its QP.
void Dataplane::verbs_remote(Core& k, const CoreMsg& m) {
  verbs::ExchangeEntry e;
  if (m.bytes.size() != sizeof e) return;
  std::memcpy(&e, m.bytes.data(), sizeof e);
  static_cast<verbs::VerbsTransport&>(*k.transport).remote(e.host, e.boot, e.gid, e.lid, e.conn, e.ep, *k.sink);
}

// Before every publish: the core's QP counters into its Stats.
void Dataplane::publish_verbs_totals(Core& k) {
  if (!verbs_mode_ || !k.transport) return;
  const verbs::QpTotals t = static_cast<const verbs::VerbsTransport&>(*k.transport).totals();
  k.stats.qps_active = t.active;
  k.stats.qps_idle = t.idle;
  k.stats.qps_errored = t.errored;
  k.stats.wrs_posted = t.sum.wrs_posted;
  k.stats.wrs_signaled = t.sum.wrs_signaled;
  k.stats.verbs_doorbells = t.sum.doorbells;
  k.stats.cq_polls = t.cq_polls;
  k.stats.qp_errors = t.sum.qp_errors;
  k.stats.qp_in_doubt_records = t.sum.in_doubt_records;
  k.stats.qp_reconnects = t.sum.reconnects;
}

}  // namespace gossamer::dataplane
