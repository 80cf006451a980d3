// The bulk connections: one TCP connection per run and pair of hosts, for the
// instances' large requests (controlplane/README.md, "Large messages"). The
// lower index dials, as for the mesh; both sides hand the socket to the
// instance at the start.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "daemon.hpp"
#include "handshake.hpp"
#include "internal.hpp"

namespace gossamer::cp {

void Daemon::init_bulk(const std::shared_ptr<Run>& r) {
  r->bulk.assign(hosts_, BulkSocket{});
  r->bulk_dialing.assign(hosts_, false);
  r->bulk_error.assign(hosts_, "");
  // Connections that came before the run was known here.
  std::vector<PendingBulk> mine;
  for (auto it = pending_bulk_.begin(); it != pending_bulk_.end();) {
    if (it->run == r->spec.run) {
      mine.push_back(*it);
      it = pending_bulk_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& p : mine) bulk_store(r, p.host, p.socket);
}

// The binary check passed: connect to every higher host, then report ready
// when every connection is there.
void Daemon::run_checked(const std::shared_ptr<Run>& r) {
  r->checked = true;
  for (std::uint32_t h = self_ + 1; h < hosts_; ++h) bulk_dial(r->spec.run, h);
  maybe_ready(r);
}

void Daemon::maybe_ready(const std::shared_ptr<Run>& r) {
  if (!r->checked || r->ready || r->started || r->done || !bulk_missing(*r, "").empty()) return;
  r->ready = true;
  if (r->bulk_timer) r->bulk_timer->cancel();
  Prepared p;
  p.run = r->spec.run;
  p.host = self_;
  p.ok = true;
  if (r->is_origin) return on_prepared(p);
  auto& o = peers_[r->spec.origin];
  if (o.link && o.up) o.link->send(Type::kPrepared, p);
  else forget_run(p.run);  // the origin is gone
}

std::string Daemon::bulk_missing(const Run& r, const std::string& within) const {
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_ || r.bulk[h].fd >= 0) continue;
    std::string why = !r.bulk_error[h].empty() ? r.bulk_error[h] : h < self_ ? "it did not connect" : "";
    return "no bulk connection with " + host_name(h) + within + (why.empty() ? "" : " (" + why + ")");
  }
  return "";
}

void Daemon::bulk_store(const std::shared_ptr<Run>& r, std::uint32_t h, BulkSocket b) {
  // A second one for the same pair: the dialer gave up on the first (its
  // handshake timed out) and holds this one.
  if (r->bulk[h].fd >= 0) ::close(r->bulk[h].fd);
  r->bulk[h] = b;
  r->bulk_error[h].clear();
  spdlog::debug("run {}: bulk connection with {} (fd {})", r->spec.run, host_name(h), b.fd);
  maybe_ready(r);
}

// The dialer's side of a bulk connection (the handshake, then BulkReady); the
// acceptor's is in accept_peer() and bulk_accepted().
void Daemon::bulk_dial(const std::string& id, std::uint32_t h) {
  auto it = runs_.find(id);
  if (shutting_down_ || it == runs_.end()) return;
  Run& r = *it->second;
  if (!r.checked || r.started || r.done || r.bulk[h].fd >= 0 || r.bulk_dialing[h]) return;
  r.bulk_dialing[h] = true;
  const auto& a = cfg_.rack.hosts[h].control;
  boost::system::error_code ec;
  asio::ip::tcp::endpoint ep(asio::ip::make_address(a.ip, ec), a.port);
  struct Attempt {
    Attempt(asio::io_context& io, Handshake h) : sock(io), timer(io), hs(std::move(h)) {}
    asio::ip::tcp::socket sock;
    asio::steady_timer timer;
    Handshake hs;
    bool ready = false, timed_out = false, over = false;
  };
  auto at = std::make_shared<Attempt>(io_, Handshake::dialer(key_, rack_id(), self_, h, id));
  // Reports the attempt once: the socket, or why not.
  auto finish = [this, id, h, at](int fd, const std::string& why) {
    if (at->over) {
      if (fd >= 0) ::close(fd);
      return;
    }
    at->over = true;
    at->timer.cancel();
    bulk_dial_done(id, h, BulkSocket{fd, fd >= 0 ? at->hs.keys(Handshake::KeyUse::kInstance) : abi::SessionKeys{}},
                   why);
  };
  at->timer.expires_after(kHandshakeTimeout);
  at->timer.async_wait([at](boost::system::error_code e) {
    if (e) return;
    at->timed_out = true;
    at->sock.close();
  });
  at->sock.async_connect(ep, [this, id, h, at, finish](boost::system::error_code e) {
    if (e || shutting_down_)
      return finish(-1, at->timed_out ? "no connection within 2 s" : e ? e.message() : "shutting down");
    at->sock.set_option(asio::ip::tcp::no_delay(true), e);
    auto link = std::make_shared<TcpLink>(std::move(at->sock), kMaxHandshakeBody);
    log_refusals(*link, "run " + id + ": bulk connection to " + host_name(h));
    at->timer.expires_after(kHandshakeTimeout);
    at->timer.async_wait([at, weak = std::weak_ptr<TcpLink>(link)](boost::system::error_code te) {
      if (te || at->ready || at->over) return;
      at->timed_out = true;
      if (auto l = weak.lock()) l->close("no bulk handshake within 2 s", true);
    });
    link->start(
        [this, id, h, at, finish, link = link.get()](Type t, std::string_view body) {
          if (!at->hs.done()) {
            std::optional<Handshake::Message> reply;
            if (!at->hs.on_message(t, body, &reply)) {
              ++protocol_errors_;
              return link->close("handshake failed (" + at->hs.error() + ")", true);
            }
            if (reply) link->send_raw(frame(reply->type, reply->body));
            if (at->hs.done()) authenticate(*link, at->hs);  // BulkReady comes tagged
            return;
          }
          RunRef ready;
          if (t != Type::kBulkReady || !decode(body, ready) || ready.run != id) {
            ++protocol_errors_;
            return link->close("expected bulk-ready for run " + id, true);
          }
          at->ready = true;
          at->timer.cancel();
          link->hand_over([finish](int fd) { finish(fd, "cannot take the socket"); });
        },
        [at, finish](const std::string& why) {
          finish(-1, at->timed_out ? "no bulk handshake within 2 s" : why);
        });
    const Handshake::Message hello = at->hs.hello();
    link->send_raw(frame(hello.type, hello.body));
  });
}

void Daemon::bulk_dial_done(const std::string& id, std::uint32_t h, BulkSocket b, const std::string& why) {
  auto it = runs_.find(id);
  auto r = it == runs_.end() ? nullptr : it->second;
  if (r) r->bulk_dialing[h] = false;
  const bool wanted = r && !r->started && !r->done && !shutting_down_;
  if (b.fd >= 0) {
    if (wanted) return bulk_store(r, h, b);
    ::close(b.fd);  // the run went away meanwhile
    return;
  }
  if (!wanted) return;
  if (r->bulk_error[h].empty())
    spdlog::warn("run {}: bulk connection to {} failed: {}; retrying every {} ms", id, host_name(h), why,
                 kRedialDelay.count());
  r->bulk_error[h] = why;
  after(kRedialDelay, [this, id, h] { bulk_dial(id, h); });
}

// The acceptor verified the proof of host h for run `id`.
void Daemon::bulk_accepted(std::uint32_t h, const std::string& id, const std::shared_ptr<TcpLink>& link,
                           const abi::SessionKeys& instance_keys) {
  auto it = runs_.find(id);
  if (shutting_down_ || (it != runs_.end() && (it->second->started || it->second->done)) ||
      (it == runs_.end() && ended_.count(id))) {
    spdlog::debug("run {}: bulk connection from {} refused: too late", id, host_name(h));
    return link->close("too late for this run", true);
  }
  RunRef ready{id};
  link->send(Type::kBulkReady, ready);
  link->hand_over([this, h, id, instance_keys](int fd) { bulk_taken(h, id, BulkSocket{fd, instance_keys}); });
}

void Daemon::bulk_taken(std::uint32_t h, const std::string& id, BulkSocket b) {
  if (b.fd < 0) {
    spdlog::warn("run {}: cannot take the bulk connection from {}", id, host_name(h));
    return;
  }
  auto it = runs_.find(id);
  if (shutting_down_ || (it != runs_.end() && (it->second->started || it->second->done)) ||
      (it == runs_.end() && ended_.count(id))) {
    ::close(b.fd);
    return;
  }
  if (it != runs_.end()) return bulk_store(it->second, h, b);
  // The Prepare has not come yet: keep it, bounded, for kPrepareTimeout.
  std::size_t n = 0;
  for (const auto& p : pending_bulk_) n += p.host == h;
  if (n >= kMaxPendingBulk) {
    auto old = std::find_if(pending_bulk_.begin(), pending_bulk_.end(),
                            [h](const PendingBulk& p) { return p.host == h; });
    ++protocol_errors_;
    spdlog::warn("{} opened {} bulk connections for runs this host does not know; closing the oldest (run {})",
                 host_name(h), n + 1, old->run);
    ::close(old->socket.fd);
    pending_bulk_.erase(old);
  }
  const std::uint64_t serial = ++pending_serial_;
  pending_bulk_.push_back(PendingBulk{serial, h, id, b});
  after(kPrepareTimeout, [this, serial] {
    auto p = std::find_if(pending_bulk_.begin(), pending_bulk_.end(),
                          [serial](const PendingBulk& x) { return x.serial == serial; });
    if (p == pending_bulk_.end()) return;
    spdlog::warn("run {}: closing the bulk connection from {}: no such run here within 10 s", p->run,
                 host_name(p->host));
    ::close(p->socket.fd);
    pending_bulk_.erase(p);
  });
}

}  // namespace gossamer::cp
