// Several ports as one (dataplane/src/port_multi.hpp): each frame leaves on
// the port that reaches its peer, rx polls every port, a core may sleep
// only when every port is armed and wakes on any port's descriptor. Over
// loopback pairs (frames really move) and a recording port that can refuse
// frames and arming.
#include "port_multi.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <deque>

#include <gtest/gtest.h>

#include <gossamer/config.hpp>

#include "dataplane.hpp"
#include "port_loopback.hpp"

namespace gossamer::dataplane {
namespace {

// A port that keeps what it is sent (up to `room` frames a burst), hands
// out what a test queued, and has a wake descriptor of its own.
class RecordingPort final : public Port {
 public:
  explicit RecordingPort(std::uint8_t mac_last, std::uint16_t queues = 1) : queues_(queues) {
    mac_[5] = mac_last;
    fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }
  ~RecordingPort() override {
    ::close(fd_);
    for (const Frame& f : sent) release(f);
    for (const Frame& f : incoming) release(f);
  }
  std::uint16_t queues() const override { return queues_; }
  std::array<std::uint8_t, 6> mac() const override { return mac_; }
  std::uint16_t rx_burst(std::uint16_t, Frame* out, std::uint16_t n) override {
    std::uint16_t k = 0;
    while (k < n && !incoming.empty()) {
      out[k++] = incoming.front();
      incoming.pop_front();
    }
    return k;
  }
  bool alloc(std::uint32_t len, Frame* out) override {
    auto* b = new std::uint8_t[len];
    std::memset(b, 0, len);
    *out = Frame{b, b, len};
    return true;
  }
  std::uint16_t tx_burst(std::uint16_t, Frame* f, std::uint16_t n) override {
    const std::uint16_t k = std::min(n, room);
    sent.insert(sent.end(), f, f + k);
    return k;
  }
  void release(const Frame& f) override { delete[] static_cast<std::uint8_t*>(f.handle); }
  void retain(const Frame&) override {}
  Frame frame(void* h) const override { return Frame{h, static_cast<std::uint8_t*>(h), 0}; }
  int rx_wake_fd(std::uint16_t) const override { return has_fd ? fd_ : -1; }
  bool rx_wake_arm(std::uint16_t, bool) override {
    ++arms;
    return armable;
  }
  std::uint64_t rx_due(std::uint16_t) const override { return due; }
  std::string describe() const override { return "recording port"; }

  std::uint16_t room = 64;
  bool has_fd = true, armable = true;
  int arms = 0;
  std::uint64_t due = UINT64_MAX;
  std::vector<Frame> sent;
  std::deque<Frame> incoming;

 private:
  std::uint16_t queues_;
  std::array<std::uint8_t, 6> mac_{0x02, 0, 0, 0, 0, 0};
  int fd_;
};

Frame frame_to(Port& p, std::uint32_t peer, std::uint8_t tag) {
  Frame f;
  EXPECT_TRUE(p.alloc(64, &f));
  f.data[20] = tag;
  f.peer = peer;
  return f;
}

// Host a of three: link 0 to b, link 1 to c (loopback pairs: the far
// sides stand for b's and c's ports).
struct Three {
  std::unique_ptr<MultiPort> a;
  std::unique_ptr<Port> b, c;
  Three() {
    auto [a_b, far_b] = make_loopback_pair(1);
    auto [a_c, far_c] = make_loopback_pair(1);
    b = std::move(far_b);
    c = std::move(far_c);
    std::vector<std::unique_ptr<Port>> links;
    links.push_back(std::move(a_b));
    links.push_back(std::move(a_c));
    EXPECT_EQ(MultiPort::make(std::move(links), {MultiPort::kNoLink, 0, 1}, &a), "");
  }
};

TEST(MultiPort, SendsEachFrameOnItsPeersPortAndReceivesFromAll) {
  Three t;
  auto& [a, b, c] = t;
  ASSERT_TRUE(a);
  EXPECT_EQ(a->link_of(1), 0);
  EXPECT_EQ(a->link_of(2), 1);

  Frame out[6];
  const std::uint32_t peers[6] = {2, 1, 2, 2, 1, UINT32_MAX};  // the last names no peer: link 0
  for (int i = 0; i < 6; ++i) out[i] = frame_to(*a, peers[i], std::uint8_t(10 + i));
  ASSERT_EQ(a->tx_burst(0, out, 6), 6);

  Frame in[8];
  ASSERT_EQ(b->rx_burst(0, in, 8), 3);  // in their order: tags 11, 14, 15
  EXPECT_EQ(in[0].data[20], 11);
  EXPECT_EQ(in[1].data[20], 14);
  EXPECT_EQ(in[2].data[20], 15);
  for (int i = 0; i < 3; ++i) b->release(in[i]);
  ASSERT_EQ(c->rx_burst(0, in, 8), 3);  // tags 10, 12, 13
  EXPECT_EQ(in[0].data[20], 10);
  EXPECT_EQ(in[1].data[20], 12);
  EXPECT_EQ(in[2].data[20], 13);
  for (int i = 0; i < 3; ++i) c->release(in[i]);
  EXPECT_EQ(a->frames(0).tx, 3u);
  EXPECT_EQ(a->frames(1).tx, 3u);

  // b and c answer: a sees both.
  Frame r1 = frame_to(*b, 0, 21), r2 = frame_to(*c, 0, 22);
  ASSERT_EQ(b->tx_burst(0, &r1, 1), 1);
  ASSERT_EQ(c->tx_burst(0, &r2, 1), 1);
  ASSERT_EQ(a->rx_burst(0, in, 8), 2);
  EXPECT_EQ(in[0].data[20] + in[1].data[20], 21 + 22);
  for (int i = 0; i < 2; ++i) a->release(in[i]);
  EXPECT_EQ(a->frames(0).rx, 1u);
  EXPECT_EQ(a->frames(1).rx, 1u);
}

// A port's device counts what it lost: a loopback side whose ring is full
// counts each frame sent to it as missed; the multi-port reports each
// link's and their sum.
TEST(MultiPort, CountsWhatEachPortsDeviceDropped) {
  Three t;
  auto& [a, b, c] = t;
  ASSERT_TRUE(a);
  EXPECT_EQ(a->device_errors().rx_missed, 0u);
  // b and c fill a's rings (4096 frames each), then send 3 and 5 more.
  auto flood = [](Port& from, std::uint32_t frames) {
    for (std::uint32_t i = 0; i < frames; ++i) {
      Frame f = frame_to(from, 0, 1);
      ASSERT_EQ(from.tx_burst(0, &f, 1), 1);  // taken: lost on the far side, as on a wire
    }
    EXPECT_EQ(from.device_errors().rx_missed, 0u);  // the sender's own ring is not full
  };
  flood(*b, 4096 + 3);
  flood(*c, 4096 + 5);
  EXPECT_EQ(a->link(0).device_errors().rx_missed, 3u);
  EXPECT_EQ(a->link(1).device_errors().rx_missed, 5u);
  const Port::DeviceErrors sum = a->device_errors();
  EXPECT_EQ(sum.rx_missed, 8u);
  EXPECT_EQ(sum.rx_errors + sum.rx_no_buffer + sum.tx_errors, 0u);
  // What a did receive is all there: a full ring, from each.
  Frame in[64];
  std::uint64_t got = 0;
  while (const std::uint16_t k = a->rx_burst(0, in, 64)) {
    got += k;
    for (std::uint16_t i = 0; i < k; ++i) a->release(in[i]);
  }
  EXPECT_EQ(got, 2u * 4096);
}

struct Two {
  RecordingPort* l0;
  RecordingPort* l1;
  std::unique_ptr<MultiPort> m;
  explicit Two(std::uint8_t mac1 = 1) {
    auto p0 = std::make_unique<RecordingPort>(1), p1 = std::make_unique<RecordingPort>(mac1);
    l0 = p0.get();
    l1 = p1.get();
    std::vector<std::unique_ptr<Port>> links;
    links.push_back(std::move(p0));
    links.push_back(std::move(p1));
    EXPECT_EQ(MultiPort::make(std::move(links), {0, 1, MultiPort::kNoLink}, &m), "");
  }
};

TEST(MultiPort, WhatAPortRefusedStaysTheCallersAfterWhatWasTaken) {
  Two t;
  t.l1->room = 1;  // link 1 takes one frame of its two
  Frame f[4];
  const std::uint32_t peers[4] = {1, 0, 1, 0};
  for (int i = 0; i < 4; ++i) f[i] = frame_to(*t.m, peers[i], std::uint8_t(i));
  ASSERT_EQ(t.m->tx_burst(0, f, 4), 3);
  // Taken first (link 0's two, link 1's first), then the one refused.
  EXPECT_EQ(f[3].data[20], 2);
  ASSERT_EQ(t.l1->sent.size(), 1u);
  EXPECT_EQ(t.l1->sent[0].data[20], 0);
  ASSERT_EQ(t.l0->sent.size(), 2u);
  EXPECT_EQ(t.l0->sent[0].data[20], 1);
  EXPECT_EQ(t.l0->sent[1].data[20], 3);
  for (int i = 0; i < 3; ++i) EXPECT_NE(f[i].data[20], 2);
  t.l1->room = 64;
  ASSERT_EQ(t.m->tx_burst(0, f + 3, 1), 1);  // the caller's retry
  EXPECT_EQ(t.m->frames(1).tx, 2u);
}

TEST(MultiPort, WritesEachPortsOwnSourceMac) {
  Two t(7);  // link 1's MAC ends in 7, link 0's (the host's) in 1
  Frame f[2] = {frame_to(*t.m, 0, 0), frame_to(*t.m, 1, 0)};
  ASSERT_EQ(t.m->tx_burst(0, f, 2), 2);
  EXPECT_EQ(t.l0->sent[0].data[11], 0);  // link 0: as the transport wrote it
  EXPECT_EQ(t.l1->sent[0].data[11], 7);
  EXPECT_EQ(t.m->mac()[5], 1);
}

TEST(MultiPort, PollsEveryPortStartingFromTheNext) {
  Two t;
  for (std::uint8_t i = 0; i < 4; ++i) {
    t.l0->incoming.push_back(frame_to(*t.l0, 0, std::uint8_t(i)));
    t.l1->incoming.push_back(frame_to(*t.l1, 0, std::uint8_t(100 + i)));
  }
  Frame in[8];
  // Two at a time: link 0 first, then link 1 first, so neither starves.
  ASSERT_EQ(t.m->rx_burst(0, in, 2), 2);
  EXPECT_EQ(in[0].data[20], 0);
  EXPECT_EQ(in[1].data[20], 1);
  ASSERT_EQ(t.m->rx_burst(0, in + 2, 2), 2);
  EXPECT_EQ(in[2].data[20], 100);
  ASSERT_EQ(t.m->rx_burst(0, in + 4, 8), 4);  // both, what is left
  EXPECT_EQ(t.m->frames(0).rx, 4u);
  EXPECT_EQ(t.m->frames(1).rx, 4u);
  for (const Frame& f : in) t.m->release(f);
}

TEST(MultiPort, SleepsOnlyWhenEveryPortIsArmedAndWakesOnAny) {
  Two t;
  EXPECT_EQ(t.m->rx_wake_fds(0).size(), 2u);
  EXPECT_EQ(t.m->rx_wake_fd(0), -1);  // several: rx_wake_fds
  EXPECT_TRUE(t.m->rx_wake_arm(0, true));
  t.l0->armable = false;
  EXPECT_FALSE(t.m->rx_wake_arm(0, true));
  EXPECT_EQ(t.l1->arms, 2);  // armed even though link 0 was not
  t.l1->has_fd = false;      // a port without a descriptor: the core wakes on timers
  EXPECT_TRUE(t.m->rx_wake_fds(0).empty());
  t.l1->due = 1234;          // a frame link 1 holds back comes out then
  EXPECT_EQ(t.m->rx_due(0), 1234u);
}

// The dataplane's table from dataplane.ports: host c of four, its frames
// to a and d on port 1, to b on port 0.
TEST(MultiPort, RoutesAsDataplanePortsSays) {
  const auto r = config::load_string(
      "host: {name: c}\n"
      "rack:\n  hosts:\n"
      "    - {name: a, control: 10.0.0.1:7700, data: 10.0.0.1:7800}\n"
      "    - {name: b, control: 10.0.0.2:7700, data: 10.0.0.2:7800}\n"
      "    - {name: c, control: 10.0.0.3:7700, data: 10.0.0.3:7800}\n"
      "    - {name: d, control: 10.0.0.4:7700, data: 10.0.0.4:7800}\n"
      "dataplane:\n  ports:\n"
      "    - {vdev: net_memif0, peers: [b]}\n"
      "    - {vdev: net_memif1, peers: [d, a]}\n",
      "c.yaml");
  ASSERT_TRUE(r.ok());
  const std::vector<std::uint16_t> table = port_of_peers(r.config());
  EXPECT_EQ(table, (std::vector<std::uint16_t>{1, 0, MultiPort::kNoLink, 1}));
  std::vector<std::unique_ptr<Port>> links;
  auto p0 = std::make_unique<RecordingPort>(1), p1 = std::make_unique<RecordingPort>(1);
  RecordingPort *l0 = p0.get(), *l1 = p1.get();
  links.push_back(std::move(p0));
  links.push_back(std::move(p1));
  std::unique_ptr<MultiPort> m;
  ASSERT_EQ(MultiPort::make(std::move(links), table, &m), "");
  Frame f[3] = {frame_to(*m, 0, 0), frame_to(*m, 1, 1), frame_to(*m, 3, 3)};
  ASSERT_EQ(m->tx_burst(0, f, 3), 3);
  ASSERT_EQ(l0->sent.size(), 1u);
  EXPECT_EQ(l0->sent[0].data[20], 1);  // b
  ASSERT_EQ(l1->sent.size(), 2u);
  EXPECT_EQ(l1->sent[0].data[20], 0);  // a
  EXPECT_EQ(l1->sent[1].data[20], 3);  // d
  EXPECT_EQ(m->describe(), "2 ports (0 to host 1: recording port; 1 to hosts 0, 3: recording port)");
  // Without dataplane.ports, every peer through the one port.
  const auto one = config::load_string(
      "host: {index: 0}\nrack:\n  hosts:\n"
      "    - {name: a, control: 10.0.0.1:7700, data: 10.0.0.1:7800}\n"
      "    - {name: b, control: 10.0.0.2:7700, data: 10.0.0.2:7800}\n",
      "a.yaml");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(port_of_peers(one.config()), (std::vector<std::uint16_t>{MultiPort::kNoLink, 0}));
}

TEST(MultiPort, RefusesLinksThatDoNotFit) {
  std::unique_ptr<MultiPort> m;
  EXPECT_EQ(MultiPort::make({}, {}, &m), "no port");
  {
    std::vector<std::unique_ptr<Port>> links;
    links.push_back(std::make_unique<RecordingPort>(1, 2));
    links.push_back(std::make_unique<RecordingPort>(2, 1));
    EXPECT_EQ(MultiPort::make(std::move(links), {0, 1}, &m), "port 1 has 1 queues, port 0 2");
  }
  {
    std::vector<std::unique_ptr<Port>> links;
    links.push_back(std::make_unique<RecordingPort>(1));
    EXPECT_EQ(MultiPort::make(std::move(links), {0, 1}, &m), "host 1 is reached through port 1 of 1");
  }
  EXPECT_EQ(m, nullptr);
}

}  // namespace
}  // namespace gossamer::dataplane
