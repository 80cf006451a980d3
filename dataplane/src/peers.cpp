// The control stage's view of the peers (core 0, dataplane.hpp): which
// applications every other host has attached (their announces), the start
// barrier, and our announces to them.
#include "dataplane.hpp"

#include <string>

#include <spdlog/spdlog.h>

namespace gossamer::dataplane {

void Dataplane::check_starts() {
  for (std::size_t i = 0; i < apps_.size(); ++i) {
    App& a = *apps_[i];
    if (a.started || a.bad) continue;
    bool all = true;
    for (std::uint32_t h = 0; h < hosts_ && !a.bad; ++h) {
      if (h == self_) continue;
      auto it = peers_[h].apps.find(a.key);
      if (it == peers_[h].apps.end()) {
        all = false;
        continue;
      }
      const wire::AttachAnnounce& r = it->second.a;
      // Two instances of a run without a token that attached at the same
      // time on two hosts, each before the other's announce came, may have
      // taken different owners (check_owner): neither runs.
      if (!a.issued && r.owner != a.owner) {
        std::string why = "host " + std::to_string(h) + " (" + cfg_.rack.hosts[h].name +
                          ") attached an instance of this run for uid " + std::to_string(r.owner) +
                          " at the same time as this one for uid " + std::to_string(a.owner);
        ++cores_[0]->stats.apps_denied;
        send_msg(a, abi::kMsgRefused, h, why);
        a.bad = true;
        a.bad_reason = why;
        continue;
      }
      if (r.build_hash != a.build_hash || r.total_threads != a.total) {
        std::string why = "host " + std::to_string(h) + " (" + cfg_.rack.hosts[h].name + ") runs " +
                          (r.build_hash != a.build_hash ? "a different build of this program (build-id differs)"
                                                        : "this program with " + std::to_string(r.total_threads) +
                                                              " threads instead of " + std::to_string(a.total));
        send_msg(a, abi::kMsgRefused, h, why);
        a.bad = true;
        a.bad_reason = why;
      }
    }
    if (all && !a.bad && !a.drains_pending) {
      a.started = true;
      spdlog::info("pid {}: every host attached, start", a.pid);
      send_msg(a, abi::kMsgStart, self_, "");
    }
  }
}

App* Dataplane::app_by_key(const Core& k, std::uint64_t key) {
  for (App* a : *k.apps)
    if (a->key == key && !a->bad) return a;
  return nullptr;
}

std::uint32_t Dataplane::host_of(std::uint32_t total, std::uint32_t g) const {
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    std::uint32_t first, count;
    abi::host_threads(total, hosts_, h, &first, &count);
    if (g < first + count) return h;
  }
  return hosts_;
}

void Dataplane::announce(std::uint32_t peer, std::uint8_t kind, const App& a) {
  wire::WireRecord w{};
  w.kind = kind;
  // A detach after the application said goodbye is the end of its run, not
  // a failure its peers must share.
  if (kind == wire::kRecDetach && a.bad_reason == "detached") w.slot_flags = wire::kDetachGraceful;
  w.app = a.key;
  w.primary_len = sizeof(wire::AttachAnnounce);
  wire::AttachAnnounce an{a.build_hash, a.total, a.instance, a.owner, 0};
  cores_[0]->transport->enqueue(peer, 0, w, &an);
}

// A peer's application attached or detached (deliver.cpp posted it).
void Dataplane::on_announce(std::uint32_t src, const wire::WireRecord& r, const wire::AttachAnnounce& an) {
  auto& apps = peers_[src].apps;
  if (r.kind == wire::kRecAttach) {
    if (apps.size() >= cfg_.dataplane.max_applications && !apps.contains(r.app)) {
      ++cores_[0]->stats.records_rejected;  // more than the rack allows a host
      return;
    }
    apps[r.app] = RemoteApp{an};
    check_starts();
    return;
  }
  // Only the instance we know of: a detach of another (an earlier instance
  // of the run) must not end ours.
  auto it = apps.find(r.app);
  if (it == apps.end() || it->second.a.instance != an.instance) return;
  apps.erase(it);
  if (App* a = app_by_key(*cores_[0], r.app); a && a->started && !(r.slot_flags & wire::kDetachGraceful))
    send_msg(*a, abi::kMsgPeerLost, src,
             "its instance on host " + std::to_string(src) + " (" + cfg_.rack.hosts[src].name +
                 ") went away without finishing");
}

void Dataplane::link_failed(Core& k, std::uint32_t peer, std::uint64_t records, const std::string& why) {
  if (k.index != 0) {
    auto* m = new CoreMsg{CoreMsg::Kind::kLinkFailed};
    m->peer = peer;
    m->boot = records;
    m->bytes.assign(why.begin(), why.end());
    return post(k, 0, m);
  }
  spdlog::error("link to host {} ({}) failed with {} records in flight: {}", peer, cfg_.rack.hosts[peer].name,
                records, why);
  for (auto& a : apps_)
    if (a->started && !a->bad && peers_[peer].apps.contains(a->key))
      send_msg(*a, abi::kMsgPeerLost, peer,
               "the link to host " + std::to_string(peer) + " (" + cfg_.rack.hosts[peer].name +
                   ") failed with requests in flight, which are not sent twice: " + why);
}

// Core 0: once per incarnation (several cores may report it).
void Dataplane::peer_restarted_control(std::uint32_t peer, std::uint64_t boot) {
  Peer& p = peers_[peer];
  if (boot <= p.handled_boot) return;
  p.handled_boot = boot;
  p.apps.clear();
  p.intervals_heard = 0;  // a newcomer again for the QP scheduler
  for (auto& a : apps_)
    if (!a->bad) announce(peer, wire::kRecAttach, *a);
}

}  // namespace gossamer::dataplane
