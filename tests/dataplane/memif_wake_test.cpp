// The memif doorbell (dataplane/src/memif_wake.hpp) with real files and
// sockets: two ends of a link in one process, as the server and client
// dataplanes would hold them.
#include "memif_wake.hpp"
#include "temp_dir.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace gossamer::dataplane {
namespace {

namespace fs = std::filesystem;

struct Dir : TempDir {
  Dir() : TempDir("gossamer-memif-wake") {}
  std::string sock() const { return (path / "memif.sock").string(); }
};

bool readable(int fd, int timeout_ms = 0) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

TEST(MemifWake, RingsOnlyASleepingPeerOncePerSleep) {
  Dir d;
  MemifWake server, client;
  ASSERT_EQ(MemifWake::open(d.sock(), false, 1, &server), "");
  ASSERT_EQ(MemifWake::open(d.sock(), true, 1, &client), "");
  ASSERT_TRUE(server.ready() && client.ready());

  client.sent(0);  // the server is awake: no doorbell
  EXPECT_FALSE(readable(server.fd(0)));
  EXPECT_EQ(client.rung(), 0u);

  ASSERT_EQ(server.arm(0), "");  // the server goes to sleep
  client.sent(0);
  EXPECT_TRUE(readable(server.fd(0), 1000));
  EXPECT_EQ(client.rung(), 1u);
  client.sent(0);  // the word was cleared by the first: one doorbell per sleep
  client.sent(0);
  EXPECT_EQ(client.rung(), 1u);

  ASSERT_EQ(server.arm(0), "");  // drains what woke it, asks again
  EXPECT_FALSE(readable(server.fd(0)));
  client.sent(0);
  EXPECT_TRUE(readable(server.fd(0), 1000));
  EXPECT_EQ(client.rung(), 2u);

  // And the other way.
  ASSERT_EQ(client.arm(0), "");
  EXPECT_FALSE(readable(client.fd(0)));
  server.sent(0);
  EXPECT_TRUE(readable(client.fd(0), 1000));
  EXPECT_EQ(server.ring_errors(), 0u);
}

TEST(MemifWake, QueuesAreSeparate) {
  Dir d;
  MemifWake server, client;
  ASSERT_EQ(MemifWake::open(d.sock(), false, 2, &server), "");
  ASSERT_EQ(MemifWake::open(d.sock(), true, 2, &client), "");
  ASSERT_NE(server.fd(0), server.fd(1));  // a socket each: no core drains another's doorbell
  ASSERT_EQ(server.arm(1), "");
  client.sent(0);  // queue 0's core does not sleep
  EXPECT_FALSE(readable(server.fd(0)));
  EXPECT_FALSE(readable(server.fd(1)));
  client.sent(1);
  EXPECT_TRUE(readable(server.fd(1), 1000));
  EXPECT_FALSE(readable(server.fd(0)));
  EXPECT_NE(server.arm(2), "");  // no such queue
  EXPECT_EQ(server.fd(2), -1);
}

TEST(MemifWake, StayingAwakeAsksForNoDoorbellAndClearsALateOne) {
  Dir d;
  MemifWake server, client;
  ASSERT_EQ(MemifWake::open(d.sock(), false, 1, &server), "");
  ASSERT_EQ(MemifWake::open(d.sock(), true, 1, &client), "");
  ASSERT_EQ(server.arm(0), "");
  client.sent(0);  // rung while armed...
  ASSERT_TRUE(readable(server.fd(0), 1000));
  ASSERT_EQ(server.stay_awake(0), "");  // ...then a sleep on a timer: the late doorbell is gone
  EXPECT_FALSE(readable(server.fd(0)));
  ASSERT_EQ(server.arm(0), "");
  ASSERT_EQ(server.stay_awake(0), "");  // armed, then not: the word is cleared
  client.sent(0);
  EXPECT_FALSE(readable(server.fd(0)));
  EXPECT_EQ(client.rung(), 1u);
}

TEST(MemifWake, APeerThatRestartsStartsAwakeAndARingToNobodyIsCounted) {
  Dir d;
  MemifWake client;
  ASSERT_EQ(MemifWake::open(d.sock(), true, 1, &client), "");
  {
    MemifWake server;
    ASSERT_EQ(MemifWake::open(d.sock(), false, 1, &server), "");
    ASSERT_EQ(server.arm(0), "");
  }  // the server dies asleep: its word stays set, its socket is gone
  client.sent(0);
  EXPECT_EQ(client.rung(), 0u);
  EXPECT_EQ(client.ring_errors(), 1u);
  ASSERT_EQ(client.arm(0), "");
  MemifWake server;  // a new incarnation clears its words and binds again
  ASSERT_EQ(MemifWake::open(d.sock(), false, 1, &server), "");
  client.sent(0);
  EXPECT_EQ(client.ring_errors(), 1u);
  server.sent(0);  // the client still sleeps: the new server rings it
  EXPECT_TRUE(readable(client.fd(0), 1000));
}

TEST(MemifWake, BadSetupsAreRefusedWithAReason) {
  Dir d;
  MemifWake w;
  EXPECT_NE(MemifWake::open(d.sock(), false, 0, &w), "");
  EXPECT_NE(MemifWake::open(d.sock(), false, MemifWake::kMaxQueues + 1, &w), "");
  EXPECT_NE(MemifWake::open(std::string(200, 'x'), false, 1, &w).find("too long"), std::string::npos);
  fs::create_directory(d.sock() + ".wake");  // not a regular file
  EXPECT_NE(MemifWake::open(d.sock(), false, 1, &w), "");
  EXPECT_FALSE(w.ready());
}

// A sleeper that arms, looks, and waits, against a sender that publishes
// and rings: no publication is ever missed (the Dekker pairing).
TEST(MemifWake, NoWakeUpIsLostUnderRaces) {
  Dir d;
  MemifWake server, client;
  ASSERT_EQ(MemifWake::open(d.sock(), false, 1, &server), "");
  ASSERT_EQ(MemifWake::open(d.sock(), true, 1, &client), "");
  constexpr int kRounds = 20000;
  std::atomic<int> published{0};
  std::atomic<bool> stop{false};
  int seen = 0, missed = 0;
  std::thread sender([&] {
    for (int i = 1; i <= kRounds && !stop.load(); ++i) {
      published.store(i, std::memory_order_relaxed);  // the "ring"'s write
      client.sent(0);
      while (published.load(std::memory_order_relaxed) != -i && !stop.load()) std::this_thread::yield();  // consumed
    }
  });
  // A sleep that ends by its timeout with a publication waiting is a lost
  // wake-up; three end the test (a broken doorbell would otherwise take
  // kRounds timeouts).
  while (seen < kRounds && missed < 3) {
    int v = published.load(std::memory_order_relaxed);
    if (v <= seen) {
      ASSERT_EQ(server.arm(0), "");
      v = published.load(std::memory_order_seq_cst);  // the last look
      if (v <= seen && !readable(server.fd(0), 500)) ++missed;
      continue;
    }
    seen = v;
    published.store(-v, std::memory_order_relaxed);
  }
  stop.store(true);
  sender.join();
  EXPECT_EQ(missed, 0);
}

}  // namespace
}  // namespace gossamer::dataplane
