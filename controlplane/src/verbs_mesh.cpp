// The verbs transport's endpoints between the dataplane and the mesh
// (verbs_relay.hpp; dataplane/src/verbs_exchange.hpp has the files): every
// 100 ms the dataplane's <socket>.verbs is read again and what changed goes
// to the peers as VerbsEndpoints; a peer's message is checked, kept and
// written to <socket>.verbs-peers for the dataplane. A link that comes up
// gets our current endpoints at once (its gossamerd may have restarted).
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "daemon.hpp"

namespace gossamer::cp {

namespace {
constexpr auto kVerbsPoll = std::chrono::milliseconds(100);
}

void Daemon::verbs_start() {
  if (cfg_.dataplane.transport != config::Transport::verbs || hosts_ < 2) return;
  const std::uint32_t conns = std::max<std::uint32_t>(1, std::min<std::uint32_t>(cfg_.connections.per_remote_host, 255));
  verbs_ = std::make_unique<VerbsRelay>(self_, hosts_, conns);
  // What a previous gossamerd kept is stale: the peers send theirs again
  // when their links come up.
  ::unlink((cfg_.dataplane_socket() + dataplane::verbs::kPeersSuffix).c_str());
  verbs_timer_ = std::make_unique<asio::steady_timer>(io_);
  verbs_tick();
}

void Daemon::verbs_tick() {
  std::string text;
  if (dataplane::verbs::read_small_file(cfg_.dataplane_socket() + dataplane::verbs::kLocalSuffix, &text) &&
      text != verbs_local_text_) {
    verbs_local_text_ = text;
    const std::uint64_t bad_before = verbs_->local_lines_rejected();
    for (const VerbsEndpoints& m : verbs_->local(text)) {
      auto& p = peers_[m.to];
      if (p.link && p.up) p.link->send(Type::kVerbsEndpoints, m);
    }
    if (verbs_->local_lines_rejected() != bad_before)
      spdlog::warn("verbs endpoints: {} lines of the dataplane's file skipped ({})",
                   verbs_->local_lines_rejected() - bad_before, verbs_->last_rejection());
  }
  verbs_timer_->expires_after(kVerbsPoll);
  verbs_timer_->async_wait([this](boost::system::error_code e) {
    if (!e && !shutting_down_) verbs_tick();
  });
}

void Daemon::verbs_link_up(std::uint32_t h) {
  VerbsEndpoints m;
  if (verbs_ && verbs_->message_for(h, &m)) peers_[h].link->send(Type::kVerbsEndpoints, m);
}

void Daemon::on_verbs_endpoints(std::uint32_t h, std::string_view body) {
  if (!verbs_) {
    // This host does not run verbs: counted, dropped.
    ++protocol_errors_;
    spdlog::warn("{} sent verbs endpoints, but dataplane.transport here is not verbs; dropped", host_name(h));
    return;
  }
  const std::uint64_t rejected = verbs_->messages_rejected();
  const bool changed = verbs_->on_message(h, body);
  if (verbs_->messages_rejected() != rejected) {
    ++protocol_errors_;
    spdlog::warn("verbs endpoints dropped: {}", verbs_->last_rejection());
    return;
  }
  if (!changed) return;
  const std::string path = cfg_.dataplane_socket() + dataplane::verbs::kPeersSuffix;
  if (std::string e = dataplane::verbs::write_file_atomically(path, verbs_->remote_text()); !e.empty())
    spdlog::error("cannot hand the peers' verbs endpoints to the dataplane: {}", e);
}

}  // namespace gossamer::cp
