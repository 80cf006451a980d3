// gossamerd's start and shutdown, and what every part uses. The parts:
// mesh.cpp (peers, heartbeats), handshake.cpp (the peer handshake), bulk.cpp
// (the instances' bulk connections), ctl.cpp (gossamerctl), runs.cpp (runs
// and fate sharing), children.cpp (spawning, reaping, the dataplane),
// daemon_metrics.cpp (what the exporter reports).
#include "daemon.hpp"

#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "internal.hpp"

namespace gossamer::cp {

Daemon::Daemon(asio::io_context& io, config::Config cfg, DaemonOptions opt, std::string secret)
    : io_(io),
      cfg_(std::move(cfg)),
      opt_(std::move(opt)),
      key_(std::move(secret)),
      self_(cfg_.host.index),
      hosts_(std::uint32_t(cfg_.rack.hosts.size())),
      tcp_acceptor_(io),
      ctl_acceptor_(io),
      sigchld_(io, SIGCHLD),
      heartbeat_timer_(io),
      peers_(hosts_),
      dataplane_timer_(io),
      shutdown_timer_(io) {}

std::string Daemon::host_name(std::uint32_t h) const {
  return "host " + std::to_string(h) + " (" + cfg_.rack.hosts[h].name + ")";
}

std::uint64_t Daemon::rack_id() const {
  std::uint64_t x = 1469598103934665603ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char c : s) x = (x ^ c) * 1099511628211ull;
    x = (x ^ 0xff) * 1099511628211ull;
  };
  mix(std::to_string(hosts_));
  for (auto& h : cfg_.rack.hosts) mix(h.name), mix(h.control.to_string());
  return x;
}

void Daemon::after(Clock::duration delay, std::function<void()> fn) {
  // The timer owns itself until it fires; io_context::stop drops it unfired.
  auto t = std::make_shared<asio::steady_timer>(io_, delay);
  t->async_wait([t, fn = std::move(fn)](boost::system::error_code e) {
    if (!e) fn();
  });
}

bool Daemon::start() {
  // The instances' run tokens are keyed by the secret itself, as the
  // dataplane's check is (rack_keys.hpp): before key_ becomes the handshake key.
  if (std::string e = tokens_.set_secret(key_); !e.empty()) {
    spdlog::error("run tokens: {}", e);
    return false;
  }
  // The handshake key, once: slow on purpose (proto.hpp, handshake_key).
  const auto t0 = Clock::now();
  key_ = handshake_key(key_, rack_id());
  if (key_.empty()) {
    spdlog::error("cannot derive the handshake key from the rack secret (scrypt in OpenSSL's libcrypto failed)");
    return false;
  }
  spdlog::debug("handshake key derived in {} ms",
                std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
  boost::system::error_code ec;
  // Peers.
  const auto& l = cfg_.controlplane.listen;
  asio::ip::tcp::endpoint ep(asio::ip::make_address(l.ip, ec), l.port);
  if (ec) {
    spdlog::error("controlplane.listen {}: {}", l.to_string(), ec.message());
    return false;
  }
  tcp_acceptor_.open(ep.protocol(), ec);
  if (!ec) tcp_acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) tcp_acceptor_.bind(ep, ec);
  if (!ec) tcp_acceptor_.listen(64, ec);
  if (ec) {
    spdlog::error("cannot listen on {} (controlplane.listen): {}", l.to_string(), ec.message());
    return false;
  }
  if (!start_metrics()) return false;
  // gossamerctl.
  ctl_path_ = cfg_.controlplane_socket();
  std::error_code fs_ec;
  std::filesystem::create_directories(std::filesystem::path(ctl_path_).parent_path(), fs_ec);
  {
    asio::local::stream_protocol::socket probe(io_);
    probe.connect(asio::local::stream_protocol::endpoint(ctl_path_), ec);
    if (!ec) {
      spdlog::error("another gossamerd answers on {} (controlplane.socket)", ctl_path_);
      return false;
    }
    ::unlink(ctl_path_.c_str());  // a stale socket of a daemon that died
  }
  ctl_acceptor_.open(asio::local::stream_protocol(), ec);
  const mode_t old_umask = ::umask(077);  // nobody may connect before the chmod below
  if (!ec) ctl_acceptor_.bind(asio::local::stream_protocol::endpoint(ctl_path_), ec);
  ::umask(old_umask);
  if (!ec) ctl_acceptor_.listen(16, ec);
  if (ec) {
    spdlog::error("cannot listen on {} (controlplane.socket): {}", ctl_path_, ec.message());
    return false;
  }
  mode_t mode = 0600;
  if (!cfg_.controlplane.socket_group.empty()) {
    struct group* g = ::getgrnam(cfg_.controlplane.socket_group.c_str());
    if (!g) {
      spdlog::error("controlplane.socket_group: no group '{}'", cfg_.controlplane.socket_group);
      return false;
    }
    if (::chown(ctl_path_.c_str(), uid_t(-1), g->gr_gid) != 0) {
      spdlog::error("chown {}: {}", ctl_path_, std::strerror(errno));
      return false;
    }
    mode = 0660;
  }
  ::chmod(ctl_path_.c_str(), mode);

  watch_children();
  if (!opt_.dataplane_path.empty()) start_dataplane();
  verbs_start();
  accept_peer();
  accept_ctl();
  for (std::uint32_t h = self_ + 1; h < hosts_; ++h) dial(h);
  heartbeat_tick();
  spdlog::info("gossamerd: {} of {} hosts, peers on {}, gossamerctl on {}", host_name(self_), hosts_, l.to_string(),
               ctl_path_);
  return true;
}

void Daemon::shutdown(const char* why) {
  if (shutting_down_) return;
  shutting_down_ = true;
  spdlog::info("gossamerd: {}; stopping", why);
  boost::system::error_code ignored;
  tcp_acceptor_.close(ignored);
  ctl_acceptor_.close(ignored);
  ::unlink(ctl_path_.c_str());
  heartbeat_timer_.cancel();
  dataplane_timer_.cancel();
  if (verbs_timer_) verbs_timer_->cancel();
  std::vector<std::shared_ptr<Run>> all;
  for (auto& [id, r] : runs_) all.push_back(r);
  // No run starts from here on: its bulk connections go now.
  for (auto& p : pending_bulk_) ::close(p.socket.fd);
  pending_bulk_.clear();
  for (auto& r : all) r->close_bulk();
  for (auto& r : all) {
    if (r->is_origin && !r->started) {
      abort_before_start(r, 1, "gossamerd on " + host_name(self_) + " is shutting down");
    } else if (r->is_origin && r->ctl && !r->done) {
      fail_run(*r, self_, 5, 1, "gossamerd on " + host_name(self_) + " is shutting down");
      stop_everywhere(*r, "gossamerd shutting down");
    } else {
      stop_instance(*r, "gossamerd shutting down");
    }
  }
  if (dataplane_pid_) ::kill(dataplane_pid_, SIGTERM);
  // Wait for the children (reaped by the SIGCHLD handler), at most 3 s.
  auto deadline = Clock::now() + std::chrono::seconds(3);
  // The function holds itself only weakly; the pending timer holds it.
  auto check = std::make_shared<std::function<void()>>();
  *check = [this, deadline, weak = std::weak_ptr<std::function<void()>>(check)] {
    bool children = dataplane_pid_ != 0 || local_instances() != 0;
    if (!children || Clock::now() > deadline) {
      if (dataplane_pid_) ::kill(dataplane_pid_, SIGKILL);
      for (auto& [id, r] : runs_)
        if (r->pid && !r->reaped) ::kill(-r->pgid, SIGKILL);
      for (auto& r : runs_)
        if (r.second->is_origin && r.second->ctl) {
          CtlDone d;
          d.status = r.second->cause_status ? r.second->cause_status : 1;
          d.message = r.second->cause;
          r.second->ctl->send(Type::kCtlDone, d);
        }
      // Let the last messages go out, then stop.
      shutdown_timer_.expires_after(std::chrono::milliseconds(100));
      shutdown_timer_.async_wait([this](boost::system::error_code) {
        for (auto& p : peers_)
          if (p.link) p.link->close("shutdown", true);
        io_.stop();
      });
      return;
    }
    shutdown_timer_.expires_after(std::chrono::milliseconds(20));
    shutdown_timer_.async_wait([self = weak.lock()](boost::system::error_code e) {
      if (!e && self) (*self)();
    });
  };
  (*check)();
}

}  // namespace gossamer::cp
