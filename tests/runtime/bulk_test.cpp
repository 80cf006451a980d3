// The TCP path for large bodies below the runtime (runtime/src/bulk.hpp):
// what GOSSAMER_BULK may say, payloads between two engines (two "hosts" in
// one process over a socketpair), and a peer that sends a bad header or
// claims more than it sends.
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/sockios.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

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
      {"1", 2, "is not <host>:<fd>"},
      {"1:", 2, "is not <host>:<fd>"},
      {"x:" + fd, 2, "is not <host>:<fd>"},
      {"1:" + fd + ",", 2, "is not <host>:<fd>"},
      {"1:99999999999", 2, "is not <host>:<fd>"},
      {"0:" + fd, 2, "is not another host"},
      {"2:" + fd, 2, "is not another host"},
      {"1:" + fd + ",1:" + fd, 3, "host 1 is named twice"},
      {"1:" + fd + ",2:" + fd, 3, "fd " + fd + " is named twice"},
      {"1:" + fd, 3, "no connection for host 2"},
      {"1:" + std::to_string(pipefd[0]), 2, "is not a connected stream socket"},
      {"1:1000000", 2, "is not a connected stream socket"},
  };
  for (const Case& c : cases) {
    std::string error;
    EXPECT_EQ(open(c.env, 0, c.hosts, &error), nullptr) << c.env;
    EXPECT_NE(error.find(c.says), std::string::npos) << c.env << ": " << error;
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
    h0 = open("1:" + std::to_string(p.a), 0, 2, &error);
    ASSERT_NE(h0, nullptr) << error;
    h1 = open("0:" + std::to_string(p.b), 1, 2, &error);
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
  EXPECT_GE(woken1[1].load(), 2);
  EXPECT_EQ(woken1[0].load(), 0);
  EXPECT_GE(woken0[0].load(), 1);
  EXPECT_EQ(h0->bytes_sent(), big.size());
  EXPECT_EQ(h1->bytes_received(), big.size());
}

// A header the receiver refuses: the connection closes (before anything is
// allocated or delivered), nobody is woken, the sender reads end-of-file.
void expect_refused(const BulkWireHeader& h) {
  Pair p;
  ASSERT_GE(p.a, 0);
  std::string error;
  auto h1 = open("0:" + std::to_string(p.b), 1, 2, &error);
  ASSERT_NE(h1, nullptr) << error;
  std::atomic<int> woken{0};
  h1->start([&](std::uint32_t) { woken++; }, [] { return true; });  // the run is over: a quiet close
  ASSERT_EQ(::write(p.a, &h, sizeof h), ssize_t(sizeof h));
  for (int i = 0; i < 5000 && h1->usable(0); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(h1->usable(0));
  EXPECT_EQ(woken.load(), 0);
  char c;
  EXPECT_EQ(::read(p.a, &c, 1), 0);  // the receiver closed its end
  ::close(p.a);
}

TEST(BulkPeer, ABadHeaderClosesTheConnection) {
  // To thread 1, which is on host 0, not on the receiver.
  expect_refused(BulkWireHeader{kBulkMagic, Bulk::kRequest, {}, 0, 1, 1, 8});
}

TEST(BulkPeer, AnOversizedLengthIsRefusedBeforeAllocating) {
  expect_refused(BulkWireHeader{kBulkMagic, Bulk::kRequest, {}, 0, 2, 1, kMaxBulkBytes + 1});
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
  auto h1 = open("0:" + std::to_string(p.b), 1, 2, &error);
  ASSERT_NE(h1, nullptr) << error;
  h1->start([](std::uint32_t) {}, [] { return true; });
  const std::size_t before = resident_bytes();
  const BulkWireHeader h{kBulkMagic, Bulk::kRequest, {}, 0, 2, 1, kMaxBulkBytes};
  ASSERT_EQ(::write(p.a, &h, sizeof h), ssize_t(sizeof h));
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
        auto h1 = open("0:" + std::to_string(p.b), 1, 2, &error);
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
