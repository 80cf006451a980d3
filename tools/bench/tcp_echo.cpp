// tcp-echo: the kernel-TCP baseline for tools/bench/echo. Both sides are
// single-threaded, epoll-driven and non-blocking, with TCP_NODELAY and
// batched writes (everything a read produced goes back in one write).
//
//   tcp-echo server --port P
//       Echoes whatever it reads on every connection, until killed.
//   tcp-echo client --host IP --port P --conns C --depth D --seconds S --size B
//       C connections, each keeping D messages of B bytes outstanding
//       (pipelined). Every read's complete echoes are answered with new
//       messages in one write per connection. After S seconds no new
//       messages are sent; those in flight complete and count. Prints
//         tcp size=B conns=C depth=D requests=N rps=R p50_us=X p99_us=Y
//       Latency: from the write that carried a message to the read that
//       completed its echo (TCP keeps order, so a FIFO of send times per
//       connection matches them up).
//       With --after-idle K, then K single messages on the first
//       connection, each after --idle-gap seconds (default 1) with nothing
//       sent (the client sleeps, the server blocks in epoll_wait), as echo
//       --after-idle; prints
//         tcp_idle requests=K p50_us=X max_us=Y
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "payload.hpp"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "tcp-echo: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

void set_nonblocking(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) die("fcntl");
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Bytes waiting to be written; flush() writes as much as the socket takes in
// one write() and keeps the rest.
struct OutBuf {
  std::vector<char> data;
  std::size_t head = 0;
  std::size_t pending() const { return data.size() - head; }
  // false: the connection failed.
  bool flush(int fd) {
    while (pending()) {
      ssize_t w = ::write(fd, data.data() + head, pending());
      if (w > 0) {
        head += std::size_t(w);
        continue;  // a partial write: try once more, the socket will say EAGAIN if full
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return false;
    }
    if (head == data.size()) {
      data.clear();
      head = 0;
    } else if (head > (1 << 16)) {
      data.erase(data.begin(), data.begin() + std::ptrdiff_t(head));
      head = 0;
    }
    return true;
  }
};

// ---- server ---------------------------------------------------------------------

int run_server(int port) {
  ::signal(SIGPIPE, SIG_IGN);
  int ls = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (ls < 0) die("socket");
  int one = 1;
  ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(std::uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("bind port " + std::to_string(port));
  if (::listen(ls, 128) != 0) die("listen");
  set_nonblocking(ls);
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) die("epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = ls;
  ::epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
  std::printf("tcp-echo: listening on port %d\n", port);
  std::fflush(stdout);

  struct Conn {
    OutBuf out;
    bool want_out = false;
  };
  std::vector<std::unique_ptr<Conn>> conns;  // by fd
  std::vector<char> buf(1 << 16);
  auto close_conn = [&](int fd) {
    ::epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    conns[std::size_t(fd)].reset();
  };
  std::vector<epoll_event> evs(256);
  for (;;) {
    int k = ::epoll_wait(ep, evs.data(), int(evs.size()), -1);
    if (k < 0) {
      if (errno == EINTR) continue;
      die("epoll_wait");
    }
    for (int i = 0; i < k; ++i) {
      int fd = evs[std::size_t(i)].data.fd;
      if (fd == ls) {
        for (;;) {
          int c = ::accept4(ls, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (c < 0) break;
          set_nodelay(c);
          if (conns.size() <= std::size_t(c)) conns.resize(std::size_t(c) + 1);
          conns[std::size_t(c)] = std::make_unique<Conn>();
          epoll_event e{};
          e.events = EPOLLIN | EPOLLRDHUP;
          e.data.fd = c;
          ::epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
        }
        continue;
      }
      Conn* c = conns[std::size_t(fd)].get();
      if (!c) continue;
      bool closed = false;
      // Read everything there is, then answer it all with one write.
      for (;;) {
        ssize_t r = ::read(fd, buf.data(), buf.size());
        if (r > 0) {
          c->out.data.insert(c->out.data.end(), buf.data(), buf.data() + r);
          if (std::size_t(r) < buf.size()) break;
          continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        closed = true;  // EOF or error
        break;
      }
      if (!closed && !c->out.flush(fd)) closed = true;
      if (closed) {
        close_conn(fd);
        continue;
      }
      bool want = c->out.pending() > 0;
      if (want != c->want_out) {
        c->want_out = want;
        epoll_event e{};
        e.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u);
        e.data.fd = fd;
        ::epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e);
      }
    }
  }
}

// ---- client ---------------------------------------------------------------------

struct ClientConn {
  int fd = -1;
  std::uint64_t id = 0;
  std::uint64_t sent = 0, received = 0;  // messages
  std::deque<Clock::time_point> sent_at;  // one per outstanding message
  std::vector<char> in;                   // a partial echo
  OutBuf out;
  bool want_out = false;
};

// The payload of request `seq` of `id` (a fiber, a connection): payload.hpp.
using echo_payload::fill;

int run_client(const std::string& host, int port, std::size_t nconns, std::size_t depth, double seconds,
               std::size_t size, std::size_t after_idle, double idle_gap) {
  ::signal(SIGPIPE, SIG_IGN);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(std::uint16_t(port));
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    std::fprintf(stderr, "tcp-echo: --host %s is not an IPv4 address\n", host.c_str());
    return 2;
  }
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) die("epoll_create1");
  std::vector<ClientConn> conns(nconns);
  // Connect (blocking, retried for a few seconds while the server starts).
  for (std::size_t i = 0; i < nconns; ++i) {
    int fd = -1;
    for (int attempt = 0;; ++attempt) {
      fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) die("socket");
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
      ::close(fd);
      if (attempt == 50) die("connect to " + host + ":" + std::to_string(port));
      ::usleep(100000);
    }
    set_nodelay(fd);
    set_nonblocking(fd);
    conns[i].fd = fd;
    conns[i].id = i;
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP;
    e.data.u64 = i;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) != 0) die("epoll_ctl");
  }

  std::vector<std::uint32_t> lat;
  lat.reserve(1 << 20);
  std::uint64_t mismatches = 0, outstanding = 0;
  std::vector<char> expect(size), buf(1 << 16);
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  Clock::time_point last_done = t0;

  auto queue_msgs = [&](ClientConn& c, std::size_t k, Clock::time_point now) {
    std::size_t at = c.out.data.size();
    c.out.data.resize(at + k * size);
    for (std::size_t j = 0; j < k; ++j) {
      fill(c.out.data.data() + at + j * size, size, c.id, c.sent++);
      c.sent_at.push_back(now);
    }
    outstanding += k;
  };
  auto update_out = [&](ClientConn& c) {
    bool want = c.out.pending() > 0;
    if (want == c.want_out) return;
    c.want_out = want;
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u);
    e.data.u64 = c.id;
    ::epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &e);
  };
  auto fail = [&](ClientConn& c, const char* what) {
    std::fprintf(stderr, "tcp-echo: connection %llu: %s\n", (unsigned long long)c.id, what);
    std::exit(1);
  };
  // c.in holds a whole echo, read at `now`: check it against what was sent
  // and return its latency in ns (TCP keeps order: the oldest send time).
  auto complete = [&](ClientConn& c, Clock::time_point now) {
    if (c.sent_at.empty()) fail(c, "more bytes echoed than sent");
    fill(expect.data(), size, c.id, c.received++);
    if (std::memcmp(expect.data(), c.in.data(), size) != 0) ++mismatches;
    c.in.clear();
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - c.sent_at.front()).count();
    c.sent_at.pop_front();
    --outstanding;
    return std::uint32_t(std::min<std::int64_t>(ns, UINT32_MAX));
  };

  // The first window: D messages per connection, one write each.
  for (auto& c : conns) {
    queue_msgs(c, depth, Clock::now());
    if (!c.out.flush(c.fd)) fail(c, "write failed");
    update_out(c);
  }
  std::vector<epoll_event> evs(256);
  while (outstanding) {
    int k = ::epoll_wait(ep, evs.data(), int(evs.size()), 1000);
    if (k < 0) {
      if (errno == EINTR) continue;
      die("epoll_wait");
    }
    if (k == 0 && Clock::now() > deadline + std::chrono::seconds(10)) {
      std::fprintf(stderr, "tcp-echo: %llu messages never came back\n", (unsigned long long)outstanding);
      return 1;
    }
    for (int i = 0; i < k; ++i) {
      ClientConn& c = conns[evs[std::size_t(i)].data.u64];
      std::size_t completed = 0;
      Clock::time_point now{};
      for (;;) {
        ssize_t r = ::read(c.fd, buf.data(), buf.size());
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (r <= 0) fail(c, r == 0 ? "the server closed the connection" : std::strerror(errno));
        now = Clock::now();
        const char* p = buf.data();
        std::size_t left = std::size_t(r);
        while (left) {
          std::size_t take = std::min(left, size - c.in.size());
          c.in.insert(c.in.end(), p, p + take);
          p += take;
          left -= take;
          if (c.in.size() < size) break;
          lat.push_back(complete(c, now));
          ++completed;
        }
        if (std::size_t(r) < buf.size()) break;
      }
      if (completed) last_done = now;
      // Replace what came back, in one write, until the deadline.
      if (completed && now < deadline) queue_msgs(c, completed, Clock::now());
      if (!c.out.flush(c.fd)) fail(c, "write failed");
      update_out(c);
    }
  }
  double secs = std::chrono::duration<double>(last_done - t0).count();
  auto pct = [&](double q) {
    if (lat.empty()) return 0.0;
    std::size_t k = std::min(lat.size() - 1, std::size_t(q * double(lat.size())));
    std::nth_element(lat.begin(), lat.begin() + std::ptrdiff_t(k), lat.end());
    return lat[k] / 1000.0;
  };
  double p50 = pct(0.50), p99 = pct(0.99);
  std::printf("tcp size=%zu conns=%zu depth=%zu requests=%zu rps=%.0f p50_us=%.1f p99_us=%.1f\n", size, nconns,
              depth, lat.size(), secs > 0 ? double(lat.size()) / secs : 0.0, p50, p99);
  std::fflush(stdout);  // the loaded figures stand whatever the idle phase does

  // The first message after an idle period, one at a time on connection 0.
  std::vector<std::uint32_t> idle_lat;
  for (std::size_t i = 0; i < after_idle; ++i) {
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_gap));
    ClientConn& c = conns[0];
    queue_msgs(c, 1, Clock::now());
    for (;;) {  // a message larger than the socket's free buffer goes in parts
      if (!c.out.flush(c.fd)) fail(c, "write after idle failed");
      if (c.out.pending() == 0) break;
      pollfd pfd{c.fd, POLLOUT, 0};
      if (::poll(&pfd, 1, 5000) == 0) fail(c, "could not write a message after idle within 5 s");
    }
    while (c.in.size() < size) {
      pollfd pfd{c.fd, POLLIN, 0};
      const int n = ::poll(&pfd, 1, 5000);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) die("poll");
      if (n == 0) fail(c, "no echo within 5 s of a message after idle");
      const ssize_t r = ::read(c.fd, buf.data(), std::min(buf.size(), size - c.in.size()));
      if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (r <= 0) fail(c, r == 0 ? "the server closed the connection" : std::strerror(errno));
      c.in.insert(c.in.end(), buf.data(), buf.data() + r);
    }
    idle_lat.push_back(complete(c, Clock::now()));
  }
  for (auto& c : conns) ::close(c.fd);

  if (!idle_lat.empty()) {
    std::sort(idle_lat.begin(), idle_lat.end());
    std::printf("tcp_idle requests=%zu p50_us=%.1f max_us=%.1f\n", idle_lat.size(),
                idle_lat[idle_lat.size() / 2] / 1000.0, idle_lat.back() / 1000.0);
  }
  std::fflush(stdout);
  if (mismatches) {
    std::fprintf(stderr, "tcp-echo: %llu echoes differ from what was sent\n", (unsigned long long)mismatches);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tcp-echo: kernel-TCP echo baseline (epoll, batched writes) for tools/bench/echo"};
  app.require_subcommand(1);
  int port = 7900;
  auto* server = app.add_subcommand("server", "echo whatever arrives, until killed");
  server->add_option("--port", port, "TCP port")->check(CLI::Range(1, 65535));
  std::string host = "198.18.0.2";
  std::size_t conns = 2, depth = 32, size = 32;
  double seconds = 3;
  auto* client = app.add_subcommand("client", "pipelined echo requests; prints rps and latency");
  client->add_option("--host", host, "server IPv4 address");
  client->add_option("--port", port, "TCP port")->check(CLI::Range(1, 65535));
  client->add_option("--conns", conns, "connections")->check(CLI::Range(1, 10000));
  client->add_option("--depth", depth, "outstanding messages per connection")->check(CLI::Range(1, 100000));
  client->add_option("--seconds", seconds, "how long to keep sending")->check(CLI::PositiveNumber);
  client->add_option("--size", size, "message bytes")->check(CLI::Range(1, 1 << 20));
  std::size_t after_idle = 0;
  double idle_gap = 1.0;
  client->add_option("--after-idle", after_idle, "then this many messages, each after an idle gap")
      ->check(CLI::Range(0, 1000));
  client->add_option("--idle-gap", idle_gap, "seconds of idle before each of them")->check(CLI::Range(0.01, 60.0));
  CLI11_PARSE(app, argc, argv);
  if (server->parsed()) return run_server(port);
  return run_client(host, port, conns, depth, seconds, size, after_idle, idle_gap);
}
