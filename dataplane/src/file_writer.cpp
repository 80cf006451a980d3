// The file writer thread (file_writer.hpp).
#include "file_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>

namespace gossamer::dataplane {

std::string FileWriter::write_now(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "open " + tmp + ": " + std::strerror(errno);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string err = "write " + tmp + ": " + std::strerror(n < 0 ? errno : EIO);
      ::close(fd);
      ::unlink(tmp.c_str());  // no partial file left behind
      return err;
    }
    done += std::size_t(n);
  }
  if (::close(fd) != 0) {
    const std::string err = "close " + tmp + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return err;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = "rename " + tmp + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return err;
  }
  return "";
}

void FileWriter::start(std::function<void()> on_start) {
  if (thread_.joinable()) return;
  {
    std::lock_guard g(mu_);
    stopping_ = false;
  }
  thread_ = std::thread([this, on_start = std::move(on_start)] {
    if (on_start) on_start();
    run();
  });
}

void FileWriter::post(const std::string& path, std::string text) {
  bool handed = false;
  {
    std::lock_guard g(mu_);
    if (thread_.joinable() && !stopping_) {
      path_ = path;
      text_ = std::move(text);
      pending_ = handed = true;
    }
  }
  if (handed) {
    cv_.notify_one();
    return;
  }
  // No thread (not started, or stopped): here and now.
  if (std::string err = write_now(path, text); !err.empty()) spdlog::warn("{}", err);
}

void FileWriter::run() {
  std::unique_lock g(mu_);
  for (;;) {
    cv_.wait(g, [this] { return pending_ || stopping_; });
    if (!pending_) return;  // stopping, nothing left
    std::string path = std::move(path_), text = std::move(text_);
    pending_ = false;
    g.unlock();
    const std::string err = write_now(path, text);
    if (!err.empty() && !warned_) spdlog::warn("{}", err);
    warned_ = !err.empty();
    g.lock();
  }
}

void FileWriter::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard g(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

}  // namespace gossamer::dataplane
