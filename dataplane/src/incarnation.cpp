// The incarnation and its state file (incarnation.hpp).
#include "incarnation.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

namespace gossamer::dataplane {

namespace {

// The file holds one decimal number and a newline: 21 bytes at most.
constexpr std::size_t kMaxFileBytes = 32;

std::string sys_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// What a corrupt file holds, printable.
std::string shown(const char* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n && i < 24; ++i) {
    const unsigned char c = static_cast<unsigned char>(p[i]);
    if (c == '\n') s += "\\n";
    else s += (c >= 0x20 && c < 0x7f) ? char(c) : '?';
  }
  return n > 24 ? s + "..." : s;
}

bool write_all(int fd, const char* p, std::size_t n) {
  while (n) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= std::size_t(w);
  }
  return true;
}

// The previous incarnation in `path`: 0 if there is none (no file).
std::string read_last(const std::string& path, std::uint64_t* last) {
  *last = 0;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return "";
    return sys_error("cannot open", path);
  }
  char buf[kMaxFileBytes];
  std::size_t n = 0;
  while (n < sizeof buf) {
    const ssize_t r = ::read(fd, buf + n, sizeof buf - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const std::string err = sys_error("cannot read", path);
      ::close(fd);
      return err;
    }
    if (r == 0) break;
    n += std::size_t(r);
  }
  ::close(fd);
  const auto corrupt = [&](const std::string& why) {
    return path + " is corrupt: " + why + " (it should hold the last incarnation, one decimal number and a " +
           "newline; if this host's clock is right, removing the file is safe)";
  };
  if (n == 0 || buf[n - 1] != '\n') return corrupt("'" + shown(buf, n) + "' does not end in a newline");
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(buf, buf + n - 1, v);
  if (ec != std::errc() || end != buf + n - 1 || v == 0)
    return corrupt("'" + shown(buf, n) + "' is not a number from 1 to 2^64 - 1");
  if (v == UINT64_MAX) return corrupt("it holds 2^64 - 1, after which there is no incarnation");
  *last = v;
  return "";
}

// Replaces `path` with `v`: a temporary file, fsync, rename, fsync of the
// directory (so the rename itself survives a crash).
std::string persist(const std::string& path, std::uint64_t v) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return sys_error("cannot create", tmp);
  char buf[kMaxFileBytes];
  char* end = std::to_chars(buf, buf + sizeof buf - 1, v).ptr;
  *end++ = '\n';
  if (!write_all(fd, buf, std::size_t(end - buf)) || ::fsync(fd) != 0) {
    const std::string err = sys_error("cannot write", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return err;
  }
  if (::close(fd) != 0) {
    const std::string err = sys_error("cannot write", tmp);
    ::unlink(tmp.c_str());
    return err;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = sys_error("cannot rename " + tmp + " to", path);
    ::unlink(tmp.c_str());
    return err;
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const std::string d = dir.empty() ? "." : dir.string();
  const int dfd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return sys_error("cannot open the directory", d);
  const bool synced = ::fsync(dfd) == 0 || errno == EINVAL;  // some file systems cannot sync a directory
  const std::string err = synced ? "" : sys_error("cannot fsync the directory", d);
  ::close(dfd);
  return err;
}

}  // namespace

Incarnation::~Incarnation() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::uint64_t Incarnation::realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000u + std::uint64_t(ts.tv_nsec);
}

std::string Incarnation::next(const std::string& path, std::uint64_t now_ns) {
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);  // open() says what failed

  // One dataplane per state file, for as long as it runs.
  const std::string lock = path + ".lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return sys_error("cannot open", lock);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    std::string err = errno == EWOULDBLOCK ? "" : sys_error("cannot lock", lock);
    if (err.empty()) {
      char pid[24] = {};
      const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
      std::string holder = n > 0 ? std::string(pid, std::size_t(n)) : "";
      while (!holder.empty() && holder.back() == '\n') holder.pop_back();
      err = "another dataplane of this host is running (pid " + (holder.empty() ? "unknown" : holder) +
            " holds " + lock + "): it owns the incarnation file " + path;
    }
    ::close(fd);
    return err;
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size())) {
    const std::string err = sys_error("cannot write", lock);
    ::close(fd);
    return err;
  }

  std::uint64_t last = 0;
  std::string err = read_last(path, &last);
  if (err.empty()) {
    const std::uint64_t v = std::max<std::uint64_t>({now_ns, last + 1, 1});
    err = persist(path, v);
    if (err.empty()) value_ = v;
  }
  if (!err.empty()) {
    ::close(fd);
    return err;
  }
  lock_fd_ = fd;
  return "";
}

}  // namespace gossamer::dataplane
