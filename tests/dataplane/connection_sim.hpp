// The connection tests' harness (connection_test.cpp,
// connection_fragments_test.cpp): records and payloads by slot sequence,
// a simulated link with loss, duplication, reordering and latency between
// two connections, and the checks on what they delivered. Time is in
// microseconds (tsc_hz = 1'000'000).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include <gossamer/abi/slots.hpp>

#include "connection.hpp"
#include "wire.hpp"

namespace {

using gossamer::dataplane::Connection;
using gossamer::dataplane::ConnectionStats;
using gossamer::dataplane::Reassembly;
using gossamer::dataplane::wire::FrameHeader;
using gossamer::dataplane::wire::kAckOnly;
using gossamer::dataplane::wire::kData;
using gossamer::dataplane::wire::kMaxUdpPayload;
using gossamer::dataplane::wire::kRecRequest;
using gossamer::dataplane::wire::kRecResponse;
using gossamer::dataplane::wire::RecordCursor;
using gossamer::dataplane::wire::RecordView;
using gossamer::dataplane::wire::WireRecord;
using gossamer::dataplane::wire::kFragment;
using gossamer::dataplane::wire::kFragMore;
using gossamer::dataplane::wire::kMaxFragmentBytes;
using gossamer::dataplane::wire::kMaxRecordBytes;

constexpr std::uint64_t kHz = 1'000'000;
constexpr std::uint64_t kStep = 50;       // µs per loop step
constexpr std::uint64_t kLatency = 20;    // µs one way
// Connection 0: always active (the others start inactive; see the
// ConnectionActivation tests).
constexpr std::uint8_t kIndex = 0;

struct Faults {
  double loss = 0, dup = 0, reorder = 0;
};
// The faults of the tests under faults: 5 % loss, 5 % duplication, 20 % reordering.
constexpr Faults kFaults{0.05, 0.05, 0.20};

// Slot seqs from kBigFirst on are large slots (fragmented on the wire).
constexpr std::uint32_t kBigFirst = 1'000'000;
// Large slots need a large overflow block; 16 KiB of payload otherwise (the
// Reassembly tests that check the blocks' bounds use their own sizes).
constexpr std::size_t kBigMax = 96 + std::max<std::size_t>(gossamer::abi::kOverflowBytes, 16384);

// Payload of the record with slot seq `s`: 0..1000 bytes (large slots: up
// to a whole slot), byte i = s * 13 + i.
std::size_t body_of(std::uint32_t s) {
  if (s >= kBigFirst) return 1 + (std::size_t(s) * 7919u) % kBigMax;
  return (std::size_t(s) * 7919u) % 1001u;
}
std::uint8_t byte_of(std::uint32_t s, std::size_t i) { return std::uint8_t(s * 13u + i); }

WireRecord record_for(std::uint32_t slot_seq) {
  std::size_t body = body_of(slot_seq);
  WireRecord r{};
  r.kind = slot_seq % 3 ? kRecRequest : kRecResponse;
  r.count = 1;
  r.client = 1;
  r.trustee = 2;
  r.slot_seq = slot_seq;
  r.primary_len = std::uint16_t(std::min<std::size_t>(body, 96));
  r.overflow_len = std::uint16_t(body - r.primary_len);
  r.app = 0x5eed;
  return r;
}

std::vector<std::uint8_t> payload_for(std::uint32_t slot_seq) {
  std::vector<std::uint8_t> payload(body_of(slot_seq));
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = byte_of(slot_seq, i);
  return payload;
}

void enqueue_record(Connection& c, std::uint32_t slot_seq) {
  c.enqueue(record_for(slot_seq), payload_for(slot_seq).data());
}

// One direction of the wire. Frames are copied when emitted and handed to
// the receiver at their delivery time; reordered ones are held longer.
class Link {
 public:
  Link(std::mt19937* rng, Faults f) : rng_(rng), faults_(f) {}

  // Returns true to drop an emitted frame (before loss is applied).
  std::function<bool(const FrameHeader&)> filter;
  // May edit an emitted frame's header.
  std::function<void(FrameHeader&)> rewrite;

  void push(const std::uint8_t* p, std::size_t len, std::uint64_t now) {
    EXPECT_GE(len, sizeof(FrameHeader));
    EXPECT_LE(len, kMaxUdpPayload);
    FrameHeader h;
    std::memcpy(&h, p, sizeof h);
    EXPECT_EQ(h.length, len - sizeof h);
    ++emitted;
    if (h.type == kData) {
      max_seq = std::max(max_seq, h.seq);
      ++data_emitted;
    } else {
      ++acks_emitted;
    }
    max_credit = std::max(max_credit, h.credit);
    if (filter && filter(h)) {
      ++filtered;
      return;
    }
    if (chance(faults_.loss)) {
      ++lost;
      return;
    }
    int copies = chance(faults_.dup) ? 2 : 1;
    for (int i = 0; i < copies; ++i) {
      Packet pk;
      pk.bytes.assign(p, p + len);
      if (rewrite) {
        FrameHeader e;
        std::memcpy(&e, pk.bytes.data(), sizeof e);
        rewrite(e);
        std::memcpy(pk.bytes.data(), &e, sizeof e);
      }
      pk.at = now + kLatency;
      if (chance(faults_.reorder)) pk.at += 25 + (*rng_)() % 400;
      pk.id = next_id_++;
      q_.push_back(std::move(pk));
    }
  }

  // Frames due by `now`, in delivery order; removed from the link.
  std::vector<std::vector<std::uint8_t>> due(std::uint64_t now) {
    std::vector<Packet> ready;
    std::vector<Packet> rest;
    for (auto& pk : q_) (pk.at <= now ? ready : rest).push_back(std::move(pk));
    q_ = std::move(rest);
    std::sort(ready.begin(), ready.end(), [](const Packet& a, const Packet& b) {
      return a.at != b.at ? a.at < b.at : a.id < b.id;
    });
    std::vector<std::vector<std::uint8_t>> out;
    for (auto& pk : ready) out.push_back(std::move(pk.bytes));
    return out;
  }
  bool empty() const { return q_.empty(); }

  std::uint64_t emitted = 0, data_emitted = 0, acks_emitted = 0, filtered = 0, lost = 0;
  std::uint32_t max_seq = 0;     // highest data seq emitted
  std::uint32_t max_credit = 0;  // highest credit field emitted

 private:
  struct Packet {
    std::vector<std::uint8_t> bytes;
    std::uint64_t at;
    std::uint64_t id;
  };
  bool chance(double p) {
    return p > 0 && std::uniform_real_distribution<double>(0, 1)(*rng_) < p;
  }
  std::mt19937* rng_;
  Faults faults_;
  std::vector<Packet> q_;
  std::uint64_t next_id_ = 0;
};

struct Side {
  std::unique_ptr<Connection> conn;
  std::vector<std::uint32_t> delivered;  // slot seqs of records delivered here
  std::uint64_t delivered_frames = 0;
  std::uint64_t payload_errors = 0;
};

struct Sim {
  Sim(std::uint32_t credits, std::uint32_t seed, Faults f, std::uint64_t boot_a = 100,
      std::uint64_t boot_b = 200, std::uint8_t index = kIndex, std::uint32_t first_seq = 1)
      : rng(seed), ab(&rng, f), ba(&rng, f), credits(credits) {
    a.conn = std::make_unique<Connection>(0, 1, index, credits, boot_a, kHz, first_seq);
    b.conn = std::make_unique<Connection>(1, 0, index, credits, boot_b, kHz, first_seq);
    big_limits(*a.conn);
    big_limits(*b.conn);
  }
  // Blocks for the large test slots, whatever the built slot layout.
  static void big_limits(Connection& c) { c.reassembly().set_limits(112, 104, kBigMax - 96); }

  Connection::Emit emit_a() {
    return [this](const std::uint8_t* p, std::size_t len) { ab.push(p, len, now); };
  }
  Connection::Emit emit_b() {
    return [this](const std::uint8_t* p, std::size_t len) { ba.push(p, len, now); };
  }

  // Hands a frame to `to`; records of a delivered frame go to its list.
  static Connection::Accept deliver(Side& to, const std::vector<std::uint8_t>& bytes,
                                    std::uint64_t now, const Connection::Emit& emit) {
    FrameHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    Connection::Accept acc = to.conn->on_frame(h, now, emit);
    if (acc == Connection::Accept::kDeliver) {
      EXPECT_EQ(h.type, kData);
      ++to.delivered_frames;
      RecordCursor cur(bytes.data() + sizeof h, h.length);
      RecordView v;
      std::size_t n = 0;
      RecordView whole;
      while (cur.next(&v)) {
        ++n;
        switch (to.conn->reassemble(v, &whole)) {
          case Reassembly::Result::kWhole: break;
          case Reassembly::Result::kComplete: v = whole; break;
          case Reassembly::Result::kHeld: continue;
          case Reassembly::Result::kDropped: ++to.payload_errors; continue;
        }
        to.delivered.push_back(v.rec.slot_seq);
        std::size_t body = std::size_t(v.rec.primary_len) + v.rec.overflow_len;
        if (body != body_of(v.rec.slot_seq)) ++to.payload_errors;
        for (std::size_t i = 0; i < body; ++i)
          if (v.payload[i] != byte_of(v.rec.slot_seq, i)) {
            ++to.payload_errors;
            break;
          }
      }
      EXPECT_EQ(n, h.records);
    }
    return acc;
  }

  void step() {
    now += kStep;
    auto ea = emit_a(), eb = emit_b();
    for (auto& f : ab.due(now)) deliver(b, f, now, eb);
    for (auto& f : ba.due(now)) deliver(a, f, now, ea);
    a.conn->pump(now, ea);
    b.conn->pump(now, eb);
    a.conn->timers(now, ea);
    b.conn->timers(now, eb);
    a.conn->flush_ack(now, ea);
    b.conn->flush_ack(now, eb);
  }

  bool quiet() const {
    return !a.conn->has_pending() && !b.conn->has_pending() && a.conn->unacked() == 0 &&
           b.conn->unacked() == 0;
  }

  // Steps until `done` or `max_steps`; returns the steps taken.
  template <class Done>
  std::uint64_t run(Done done, std::uint64_t max_steps) {
    std::uint64_t steps = 0;
    while (!done() && steps < max_steps) {
      step();
      ++steps;
    }
    return steps;
  }

  std::uint64_t now = 1000;
  std::mt19937 rng;
  Link ab, ba;
  Side a, b;
  std::uint32_t credits;
};

[[maybe_unused]] std::vector<std::uint32_t> iota(std::uint32_t first, std::uint32_t n) {
  std::vector<std::uint32_t> v(n);
  for (std::uint32_t i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

// Exactly once and in order, with the first difference in the message.
void expect_sequence(const std::vector<std::uint32_t>& got, const std::vector<std::uint32_t>& want) {
  if (got == want) return;
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  ADD_FAILURE() << "delivered " << got.size() << " records, expected " << want.size()
                << "; first difference at index " << i << ": got "
                << (i < got.size() ? std::to_string(got[i]) : "nothing") << ", expected "
                << (i < want.size() ? std::to_string(want[i]) : "nothing");
}

// ---- no faults -------------------------------------------------------------------

}  // namespace
