// The mesh: the authenticated TCP connection to every other host's gossamerd
// (the lower index dials), heartbeats, and a peer's messages.
#include <spdlog/async.h>
#include <spdlog/spdlog.h>

#include "daemon.hpp"
#include "handshake.hpp"
#include "internal.hpp"

namespace gossamer::cp {


// Both sides of every connection between daemons run a Handshake
// (handshake.hpp); the acceptor learns from the hello whether it is a mesh or
// a bulk connection (then bulk_accepted() takes over).
void Daemon::accept_peer() {
  tcp_acceptor_.async_accept([this](boost::system::error_code ec, asio::ip::tcp::socket s) {
    if (shutting_down_) return;
    if (ec) {
      // Out of descriptors, say: try again later rather than spin.
      after(kAcceptRetry, [this] { accept_peer(); });
      return;
    }
    {
      s.set_option(asio::ip::tcp::no_delay(true), ec);
      auto link = std::make_shared<TcpLink>(std::move(s), kMaxHandshakeBody);
      struct Hs {
        Hs(Handshake h, asio::io_context& io) : hs(std::move(h)), timer(io) {}
        Handshake hs;
        asio::steady_timer timer;
      };
      auto hs = std::make_shared<Hs>(Handshake::acceptor(key_, rack_id(), self_), io_);
      std::weak_ptr<TcpLink> weak = link;
      hs->timer.expires_after(kHandshakeTimeout);
      hs->timer.async_wait([this, weak, hs](boost::system::error_code e) {
        if (e || hs->hs.done()) return;
        if (auto k = weak.lock()) {
          ++protocol_errors_;
          k->close("no handshake within 2 s", true);
        }
      });
      std::string from = link->socket().remote_endpoint(ec).address().to_string();
      log_refusals(*link, "connection from " + from);
      link->start(
          [this, link = link.get(), hs, from](Type t, std::string_view body) {
            auto self_link = link->shared_from_this();
            Handshake& h = hs->hs;
            if (h.done()) {
              // A bulk link reads nothing after the proof (hand_over).
              if (!h.bulk()) on_peer_message(h.peer(), t, body);
              return;
            }
            std::optional<Handshake::Message> reply;
            if (!h.on_message(t, body, &reply)) {
              ++protocol_errors_;
              spdlog::warn("{} connection from {} refused: {}", h.bulk() ? "bulk" : "peer", from, h.error());
              return link->close(h.error(), true);
            }
            if (reply) link->send_raw(frame(reply->type, reply->body));
            if (!h.done()) return;
            hs->timer.cancel();
            authenticate(*link, h);
            if (h.bulk()) return bulk_accepted(h.peer(), h.run(), self_link, h.keys(Handshake::KeyUse::kInstance));
            link->set_max_body(kMaxBody);
            peer_authenticated(h.peer(), self_link);
          },
          [this, link = link.get(), hs](const std::string& why) {
            const Handshake& h = hs->hs;
            if (h.done() && !h.bulk() && peers_[h.peer()].link.get() == link)
              peer_down(h.peer(), "connection lost: " + why);
          });
    }
    accept_peer();
  });
}

void Daemon::dial(std::uint32_t h) {
  if (shutting_down_ || peers_[h].link || peers_[h].dialing) return;
  peers_[h].dialing = true;
  const auto& a = cfg_.rack.hosts[h].control;
  boost::system::error_code ec;
  asio::ip::tcp::endpoint ep(asio::ip::make_address(a.ip, ec), a.port);
  auto sock = std::make_shared<asio::ip::tcp::socket>(io_);
  auto timer = std::make_shared<asio::steady_timer>(io_);
  timer->expires_after(kHandshakeTimeout);
  timer->async_wait([sock](boost::system::error_code e) {
    if (!e) sock->close();
  });
  sock->async_connect(ep, [this, h, sock, timer](boost::system::error_code e) {
    if (e || shutting_down_) {
      timer->cancel();
      peers_[h].dialing = false;
      return schedule_redial(h);
    }
    sock->set_option(asio::ip::tcp::no_delay(true), e);
    auto link = std::make_shared<TcpLink>(std::move(*sock), kMaxHandshakeBody);
    auto hs = std::make_shared<Handshake>(Handshake::dialer(key_, rack_id(), self_, h));
    log_refusals(*link, host_name(h));
    // The connect timer closed the socket; from here the link owns it.
    timer->cancel();
    timer->expires_after(kHandshakeTimeout);
    timer->async_wait([this, weak = std::weak_ptr<TcpLink>(link), hs](boost::system::error_code te) {
      if (te || hs->done()) return;
      if (auto l = weak.lock()) {
        ++protocol_errors_;
        l->close("no handshake within 2 s", true);
      }
    });
    link->start(
        [this, h, link = link.get(), hs, timer](Type t, std::string_view body) {
          auto self_link = link->shared_from_this();
          if (hs->done()) return on_peer_message(h, t, body);
          std::optional<Handshake::Message> reply;
          if (!hs->on_message(t, body, &reply)) {
            ++protocol_errors_;
            spdlog::warn("{} failed the handshake: {}", host_name(h), hs->error());
            return link->close("handshake failed", true);
          }
          if (reply) link->send_raw(frame(reply->type, reply->body));
          if (!hs->done()) return;
          timer->cancel();
          authenticate(*link, *hs);
          link->set_max_body(kMaxBody);
          peer_authenticated(h, self_link);
        },
        [this, h, link = link.get(), hs, timer](const std::string& why) {
          timer->cancel();
          peers_[h].dialing = false;
          if (hs->done() && peers_[h].link.get() == link) peer_down(h, "connection lost: " + why);
          schedule_redial(h);
        });
    const Handshake::Message hello = hs->hello();
    link->send_raw(frame(hello.type, hello.body));
  });
}

void Daemon::log_refusals(TcpLink& link, const std::string& who) {
  link.on_refused([this, who](const std::string& why) {
    ++protocol_errors_;
    spdlog::warn("{}: {}; closing the connection", who, why);
  });
}

void Daemon::authenticate(TcpLink& link, const Handshake& hs) {
  log_refusals(link, (hs.bulk() ? "run " + hs.run() + ": bulk connection with " : "") + host_name(hs.peer()));
  link.authenticate(hs.keys(Handshake::KeyUse::kLink));
}

void Daemon::schedule_redial(std::uint32_t h) {
  if (shutting_down_) return;
  auto& p = peers_[h];
  if (!p.redial) p.redial = std::make_unique<asio::steady_timer>(io_);
  p.redial->expires_after(kRedialDelay);
  p.redial->async_wait([this, h](boost::system::error_code e) {
    if (!e) dial(h);
  });
}

void Daemon::peer_authenticated(std::uint32_t h, std::shared_ptr<TcpLink> link) {
  auto& p = peers_[h];
  if (p.link && p.link != link) {
    // It reconnected while we thought it up: whatever it knew may be lost.
    peer_down(h, "reconnected");
  }
  p.link = std::move(link);
  p.dialing = false;
  p.up = true;
  p.last_heard = Clock::now();
  p.absent_at_heard = absent_;
  spdlog::info("{} is up", host_name(h));
  publish_view();
  Heartbeat hb;
  hb.seq = heartbeat_seq_;
  hb.dataplane = std::uint8_t(dataplane_state_);
  hb.dataplane_restarts = dataplane_restarts_;
  hb.instances = local_instances();
  p.link->send(Type::kHeartbeat, hb);
  verbs_link_up(h);
}

void Daemon::peer_down(std::uint32_t h, const std::string& why) {
  auto& p = peers_[h];
  if (!p.up && !p.link) return;
  const bool was_up = p.up;
  p.up = false;
  publish_view();
  if (p.link) {
    auto l = std::move(p.link);
    l->close(why, true);
  }
  if (was_up) spdlog::warn("{} is down: {}", host_name(h), why);
  // Fate sharing: every run spans every host.
  std::vector<std::shared_ptr<Run>> affected;
  for (auto& [id, r] : runs_) affected.push_back(r);
  for (auto& r : affected) {
    if (r->done) continue;
    if (r->is_origin && !r->started) {
      abort_before_start(r, 2, "not started: " + host_name(h) + " " + why);
    } else if (r->is_origin) {
      if (!r->finished[h]) {
        r->finished[h] = true;
        if (r->prepared[h] == 0) r->prepared[h] = -1;
        fail_run(*r, h, 3, 1, host_name(h) + " " + why);
        maybe_finish(r->spec.run);
      }
    } else if (r->spec.origin == h) {
      // Nobody to report to: stop, and forget the run once the instance ended.
      stop_instance(*r, "the run's origin " + host_name(h) + " is down");
      if (!r->pid || r->reaped) forget_run(r->spec.run);
    }
  }
  if (h > self_) schedule_redial(h);
}

// A peer is down when it has been silent for heartbeat_timeout_ms of the
// time this daemon ran. When this daemon itself did not run (stopped,
// descheduled on a loaded machine, its loop held up), the timer fires first
// when it runs again, before the io_context has read the heartbeats that
// waited in the sockets meanwhile: judging then blamed the peers for our own
// absence (both gossamerds of a loaded rack in a box once declared each other
// down at once). So a tick more than an interval late adds its lateness to
// absent_, which is taken off every peer's silence; and a peer whose socket
// holds bytes we have not read yet is judged at the next tick, once they are.
// A peer that really stops is still declared down within the timeout of the
// time we run (see controlplane/README.md, "Heartbeats").
void Daemon::heartbeat_tick() {
  publish_view();
  const auto now = Clock::now();
  const auto interval = std::chrono::milliseconds(cfg_.controlplane.heartbeat_interval_ms);
  const auto timeout = std::chrono::milliseconds(cfg_.controlplane.heartbeat_timeout_ms);
  if (heartbeat_due_ != Clock::time_point{} && now - heartbeat_due_ > interval) {
    const auto late = now - heartbeat_due_;
    absent_ += late;
    const auto late_ms = std::chrono::duration_cast<std::chrono::milliseconds>(late).count();
    if (late * 2 >= timeout)
      spdlog::warn("heartbeat tick {} ms late (this gossamerd did not run); that time is not held against peers",
                   late_ms);
    else
      spdlog::debug("heartbeat tick {} ms late; that time is not held against peers", late_ms);
  }
  if (auto pool = spdlog::thread_pool()) {
    const std::size_t dropped = pool->overrun_counter();
    if (dropped != log_lines_dropped_)
      spdlog::warn("{} log lines dropped: stderr was not written as fast as gossamerd logged",
                   dropped - log_lines_dropped_);
    log_lines_dropped_ = dropped;
  }
  Heartbeat hb;
  hb.seq = ++heartbeat_seq_;
  hb.dataplane = std::uint8_t(dataplane_state_);
  hb.dataplane_restarts = dataplane_restarts_;
  hb.instances = local_instances();
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    auto& p = peers_[h];
    if (!p.link || !p.up) continue;
    const auto silent = (now - p.last_heard) - (absent_ - p.absent_at_heard);
    if (silent > timeout) {
      boost::system::error_code ec;
      const std::size_t unread = p.link->socket().available(ec);
      if (ec || unread == 0) {
        auto ms = [](Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
        std::string why = "stopped answering heartbeats (last one " + std::to_string(ms(now - p.last_heard)) + " ms ago";
        if (absent_ != p.absent_at_heard)
          why += ", " + std::to_string(ms(absent_ - p.absent_at_heard)) + " ms of which this gossamerd did not run";
        peer_down(h, why + ")");
        continue;
      }
      spdlog::debug("{}: silent for {} ms, but {} bytes from it wait unread; judged at the next tick", host_name(h),
                    std::chrono::duration_cast<std::chrono::milliseconds>(silent).count(), unread);
    }
    p.link->send(Type::kHeartbeat, hb);
  }
  heartbeat_due_ = Clock::now() + interval;
  heartbeat_timer_.expires_at(heartbeat_due_);
  heartbeat_timer_.async_wait([this](boost::system::error_code e) {
    if (!e && !shutting_down_) heartbeat_tick();
  });
}

void Daemon::on_peer_message(std::uint32_t h, Type t, std::string_view body) {
  auto& p = peers_[h];
  p.last_heard = Clock::now();
  p.absent_at_heard = absent_;
  if (t == Type::kHeartbeat) publish_view();  // the heartbeat age starts again
  auto bad = [&] {
    ++protocol_errors_;
    spdlog::warn("{} sent a malformed message (type {}, {} bytes); closing the connection", host_name(h),
                 unsigned(t), body.size());
    peer_down(h, "protocol error");
  };
  switch (t) {
    case Type::kHeartbeat: {
      Heartbeat hb;
      if (!decode(body, hb)) return bad();
      p.last = hb;
      return;
    }
    case Type::kPrepare: {
      Prepare m;
      if (!decode(body, m) || m.origin != h) return bad();
      if (runs_.count(m.run)) return;  // a duplicate: the first one stands
      auto r = std::make_shared<Run>();
      r->spec = m;
      runs_[m.run] = r;
      init_bulk(r);
      r->bulk_timer = std::make_unique<asio::steady_timer>(io_);
      r->bulk_timer->expires_after(kBulkTimeout);
      r->bulk_timer->async_wait([this, h, id = m.run](boost::system::error_code e) {
        auto it = runs_.find(id);
        if (e || it == runs_.end()) return;
        auto run = it->second;
        // Still hashing: the origin's own timeout says so.
        if (run->is_origin || !run->checked || run->ready || run->started) return;
        Prepared no;
        no.run = id;
        no.host = self_;
        no.error = bulk_missing(*run, " within 8 s");
        spdlog::warn("run {}: not ready: {}", id, no.error);
        forget_run(it);
        if (peers_[h].link && peers_[h].up) peers_[h].link->send(Type::kPrepared, no);
      });
      // Registered now, so that a Stop during the hashing finds it.
      prepare_async(m, [this, h, id = m.run](Prepared reply, std::string) {
        auto it = runs_.find(id);
        if (it == runs_.end() || it->second->is_origin) return;  // stopped meanwhile
        if (reply.ok) return run_checked(it->second);  // reports once connected
        forget_run(it);
        if (peers_[h].link && peers_[h].up) peers_[h].link->send(Type::kPrepared, reply);
      });
      return;
    }
    case Type::kStart: {
      RunRef m;
      if (!decode(body, m)) return bad();
      auto it = runs_.find(m.run);
      if (it == runs_.end() || it->second->is_origin || it->second->spec.origin != h || !it->second->ready ||
          it->second->started || shutting_down_)
        return;
      start_instance(*it->second);
      return;
    }
    case Type::kStop: {
      Stop m;
      if (!decode(body, m)) return bad();
      auto it = runs_.find(m.run);
      if (it == runs_.end() || it->second->is_origin || it->second->spec.origin != h) return;
      auto r = it->second;
      if (!r->started) {
        forget_run(it);  // prepared, never started
        return;
      }
      stop_instance(*r, m.reason);
      return;
    }
    case Type::kPrepared: {
      Prepared m;
      if (!decode(body, m) || m.host != h) return bad();
      return on_prepared(m);
    }
    case Type::kOutput: {
      Output m;
      if (!decode(body, m) || m.host != h || (m.stream != 1 && m.stream != 2)) return bad();
      return on_output(m);
    }
    case Type::kExited: {
      Exited m;
      if (!decode(body, m) || m.host != h) return bad();
      return on_exited(m);
    }
    case Type::kVerbsEndpoints:
      return on_verbs_endpoints(h, body);  // checked there; a bad one is counted and dropped
    default:
      return bad();
  }
}
}  // namespace gossamer::cp
