// Children: spawning (instances and the dataplane), reaping, and the
// dataplane's supervision (restarts with back-off).
#include <fcntl.h>
#include <signal.h>
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon.hpp"
#include "internal.hpp"

extern char** environ;

namespace gossamer::cp {

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& cwd,
            int out_fd, int err_fd, bool own_group, const std::vector<int>& keep, const RunAs* as,
            std::string* error) {
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
  const auto t0 = std::chrono::steady_clock::now();
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
    if (as) {
      if (const char* failed = become(*as)) {
        char msg[256];
        int n = std::snprintf(msg, sizeof msg, "%s to user '%s' (uid %u): %s", failed, as->user.c_str(),
                              unsigned(as->uid), std::strerror(errno));
        (void)!::write(status_pipe[1], msg, std::size_t(n));
        ::_exit(127);
      }
    }
    // After the change of user, which clears the parent-death signal.
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
  // Nothing else runs meanwhile: heartbeats wait (README.md, "Heartbeats").
  if (const auto held = std::chrono::steady_clock::now() - t0; held >= kSlowSpawn)
    spdlog::warn("starting {} held gossamerd's loop {} ms (fork until exec)", argv[0],
                 std::chrono::duration_cast<std::chrono::milliseconds>(held).count());
  if (n > 0) {
    *error = std::string(msg, std::size_t(n));
    ::waitpid(pid, nullptr, 0);
    return -1;
  }
  return pid;
}


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
  pid_t pid = spawn({opt_.dataplane_path, "--config", opt_.config_path}, env, "", -1, -1, false, {}, nullptr, &err);
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

}  // namespace gossamer::cp
