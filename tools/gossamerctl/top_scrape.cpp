// `gossamerctl top`'s input side (top_scrape.hpp): endpoints, stopping,
// and scraping every host at once.
#include "top_scrape.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <utility>

namespace gossamer::ctl::scrape {

namespace {

using namespace std::chrono_literals;

constexpr auto kConnectTimeout = 500ms;             // TCP connect
constexpr auto kScrapeTimeout = 1000ms;             // the whole exchange
// One host's exposition at the configuration's limits (64 hosts x 64
// connections per peer) is about 10 MB; refuse what is much larger.
constexpr std::size_t kMaxResponseBytes = 32 << 20;
constexpr std::size_t kReadChunk = 64 << 10;

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int) { g_stop = 1; }

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::optional<std::uint16_t> parse_port(std::string_view s) {
  unsigned v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v == 0 || v > 65535) return std::nullopt;
  return std::uint16_t(v);
}


}  // namespace

std::string printable(std::string_view s, std::size_t max) {
  std::string out;
  for (char c : s.substr(0, max)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > max) out += "...";
  return out;
}

std::optional<Endpoint> parse_endpoint(std::string_view s) {
  Endpoint ep;
  std::string_view port;
  if (starts_with(s, "[")) {
    const auto close = s.find("]:");
    if (close == std::string_view::npos) return std::nullopt;
    ep.ip = std::string(s.substr(1, close - 1));
    ep.ipv6 = true;
    port = s.substr(close + 2);
  } else {
    const auto colon = s.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    ep.ip = std::string(s.substr(0, colon));
    port = s.substr(colon + 1);
  }
  unsigned char buf[sizeof(in6_addr)];
  if (::inet_pton(ep.ipv6 ? AF_INET6 : AF_INET, ep.ip.c_str(), buf) != 1) return std::nullopt;
  auto p = parse_port(port);
  if (!p) return std::nullopt;
  ep.port = *p;
  return ep;
}


Endpoint default_endpoint(const config::Config& cfg, std::size_t host) {
  const config::SocketAddress& listen = cfg.metrics.listen;
  const bool wildcard = listen.ip == "0.0.0.0" || listen.ip == "::";
  if (host == cfg.host.index && !wildcard) return {listen.ip, listen.port, listen.ipv6};
  const config::SocketAddress& control = cfg.rack.hosts[host].control;
  return {control.ip, listen.port, control.ipv6};
}

// ---- stopping: signals and the `q` key -------------------------------------

StopSignals::StopSignals() {
  g_stop = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigset_t block;
  sigemptyset(&block);
  for (std::size_t i = 0; i < kSignals.size(); ++i) {
    ::sigaction(kSignals[i], &sa, &old_actions_[i]);
    sigaddset(&block, kSignals[i]);
  }
  ::sigprocmask(SIG_BLOCK, &block, &old_mask_);
  wait_mask_ = old_mask_;
  for (int s : kSignals) sigdelset(&wait_mask_, s);
}

StopSignals::~StopSignals() {
  ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  for (std::size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &old_actions_[i], nullptr);
}

bool StopSignals::arrived() { return g_stop != 0; }

Keys::Keys(bool interactive) {
  if (!interactive || !::isatty(STDIN_FILENO) || ::tcgetpgrp(STDIN_FILENO) != ::getpgrp()) return;
  if (::tcgetattr(STDIN_FILENO, &saved_) != 0) return;
  termios t = saved_;
  t.c_lflag &= ~tcflag_t(ICANON | ECHO);
  t.c_cc[VMIN] = 0;
  t.c_cc[VTIME] = 0;
  active_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0;
}

Keys::~Keys() {
  if (active_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
}

int Keys::fd() const { return active_ && !broken_ ? STDIN_FILENO : -1; }

bool Keys::quit(short revents) {
  if (revents & (POLLERR | POLLHUP | POLLNVAL)) {
    broken_ = true;  // terminal gone: SIGHUP follows; stop polling it
    return false;
  }
  char buf[64];
  const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
  for (ssize_t i = 0; i < n; ++i)
    if (buf[i] == 'q' || buf[i] == 'Q') return true;
  return false;
}

int wait_for(std::vector<pollfd>& fds, Clock::time_point until, Stop& stop) {
  const std::size_t n = fds.size();
  if (stop.keys.fd() >= 0) fds.push_back({stop.keys.fd(), POLLIN, 0});
  int ready = 0;
  for (;;) {
    if (stop.check()) break;
    const auto left = until - Clock::now();
    if (left <= 0s) break;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec ts{time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)};
    const int r = ::ppoll(fds.data(), fds.size(), &ts, stop.signals.wait_mask());
    if (r < 0) {
      if (errno == EINTR) continue;  // g_stop is checked at the top
      break;
    }
    if (r == 0) break;
    if (fds.size() > n && fds[n].revents) {
      if (stop.keys.quit(fds[n].revents)) {
        stop.requested = true;
        break;
      }
      if (stop.keys.fd() < 0) fds.resize(n);  // the terminal went away
    }
    ready = 0;
    for (std::size_t i = 0; i < n; ++i) ready += fds[i].revents != 0;
    if (ready) break;
  }
  fds.resize(n);
  return ready;
}


// ---- HTTP ------------------------------------------------------------------

namespace {

// One GET /metrics, driven by the poll loop in scrape_all.
class Fetch {
 public:
  explicit Fetch(const Endpoint& ep) : ep_(ep) {
    request_ = "GET /metrics HTTP/1.0\r\nHost: " + ep.to_string() +
               "\r\nAccept: text/plain;version=0.0.4\r\nUser-Agent: gossamerctl-top\r\n\r\n";
    start();
  }
  ~Fetch() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fetch(const Fetch&) = delete;
  Fetch& operator=(const Fetch&) = delete;

  bool done() const { return phase_ == Phase::done; }
  bool connecting() const { return phase_ == Phase::connecting; }
  pollfd pollable() const { return {fd_, short(phase_ == Phase::reading ? POLLIN : POLLOUT), 0}; }

  void on_ready() {
    if (phase_ == Phase::connecting) {
      int err = 0;
      socklen_t len = sizeof err;
      if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err) return fail(std::string("connect: ") + std::strerror(err));
      phase_ = Phase::sending;
    }
    if (phase_ == Phase::sending) send_some();
    if (phase_ == Phase::reading) read_some();
  }

  void fail(std::string why) {
    if (done()) return;
    result_.error = std::move(why);
    finish();
  }
  ScrapeResult take();  // the outcome, once done()

 private:
  enum class Phase { connecting, sending, reading, done };

  void start() {
    sockaddr_storage ss{};
    socklen_t len = 0;
    bool ok = false;
    if (ep_.ipv6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_port = htons(ep_.port);
      ok = ::inet_pton(AF_INET6, ep_.ip.c_str(), &a->sin6_addr) == 1;
      len = sizeof *a;
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_port = htons(ep_.port);
      ok = ::inet_pton(AF_INET, ep_.ip.c_str(), &a->sin_addr) == 1;
      len = sizeof *a;
    }
    if (!ok) return fail("bad address " + ep_.to_string());
    fd_ = ::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return fail(std::string("socket: ") + std::strerror(errno));
    phase_ = Phase::connecting;
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&ss), len) == 0) phase_ = Phase::sending;
    else if (errno != EINPROGRESS) fail(std::string("connect: ") + std::strerror(errno));
  }

  void send_some() {
    while (sent_ < request_.size()) {
      const ssize_t n = ::send(fd_, request_.data() + sent_, request_.size() - sent_, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        return fail(std::string("send: ") + std::strerror(errno));
      }
      sent_ += std::size_t(n);
    }
    phase_ = Phase::reading;
  }

  void read_some() {
    // Bounded per wake-up so that one fast host cannot starve the others.
    for (std::size_t got = 0; got < kReadChunk * 4;) {
      const std::size_t old = response_.size();
      response_.resize(old + kReadChunk);
      const ssize_t n = ::recv(fd_, response_.data() + old, kReadChunk, 0);
      response_.resize(old + std::size_t(std::max<ssize_t>(n, 0)));
      if (n == 0) {
        result_.ok = true;  // HTTP/1.0: the server closes after the body
        return finish();
      }
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        return fail(std::string("receive: ") + std::strerror(errno));
      }
      if (response_.size() > kMaxResponseBytes)
        return fail("response larger than " + std::to_string(kMaxResponseBytes >> 20) + " MiB, refused");
      got += std::size_t(n);
    }
  }

  void finish() {
    phase_ = Phase::done;
    result_.at = Clock::now();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  Endpoint ep_;
  int fd_ = -1;
  Phase phase_ = Phase::connecting;
  std::string request_;
  std::size_t sent_ = 0;
  std::string response_;
  ScrapeResult result_;
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// A chunked body (RFC 9112 §7.1); a server may use it even for HTTP/1.0.
std::optional<std::string> dechunk(std::string_view in, std::string& error) {
  std::string out;
  for (;;) {
    const auto eol = in.find('\n');
    if (eol == std::string_view::npos) break;
    std::string_view size_text = trim(in.substr(0, eol));
    size_text = trim(size_text.substr(0, size_text.find(';')));  // chunk extensions
    std::size_t size = 0;
    auto [end, ec] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
    if (size_text.empty() || ec != std::errc() || end != size_text.data() + size_text.size()) break;
    in.remove_prefix(eol + 1);
    if (size == 0) return out;
    if (size > in.size()) break;
    out.append(in.substr(0, size));
    in.remove_prefix(size);
    if (starts_with(in, "\r\n")) in.remove_prefix(2);
    else if (starts_with(in, "\n")) in.remove_prefix(1);
    else break;
  }
  error = "malformed chunked body";
  return std::nullopt;
}

// The body of a complete HTTP/1.x response with status 200.
std::optional<std::string> http_body(std::string_view resp, std::string& error) {
  std::size_t head_end = resp.find("\r\n\r\n"), sep = 4;
  if (head_end == std::string_view::npos) head_end = resp.find("\n\n"), sep = 2;
  if (head_end == std::string_view::npos) {
    error = resp.empty() ? "empty response (is this a metrics port?)" : "incomplete HTTP response";
    return std::nullopt;
  }
  std::string_view head = resp.substr(0, head_end);
  const std::string_view status_line = trim(head.substr(0, head.find('\n')));
  if (!starts_with(status_line, "HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ') {
    error = "not an HTTP response: " + printable(status_line, 40);
    return std::nullopt;
  }
  if (status_line.substr(9, 3) != "200") {
    error = "HTTP " + printable(status_line.substr(9), 40);
    return std::nullopt;
  }
  std::optional<std::size_t> length;
  bool chunked = false;
  for (std::size_t at = head.find('\n'); at != std::string_view::npos;) {
    const std::size_t next = head.find('\n', at + 1);
    const std::string_view line = head.substr(at + 1, next == std::string_view::npos ? next : next - at - 1);
    at = next;
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string name = lower(trim(line.substr(0, colon)));
    const std::string value = lower(trim(line.substr(colon + 1)));
    if (name == "content-length") {
      std::size_t n = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec == std::errc() && end == value.data() + value.size()) length = n;
    } else if (name == "transfer-encoding") {
      chunked = value.find("chunked") != std::string::npos;
    } else if (name == "content-encoding" && !value.empty() && value != "identity") {
      error = "unsupported Content-Encoding " + printable(value, 20);
      return std::nullopt;
    }
  }
  std::string_view body = resp.substr(head_end + sep);
  if (chunked) return dechunk(body, error);
  if (length) {
    if (body.size() < *length) {
      error = "truncated body (" + std::to_string(body.size()) + " of " + std::to_string(*length) + " bytes)";
      return std::nullopt;
    }
    body = body.substr(0, *length);
  }
  return std::string(body);
}

}  // namespace

ScrapeResult Fetch::take() {
  ScrapeResult r = std::move(result_);
  if (r.ok) {
    auto body = http_body(response_, r.error);
    r.ok = body.has_value();
    if (body) r.body = std::move(*body);
  }
  response_.clear();
  return r;
}

// Scrapes every endpoint at once; one result per endpoint, in order.
// Unfinished exchanges fail at their deadline or when stop is requested.
std::vector<ScrapeResult> scrape_all(const std::vector<Endpoint>& endpoints, Stop& stop) {
  const auto start = Clock::now();
  std::vector<std::unique_ptr<Fetch>> fetches;
  for (const auto& ep : endpoints) fetches.push_back(std::make_unique<Fetch>(ep));
  std::vector<pollfd> fds;
  std::vector<Fetch*> polled;
  for (;;) {
    const auto now = Clock::now();
    fds.clear();
    polled.clear();
    for (auto& f : fetches) {
      if (f->done()) continue;
      if (f->connecting() && now >= start + kConnectTimeout) {
        f->fail("no answer to connect within " + std::to_string(kConnectTimeout.count()) + " ms");
        continue;
      }
      if (now >= start + kScrapeTimeout) {
        f->fail("no complete response within " + std::to_string(kScrapeTimeout.count()) + " ms");
        continue;
      }
      fds.push_back(f->pollable());
      polled.push_back(f.get());
    }
    if (fds.empty()) break;
    if (stop.check()) {
      for (Fetch* f : polled) f->fail("interrupted");
      break;
    }
    const bool any_connecting =
        std::any_of(polled.begin(), polled.end(), [](const Fetch* f) { return f->connecting(); });
    const auto until = any_connecting ? start + kConnectTimeout : start + kScrapeTimeout;
    if (wait_for(fds, until, stop) > 0)
      for (std::size_t i = 0; i < fds.size(); ++i)
        if (fds[i].revents) polled[i]->on_ready();
  }
  std::vector<ScrapeResult> results;
  for (auto& f : fetches) results.push_back(f->take());
  return results;
}


}  // namespace gossamer::ctl::scrape
