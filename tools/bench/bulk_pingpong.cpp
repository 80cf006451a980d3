// bulk-pingpong: the large-request path's own cost, without a rack. Two
// engines of runtime/src/bulk.hpp (two "hosts" in one process) over a real
// TCP connection on 127.0.0.1, as gossamerd hands them to a run's instances.
// A client thread on host 0 sends a B-byte request to a trustee thread on
// host 1, which takes it and sends it back as the response; W such round
// trips are in flight at once. Each worker waits for its I/O thread's wake
// on a futex (std::atomic::wait), as the runtime's adaptive workers do.
//
// Prints one line:
//   bulk-pingpong size=B window=W round_trips=N seconds=S rt_per_s=R MB_s=M cpu_s_per_MB=C
// (MB/s: B x round trips/s / 10^6, one direction; cpu_s_per_MB: the process's
// user+system CPU seconds per MB of requests, which other load on the
// machine does not change much). For load-independent figures run it under
// `valgrind --tool=callgrind` (instructions) or `strace -c -f` (syscalls)
// with two counts and divide the difference by the extra round trips.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bulk.hpp"

namespace {

using gossamer::detail::Bulk;

// A connected pair of TCP sockets on loopback.
bool tcp_pair(int* a, int* b) {
  const int l = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (l < 0 || ::bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(l, 1) != 0 ||
      ::getsockname(l, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    return false;
  *a = ::socket(AF_INET, SOCK_STREAM, 0);
  if (*a < 0 || ::connect(*a, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return false;
  *b = ::accept(l, nullptr, nullptr);
  ::close(l);
  return *b >= 0;
}

std::string hex_key(std::uint8_t fill) {
  gossamer::abi::SessionKey k;
  k.fill(fill);
  return gossamer::abi::session_key_hex(k);
}

// One worker's wake word: bumped by the I/O thread, waited on by the worker.
struct Waker {
  std::atomic<std::uint32_t> word{0};
  void wake() {
    word.fetch_add(1, std::memory_order_release);
    word.notify_one();
  }
};

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t size = 16384, window = 8, count = 20000;
  CLI::App app{"bulk-pingpong: round trips of B-byte bodies over the large-request path (bulk.hpp) on loopback"};
  app.add_option("--size", size, "body bytes, both ways")->check(CLI::Range(std::size_t(1), std::size_t(1) << 26));
  app.add_option("--window", window, "round trips in flight")->check(CLI::Range(1, 4096));
  app.add_option("--count", count, "round trips")->check(CLI::Range(1, 100'000'000));
  CLI11_PARSE(app, argc, argv);

  int a = -1, b = -1;
  if (!tcp_pair(&a, &b)) {
    std::perror("bulk-pingpong: loopback TCP");
    return 1;
  }
  // Host 0 has thread 0 (the client), host 1 thread 1 (the trustee);
  // host 0 sends under key 1, host 1 under key 2.
  std::string error;
  auto h0 = Bulk::from_env(("1:" + std::to_string(a) + ":" + hex_key(1) + ":" + hex_key(2)).c_str(),
                           Bulk::Rack{0, 2, 2}, 0, &error);
  auto h1 = h0 ? Bulk::from_env(("0:" + std::to_string(b) + ":" + hex_key(2) + ":" + hex_key(1)).c_str(),
                                Bulk::Rack{1, 2, 2}, 0, &error)
               : nullptr;
  if (!h0 || !h1) {
    std::fprintf(stderr, "bulk-pingpong: %s\n", error.c_str());
    return 1;
  }
  Waker client_wake, trustee_wake;
  h0->start([&](std::uint32_t) { client_wake.wake(); }, [] { return true; });
  h1->start([&](std::uint32_t) { trustee_wake.wake(); }, [] { return true; });

  // The trustee: takes requests in the order they were sent, echoes each.
  std::atomic<bool> failed{false};
  std::thread trustee([&] {
    std::vector<std::byte> body;
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint64_t id = i + 1;  // the client's engine numbers its sends 1, 2, ...
      for (;;) {
        const std::uint32_t seen = trustee_wake.word.load(std::memory_order_acquire);
        if (h1->take(0, Bulk::kRequest, 0, id, &body)) break;
        trustee_wake.word.wait(seen, std::memory_order_acquire);
      }
      if (body.size() != size) failed = true;
      h1->send(0, Bulk::kResponse, 1, 0, std::move(body));
      body = {};
    }
  });

  const std::vector<std::byte> payload(size, std::byte{0x5a});
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = cpu_seconds();
  std::size_t sent = 0, done = 0;
  std::vector<std::byte> got;
  while (done < count) {
    while (sent < count && sent - done < window) {
      h0->send(1, Bulk::kRequest, 0, 1, payload);
      ++sent;
    }
    const std::uint64_t id = done + 1;  // the trustee's engine numbers its responses 1, 2, ...
    for (;;) {
      const std::uint32_t seen = client_wake.word.load(std::memory_order_acquire);
      if (h0->take(0, Bulk::kResponse, 1, id, &got)) break;
      client_wake.word.wait(seen, std::memory_order_acquire);
    }
    if (got.size() != size || (size && got[size / 2] != std::byte{0x5a})) failed = true;
    ++done;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_seconds() - c0;
  trustee.join();
  h0->stop();
  h1->stop();
  const double mb = double(size) * double(count) / 1e6;
  std::printf("bulk-pingpong size=%zu window=%zu round_trips=%zu seconds=%.3f rt_per_s=%.0f MB_s=%.2f cpu_s_per_MB=%.5f\n",
              size, window, count, secs, double(count) / secs, mb / secs, cpu / mb);
  if (failed) {
    std::fprintf(stderr, "bulk-pingpong: a body came back with another length or content\n");
    return 1;
  }
  return 0;
}
