// Whole text files written off the polling cores: core 0 formats the
// `<socket>.stats` file every second and hands the text to a thread of its
// own, which writes it under a temporary name and renames it over the old
// one (a reader never sees half a file).
//
// Why a thread: on a disk file system the rename costs a polling core
// milliseconds. On ext4 (this project's machines keep /run and /tmp on it)
// renaming over an existing file starts the new file's writeback
// (auto_da_alloc), and the core waited in the kernel (state D) for 1-3.5
// ms. The stats job is due whenever a core wakes from a long sleep, so a
// host that had been idle for a second answered its first request only
// after that write (perf sched trace of echo-rack --after-idle: the
// response left 3.4 ms after the request came in, all of it in rename).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace gossamer::dataplane {

class FileWriter {
 public:
  FileWriter() = default;
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;
  ~FileWriter() { stop(); }

  // Starts the thread; `on_start` runs on it first (where it may run, its
  // priority). Until then, and after stop(), post() writes at once.
  void start(std::function<void()> on_start);
  // Writes `text` to `path` soon: on the thread, which takes the newest
  // text of a path that it has not written yet (one path at a time: the
  // stats file). Never waits for I/O while the thread runs: it takes a lock
  // that the thread holds only to swap strings.
  void post(const std::string& path, std::string text);
  // Writes what is pending, then ends the thread.
  void stop();
  bool running() const { return thread_.joinable(); }

  // PATH.tmp, then renamed to PATH. Returns "" or why not.
  static std::string write_now(const std::string& path, const std::string& text);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::string path_, text_;
  bool pending_ = false, stopping_ = false;
  bool warned_ = false;  // the thread's: one warning per failing streak
  std::thread thread_;
};

}  // namespace gossamer::dataplane
