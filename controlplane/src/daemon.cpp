#include "daemon.hpp"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include <spdlog/spdlog.h>

extern char** environ;

namespace gossamer::cp {

namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(2);
constexpr auto kRedialDelay = std::chrono::milliseconds(250);
constexpr auto kPrepareTimeout = std::chrono::seconds(10);
constexpr auto kKillDelay = std::chrono::seconds(1);       // SIGTERM, then SIGKILL
constexpr auto kDrainLimit = std::chrono::milliseconds(500);  // output after the exit
constexpr auto kMaxDataplaneBackoff = std::chrono::milliseconds(10'000);
constexpr auto kDataplaneStable = std::chrono::seconds(10);
constexpr std::size_t kOutputBacklog = 8u << 20;  // pause an instance's pipes above this
constexpr std::size_t kCtlBacklogLimit = 64u << 20;  // gossamerctl not reading: fail the run
constexpr std::size_t kHashChunk = 4u << 20;         // bytes hashed between other work
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);
// A host that is not the origin gives up on its bulk connections this long
// after the Prepare, and says which one is missing: before the origin's
// kPrepareTimeout, which could only say that the host did not answer.
constexpr auto kBulkTimeout = std::chrono::seconds(8);
// Authenticated bulk connections for runs this host does not know yet (the
// Prepare may come after the peer's dial), per peer host.
constexpr std::size_t kMaxPendingBulk = 64;
constexpr std::size_t kRememberEnded = 256;  // run ids, see forget_run()

std::string random_id() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

std::string describe_exit(int code, int sig) {
  if (sig) {
    const char* name = sigabbrev_np(sig);
    return "killed by signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "exited with status " + std::to_string(code);
}

// fork + exec with stdin from /dev/null and the given stdout/stderr; the child
// gets its own process group (so a stop reaches whatever it forked) and dies
// with this daemon. Of the other descriptors it keeps `keep` (>= 3) only.
// Returns the pid, or -1 with *error.
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& cwd,
            int out_fd, int err_fd, bool own_group, const std::vector<int>& keep, std::string* error) {
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    return -1;
  }
  std::vector<char*> av, ev;
  for (auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  for (auto& e : env) ev.push_back(const_cast<char*>(e.c_str()));
  ev.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    ::close(status_pipe[0]);
    ::close(status_pipe[1]);
    return -1;
  }
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGPIPE}) ::signal(s, SIG_DFL);
    if (own_group) ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    // Nothing of the daemon's (sockets, listeners, pipes) crosses exec.
    ::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
    for (int fd : keep) ::fcntl(fd, F_SETFD, 0);  // but the instance's bulk connections do
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) ::dup2(null, 0);
    if (out_fd >= 0) ::dup2(out_fd, 1);
    if (err_fd >= 0) ::dup2(err_fd, 2);
    const char* stage = "chdir";
    if (cwd.empty() || ::chdir(cwd.c_str()) == 0) {
      stage = "exec";
      ::execve(av[0], av.data(), ev.data());
    }
    int e = errno;
    char msg[256];
    int n = std::snprintf(msg, sizeof msg, "%s %s: %s", stage, stage[0] == 'c' ? cwd.c_str() : av[0],
                          std::strerror(e));
    (void)!::write(status_pipe[1], msg, std::size_t(n));
    ::_exit(127);
  }
  ::close(status_pipe[1]);
  char msg[256];
  ssize_t n;
  do n = ::read(status_pipe[0], msg, sizeof msg);  // EOF on a successful exec
  while (n < 0 && errno == EINTR);
  ::close(status_pipe[0]);
  if (n > 0) {
    *error = std::string(msg, std::size_t(n));
    ::waitpid(pid, nullptr, 0);
    return -1;
  }
  return pid;
}

}  // namespace

// One application run. On the origin host it also holds the gossamerctl
// link and what every host reported; on the others only the local instance.
struct Daemon::Run {
  Run() = default;
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;
  ~Run() { close_bulk(); }
  void close_bulk() {
    for (int& fd : bulk)
      if (fd >= 0) ::close(fd), fd = -1;
  }

  Prepare spec;
  bool is_origin = false;
  bool checked = false;  // the binary check passed on this host
  bool ready = false;    // checked, and every bulk connection held (not origin: Prepared ok sent)
  bool started = false;
  // Bulk connections, per host: the socket for the instance (-1: not yet;
  // always -1 for this host), given to it at the start, closed whenever the
  // run goes away before (this destructor).
  std::vector<int> bulk;
  std::vector<bool> bulk_dialing;       // per higher host: an attempt is under way
  std::vector<std::string> bulk_error;  // per host: why the last attempt failed
  std::unique_ptr<asio::steady_timer> bulk_timer;  // not origin: kBulkTimeout
  // the local instance
  pid_t pid = 0;
  int pgid = 0;
  bool reaped = false;
  int code = -1, sig = 0;
  bool stopping = false;
  bool group_killed = false;
  bool dead_before_stop = false;  // had exited (unreaped) when we stopped it
  bool sigkill_sent = false;      // our escalation after SIGTERM
  bool exited_sent = false;
  std::string exec_error;
  std::unique_ptr<asio::posix::stream_descriptor> streams[2];
  std::array<char, kOutputChunk> buf[2];
  std::unique_ptr<asio::steady_timer> drain_timer;
  // origin only
  std::shared_ptr<UnixLink> ctl;
  std::vector<int> prepared;   // per host: 0 waiting, 1 ok, -1 failed
  std::vector<bool> finished;  // per host: exited or lost
  std::unique_ptr<asio::steady_timer> prepare_timer;
  bool failed = false, stop_sent = false, done = false;
  int cause_rank = -1;  // higher wins; ties: first
  int cause_status = 0;
  std::string cause;
};

Daemon::Daemon(asio::io_context& io, config::Config cfg, DaemonOptions opt, std::string key)
    : io_(io),
      cfg_(std::move(cfg)),
      opt_(std::move(opt)),
      key_(std::move(key)),
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
  accept_peer();
  accept_ctl();
  for (std::uint32_t h = self_ + 1; h < hosts_; ++h) dial(h);
  heartbeat_tick();
  spdlog::info("gossamerd: {} of {} hosts, peers on {}, gossamerctl on {}", host_name(self_), hosts_, l.to_string(),
               ctl_path_);
  return true;
}

// ---- metrics ------------------------------------------------------------------------

bool Daemon::start_metrics() {
  if (!cfg_.metrics.enabled) return true;
  std::vector<std::string> names;
  for (const auto& h : cfg_.rack.hosts) names.push_back(h.name);
  exporter_ = std::make_shared<Exporter>(std::move(names), self_, cfg_.dataplane_socket() + ".metrics");
  publish_view();
  const std::string addr = cfg_.metrics.listen.to_string();
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(addr, 1);
  } catch (const std::exception& e) {
    spdlog::error("cannot serve metrics on {} (metrics.listen): {}", addr, e.what());
    return false;
  }
  exposer_->RegisterCollectable(exporter_);
  spdlog::info("metrics on http://{}/metrics", addr);
  return true;
}

// Refreshed every heartbeat interval: scrapes see at most that much delay.
void Daemon::publish_view() {
  if (!exporter_) return;
  DaemonView v;
  v.hosts.resize(hosts_);
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    v.hosts[h].up = h == self_ || peers_[h].up;
    v.hosts[h].last_heard = peers_[h].last_heard;
  }
  v.dataplane_restarts = dataplane_restarts_;
  v.runs = local_instances();
  exporter_->set_view(std::move(v));
}

// ---- mesh ---------------------------------------------------------------------------

// The acceptor's side of the handshake; the dialer's is in dial().
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
        Nonce mine = random_nonce(), theirs{};
        std::uint32_t host = UINT32_MAX;
        bool authenticated = false;
        bool bulk = false;  // a BulkHello opened it: never a mesh link
        std::string run;    // the bulk connection's run
        asio::steady_timer timer;
        explicit Hs(asio::io_context& io) : timer(io) {}
      };
      auto hs = std::make_shared<Hs>(io_);
      std::weak_ptr<TcpLink> weak = link;
      hs->timer.expires_after(kHandshakeTimeout);
      hs->timer.async_wait([this, weak, hs](boost::system::error_code e) {
        if (e || hs->authenticated) return;
        if (auto k = weak.lock()) {
          ++protocol_errors_;
          k->close("no handshake within 2 s", true);
        }
      });
      std::string from = link->socket().remote_endpoint(ec).address().to_string();
      link->start(
          [this, link = link.get(), hs, from](Type t, std::string_view body) {
            auto self_link = link->shared_from_this();
            if (hs->authenticated) {
              // A bulk link reads nothing after the proof (hand_over).
              if (!hs->bulk) on_peer_message(hs->host, t, body);
              return;
            }
            auto reject = [&](const std::string& why) {
              ++protocol_errors_;
              spdlog::warn("{} connection from {} refused: {}", hs->bulk ? "bulk" : "peer", from, why);
              link->close(why, true);
            };
            if (hs->host == UINT32_MAX) {
              Hello h;
              if (t == Type::kBulkHello) {
                BulkHello b;
                hs->bulk = true;
                if (!decode(body, b)) return reject("malformed bulk hello");
                if (!valid_run_id(b.run)) return reject("bad run id in a bulk hello");
                h = Hello{b.version, b.host, b.rack, b.nonce};
                hs->run = std::move(b.run);
              } else if (t != Type::kHello || !decode(body, h)) {
                return reject("expected a hello");
              }
              if (h.version != kVersion)
                return reject("protocol version " + std::to_string(h.version) + ", this daemon speaks " +
                              std::to_string(kVersion));
              if (h.host >= self_) return reject("host index " + std::to_string(h.host) + " may not dial " + host_name(self_));
              if (h.rack != rack_id()) return reject(host_name(h.host) + " has a different rack section");
              hs->host = h.host;
              hs->theirs = h.nonce;
              Challenge c;
              c.host = self_;
              c.nonce = hs->mine;
              c.mac = hs->bulk ? bulk_mac(key_, Role::kBulkAcceptor, hs->theirs, hs->mine, h.host, self_, rack_id(),
                                          hs->run)
                               : handshake_mac(key_, Role::kAcceptor, hs->theirs, hs->mine, h.host, self_, rack_id());
              link->send(Type::kChallenge, c);
              return;
            }
            Proof p;
            if (t != Type::kProof || !decode(body, p)) return reject("expected a proof");
            const Mac want = hs->bulk ? bulk_mac(key_, Role::kBulkDialer, hs->theirs, hs->mine, hs->host, self_,
                                                 rack_id(), hs->run)
                                      : handshake_mac(key_, Role::kDialer, hs->theirs, hs->mine, hs->host, self_,
                                                      rack_id());
            if (!mac_equal(p.mac, want))
              return reject("wrong pre-shared key (claimed to be " + host_name(hs->host) + ")");
            hs->authenticated = true;
            hs->timer.cancel();
            if (hs->bulk) return bulk_accepted(hs->host, hs->run, self_link);
            link->set_max_body(kMaxBody);
            peer_authenticated(hs->host, self_link);
          },
          [this, link = link.get(), hs](const std::string& why) {
            if (hs->authenticated && !hs->bulk && peers_[hs->host].link.get() == link)
              peer_down(hs->host, "connection lost: " + why);
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
    struct Hs {
      Nonce mine = random_nonce();
      bool authenticated = false;
    };
    auto hs = std::make_shared<Hs>();
    // The connect timer closed the socket; from here the link owns it.
    timer->cancel();
    timer->expires_after(kHandshakeTimeout);
    timer->async_wait([this, weak = std::weak_ptr<TcpLink>(link), hs](boost::system::error_code te) {
      if (te || hs->authenticated) return;
      if (auto l = weak.lock()) {
        ++protocol_errors_;
        l->close("no handshake within 2 s", true);
      }
    });
    link->start(
        [this, h, link = link.get(), hs, timer](Type t, std::string_view body) {
          auto self_link = link->shared_from_this();
          if (hs->authenticated) return on_peer_message(h, t, body);
          Challenge c;
          if (t != Type::kChallenge || !decode(body, c) || c.host != h ||
              !mac_equal(c.mac, handshake_mac(key_, Role::kAcceptor, hs->mine, c.nonce, self_, h, rack_id()))) {
            ++protocol_errors_;
            spdlog::warn("{} failed the handshake (wrong pre-shared key, or not a gossamerd)", host_name(h));
            return link->close("handshake failed", true);
          }
          Proof p;
          p.mac = handshake_mac(key_, Role::kDialer, hs->mine, c.nonce, self_, h, rack_id());
          link->send(Type::kProof, p);
          hs->authenticated = true;
          timer->cancel();
          link->set_max_body(kMaxBody);
          peer_authenticated(h, self_link);
        },
        [this, h, link = link.get(), hs, timer](const std::string& why) {
          timer->cancel();
          peers_[h].dialing = false;
          if (hs->authenticated && peers_[h].link.get() == link) peer_down(h, "connection lost: " + why);
          schedule_redial(h);
        });
    Hello hello;
    hello.host = self_;
    hello.rack = rack_id();
    hello.nonce = hs->mine;
    link->send(Type::kHello, hello);
  });
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
  spdlog::info("{} is up", host_name(h));
  publish_view();
  Heartbeat hb;
  hb.seq = heartbeat_seq_;
  hb.dataplane = std::uint8_t(dataplane_state_);
  hb.dataplane_restarts = dataplane_restarts_;
  hb.instances = local_instances();
  p.link->send(Type::kHeartbeat, hb);
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

void Daemon::heartbeat_tick() {
  publish_view();
  const auto now = Clock::now();
  Heartbeat hb;
  hb.seq = ++heartbeat_seq_;
  hb.dataplane = std::uint8_t(dataplane_state_);
  hb.dataplane_restarts = dataplane_restarts_;
  hb.instances = local_instances();
  const auto timeout = std::chrono::milliseconds(cfg_.controlplane.heartbeat_timeout_ms);
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    auto& p = peers_[h];
    if (!p.link || !p.up) continue;
    if (now - p.last_heard > timeout) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - p.last_heard).count();
      peer_down(h, "stopped answering heartbeats (last one " + std::to_string(ms) + " ms ago)");
      continue;
    }
    p.link->send(Type::kHeartbeat, hb);
  }
  heartbeat_timer_.expires_after(std::chrono::milliseconds(cfg_.controlplane.heartbeat_interval_ms));
  heartbeat_timer_.async_wait([this](boost::system::error_code e) {
    if (!e && !shutting_down_) heartbeat_tick();
  });
}

void Daemon::on_peer_message(std::uint32_t h, Type t, std::string_view body) {
  auto& p = peers_[h];
  p.last_heard = Clock::now();
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
    default:
      return bad();
  }
}

// ---- bulk connections -------------------------------------------------------------------
// One TCP connection per run and pair of hosts, for the instances' large
// requests (controlplane/README.md, "Large messages"). The lower index dials,
// as for the mesh; both sides hand the socket to the instance at the start.

void Daemon::init_bulk(const std::shared_ptr<Run>& r) {
  r->bulk.assign(hosts_, -1);
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
  for (const auto& p : mine) bulk_store(r, p.host, p.fd);
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
    if (h == self_ || r.bulk[h] >= 0) continue;
    std::string why = !r.bulk_error[h].empty() ? r.bulk_error[h] : h < self_ ? "it did not connect" : "";
    return "no bulk connection with " + host_name(h) + within + (why.empty() ? "" : " (" + why + ")");
  }
  return "";
}

void Daemon::bulk_store(const std::shared_ptr<Run>& r, std::uint32_t h, int fd) {
  // A second one for the same pair: the dialer gave up on the first (its
  // handshake timed out) and holds this one.
  if (r->bulk[h] >= 0) ::close(r->bulk[h]);
  r->bulk[h] = fd;
  r->bulk_error[h].clear();
  spdlog::debug("run {}: bulk connection with {} (fd {})", r->spec.run, host_name(h), fd);
  maybe_ready(r);
}

// The dialer's side of the bulk handshake; the acceptor's is in accept_peer()
// and bulk_accepted().
void Daemon::bulk_dial(const std::string& id, std::uint32_t h) {
  auto it = runs_.find(id);
  if (shutting_down_ || it == runs_.end()) return;
  Run& r = *it->second;
  if (!r.checked || r.started || r.done || r.bulk[h] >= 0 || r.bulk_dialing[h]) return;
  r.bulk_dialing[h] = true;
  const auto& a = cfg_.rack.hosts[h].control;
  boost::system::error_code ec;
  asio::ip::tcp::endpoint ep(asio::ip::make_address(a.ip, ec), a.port);
  struct Attempt {
    explicit Attempt(asio::io_context& io) : sock(io), timer(io) {}
    asio::ip::tcp::socket sock;
    asio::steady_timer timer;
    Nonce mine = random_nonce();
    bool challenged = false, ready = false, timed_out = false, over = false;
  };
  auto at = std::make_shared<Attempt>(io_);
  // Reports the attempt once: the socket, or why not.
  auto finish = [this, id, h, at](int fd, const std::string& why) {
    if (at->over) {
      if (fd >= 0) ::close(fd);
      return;
    }
    at->over = true;
    at->timer.cancel();
    bulk_dial_done(id, h, fd, why);
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
    at->timer.expires_after(kHandshakeTimeout);
    at->timer.async_wait([at, weak = std::weak_ptr<TcpLink>(link)](boost::system::error_code te) {
      if (te || at->ready || at->over) return;
      at->timed_out = true;
      if (auto l = weak.lock()) l->close("no bulk handshake within 2 s", true);
    });
    link->start(
        [this, id, h, at, finish, link = link.get()](Type t, std::string_view body) {
          if (!at->challenged) {
            Challenge c;
            if (t != Type::kChallenge || !decode(body, c) || c.host != h ||
                !mac_equal(c.mac, bulk_mac(key_, Role::kBulkAcceptor, at->mine, c.nonce, self_, h, rack_id(), id))) {
              ++protocol_errors_;
              return link->close("handshake failed (wrong pre-shared key, or not a gossamerd)", true);
            }
            at->challenged = true;
            Proof p;
            p.mac = bulk_mac(key_, Role::kBulkDialer, at->mine, c.nonce, self_, h, rack_id(), id);
            link->send(Type::kProof, p);
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
    BulkHello hello;
    hello.host = self_;
    hello.rack = rack_id();
    hello.nonce = at->mine;
    hello.run = id;
    link->send(Type::kBulkHello, hello);
  });
}

void Daemon::bulk_dial_done(const std::string& id, std::uint32_t h, int fd, const std::string& why) {
  auto it = runs_.find(id);
  auto r = it == runs_.end() ? nullptr : it->second;
  if (r) r->bulk_dialing[h] = false;
  const bool wanted = r && !r->started && !r->done && !shutting_down_;
  if (fd >= 0) {
    if (wanted) return bulk_store(r, h, fd);
    ::close(fd);  // the run went away meanwhile
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
void Daemon::bulk_accepted(std::uint32_t h, const std::string& id, const std::shared_ptr<TcpLink>& link) {
  auto it = runs_.find(id);
  if (shutting_down_ || (it != runs_.end() && (it->second->started || it->second->done)) ||
      (it == runs_.end() && ended_.count(id))) {
    spdlog::debug("run {}: bulk connection from {} refused: too late", id, host_name(h));
    return link->close("too late for this run", true);
  }
  RunRef ready{id};
  link->send(Type::kBulkReady, ready);
  link->hand_over([this, h, id](int fd) { bulk_taken(h, id, fd); });
}

void Daemon::bulk_taken(std::uint32_t h, const std::string& id, int fd) {
  if (fd < 0) {
    spdlog::warn("run {}: cannot take the bulk connection from {}", id, host_name(h));
    return;
  }
  auto it = runs_.find(id);
  if (shutting_down_ || (it != runs_.end() && (it->second->started || it->second->done)) ||
      (it == runs_.end() && ended_.count(id))) {
    ::close(fd);
    return;
  }
  if (it != runs_.end()) return bulk_store(it->second, h, fd);
  // The Prepare has not come yet: keep it, bounded, for kPrepareTimeout.
  std::size_t n = 0;
  for (const auto& p : pending_bulk_) n += p.host == h;
  if (n >= kMaxPendingBulk) {
    auto old = std::find_if(pending_bulk_.begin(), pending_bulk_.end(),
                            [h](const PendingBulk& p) { return p.host == h; });
    ++protocol_errors_;
    spdlog::warn("{} opened {} bulk connections for runs this host does not know; closing the oldest (run {})",
                 host_name(h), n + 1, old->run);
    ::close(old->fd);
    pending_bulk_.erase(old);
  }
  const std::uint64_t serial = ++pending_serial_;
  pending_bulk_.push_back(PendingBulk{serial, h, id, fd});
  after(kPrepareTimeout, [this, serial] {
    auto p = std::find_if(pending_bulk_.begin(), pending_bulk_.end(),
                          [serial](const PendingBulk& x) { return x.serial == serial; });
    if (p == pending_bulk_.end()) return;
    spdlog::warn("run {}: closing the bulk connection from {}: no such run here within 10 s", p->run,
                 host_name(p->host));
    ::close(p->fd);
    pending_bulk_.erase(p);
  });
}

// ---- gossamerctl --------------------------------------------------------------------

void Daemon::accept_ctl() {
  ctl_acceptor_.async_accept([this](boost::system::error_code ec, asio::local::stream_protocol::socket s) {
    if (shutting_down_) return;
    if (ec) {
      after(kAcceptRetry, [this] { accept_ctl(); });
      return;
    }
    {
      auto link = std::make_shared<UnixLink>(std::move(s), 1u << 20);
      link->start([this, l = link.get()](Type t, std::string_view body) { on_ctl_message(l->shared_from_this(), t, body); },
                  [this, l = link.get()](const std::string&) {
                    // gossamerctl went away (Ctrl-C twice, killed): stop its run.
                    std::vector<std::shared_ptr<Run>> mine;
                    for (auto& [id, r] : runs_)
                      if (r->is_origin && r->ctl.get() == l && !r->done) mine.push_back(r);
                    for (auto& r : mine) {
                      r->ctl.reset();
                      if (!r->started) {
                        abort_before_start(r, 130, "gossamerctl disconnected");
                        continue;
                      }
                      if (!r->failed) fail_run(*r, self_, 4, 130, "gossamerctl disconnected");
                      stop_everywhere(*r, "gossamerctl disconnected");
                    }
                  });
    }
    accept_ctl();
  });
}

void Daemon::on_ctl_message(const std::shared_ptr<UnixLink>& link, Type t, std::string_view body) {
  switch (t) {
    case Type::kCtlStatus:
      link->send(Type::kCtlStatusReply, status());
      link->close("status sent");
      return;
    case Type::kCtlRun: {
      CtlRun m;
      if (!decode(body, m)) break;
      return ctl_run(link, std::move(m));
    }
    case Type::kCtlStop:
      for (auto& [id, r] : runs_)
        if (r->is_origin && r->ctl == link && !r->done) {
          if (!r->started) {
            auto keep = r;
            abort_before_start(keep, 130, "interrupted before the start");
            return;
          }
          if (!r->failed) fail_run(*r, self_, 4, 130, "interrupted: gossamerctl got SIGINT, SIGTERM or SIGHUP");
          stop_everywhere(*r, "interrupted from gossamerctl");
          maybe_finish(r->spec.run);
          return;
        }
      return;
    default:
      break;
  }
  ++protocol_errors_;
  CtlDone d;
  d.status = 2;
  d.message = "gossamerd: malformed request (type " + std::to_string(unsigned(t)) + ")";
  link->send(Type::kCtlDone, d);
  link->close("malformed request");
}

StatusReply Daemon::status() const {
  StatusReply s;
  s.self = self_;
  const auto now = Clock::now();
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    HostStatus hs;
    hs.index = h;
    hs.name = cfg_.rack.hosts[h].name;
    if (h == self_) {
      hs.state = "self";
      hs.dataplane = std::uint8_t(dataplane_state_);
      hs.dataplane_restarts = dataplane_restarts_;
      hs.instances = local_instances();
    } else {
      const auto& p = peers_[h];
      hs.state = p.up ? "up" : "down";
      if (p.last_heard != Clock::time_point{})
        hs.heartbeat_ms =
            std::int32_t(std::chrono::duration_cast<std::chrono::milliseconds>(now - p.last_heard).count());
      hs.dataplane = p.last.dataplane;
      hs.dataplane_restarts = p.last.dataplane_restarts;
      hs.instances = p.last.instances;
    }
    s.hosts.push_back(std::move(hs));
  }
  for (const auto& [id, r] : runs_) {
    RunStatus rs;
    rs.run = id;
    rs.path = r->spec.path;
    rs.threads = r->spec.threads;
    rs.origin = r->spec.origin;
    rs.state = !r->started ? "preparing" : r->stopping ? "stopping" : (r->pid && !r->reaped) ? "running" : "finishing";
    rs.pid = r->reaped ? 0 : r->pid;
    s.runs.push_back(std::move(rs));
  }
  return s;
}

// ---- runs: origin side ----------------------------------------------------------------

void Daemon::ctl_run(const std::shared_ptr<UnixLink>& link, CtlRun req) {
  auto refuse = [&](const std::string& why) {
    CtlDone d;
    d.status = 2;
    d.message = why;
    link->send(Type::kCtlDone, d);
    link->close("refused");
  };
  if (shutting_down_) return refuse("gossamerd on " + host_name(self_) + " is shutting down");
  if (req.path.empty() || req.path[0] != '/') return refuse("the binary path must be absolute");
  for (std::uint32_t h = 0; h < hosts_; ++h)
    if (h != self_ && !peers_[h].up) return refuse(host_name(h) + " is down; not starting anything");
  auto r = std::make_shared<Run>();
  r->is_origin = true;
  r->ctl = link;
  r->spec.run = random_id();
  r->spec.origin = self_;
  r->spec.path = req.path;
  r->spec.args = std::move(req.args);
  r->spec.cwd = std::move(req.cwd);
  r->spec.threads = req.threads;
  r->prepared.assign(hosts_, 0);
  r->finished.assign(hosts_, false);
  runs_[r->spec.run] = r;
  init_bulk(r);
  spdlog::info("run {}: {} on {} hosts{}", r->spec.run, r->spec.path, hosts_,
               r->spec.threads ? " with " + std::to_string(r->spec.threads) + " threads" : "");
  r->prepare_timer = std::make_unique<asio::steady_timer>(io_);
  r->prepare_timer->expires_after(kPrepareTimeout);
  r->prepare_timer->async_wait([this, id = r->spec.run](boost::system::error_code e) {
    auto it = runs_.find(id);
    if (e || it == runs_.end() || it->second->started) return;
    auto& run = *it->second;
    if (run.prepared[self_] == 0 && run.checked) {
      // Checked here, but a bulk connection of this host is missing.
      Prepared p;
      p.run = id;
      p.host = self_;
      p.error = bulk_missing(run, " within 10 s");
      on_prepared(p);
      return;
    }
    for (std::uint32_t h = 0; h < hosts_; ++h)
      if (run.prepared[h] == 0) {
        Prepared p;
        p.run = id;
        p.host = h;
        p.error = "did not answer within 10 s";
        on_prepared(p);
        return;
      }
  });
  // This host checks first (and hashes, a piece at a time); the others get
  // the hash to compare with.
  prepare_async(r->spec, [this, id = r->spec.run](Prepared mine, std::string sum) {
    auto it = runs_.find(id);
    if (it == runs_.end() || it->second->done) return;
    auto run = it->second;
    if (mine.ok) {
      run->spec.sha256 = std::move(sum);
      for (std::uint32_t h = 0; h < hosts_; ++h)
        if (h != self_ && peers_[h].link) peers_[h].link->send(Type::kPrepare, run->spec);
      return run_checked(run);  // prepared here once connected
    }
    on_prepared(mine);
  });
}

void Daemon::abort_before_start(const std::shared_ptr<Run>& r, int status, const std::string& message) {
  if (r->done) return;
  r->done = true;
  if (r->prepare_timer) r->prepare_timer->cancel();
  Stop s;
  s.run = r->spec.run;
  s.reason = message;
  for (std::uint32_t h = 0; h < hosts_; ++h)
    if (h != self_ && peers_[h].link) peers_[h].link->send(Type::kStop, s);
  if (r->ctl) {
    CtlDone d;
    d.status = status;
    d.message = message;
    r->ctl->send(Type::kCtlDone, d);
    r->ctl->close("refused");
  }
  spdlog::warn("run {} not started: {}", r->spec.run, message);
  forget_run(r->spec.run);
}

void Daemon::hash_async(const std::string& path, std::function<void(std::string, std::string)> done) {
  auto h = std::make_shared<FileHasher>();
  std::string err;
  if (!h->open(path, &err)) return done("", err);
  auto cb = std::make_shared<std::function<void(std::string, std::string)>>(std::move(done));
  asio::post(io_, [this, h, cb] { hash_step(h, cb); });
}

void Daemon::hash_step(std::shared_ptr<FileHasher> h,
                       std::shared_ptr<std::function<void(std::string, std::string)>> done) {
  std::string e;
  if (!h->step(kHashChunk, &e)) {
    // Let heartbeats and everything else run between pieces.
    asio::post(io_, [this, h, done] { hash_step(h, done); });
    return;
  }
  (*done)(h->hex(), h->hex().empty() ? e : "");
}

void Daemon::on_prepared(const Prepared& p) {
  auto it = runs_.find(p.run);
  if (it == runs_.end() || !it->second->is_origin) return;
  auto r = it->second;
  if (r->started || r->done || p.host >= hosts_ || r->prepared[p.host] != 0) return;
  r->prepared[p.host] = p.ok ? 1 : -1;
  if (!p.ok) return abort_before_start(r, 2, "not started: " + host_name(p.host) + ": " + p.error);
  for (int v : r->prepared)
    if (v != 1) return;
  for (std::uint32_t h = 0; h < hosts_; ++h)
    if (h != self_ && (!peers_[h].link || !peers_[h].up))
      return abort_before_start(r, 2, "not started: " + host_name(h) + " is down");
  if (shutting_down_) return abort_before_start(r, 1, "gossamerd on " + host_name(self_) + " is shutting down");
  r->prepare_timer->cancel();
  r->started = true;
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    if (h == self_) continue;
    RunRef ref{p.run};
    peers_[h].link->send(Type::kStart, ref);
  }
  start_instance(*r);
}

void Daemon::on_output(const Output& o) {
  auto it = runs_.find(o.run);
  if (it == runs_.end() || !it->second->is_origin || !it->second->ctl) return;
  if (it->second->ctl->queued_bytes() > kCtlBacklogLimit) {
    // Every host's output ends up here: a caller that stopped reading must
    // not make this daemon buffer without bound.
    auto r = it->second;
    if (!r->failed) fail_run(*r, self_, 4, 1, "gossamerctl is not reading the output (64 MiB queued)");
    return;
  }
  CtlOutput c;
  c.host = o.host;
  c.stream = o.stream;
  c.data = o.data;
  it->second->ctl->send(Type::kCtlOutput, c);
}

void Daemon::on_exited(const Exited& e) {
  auto it = runs_.find(e.run);
  if (it == runs_.end() || !it->second->is_origin) return;
  auto r = it->second;
  if (e.host >= hosts_ || r->finished[e.host]) return;
  r->finished[e.host] = true;
  std::string what = host_name(e.host) + ": instance" + (e.pid ? " pid " + std::to_string(e.pid) : "") + " ";
  if (!e.error.empty()) {
    fail_run(*r, e.host, 3, 127, what + "did not start: " + e.error);
  } else if (e.signal || e.code != 0) {
    const int status = e.signal ? 128 + e.signal : e.code;
    // A stop we ordered, or an exit because another host's instance left,
    // is a consequence; anything else is a cause.
    const int rank = e.stopped ? 0 : (e.code == kExitPeerLost ? 1 : 2);
    std::string why = describe_exit(e.code, e.signal);
    if (e.code == kExitPeerLost) why += " (another host's instance left the rack)";
    if (e.stopped) why += " (stopped by gossamerd)";
    fail_run(*r, e.host, rank, status, what + why);
  }
  maybe_finish(e.run);
}

void Daemon::fail_run(Run& r, std::uint32_t host, int rank, int status, const std::string& cause) {
  (void)host;
  if (rank > r.cause_rank) {
    r.cause_rank = rank;
    r.cause_status = status;
    r.cause = cause;
  }
  if (r.failed) return;
  r.failed = true;
  spdlog::warn("run {}: {}; stopping it on every host", r.spec.run, cause);
  stop_everywhere(r, cause);
}

void Daemon::stop_everywhere(Run& r, const std::string& reason) {
  if (r.stop_sent) return;
  r.stop_sent = true;
  Stop s;
  s.run = r.spec.run;
  s.reason = reason;
  for (std::uint32_t h = 0; h < hosts_; ++h)
    if (h != self_ && peers_[h].link && !r.finished[h]) peers_[h].link->send(Type::kStop, s);
  stop_instance(r, reason);
}

void Daemon::maybe_finish(const std::string& id) {
  auto it = runs_.find(id);
  if (it == runs_.end()) return;
  auto r = it->second;
  if (!r->is_origin || r->done) return;
  for (bool f : r->finished)
    if (!f) return;
  r->done = true;
  CtlDone d;
  if (r->failed) {
    d.status = r->cause_status ? r->cause_status : 1;
    d.message = r->cause;
  }
  spdlog::info("run {} finished: {}", id, r->failed ? r->cause : std::string("every instance exited 0"));
  if (r->ctl) {
    r->ctl->send(Type::kCtlDone, d);
    r->ctl->close("done");
  }
  forget_run(it);
}

// ---- runs: every host -------------------------------------------------------------------

std::string Daemon::precheck(const Prepare& p) const {
  struct stat st {};
  if (p.path.empty() || p.path[0] != '/') return "binary path '" + p.path + "' is not absolute";
  if (::stat(p.path.c_str(), &st) != 0) return "no binary at " + p.path + " (" + std::strerror(errno) + ")";
  if (!S_ISREG(st.st_mode) || ::access(p.path.c_str(), X_OK) != 0) return p.path + " is not an executable file";
  if (!opt_.dataplane_path.empty() && hosts_ > 1 && dataplane_state_ != DataplaneState::kRunning)
    return std::string("the dataplane is ") + to_string(dataplane_state_);
  if (shutting_down_) return "gossamerd is shutting down";
  return "";
}

// Calls `done` with this host's answer and the binary's hash ("" if it could
// not be read). On the origin p.sha256 is empty: there is nothing to compare
// yet, and the hash becomes the one the other hosts get.
void Daemon::prepare_async(const Prepare& p, std::function<void(Prepared, std::string)> done) {
  Prepared r;
  r.run = p.run;
  r.host = self_;
  r.error = precheck(p);
  if (!r.error.empty()) return done(r, "");
  hash_async(p.path, [this, r, p, done = std::move(done)](std::string sum, std::string err) mutable {
    if (sum.empty()) {
      r.error = "cannot read " + p.path + ": " + err;
    } else if (p.sha256.empty()) {
      r.ok = true;
    } else if (sum != p.sha256) {
      r.error = "a different binary at " + p.path + " (sha256 " + sum.substr(0, 16) + "…, " + host_name(p.origin) +
                " has " + p.sha256.substr(0, 16) + "…)";
    } else {
      r.ok = true;
    }
    done(r, sum);
  });
}

// Every run leaves through here: its id is remembered a while, so that a
// bulk connection for it that comes late is refused at once instead of
// waiting kPrepareTimeout for a Prepare that will not come.
void Daemon::forget_run(const std::string& id) {
  auto it = runs_.find(id);
  if (it == runs_.end()) return;
  forget_run(it);
}

void Daemon::forget_run(std::map<std::string, std::shared_ptr<Run>>::iterator it) {
  if (ended_.insert(it->first).second) {
    ended_order_.push_back(it->first);
    if (ended_order_.size() > kRememberEnded) {
      ended_.erase(ended_order_.front());
      ended_order_.pop_front();
    }
  }
  runs_.erase(it);  // the Run closes its bulk connections when the last reference goes
}

std::uint32_t Daemon::local_instances() const {
  std::uint32_t n = 0;
  for (const auto& [id, r] : runs_) n += r->pid && !r->reaped;
  return n;
}

void Daemon::start_instance(Run& r) {
  r.started = true;
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    r.exec_error = std::string("pipe: ") + std::strerror(errno);
  } else {
    std::vector<std::string> argv{r.spec.path};
    argv.insert(argv.end(), r.spec.args.begin(), r.spec.args.end());
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string_view v(*e);
      if (v.starts_with("GOSSAMER_CONFIG=") || v.starts_with("GOSSAMER_RUN_ID=") ||
          v.starts_with("GOSSAMER_THREADS=") || v.starts_with("GOSSAMER_BULK="))
        continue;
      env.emplace_back(v);
    }
    env.push_back("GOSSAMER_CONFIG=" + opt_.config_path);
    env.push_back("GOSSAMER_RUN_ID=" + r.spec.run);
    if (r.spec.threads) env.push_back("GOSSAMER_THREADS=" + std::to_string(r.spec.threads));
    // GOSSAMER_BULK=<host>:<fd>,...: the connection to each other host's
    // instance, inherited at the same number.
    std::vector<int> keep;
    std::string bulk;
    if (hosts_ > 1 && bulk_missing(r, "").empty()) {
      for (std::uint32_t h = 0; h < hosts_; ++h) {
        if (h == self_) continue;
        bulk += (bulk.empty() ? "" : ",") + std::to_string(h) + ":" + std::to_string(r.bulk[h]);
        keep.push_back(r.bulk[h]);
      }
      env.push_back("GOSSAMER_BULK=" + bulk);
    }
    std::string cwd = r.spec.cwd;
    struct stat st {};
    if (cwd.empty() || ::stat(cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) cwd = "/";
    r.pid = spawn(argv, env, cwd, out[1], err[1], true, keep, &r.exec_error);
  }
  r.close_bulk();  // the instance has them, or never will
  for (int fd : {out[1], err[1]})
    if (fd >= 0) ::close(fd);
  if (r.pid <= 0) {
    for (int fd : {out[0], err[0]})
      if (fd >= 0) ::close(fd);
    r.pid = 0;
    r.reaped = true;
    spdlog::warn("run {}: cannot start {}: {}", r.spec.run, r.spec.path, r.exec_error);
    instance_finished(r);
    return;
  }
  r.pgid = r.pid;
  spdlog::info("run {}: started {} as pid {}", r.spec.run, r.spec.path, r.pid);
  auto shared = runs_.at(r.spec.run);
  for (int i = 0; i < 2; ++i) {
    int fd = i == 0 ? out[0] : err[0];
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    r.streams[i] = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
    read_stream(shared, i);
  }
}

void Daemon::read_stream(std::shared_ptr<Run> r, int which) {
  auto& sd = r->streams[which];
  if (!sd) return;
  sd->async_read_some(asio::buffer(r->buf[which]), [this, r, which](boost::system::error_code ec, std::size_t n) {
    if (n > 0) {
      Output o;
      o.run = r->spec.run;
      o.host = self_;
      o.stream = std::uint8_t(which + 1);
      o.data.assign(r->buf[which].data(), n);
      send_to_origin(*r, Type::kOutput, encode(o));
    }
    if (ec) {
      boost::system::error_code ignored;
      if (r->streams[which]) r->streams[which]->close(ignored);
      r->streams[which].reset();
      instance_finished(*r);
      return;
    }
    // Back-pressure: a slow gossamerctl must not make us buffer without bound.
    std::size_t backlog = 0;
    if (r->is_origin && r->ctl) backlog = r->ctl->queued_bytes();
    if (!r->is_origin && peers_[r->spec.origin].link) backlog = peers_[r->spec.origin].link->queued_bytes();
    if (backlog > kOutputBacklog) {
      after(std::chrono::milliseconds(20), [this, r, which] { read_stream(r, which); });
      return;
    }
    read_stream(r, which);
  });
}

// SIGTERM to the instance's process group, SIGKILL 1 s later even if the
// leader is gone by then: nothing it started may outlive the run, even what
// ignores SIGTERM. The timer owns itself, so it fires after the run is
// forgotten too.
void Daemon::kill_group(Run& r) {
  if (r.group_killed || r.pgid <= 0) return;
  r.group_killed = true;
  // An instance that already died (killed by someone else, say) but is not
  // reaped yet: its death is a cause, not our stop.
  siginfo_t info{};
  if (r.pid && ::waitid(P_PID, id_t(r.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == r.pid)
    r.dead_before_stop = true;
  if (::kill(-r.pgid, SIGTERM) != 0) return;  // nobody left
  after(kKillDelay, [this, id = r.spec.run, pgid = r.pgid] {
    if (::kill(-pgid, SIGKILL) != 0) return;
    spdlog::warn("run {}: process group {} outlived SIGTERM by 1 s; SIGKILL", id, pgid);
    if (auto it = runs_.find(id); it != runs_.end()) it->second->sigkill_sent = true;
  });
}

void Daemon::stop_instance(Run& r, const std::string& reason) {
  if (!r.started || r.stopping) return;
  r.stopping = true;
  if (!r.pid || r.reaped) return;
  spdlog::info("run {}: stopping pid {} ({})", r.spec.run, r.pid, reason);
  kill_group(r);
}

// Called when the process was reaped and when each pipe closes: reports the
// exit once all three happened, or once the process is gone and its pipes
// stayed open past kDrainLimit (a grandchild holding them).
void Daemon::instance_finished(Run& r) {
  if (r.exited_sent || !r.reaped) return;
  if (r.streams[0] || r.streams[1]) {
    if (!r.drain_timer) {
      r.drain_timer = std::make_unique<asio::steady_timer>(io_);
      r.drain_timer->expires_after(kDrainLimit);
      r.drain_timer->async_wait([this, id = r.spec.run](boost::system::error_code e) {
        auto it = runs_.find(id);
        if (e || it == runs_.end()) return;
        boost::system::error_code ignored;
        for (auto& s : it->second->streams)
          if (s) s->close(ignored), s.reset();
        instance_finished(*it->second);
      });
    }
    return;
  }
  r.exited_sent = true;
  if (r.drain_timer) r.drain_timer->cancel();
  Exited e;
  e.run = r.spec.run;
  e.host = self_;
  e.pid = r.pid;
  e.code = r.code;
  e.signal = r.sig;
  // Our stop if our signal ended it; a SIGKILL we did not send, or a death
  // before we stopped it, is the instance's own failure.
  e.stopped = r.stopping && !r.dead_before_stop && (r.sig == SIGTERM || (r.sig == SIGKILL && r.sigkill_sent));
  e.error = r.exec_error;
  spdlog::info("run {}: instance {}", r.spec.run,
               e.error.empty() ? "pid " + std::to_string(r.pid) + " " + describe_exit(r.code, r.sig)
                               : "did not start: " + e.error);
  const std::string id = r.spec.run;
  if (r.is_origin) {
    on_exited(e);
  } else {
    send_to_origin(r, Type::kExited, encode(e));
    forget_run(id);
  }
}

void Daemon::send_to_origin(Run& r, Type t, const std::string& body) {
  if (r.is_origin) {
    if (t == Type::kOutput) {
      Output o;
      if (decode(body, o)) on_output(o);
    }
    return;
  }
  auto& p = peers_[r.spec.origin];
  if (p.link && p.up) p.link->send_raw(frame(t, body));
}

// ---- children ---------------------------------------------------------------------------

void Daemon::watch_children() {
  sigchld_.async_wait([this](boost::system::error_code ec, int) {
    if (ec) return;
    reap();
    watch_children();
  });
}

void Daemon::reap() {
  for (;;) {
    int st = 0;
    pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid <= 0) return;
    const int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    const int sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    if (pid == dataplane_pid_) {
      dataplane_pid_ = 0;
      if (shutting_down_) {
        dataplane_state_ = DataplaneState::kStopped;
        spdlog::info("dataplane {}", describe_exit(code, sig));
        continue;
      }
      ++dataplane_restarts_;
      dataplane_state_ = DataplaneState::kRestarting;
      if (Clock::now() - dataplane_started_ >= kDataplaneStable) dataplane_backoff_ = std::chrono::milliseconds(200);
      spdlog::error("dataplane {}; restarting it in {} ms (restart {})", describe_exit(code, sig),
                    dataplane_backoff_.count(), dataplane_restarts_);
      dataplane_timer_.expires_after(dataplane_backoff_);
      dataplane_timer_.async_wait([this](boost::system::error_code e) {
        if (!e && !shutting_down_) start_dataplane();
      });
      dataplane_backoff_ = std::min(dataplane_backoff_ * 2, kMaxDataplaneBackoff);
      continue;
    }
    for (auto& [id, r] : runs_)
      if (r->pid == pid && !r->reaped) {
        r->reaped = true;
        r->code = code;
        r->sig = sig;
        kill_group(*r);  // what the instance left behind in its group
        auto keep = r;
        instance_finished(*keep);
        break;
      }
  }
}

void Daemon::start_dataplane() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  std::string err;
  dataplane_started_ = Clock::now();
  pid_t pid = spawn({opt_.dataplane_path, "--config", opt_.config_path}, env, "", -1, -1, false, {}, &err);
  if (pid < 0) {
    ++dataplane_restarts_;
    dataplane_state_ = DataplaneState::kRestarting;
    spdlog::error("cannot start the dataplane ({}); retrying in {} ms", err, dataplane_backoff_.count());
    dataplane_timer_.expires_after(dataplane_backoff_);
    dataplane_timer_.async_wait([this](boost::system::error_code e) {
      if (!e && !shutting_down_) start_dataplane();
    });
    dataplane_backoff_ = std::min(dataplane_backoff_ * 2, kMaxDataplaneBackoff);
    return;
  }
  dataplane_pid_ = pid;
  dataplane_state_ = DataplaneState::kRunning;
  spdlog::info("dataplane started, pid {}", pid);
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
  std::vector<std::shared_ptr<Run>> all;
  for (auto& [id, r] : runs_) all.push_back(r);
  // No run starts from here on: its bulk connections go now.
  for (auto& p : pending_bulk_) ::close(p.fd);
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
