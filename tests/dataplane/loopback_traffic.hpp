// The traffic of the loopback rack tests (loopback_test.cpp, verbs_rack_test.cpp):
// every thread of two fake applications is a client of every remote
// trustee and a trustee of every remote client, with checked bodies; a
// request lost, repeated or changed is a test failure.
#pragma once

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "app.hpp"  // App::next_in_lane
#include "loopback_rack.hpp"

namespace gossamer::dataplane::testing {

using Clock = std::chrono::steady_clock;
constexpr std::uint32_t kHosts = 2, kTotal = 4;  // threads 0,1 on host a; 2,3 on host b

// A fresh GOSSAMER_RUN_ID.
inline std::string fresh_id() {
  return "t-" + std::to_string(std::random_device{}()) + "-" + std::to_string(std::random_device{}());
}

// Request and response sizes: mostly a slot's primary block, every 7th with
// an overflow larger than a frame (fragments).
inline std::size_t size_of(std::uint32_t seq, bool response) {
  if (seq % 7 == 0) return response ? 2000 : 3000;
  return 8 * (1 + (seq * 5 + (response ? 3 : 0)) % 13);
}
// Every 5th response says its rest is held back (kResponseMore), as a
// trustee's runtime does when an answer outgrows the slot; the dataplane
// carries the flag and nothing else changes: each request slot still gets
// one response slot.
inline std::uint16_t flags_of(std::uint32_t seq) { return seq % 5 == 0 ? abi::kResponseMore : 0; }

// Drives the client and trustee roles of every thread of both applications
// until each client has had `rounds` answers from each remote trustee.
class Traffic {
 public:
  // window: batches a client keeps out per trustee (1, or kLanes as the
  // runtime does across hosts: every lane).
  Traffic(FakeApp& a, FakeApp& b, std::uint32_t rounds, std::uint32_t window = abi::kLanes)
      : apps_{&a, &b}, rounds_(rounds), window_(window) {
    for (int h = 0; h < 2; ++h) {
      sent_[h].assign(kTotal * kTotal, 0);
      answered_[h].assign(kTotal * kTotal, 0);
      served_[h].assign(kTotal * kTotal, 0);
    }
  }
  // One pass over every pair; false once something was wrong (ADD_FAILURE).
  bool step() {
    for (int h = 0; h < 2; ++h) {
      FakeApp& app = *apps_[h];
      FakeApp& other = *apps_[1 - h];
      for (std::uint32_t li = 0; li < app.local(); ++li)
        for (std::uint32_t r = 0; r < other.local(); ++r) {
          const std::uint32_t self = app.first() + li, peer = other.first() + r;
          if (!client(h, li, self, peer) || !trustee(h, li, self, peer)) return false;
        }
    }
    return true;
  }
  void extend(std::uint32_t rounds) { rounds_ = rounds; }
  std::uint32_t sent_max() const {
    std::uint32_t m = 0;
    for (int h = 0; h < 2; ++h)
      for (std::uint32_t v : sent_[h]) m = std::max(m, v);
    return m;
  }
  std::uint64_t answers() const {
    std::uint64_t n = 0;
    for (int h = 0; h < 2; ++h)
      for (std::uint32_t v : answered_[h]) n += v;
    return n;
  }
  bool done() const {
    for (int h = 0; h < 2; ++h)
      for (std::uint32_t i = 0; i < kTotal * kTotal; ++i)
        if (answered_[h][i] < rounds_ && owns(h, i / kTotal) && !owns(h, i % kTotal)) return false;
    return true;
  }
  std::uint32_t served(int h, std::uint32_t trustee, std::uint32_t client) const {
    return served_[h][trustee * kTotal + client];
  }
  // Requests the trustee side saw beyond the ones already served: the
  // detach drain's last batch (no response expected).
  bool saw_final(int h, std::uint32_t li, std::uint32_t client, std::uint32_t seq) {
    FakeApp& app = *apps_[h];
    if (app.request_seq(li, client, seq) != seq) return false;
    const auto body = app.request_body(li, client, seq);
    EXPECT_EQ(body, pattern(client, app.first() + li, seq, false, size_of(seq, false)));
    return true;
  }

 private:
  bool owns(int h, std::uint32_t self) const {
    return self >= apps_[h]->first() && self < apps_[h]->first() + apps_[h]->local();
  }
  // Up to window_ batches out (one per lane), answered in seq order.
  bool client(int h, std::uint32_t li, std::uint32_t self, std::uint32_t peer) {
    FakeApp& app = *apps_[h];
    const std::uint32_t i = self * kTotal + peer;
    while (answered_[h][i] < sent_[h][i]) {
      const std::uint32_t want = answered_[h][i] + 1;
      const std::uint32_t got = app.response_seq(li, peer, want);
      if (got != want) {
        // The lane still holds its previous answer (or none yet).
        if (!App::next_in_lane(got, want)) {
          ADD_FAILURE() << "thread " << self << ": response slot of " << peer << " says " << got << ", waiting for "
                        << want;
          return false;
        }
        break;
      }
      const auto body = app.response_body(li, peer, want);
      if (body != pattern(self, peer, got, true, size_of(got, true)) ||
          app.response_flags(li, peer, want) != flags_of(got)) {
        ADD_FAILURE() << "thread " << self << ": response " << got << " from " << peer << " has other bytes or flags";
        return false;
      }
      answered_[h][i] = got;
    }
    while (sent_[h][i] - answered_[h][i] < window_ && sent_[h][i] < rounds_) {
      const std::uint32_t seq = ++sent_[h][i];
      app.request(li, peer, seq, pattern(self, peer, seq, false, size_of(seq, false)));
    }
    return true;
  }
  // Serves each client's batches in seq order, whichever lane came first.
  bool trustee(int h, std::uint32_t li, std::uint32_t self, std::uint32_t client) {
    FakeApp& app = *apps_[h];
    const std::uint32_t i = self * kTotal + client;
    const std::uint32_t want = served_[h][i] + 1;
    const std::uint32_t got = app.request_seq(li, client, want);
    if (got != want) {
      if (!App::next_in_lane(got, want)) {
        ADD_FAILURE() << "trustee " << self << ": request from " << client << " is " << got << " after "
                      << served_[h][i] << " (lost or repeated)";
        return false;
      }
      return true;
    }
    if (got > rounds_) return true;  // a detach drain's final batch: not answered
    if (app.request_body(li, client, got) != pattern(client, self, got, false, size_of(got, false))) {
      ADD_FAILURE() << "trustee " << self << ": request " << got << " from " << client << " has other bytes";
      return false;
    }
    served_[h][i] = got;
    app.respond(li, client, got, pattern(client, self, got, true, size_of(got, true)), flags_of(got));
    return true;
  }

  FakeApp* apps_[2];
  std::uint32_t rounds_;
  std::uint32_t window_;
  std::vector<std::uint32_t> sent_[2], answered_[2], served_[2];  // [self * kTotal + peer]
};

// Attaches both, waits for the start barrier.
inline void attach_both(FakeApp& a, FakeApp& b) {
  ASSERT_EQ(a.attach().type, abi::kMsgAttachOk);
  ASSERT_EQ(b.attach().type, abi::kMsgAttachOk);
  ASSERT_TRUE(a.wait_message(abi::kMsgStart, 10'000)) << "host a: no start";
  ASSERT_TRUE(b.wait_message(abi::kMsgStart, 10'000)) << "host b: no start";
}

inline bool run_until(Traffic& t, std::chrono::seconds limit) {
  const auto end = Clock::now() + limit;
  while (!t.done()) {
    if (!t.step()) return false;
    if (Clock::now() > end) {
      ADD_FAILURE() << "traffic did not complete within " << limit.count() << " s";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return true;
}

}  // namespace gossamer::dataplane::testing
