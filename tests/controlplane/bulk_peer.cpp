// The instance controlplane_test.py runs with `gossamerctl run` to check the
// bulk connections gossamerd hands to every instance (GOSSAMER_BULK,
// controlplane/README.md): exactly one per other host, each a connected,
// blocking TCP socket with TCP_NODELAY, nothing else inherited, and each one
// connected to that host's instance of the same run. Every pair proves the
// last point both ways: each side sends {its host, a random token, its
// socket's port}, checks that the peer on the descriptor for host h says it
// is host h on the other end of this very socket, and echoes the peer's
// token back; each side checks its own token comes back. Then one side of
// each pair closes its descriptor and the other must read end-of-file: no
// copy of that socket is left open anywhere, in gossamerd say (which side
// closes alternates, so that every host's daemon is checked). Every message
// is tagged as gossamer/abi/session.hpp says, under the instance keys that
// GOSSAMER_BULK gives, and every tag read is checked: the two instances of a
// pair got matching keys, for this very connection. Prints
// "bulk ME-PEER ok" per peer and exits 0, or says why on stderr and exits 1.
//
//   bulk-peer [--proxied]   --proxied: the connections go through a proxy,
//                           so the peer's port is not this socket's peer port
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>

#include <gossamer/abi/session.hpp>
#include <gossamer/config.hpp>

namespace {

std::uint32_t g_me = 0;

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "bulk_peer: host %u: %s\n", g_me, why.c_str());
  std::exit(1);
}

struct Msg {
  std::uint32_t magic;
  std::uint32_t host;
  std::uint64_t token;
  std::uint32_t port;  // the sender's local port of this connection
  std::uint32_t zero;
};
constexpr std::uint32_t kHello = 0x4b4c4247;  // "GBLK"
constexpr std::uint32_t kAck = 0x4b434147;    // "GACK"

// One connection: its descriptor and the instances' tags, both ways.
struct Conn {
  int fd = -1;
  gossamer::abi::SessionDirection out, in;
};

// A message as the session rule frames it: the Msg as the header, its tag,
// no body, the body's tag.
struct Tagged {
  Msg m;
  gossamer::abi::SessionTag header_tag, body_tag;
};
static_assert(sizeof(Tagged) == sizeof(Msg) + 2 * gossamer::abi::kSessionTagBytes);

std::string_view bytes(const Msg& m) { return {reinterpret_cast<const char*>(&m), sizeof m}; }

void write_all(Conn& c, const Msg& m, std::uint32_t peer) {
  Tagged t{m, c.out.header_tag(bytes(m)), c.out.body_tag(bytes(m), {})};
  c.out.advance();
  const char* p = reinterpret_cast<const char*>(&t);
  for (std::size_t done = 0; done < sizeof t;) {
    ssize_t n = ::write(c.fd, p + done, sizeof t - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write to host " + std::to_string(peer) + ": " + std::strerror(errno));
    done += std::size_t(n);
  }
}

Msg read_msg(Conn& c, std::uint32_t peer) {
  Tagged t{};
  char* p = reinterpret_cast<char*>(&t);
  for (std::size_t done = 0; done < sizeof t;) {
    pollfd pf{c.fd, POLLIN, 0};
    if (::poll(&pf, 1, 10'000) == 0) fail("nothing from host " + std::to_string(peer) + " within 10 s");
    ssize_t n = ::read(c.fd, p + done, sizeof t - done);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) fail("host " + std::to_string(peer) + " closed the connection");
    if (n < 0) fail("read from host " + std::to_string(peer) + ": " + std::strerror(errno));
    done += std::size_t(n);
  }
  if (!gossamer::abi::SessionDirection::equal(c.in.header_tag(bytes(t.m)), t.header_tag.data()) ||
      !gossamer::abi::SessionDirection::equal(c.in.body_tag(bytes(t.m), {}), t.body_tag.data()))
    fail("a message from host " + std::to_string(peer) +
         " failed its tags: the two instances were not given matching keys for this connection");
  c.in.advance();
  return t.m;
}

std::uint32_t port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return 0;
}

// The checks on one inherited descriptor; returns {local port, peer port}.
std::pair<std::uint32_t, std::uint32_t> check_socket(int fd, std::uint32_t peer) {
  const std::string what = "the descriptor " + std::to_string(fd) + " for host " + std::to_string(peer);
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(what + " is not open: " + std::strerror(errno));
  if (!S_ISSOCK(st.st_mode)) fail(what + " is not a socket");
  int type = 0, nodelay = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
    fail(what + " is not a stream socket");
  len = sizeof nodelay;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len) != 0 || !nodelay)
    fail(what + " is not TCP with TCP_NODELAY");
  if (::fcntl(fd, F_GETFL) & O_NONBLOCK) fail(what + " is non-blocking");
  sockaddr_storage local{}, remote{};
  socklen_t ll = sizeof local, rl = sizeof remote;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) fail(what + ": getsockname failed");
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &rl) != 0)
    fail(what + " is not connected: " + std::strerror(errno));
  return {port_of(local), port_of(remote)};
}

}  // namespace

int main(int argc, char** argv) {
  const bool proxied = argc > 1 && std::strcmp(argv[1], "--proxied") == 0;
  const char* cfg_path = std::getenv("GOSSAMER_CONFIG");
  if (!cfg_path) fail("no GOSSAMER_CONFIG");
  auto loaded = gossamer::config::load_file(cfg_path);
  if (!loaded) fail(std::string("cannot load ") + cfg_path);
  const auto& cfg = loaded.config();
  g_me = cfg.host.index;
  const auto hosts = std::uint32_t(cfg.rack.hosts.size());

  const char* env = std::getenv("GOSSAMER_BULK");
  std::map<std::uint32_t, Conn> fds;  // host -> connection
  if (env) {
    std::string s = env;
    for (std::size_t at = 0; at <= s.size();) {
      std::size_t end = s.find(',', at);
      if (end == std::string::npos) end = s.size();
      const std::string item = s.substr(at, end - at);
      unsigned h = 0;
      int fd = -1, used = 0;
      char send[65] = {}, receive[65] = {};
      gossamer::abi::SessionKey ks{}, kr{};
      if (std::sscanf(item.c_str(), "%u:%d:%64[0-9a-f]:%64[0-9a-f]%n", &h, &fd, send, receive, &used) != 4 ||
          std::size_t(used) != item.size() || fd < 3 || !gossamer::abi::parse_session_key(send, &ks) ||
          !gossamer::abi::parse_session_key(receive, &kr))
        fail("a GOSSAMER_BULK entry is not HOST:FD:SEND-KEY:RECEIVE-KEY");
      if (h >= hosts || h == g_me || fds.count(h)) fail("GOSSAMER_BULK names host " + std::to_string(h) + " wrongly");
      fds[h] = Conn{fd, gossamer::abi::SessionDirection(ks), gossamer::abi::SessionDirection(kr)};
      at = end + 1;
    }
  }
  if (hosts == 1) {
    if (env) fail("GOSSAMER_BULK is set on a 1-host rack");
    std::printf("bulk none ok\n");
    return 0;
  }
  if (fds.size() != hosts - 1)
    fail("GOSSAMER_BULK='" + std::string(env ? env : "") + "' has " + std::to_string(fds.size()) + " entries, want " +
         std::to_string(hosts - 1));

  // Nothing else is inherited.
  std::set<int> allowed{0, 1, 2};
  for (auto& [h, c] : fds) allowed.insert(c.fd);
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const int fd = std::atoi(e->d_name);
      if (fd != ::dirfd(d) && !allowed.count(fd)) fail("inherited an unexpected descriptor " + std::to_string(fd));
    }
    ::closedir(d);
  }

  std::map<std::uint32_t, std::pair<std::uint32_t, std::uint32_t>> ports;
  for (auto& [h, c] : fds) ports[h] = check_socket(c.fd, h);
  std::random_device rd;
  std::map<std::uint32_t, std::uint64_t> tokens;
  // 16-byte messages: they fit any socket buffer, so writing to every peer
  // before reading from any cannot deadlock.
  for (auto& [h, c] : fds) {
    tokens[h] = (std::uint64_t(rd()) << 32) | rd();
    write_all(c, Msg{kHello, g_me, tokens[h], ports[h].first, 0}, h);
  }
  for (auto& [h, c] : fds) {
    const Msg m = read_msg(c, h);
    if (m.magic != kHello) fail("host " + std::to_string(h) + "'s descriptor: not a hello first");
    if (m.host != h) fail("the descriptor for host " + std::to_string(h) + " leads to host " + std::to_string(m.host));
    if (!proxied && m.port != ports[h].second)
      fail("host " + std::to_string(h) + " wrote from port " + std::to_string(m.port) +
           ", this socket's peer is port " + std::to_string(ports[h].second));
    write_all(c, Msg{kAck, g_me, m.token, ports[h].first, 0}, h);
  }
  for (auto& [h, c] : fds) {
    const Msg m = read_msg(c, h);
    if (m.magic != kAck || m.host != h || m.token != tokens[h])
      fail("host " + std::to_string(h) + " did not echo this host's token");
  }
  // The lower host of a pair closes first when the indexes add up to an odd
  // number: (0,1) checks host 0's side, (0,2) host 2's, (1,2) host 1's.
  auto closes_first = [](std::uint32_t me, std::uint32_t peer) { return ((me + peer) % 2 == 1) == (me < peer); };
  for (auto& [h, c] : fds)
    if (closes_first(g_me, h)) ::close(c.fd);
  for (auto& [h, conn] : fds) {
    if (closes_first(g_me, h)) continue;
    const int fd = conn.fd;
    pollfd pf{fd, POLLIN, 0};
    char c;
    if (::poll(&pf, 1, 10'000) == 0 || ::read(fd, &c, 1) != 0)
      fail("no end-of-file from host " + std::to_string(h) +
           " after its instance closed the connection: a copy of its socket is still open");
    ::close(fd);
  }
  for (auto& [h, c] : fds) std::printf("bulk %u-%u ok\n", g_me, h);
  return 0;
}
