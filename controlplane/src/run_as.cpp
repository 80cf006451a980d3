// Who an instance runs as (run_as.hpp).
#include "run_as.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

namespace gossamer::cp {

namespace {

// getpw*_r into a buffer that grows until the entry fits. Returns false when
// there is no entry (*error empty) or the lookup failed (*error says why).
template <class Lookup>
bool passwd_entry(Lookup lookup, passwd* pw, std::vector<char>* buf, std::string* error) {
  buf->resize(4096);
  for (;;) {
    passwd* found = nullptr;
    const int e = lookup(pw, buf->data(), buf->size(), &found);
    if (e == ERANGE && buf->size() < (1u << 20)) {
      buf->resize(buf->size() * 2);
      continue;
    }
    if (e != 0 && e != ENOENT && e != ESRCH && e != EBADF && e != EPERM) {
      *error = std::strerror(e);
      return false;
    }
    return found != nullptr;
  }
}

// Why `r` may not run `path` in `cwd`, checked with this process's ids; ""
// when it may. Only async-signal-safe calls: it also runs in a forked child.
void access_problem(const std::string& path, const std::string& cwd, char* out, std::size_t size) {
  struct stat st {};
  out[0] = 0;
  if (::stat(path.c_str(), &st) != 0) {
    std::snprintf(out, size, "cannot see %s (%s)", path.c_str(), std::strerror(errno));
    return;
  }
  if (!S_ISREG(st.st_mode)) {
    std::snprintf(out, size, "%s is not a regular file", path.c_str());
    return;
  }
  if (::access(path.c_str(), X_OK) != 0) {
    std::snprintf(out, size, "may not execute %s (%s)", path.c_str(), std::strerror(errno));
    return;
  }
  // A working directory missing on this host is replaced by / (start_instance);
  // one that exists must be enterable.
  if (cwd.empty()) return;
  if (::stat(cwd.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR)
      std::snprintf(out, size, "cannot see the working directory %s (%s)", cwd.c_str(), std::strerror(errno));
    return;
  }
  if (S_ISDIR(st.st_mode) && ::access(cwd.c_str(), X_OK) != 0)
    std::snprintf(out, size, "may not enter the working directory %s (%s)", cwd.c_str(), std::strerror(errno));
}

}  // namespace

Requester peer_credentials(int fd) {
  ucred cr{};
  socklen_t len = sizeof cr;
  Requester r;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 && len == sizeof cr) {
    r.pid = cr.pid;
    r.uid = cr.uid;
    r.gid = cr.gid;
  }
  return r;
}

std::string user_name(uid_t uid, std::string* error) {
  passwd pw{};
  std::vector<char> buf;
  std::string why;
  if (uid == uid_t(-1) ||
      !passwd_entry([uid](passwd* p, char* b, std::size_t n, passwd** f) { return ::getpwuid_r(uid, p, b, n, f); },
                    &pw, &buf, &why)) {
    *error = uid == uid_t(-1) ? std::string("who asked is unknown (no SO_PEERCRED)")
                              : "uid " + std::to_string(uid) + " has no user name here" +
                                    (why.empty() ? std::string() : " (" + why + ")");
    return "";
  }
  return pw.pw_name;
}

std::string resolve_user(const std::string& user, RunAs* out) {
  passwd pw{};
  std::vector<char> buf;
  std::string why;
  if (user.empty() ||
      !passwd_entry(
          [&user](passwd* p, char* b, std::size_t n, passwd** f) { return ::getpwnam_r(user.c_str(), p, b, n, f); },
          &pw, &buf, &why))
    return "user '" + user + "' does not exist on this host" + (why.empty() ? "" : " (" + why + ")");
  RunAs r;
  r.user = pw.pw_name;
  r.uid = pw.pw_uid;
  r.gid = pw.pw_gid;
  r.home = pw.pw_dir ? pw.pw_dir : "/";
  r.shell = pw.pw_shell ? pw.pw_shell : "";
  int n = 32;
  for (int tries = 0; tries < 8; ++tries) {
    r.groups.resize(std::size_t(n));
    int got = n;
    if (::getgrouplist(r.user.c_str(), r.gid, r.groups.data(), &got) >= 0) {
      r.groups.resize(std::size_t(got));
      *out = std::move(r);
      return "";
    }
    n = got > n ? got : 2 * n;
  }
  return "cannot list the groups of user '" + user + "' on this host";
}

std::string may_run_as(uid_t self, const RunAs& r) {
  if (r.uid == self || self == 0) return "";
  return "gossamerd runs as uid " + std::to_string(self) + " here, not as root: it starts instances only as "
         "itself, not as user '" + r.user + "' (uid " + std::to_string(r.uid) + ")";
}

const char* become(const RunAs& r) {
  if (::setgroups(r.groups.size(), r.groups.data()) != 0) return "setgroups";
  if (::setresgid(r.gid, r.gid, r.gid) != 0) return "setgid";
  if (::setresuid(r.uid, r.uid, r.uid) != 0) return "setuid";
  uid_t ru, eu, su;
  gid_t rg, eg, sg;
  if (::getresuid(&ru, &eu, &su) != 0 || ru != r.uid || eu != r.uid || su != r.uid) {
    errno = EPERM;
    return "getresuid";
  }
  if (::getresgid(&rg, &eg, &sg) != 0 || rg != r.gid || eg != r.gid || sg != r.gid) {
    errno = EPERM;
    return "getresgid";
  }
  return nullptr;
}

std::string check_access_as(const RunAs& r, const std::string& path, const std::string& cwd) {
  char why[512];
  if (r.uid == ::geteuid()) {
    access_problem(path, cwd, why, sizeof why);
    return why[0] ? "user '" + r.user + "' " + why : "";
  }
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(p[0]);
    ::close(p[1]);
    return std::string("fork: ") + std::strerror(errno);
  }
  if (pid == 0) {
    ::close(p[0]);
    if (const char* failed = become(r))
      std::snprintf(why, sizeof why, "cannot be switched to here (%s: %s)", failed, std::strerror(errno));
    else
      access_problem(path, cwd, why, sizeof why);
    (void)!::write(p[1], why, std::strlen(why));
    ::_exit(0);
  }
  ::close(p[1]);
  std::string got;
  char buf[512];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    got.append(buf, std::size_t(n));
  }
  ::close(p[0]);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  return got.empty() ? "" : "user '" + r.user + "' " + got;
}

void user_environment(const RunAs& r, std::vector<std::string>* env) {
  if (r.uid == ::geteuid()) return;
  std::erase_if(*env, [](const std::string& v) {
    for (std::string_view k : {"HOME=", "USER=", "LOGNAME=", "SHELL="})
      if (v.starts_with(k)) return true;
    return false;
  });
  env->push_back("HOME=" + r.home);
  env->push_back("USER=" + r.user);
  env->push_back("LOGNAME=" + r.user);
  if (!r.shell.empty()) env->push_back("SHELL=" + r.shell);
}

}  // namespace gossamer::cp
