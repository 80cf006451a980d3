// Two batches in flight per channel (runtime/src/square.hpp, "Lanes"): a
// client publishes its next batch to a trustee on the same host while the
// trustee has not answered the previous one, and the trustee still runs a
// client's requests in the order they were sent, lane after lane.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

#include "common.hpp"

namespace {

using gossamer_test::wait_until;

// Thread 1 is held by a fiber that does not yield; thread 0 queues three
// batches' worth of requests to it (a batch goes out at 16 queued), then
// spins without yielding, so it neither takes responses nor sends anything
// more from its loop. With one slot per channel only the first batch is out
// and request 16 cannot run until thread 0 yields; with two lanes the
// second batch is out too, and thread 1 serves both once released.
TEST(LanesTest, ASecondBatchGoesOutBeforeTheFirstIsAnswered) {
  constexpr long kN = 48;
  std::atomic<bool> go{false}, holding{false}, second_ran{false};
  bool seen = false;
  std::vector<long> order;
  long done = 0;
  gossamer::run(2, [&] {
    auto log = gossamer::trustee(1).entrust(std::vector<long>{});
    std::atomic<bool>* gop = &go;
    std::atomic<bool>* holdingp = &holding;
    auto holder = gossamer::spawn_on(1, [gop, holdingp] {
      holdingp->store(true);
      while (!gop->load()) __builtin_ia32_pause();
    });
    while (!holding.load()) gossamer::yield();
    std::atomic<bool>* ran = &second_ran;
    long* donep = &done;
    for (long i = 0; i < kN; ++i)
      log.apply_then(
          [i, ran](std::vector<long>& v) {
            v.push_back(i);
            if (i == 16) ran->store(true);
          },
          [donep] { ++*donep; });
    go.store(true);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!second_ran.load() && std::chrono::steady_clock::now() < deadline) __builtin_ia32_pause();
    seen = second_ran.load();
    ASSERT_TRUE(wait_until([&] { return done == kN; }));
    holder.join();
    order = log.apply([](std::vector<long>& v) { return v; });
  });
  EXPECT_TRUE(seen) << "the second batch was not served while the client held its thread";
  ASSERT_EQ(order.size(), std::size_t(kN));
  for (long i = 0; i < kN; ++i) EXPECT_EQ(order[std::size_t(i)], i);
}

std::string filler(std::size_t n, long salt) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = char('a' + (std::size_t(salt) + i) % 26);
  return s;
}

// Several fibers on two client threads send to one trustee, with bodies and
// results from 0 bytes to past a block (primary, overflow, heap), so batches
// of every shape use both lanes: the trustee sees each client's requests in
// the order that client sent them, and each response reaches its request.
TEST(LanesTest, EachClientsRequestsRunInOrderAcrossLanes) {
  constexpr int kFibers = 4;
  constexpr long kPerFiber = 3000;
  struct Seen {
    long last[3] = {-1, -1, -1};  // per client thread: the last sequence number run
    long out_of_order = 0;
  };
  long wrong = 0, out_of_order = 0;
  // No backpressure bound: a fiber never waits between taking its sequence
  // number and encoding its request, so numbers are taken in send order.
  gossamer::Options o;
  o.threads = 3;
  o.max_outstanding = 0;
  gossamer::run(o, [&] {
    auto seen = gossamer::trustee(2).entrust(Seen{});
    auto ref = seen.ref();
    // One sequence per client thread, in the order its fibers issue.
    std::vector<gossamer::FiberHandle> clients;
    for (std::size_t t = 0; t < 2; ++t) {
      long* wrongp = &wrong;
      clients.push_back(gossamer::spawn_on(t, [ref, t, wrongp] {
        long next = 0, arrived = 0, bad = 0;
        long *nextp = &next, *arrivedp = &arrived, *badp = &bad;
        std::vector<gossamer::FiberHandle> fs;
        for (int f = 0; f < kFibers; ++f) {
          fs.push_back(gossamer::spawn([ref, t, f, nextp, arrivedp, badp] {
            for (long i = 0; i < kPerFiber; ++i) {
              const long seq = (*nextp)++;
              const std::size_t size = std::size_t((seq * 37) % (f == 0 ? 20000 : 300));
              ref.apply_with_then(
                  [](Seen& s, long q, std::size_t th, std::string body) {
                    if (q <= s.last[th]) ++s.out_of_order;
                    s.last[th] = q;
                    return body.size() % 2 ? body + "!" : std::string(body.size() / 2, 'x');
                  },
                  [arrivedp, badp, size, seq](std::string r) {
                    const std::string want =
                        size % 2 ? filler(size, seq) + "!" : std::string(size / 2, 'x');
                    if (r != want) ++*badp;
                    ++*arrivedp;
                  },
                  seq, t, filler(size, seq));
              if (i % 64 == 63) gossamer::yield();
            }
          }));
        }
        for (auto& h : fs) h.join();
        while (arrived < kFibers * kPerFiber) gossamer::yield();
        __atomic_add_fetch(wrongp, bad, __ATOMIC_RELAXED);
      }));
    }
    for (auto& h : clients) h.join();
    out_of_order = seen.apply([](Seen& s) { return s.out_of_order; });
    Seen last = seen.apply([](Seen& s) { return s; });
    EXPECT_EQ(last.last[0], kFibers * kPerFiber - 1);
    EXPECT_EQ(last.last[1], kFibers * kPerFiber - 1);
  });
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(out_of_order, 0);
}

}  // namespace
