// Runs: on the origin host (what gossamerctl asked for, every host's answer,
// fate sharing) and on every host (the check, the local instance, its output).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon.hpp"
#include "internal.hpp"

extern char** environ;

namespace gossamer::cp {

std::string random_id() {
  // Unguessable, though not secret (gossamerctl status shows it): what keeps
  // others out of the run is its token (SECURITY.md "Runs and users").
  const Nonce n = random_nonce();
  std::string id = abi::kIssuedRunPrefix;
  for (std::size_t i = 0; i < 16; ++i) {
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", n[i]);
    id += hex;
  }
  return id;
}

std::string describe_exit(int code, int sig) {
  if (sig) {
    const char* name = sigabbrev_np(sig);
    return "killed by signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "exited with status " + std::to_string(code);
}

// ---- runs: origin side ----------------------------------------------------------------

void Daemon::ctl_run(const std::shared_ptr<UnixLink>& link, CtlRun req, const Requester& who) {
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
  // Every host runs the instance as this user (run_as.hpp), named so that
  // each can look it up in its own user database.
  std::string why;
  const std::string user = user_name(who.uid, &why);
  if (user.empty()) return refuse("gossamerd on " + host_name(self_) + " cannot tell who asked: " + why);
  auto r = std::make_shared<Run>();
  r->is_origin = true;
  r->ctl = link;
  r->spec.run = random_id();
  r->spec.origin = self_;
  r->spec.path = req.path;
  r->spec.args = std::move(req.args);
  r->spec.cwd = std::move(req.cwd);
  r->spec.threads = req.threads;
  r->spec.user = user;
  r->spec.uid = who.uid;
  r->prepared.assign(hosts_, 0);
  r->finished.assign(hosts_, false);
  runs_[r->spec.run] = r;
  init_bulk(r);
  spdlog::info("run {}: {} on {} hosts{}, for user {} (uid {}, pid {})", r->spec.run, r->spec.path, hosts_,
               r->spec.threads ? " with " + std::to_string(r->spec.threads) + " threads" : "", user, who.uid, who.pid);
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
  if (!S_ISREG(st.st_mode)) return p.path + " is not an executable file";
  // As the user who asked, looked up here; what that user may run, as them.
  RunAs as;
  if (std::string e = resolve_user(p.user, &as); !e.empty())
    return e + " (uid " + std::to_string(p.uid) + " on " + host_name(p.origin) + ")";
  if (std::string e = may_run_as(::geteuid(), as); !e.empty()) return e;
  if (std::string e = check_access_as(as, p.path, p.cwd); !e.empty()) return e;
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
          v.starts_with("GOSSAMER_RUN_TOKEN=") || v.starts_with("GOSSAMER_THREADS=") ||
          v.starts_with("GOSSAMER_BULK="))
        continue;
      env.emplace_back(v);
    }
    env.push_back("GOSSAMER_CONFIG=" + opt_.config_path);
    env.push_back("GOSSAMER_RUN_ID=" + r.spec.run);
    // What admits this instance, and no other, to the run on this host's
    // dataplane (dataplane/src/rack_keys.hpp).
    env.push_back(std::string(abi::kRunTokenEnv) + "=" +
                  dataplane::RunTokens::to_hex(tokens_.token(r.spec.run, self_)));
    if (r.spec.threads) env.push_back("GOSSAMER_THREADS=" + std::to_string(r.spec.threads));
    // GOSSAMER_BULK=<host>:<fd>:<send key>:<receive key>,...: the connection
    // to each other host's instance, inherited at the same number, and the
    // instances' session keys for it (hex; gossamer/abi/session.hpp).
    std::vector<int> keep;
    std::string bulk;
    if (hosts_ > 1 && bulk_missing(r, "").empty()) {
      for (std::uint32_t h = 0; h < hosts_; ++h) {
        if (h == self_) continue;
        const BulkSocket& b = r.bulk[h];
        bulk += (bulk.empty() ? "" : ",") + std::to_string(h) + ":" + std::to_string(b.fd) + ":" +
                abi::session_key_hex(b.keys.send) + ":" + abi::session_key_hex(b.keys.receive);
        keep.push_back(b.fd);
      }
      env.push_back("GOSSAMER_BULK=" + bulk);
    }
    std::string cwd = r.spec.cwd;
    struct stat st {};
    if (cwd.empty() || ::stat(cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) cwd = "/";
    // The user who asked, as this host knows it now (precheck looked too).
    RunAs as;
    r.exec_error = resolve_user(r.spec.user, &as);
    if (r.exec_error.empty()) r.exec_error = may_run_as(::geteuid(), as);
    if (r.exec_error.empty()) {
      user_environment(as, &env);
      r.pid = spawn(argv, env, cwd, out[1], err[1], true, keep, as.uid == ::geteuid() ? nullptr : &as,
                    &r.exec_error);
    }
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
  spdlog::info("run {}: started {} as pid {}, user {}", r.spec.run, r.spec.path, r.pid, r.spec.user);
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

}  // namespace gossamer::cp
