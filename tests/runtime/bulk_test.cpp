// The TCP path for large bodies below the runtime (runtime/src/bulk.hpp):
// what GOSSAMER_BULK may say, payloads between two engines (two "hosts" in
// one process over a socketpair), a peer that sends a bad header or claims
// more than it sends, and transfers injected or replayed into the stream
// (their tags fail).
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/sockios.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include "bulk.hpp"

namespace gossamer::detail {
namespace {

struct Pair {
  int a = -1, b = -1;
  Pair() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0) {
      a = fds[0];
      b = fds[1];
    }
  }
};

std::unique_ptr<Bulk> open(const std::string& env, std::uint32_t host, std::uint32_t hosts, std::string* error,
                           std::uint32_t total = 4) {
  return Bulk::from_env(env.c_str(), Bulk::Rack{host, hosts, total}, 1024, error);
}

// The session keys of a connection between hosts 0 and 1: host 0 sends
// under k01, host 1 under k10 (gossamerd derives them in the handshake).
abi::SessionKey key(std::uint8_t fill) {
  abi::SessionKey k;
  k.fill(fill);
  k[0] = 0x42;
  return k;
}
const abi::SessionKey k01 = key(1), k10 = key(2);

// A GOSSAMER_BULK entry: the host at the other end, the descriptor, and this
// end's keys.
std::string entry(std::uint32_t host, int fd, const abi::SessionKey& send, const abi::SessionKey& receive) {
  return std::to_string(host) + ":" + std::to_string(fd) + ":" + abi::session_key_hex(send) + ":" +
         abi::session_key_hex(receive);
}

// One transfer as the wire carries it, tagged as message `tags.next()`.
std::string wire(abi::SessionDirection& tags, const BulkWireHeader& h, const std::string& payload) {
  const std::string header(reinterpret_cast<const char*>(&h), sizeof h);
  const abi::SessionTag ht = tags.header_tag(header), bt = tags.body_tag(header, payload);
  tags.advance();
  return header + std::string(reinterpret_cast<const char*>(ht.data()), ht.size()) + payload +
         std::string(reinterpret_cast<const char*>(bt.data()), bt.size());
}

TEST(BulkEnv, NothingMeansNoConnections) {
  std::string error;
  EXPECT_EQ(Bulk::from_env(nullptr, Bulk::Rack{0, 2, 4}, 1024, &error), nullptr);
  EXPECT_EQ(Bulk::from_env("", Bulk::Rack{0, 2, 4}, 1024, &error), nullptr);
  EXPECT_TRUE(error.empty());
}

TEST(BulkEnv, RefusesWhatIsNotAConnectionPerOtherHost) {
  Pair p;
  ASSERT_GE(p.a, 0);
  const std::string fd = std::to_string(p.a);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  struct Case {
    std::string env;
    std::uint32_t hosts;
    std::string says;
  } cases[] = {
      {"1", 2, "entry 1 is not <host>:<fd>:<send key>:<receive key>"},
      {"1:", 2, "is not <host>:<fd>"},
      {"x:" + fd, 2, "is not <host>:<fd>"},
      {entry(1, p.a, k01, k10) + ",", 2, "entry 2 is not <host>:<fd>"},
      {"1:99999999999", 2, "is not <host>:<fd>"},
      // Keys: none, one, short, not hex, one too many fields.
      {"1:" + fd, 2, "is not <host>:<fd>:<send key>:<receive key>"},
      {"1:" + fd + ":" + abi::session_key_hex(k01), 2, "is not <host>:<fd>"},
      {"1:" + fd + ":" + abi::session_key_hex(k01) + ":abcd", 2, "is not <host>:<fd>"},
      {"1:" + fd + ":" + abi::session_key_hex(k01) + ":" + std::string(64, 'g'), 2, "is not <host>:<fd>"},
      {entry(1, p.a, k01, k10) + ":00", 2, "is not <host>:<fd>"},
      {entry(0, p.a, k01, k10), 2, "is not another host"},
      {entry(2, p.a, k01, k10), 2, "is not another host"},
      {entry(1, p.a, k01, k10) + "," + entry(1, p.a, k01, k10), 3, "host 1 is named twice"},
      {entry(1, p.a, k01, k10) + "," + entry(2, p.a, k01, k10), 3, "fd " + fd + " is named twice"},
      {entry(1, p.a, k01, k10), 3, "no connection for host 2"},
      {entry(1, pipefd[0], k01, k10), 2, "is not a connected stream socket"},
      {entry(1, 1000000, k01, k10), 2, "is not a connected stream socket"},
  };
  for (const Case& c : cases) {
    std::string error;
    EXPECT_EQ(open(c.env, 0, c.hosts, &error), nullptr) << c.env;
    EXPECT_NE(error.find(c.says), std::string::npos) << c.env << ": " << error;
    // The error never repeats a key (it may reach a log).
    EXPECT_EQ(error.find(abi::session_key_hex(k01)), std::string::npos) << error;
  }
  ::close(pipefd[0]);
  ::close(pipefd[1]);
  ::close(p.a);
  ::close(p.b);
}

// Two hosts of a 4-thread rack: host 0 has threads 0-1, host 1 threads 2-3.
class BulkPair : public ::testing::Test {
 protected:
  void SetUp() override {
    Pair p;
    ASSERT_GE(p.a, 0);
    std::string error;
    h0 = open(entry(1, p.a, k01, k10), 0, 2, &error);
    ASSERT_NE(h0, nullptr) << error;
    h1 = open(entry(0, p.b, k10, k01), 1, 2, &error);
    ASSERT_NE(h1, nullptr) << error;
    h0->start([this](std::uint32_t li) { woken0[li]++; }, [] { return true; });
    h1->start([this](std::uint32_t li) { woken1[li]++; }, [] { return true; });
  }
  // Waits until `take` succeeds (the I/O threads run on their own).
  static bool take(Bulk& b, std::uint32_t li, Bulk::Kind k, std::uint32_t from, std::uint64_t id,
                   std::vector<std::byte>* out) {
    for (int i = 0; i < 5000; ++i) {
      if (b.take(li, k, from, id, out)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }
  // Before the engines: their I/O threads call the wake lambdas until they stop.
  std::atomic<int> woken0[2]{}, woken1[2]{};
  std::unique_ptr<Bulk> h0, h1;
};

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte((i * 131 + seed) >> 3);
  return v;
}

TEST_F(BulkPair, PayloadsArriveWholeAtTheirThreadAndKind) {
  EXPECT_TRUE(h0->usable(1));
  EXPECT_FALSE(h0->usable(0));  // itself
  auto big = pattern(5 << 20, 7), small = pattern(3, 1);
  // Thread 1 (host 0) to thread 3 (host 1); a response from thread 2 to thread 0.
  std::uint64_t a = h0->send(1, Bulk::kRequest, 1, 3, big);
  std::uint64_t b = h1->send(0, Bulk::kResponse, 2, 0, small);
  std::uint64_t c = h0->send(1, Bulk::kRequest, 1, 3, {});
  std::vector<std::byte> got;
  // Not under another kind, sender or id.
  EXPECT_FALSE(h1->take(1, Bulk::kResponse, 1, a, &got));
  ASSERT_TRUE(take(*h1, 1, Bulk::kRequest, 1, a, &got));
  EXPECT_TRUE(got == big);
  EXPECT_FALSE(h1->take(1, Bulk::kRequest, 1, a, &got));  // taken once
  ASSERT_TRUE(take(*h1, 1, Bulk::kRequest, 1, c, &got));
  EXPECT_TRUE(got.empty());
  ASSERT_TRUE(take(*h0, 0, Bulk::kResponse, 2, b, &got));
  EXPECT_TRUE(got == small);
  EXPECT_GE(woken1[1].load(), 1);  // once per round of reads that brought it something
  EXPECT_EQ(woken1[0].load(), 0);
  EXPECT_GE(woken0[0].load(), 1);
  EXPECT_EQ(h0->bytes_sent(), big.size());
  EXPECT_EQ(h1->bytes_received(), big.size());
}

// A burst of transfers queued at once (several per sendmsg, several per
// read on the other side: a body's tag read with the next header), of
// lengths around the first receive buffer (64 KiB) and the tags' blocks,
// to two threads: every one arrives whole, once.
TEST_F(BulkPair, ABurstArrivesWholeAndOnce) {
  const std::size_t lengths[] = {1, 15, 16, 17, 48, 63, 64, 65, 4095, 16385, 65535, 65536, 65537, 200000, 1};
  std::vector<std::uint64_t> ids;
  std::vector<std::vector<std::byte>> sent;
  for (int round = 0; round < 8; ++round)
    for (std::size_t n : lengths) {
      sent.push_back(pattern(n, unsigned(ids.size())));
      ids.push_back(h0->send(1, Bulk::kRequest, 1, 2 + std::uint32_t(ids.size() % 2), sent.back()));
    }
  std::vector<std::byte> got;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::uint32_t li = std::uint32_t(i % 2);
    ASSERT_TRUE(take(*h1, li, Bulk::kRequest, 1, ids[i], &got)) << i;
    EXPECT_TRUE(got == sent[i]) << i << ": " << got.size() << " bytes, sent " << sent[i].size();
    EXPECT_FALSE(h1->take(li, Bulk::kRequest, 1, ids[i], &got)) << i;  // once
  }
}

// take_all takes every payload a batch names or none of them.
TEST_F(BulkPair, TakeAllIsAllOrNothing) {
  const auto x = pattern(20000, 1), y = pattern(30, 2);
  const std::uint64_t a = h0->send(1, Bulk::kRequest, 0, 3, x), b = h0->send(1, Bulk::kRequest, 0, 3, y);
  const std::uint64_t m = h0->send(1, Bulk::kRequest, 0, 3, {});
  std::vector<std::byte> got;
  ASSERT_TRUE(take(*h1, 1, Bulk::kRequest, 0, m, &got));  // in order on the wire: a and b are in too
  std::vector<std::byte> out[3];
  const std::uint64_t missing[3] = {a, m + 1, b};  // m + 1: not sent
  EXPECT_FALSE(h1->take_all(1, Bulk::kRequest, 0, missing, 3, out));
  EXPECT_TRUE(out[0].empty() && out[2].empty());
  const std::uint64_t both[2] = {b, a};  // any order
  ASSERT_TRUE(h1->take_all(1, Bulk::kRequest, 0, both, 2, out));
  EXPECT_TRUE(out[0] == y);
  EXPECT_TRUE(out[1] == x);
  EXPECT_FALSE(h1->take_all(1, Bulk::kRequest, 0, both, 1, out));  // taken once
}

// The session tags are HMAC-SHA256 as controlplane/README.md writes them,
// whatever the object has computed before (its keyed context is reused),
// and a copy tags on its own.
TEST(BulkSession, TagsAreTheDocumentedHmac) {
  const auto reference = [](const abi::SessionKey& k, char part, std::uint64_t n, const std::string& header,
                            const std::string& body) {
    std::string msg(1, part);
    for (int i = 0; i < 8; ++i) msg += char(n >> (8 * i));
    msg += header + body;
    unsigned char out[32];
    std::size_t len = 0;
    EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, k.data(), k.size(),
              reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, sizeof out, &len);
    return len == 32 ? std::string(reinterpret_cast<char*>(out), 16) : std::string("HMAC failed");
  };
  const auto str = [](const abi::SessionTag& t) { return std::string(reinterpret_cast<const char*>(t.data()), 16); };
  abi::SessionDirection d(k01);
  const std::string header(32, 'h'), body(70000, 'b');
  for (std::uint64_t n = 0; n < 3; ++n) {
    EXPECT_EQ(str(d.header_tag(header)), reference(k01, 'h', n, header, "")) << n;
    EXPECT_EQ(str(d.body_tag(header, body)), reference(k01, 'b', n, header, body)) << n;
    EXPECT_EQ(str(d.header_tag(header)), reference(k01, 'h', n, header, "")) << n;  // again, same context
    d.advance();
  }
  abi::SessionDirection copy = d, other(k10);
  copy.advance();
  EXPECT_EQ(str(d.header_tag("x")), reference(k01, 'h', 3, "x", ""));
  EXPECT_EQ(str(copy.header_tag("x")), reference(k01, 'h', 4, "x", ""));
  EXPECT_EQ(str(other.header_tag("x")), reference(k10, 'h', 0, "x", ""));
  other = copy;
  EXPECT_EQ(str(other.body_tag("x", "y")), reference(k01, 'b', 4, "x", "y"));
  abi::SessionDirection zero;  // default: the zero key
  EXPECT_EQ(str(zero.header_tag("x")), reference(abi::SessionKey{}, 'h', 0, "x", ""));
}

// Host 1 of a 2-host, 4-thread rack, with host 0's end of its connection
// played by the test: `bytes` go in as they are; then either the receiver
// closes (before anything of the refused transfer is allocated or
// delivered: `delivered` transfers reach thread 2, no more) or not.
void expect_refused(const std::string& bytes, int delivered = 0) {
  Pair p;
  ASSERT_GE(p.a, 0);
  std::string error;
  auto h1 = open(entry(0, p.b, k10, k01), 1, 2, &error);
  ASSERT_NE(h1, nullptr) << error;
  std::atomic<int> woken{0};
  h1->start([&](std::uint32_t) { woken++; }, [] { return true; });  // the run is over: a quiet close
  ASSERT_EQ(::write(p.a, bytes.data(), bytes.size()), ssize_t(bytes.size()));
  for (int i = 0; i < 5000 && h1->usable(0); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(h1->usable(0));
  // Woken once per round of reads that delivered something (the takes below count the transfers).
  EXPECT_EQ(woken.load() > 0, delivered > 0) << woken.load();
  std::vector<std::byte> got;
  for (std::uint64_t id = 1; id <= 3; ++id)
    EXPECT_EQ(h1->take(0, Bulk::kRequest, 0, id, &got), int(id) <= delivered) << id;
  // The receiver closed its end: end-of-file, or a reset when it left
  // unread bytes behind (the rest of a refused transfer).
  char c;
  const ssize_t n = ::read(p.a, &c, 1);
  EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << n << " " << std::strerror(errno);
  ::close(p.a);
}

TEST(BulkPeer, ABadHeaderClosesTheConnection) {
  // To thread 1, which is on host 0, not on the receiver.
  abi::SessionDirection tags(k01);
  expect_refused(wire(tags, BulkWireHeader{kBulkMagic, Bulk::kRequest, {}, 0, 1, 1, 8}, "12345678"));
}

TEST(BulkPeer, AnOversizedLengthIsRefusedBeforeAllocating) {
  abi::SessionDirection tags(k01);
  std::string w = wire(tags, BulkWireHeader{kBulkMagic, Bulk::kRequest, {}, 0, 2, 1, kMaxBulkBytes + 1}, "");
  w.resize(sizeof(BulkWireHeader) + abi::kSessionTagBytes);  // the header and its tag: enough to refuse
  expect_refused(w);
}

TEST(BulkPeer, AnInjectedTransferIsRefused) {
  // Well formed, to thread 2 on the receiver, but not tagged with host 0's
  // key: what someone on the path without the key can write.
  abi::SessionDirection wrong(key(9));
  expect_refused(wire(wrong, BulkWireHeader{kBulkMagic, Bulk::kRequest, {}, 0, 2, 1, 8}, "injected"));
  // An untagged transfer (the format before the tags).
  BulkWireHeader h{kBulkMagic, Bulk::kRequest, {}, 0, 2, 1, 8};
  expect_refused(std::string(reinterpret_cast<const char*>(&h), sizeof h) + "injected" + std::string(40, '\0'));
  // The right header and tag, other bytes: the body's tag fails, nothing is delivered.
  abi::SessionDirection tags(k01);
  std::string w = wire(tags, h, "original");
  w.replace(sizeof h + abi::kSessionTagBytes, 8, "tampered");
  expect_refused(w);
  // A tag of the other direction's key (a transfer reflected back).
  abi::SessionDirection reflected(k10);
  expect_refused(wire(reflected, h, "reflects"));
}

TEST(BulkPeer, AReplayedOrReorderedTransferIsRefused) {
  abi::SessionDirection tags(k01);
  const std::string first = wire(tags, BulkWireHeader{kBulkMagic, Bulk::kRequest, {}, 0, 2, 1, 5}, "first");
  const std::string second = wire(tags, BulkWireHeader{kBulkMagic, Bulk::kRequest, {}, 0, 2, 2, 6}, "second");
  // The first is delivered, its copy is refused (it carries message 0's tags
  // where message 1's are due).
  expect_refused(first + first, 1);
  // Out of order: message 1 where message 0 is due.
  expect_refused(second + first, 0);
  // In order both arrive, then a replay of either is refused.
  expect_refused(first + second + second, 2);
}

std::size_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * std::size_t(::sysconf(_SC_PAGESIZE));
}

// A header that claims the largest payload, then 16 bytes and silence: the
// receiver holds what arrived, not what was claimed (before, it allocated
// and zeroed the whole GiB on the header alone).
TEST(BulkPeer, AClaimedLengthIsNotAllocatedBeforeItsBytesArrive) {
  Pair p;
  ASSERT_GE(p.a, 0);
  std::string error;
  auto h1 = open(entry(0, p.b, k10, k01), 1, 2, &error);
  ASSERT_NE(h1, nullptr) << error;
  h1->start([](std::uint32_t) {}, [] { return true; });
  const std::size_t before = resident_bytes();
  // A header with its valid tag (the sender holds the key), then the body's
  // first bytes.
  abi::SessionDirection tags(k01);
  std::string w = wire(tags, BulkWireHeader{kBulkMagic, Bulk::kRequest, {}, 0, 2, 1, kMaxBulkBytes}, "");
  w.resize(sizeof(BulkWireHeader) + abi::kSessionTagBytes);
  ASSERT_EQ(::write(p.a, w.data(), w.size()), ssize_t(w.size()));
  const char sixteen[16] = {};
  ASSERT_EQ(::write(p.a, sixteen, sizeof sixteen), ssize_t(sizeof sixteen));
  // Until the receiver has read all of it (nothing left unread in the socket).
  int unread = -1;
  for (int i = 0; i < 5000; ++i) {
    ASSERT_EQ(::ioctl(p.a, SIOCOUTQ, &unread), 0);
    if (unread == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(unread, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_LT(resident_bytes(), before + (std::size_t(64) << 20));
  EXPECT_TRUE(h1->usable(0));  // a transfer in progress, not an error
  ::close(p.a);
}

// During the run, a lost connection ends the instance (references already
// in slots could never complete): after 2 s, status 75, naming the host.
TEST(BulkPeerDeath, ALostConnectionDuringTheRunEndsTheInstance) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Pair p;
        std::string error;
        auto h1 = open(entry(0, p.b, k10, k01), 1, 2, &error);
        if (!h1) std::_Exit(3);
        h1->start([](std::uint32_t) {}, [] { return false; });
        ::close(p.a);  // host 0 goes away
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::_Exit(4);
      },
      ::testing::ExitedWithCode(75), "TCP connection for large bodies to host 0 was lost");
}

}  // namespace
}  // namespace gossamer::detail
