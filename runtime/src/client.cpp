// Client side of delegation: requests encoded into the channel's queue
// (encode.cpp) are packed into the request slot when it is free, and their
// responses matched to completions in order (papers 001 §5.2-5.3,
// 000 §3.2.4).
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "runtime_state.hpp"
#include "worker.hpp"

namespace gossamer::detail {

namespace {
using abi::RequestHeader;
using abi::ResponseHeader;
constexpr std::uint32_t kRecordHeader = sizeof(RequestHeader);
// Largest record a block can hold; bigger bodies go out of line (same host)
// or in pieces (across hosts).
constexpr std::uint32_t kMaxInlineRecord = abi::kOverflowBytes;

template <class T>
T load_atomic(const std::byte* p, std::memory_order mo) {
  return std::atomic_ref<T>(*reinterpret_cast<T*>(const_cast<std::byte*>(p))).load(mo);
}
template <class T>
void store_atomic(std::byte* p, T v, std::memory_order mo) {
  std::atomic_ref<T>(*reinterpret_cast<T*>(p)).store(v, mo);
}
}  // namespace

// ---- queues ------------------------------------------------------------------

void ByteQueue::expand(std::size_t need) {
  std::size_t cap = std::max<std::size_t>(cap_ ? cap_ * 2 : 4096, need);
  std::unique_ptr<std::byte[]> bigger(new std::byte[cap]);
  if (end_) std::memcpy(bigger.get(), buf_.get(), end_);
  buf_ = std::move(bigger);
  cap_ = cap;
}

void ByteQueue::consume_front(std::size_t n) {
  if (n < end_) std::memmove(buf_.get(), buf_.get() + n, end_ - n);
  end_ -= std::min(n, end_);
}

void Channel::grow_ring() {
  std::vector<Completion> bigger(ring.empty() ? 64 : ring.size() * 2);
  for (std::size_t i = 0; i < ring_size; ++i) bigger[i] = ring[(ring_head + i) & ring_mask];
  ring.swap(bigger);
  ring_head = 0;
  ring_mask = ring.size() - 1;
  ring_cap = ring.size();
}

// ---- blocking callers' slots ----------------------------------------------------

// The response into the blocked fiber's WaitSlot, and the fiber ready.
inline void Worker::fill_wait_slot(WaitSlot& w, std::uint32_t status, const std::byte* data, std::uint32_t len) {
  w.status = status;
  w.len = len;
  if (status == abi::kOk) [[likely]] {
    if (len <= kWaitBytes) {
      // Whole words, then the rest: no call to memcpy for a few bytes.
      std::uint32_t i = 0;
      for (; i + sizeof(std::uint64_t) <= len; i += sizeof(std::uint64_t)) {
        std::uint64_t v;
        std::memcpy(&v, data + i, sizeof v);
        std::memcpy(w.bytes + i, &v, sizeof v);
      }
      if (i != len) [[unlikely]] std::memcpy(w.bytes + i, data + i, len - i);
    }
  } else {
    w.error = data && len ? new std::string(reinterpret_cast<const char*>(data), len) : new std::string;
  }
  w.done = true;
  make_ready(w.fiber);
}

void wait_failed(WaitSlot& w, const char* op) {
  std::unique_ptr<std::string> m(std::exchange(w.error, nullptr));
  if (!m) m = std::make_unique<std::string>();
  throw_status(w.status, reinterpret_cast<const std::byte*>(m->data()), std::uint32_t(m->size()), op);
}

void wait_wrong_size(const char* op) {
  // What complete_wait reports for a raw result of the wrong size.
  const std::string m = "the response could not be decoded: gossamer: response has the wrong size";
  throw_status(abi::kMalformed, reinterpret_cast<const std::byte*>(m.data()), std::uint32_t(m.size()), op);
}

// ---- parked completions -----------------------------------------------------

std::uint64_t ParkedTable::park(const Completion& c) {
  std::uint32_t i;
  if (!free.empty()) {
    i = free.back();
    free.pop_back();
  } else {
    i = std::uint32_t(entries.size());
    entries.emplace_back();
  }
  Entry& e = entries[i];
  e.c = c;
  e.used = true;
  ++in_use;
  return std::uint64_t(i) << 32 | e.gen;
}

bool ParkedTable::take(std::uint64_t token, Completion* out) {
  std::uint32_t i = std::uint32_t(token >> 32), gen = std::uint32_t(token);
  if (i >= entries.size() || !entries[i].used || entries[i].gen != gen) return false;
  Entry& e = entries[i];
  *out = e.c;
  e.used = false;
  if (++e.gen == 0) e.gen = 1;
  free.push_back(i);
  --in_use;
  return true;
}

std::uint64_t Worker::park(const Completion& c) {
  ++activity_;
  return parked_.park(c);
}

void Worker::complete_parked(std::uint64_t token, std::uint32_t status, const std::byte* data,
                             std::uint32_t len) {
  Completion c;
  if (!parked_.take(token, &c)) return;  // unknown or already completed: drop
  ++activity_;
  if (c.fn == wait_slot_fn()) {
    fill_wait_slot(*c.context<WaitSlot*>(), status, data, len);
    return;
  }
  DelegatedScope scope;
  if (c.fn) c.fn(c, status, data, len);
}

std::uint64_t park_completion(Completion c) { return worker_or_null()->park(c); }

void complete_parked(std::uint64_t token, std::uint32_t status, const std::byte* data,
                     std::uint32_t len) {
  worker_or_null()->complete_parked(token, status, data, len);
}

void send_completion(ThreadId client, std::uint64_t token, std::uint32_t status, const void* data,
                     std::uint32_t len) {
  Worker* w = worker_or_null();
  if (client == w->id()) {
    w->complete_parked(token, status, static_cast<const std::byte*>(data), len);
    return;
  }
  RecordWriter rw(client, abi::kBuiltinComplete, {});
  std::uint32_t pad = 0;
  rw.append(&token, sizeof token);
  rw.append(&status, sizeof status);
  rw.append(&pad, sizeof pad);
  if (len) rw.append(data, len);
  rw.close({});
}

// ---- moving batches ------------------------------------------------------------

bool Worker::flush_and_poll(std::uint32_t min_batch) {
  bool worked = false;
  for (std::size_t i = 0; i < dirty_.size();) {
    ThreadId to = dirty_[i];
    Channel& ch = channels_[to];
    // The checks inline: a channel still waiting for its response costs one
    // load of the response's ready word here, not two calls. Across hosts
    // every answered batch is taken, and every free lane takes a batch, in
    // the same pass (a body larger than a slot goes as a batch per lane):
    // max_out of each at most. Same host: one of each.
    for (std::uint32_t k = 0; k < ch.max_out && ch.inflight && response_ready(ch); ++k) {
      if (!poll_responses(to, min_batch)) break;  // a body still on its way over TCP
      worked = true;
    }
    for (std::uint32_t k = 0; k < ch.max_out && ch.inflight < ch.max_out && would_flush(to, ch, min_batch); ++k)
      worked |= flush(to);
    if (ch.inflight == 0 && ch.queued == 0 && !ch.need_fetch) {
      is_dirty_[to] = 0;
      dirty_[i] = dirty_.back();
      dirty_.pop_back();
    } else {
      ++i;
    }
  }
  // Completions only run above: wake the fibers waiting for room, if any.
  if (!room_waiters_.empty() && tl_state.outstanding < tl_state.max_outstanding) [[unlikely]] {
    for (Fiber* f : room_waiters_) make_ready(f);
    room_waiters_.clear();
  }
  return worked;
}

// Packs whole queued records into the free request slot: primary block
// first, then the overflow block, never back (so the trustee reads them in
// order), and publishes the batch.
bool Worker::flush(ThreadId to) {
  Channel& ch = channels_[to];
  if (ch.inflight >= ch.max_out || (!ch.queued && !ch.need_fetch)) return false;
  bool remote = !rt_.is_local(to);
  // Across hosts, batch `sent + 1` goes to its lane: the lane's previous
  // batch is answered (at most max_out are out, answered in order).
  const std::uint32_t lane = remote ? ch.sent + 1 : 0;
  std::byte* primary = square_.request_primary(to, id_, lane);
  std::byte* overflow = square_.request_overflow(to, id_, lane);
  std::byte* pdata = primary + sizeof(abi::RequestSlotHeader);
  std::uint32_t pl = 0, ol = 0, n = 0;
  bool in_overflow = false;
  const std::uint32_t host = remote && bulk_ ? rt_.rack()->host_of(to) : 0;
  if (!remote) {
    // Same host: every record fits a block (close() moved larger bodies to
    // the heap), so the records are copied as two runs, one per block, the
    // lengths read in place.
    const std::byte* q = ch.queue.data() + ch.head;
    const std::uint32_t most = std::min<std::uint32_t>(ch.queued, UINT16_MAX);
    std::uint32_t size = 0;
    const auto next_size = [&] {
      std::uint32_t len;
      std::memcpy(&len, q + pl + ol + offsetof(RequestHeader, length), sizeof len);
      return kRecordHeader + abi::align_record(len);
    };
    while (n < most && pl + (size = next_size()) <= abi::kRequestPrimaryData) {
      pl += size;
      ++n;
    }
    std::memcpy(pdata, q, pl);
    // The rest of the queue is whole records: when all of them fit the
    // overflow block, it takes them without reading each length.
    const std::size_t rest = ch.queue.size() - ch.head - pl;
    if (ch.queued <= most && rest <= abi::kOverflowBytes) {
      ol = std::uint32_t(rest);
      n = ch.queued;
    }
    while (n < most && ol + (size = next_size()) <= abi::kOverflowBytes) {
      ol += size;
      ++n;
    }
    std::memcpy(overflow, q + pl, ol);
    ch.head += pl + ol;
    ch.queued -= n;
  }
  while (remote && ch.queued && n < UINT16_MAX) {
    const std::byte* rec = ch.queue.data() + ch.head;
    RequestHeader h;
    std::memcpy(&h, rec, sizeof h);
    std::uint32_t size = kRecordHeader + abi::align_record(h.length);
    if (remote && h.length > bulk_threshold_ && h.length <= kMaxBulkBytes && bulk_->usable(host)) {
      // Larger than the threshold, to another host: the body goes over the
      // run's TCP connection and the slot carries a reference to it (the
      // trustee serves the batch once every body it names is in).
      // (close() already replaced bodies over 1 GiB by kBuiltinTooLarge.)
      constexpr std::uint32_t need = kRecordHeader + sizeof(abi::BulkRef);
      std::byte* at;
      if (!in_overflow && pl + need <= abi::kRequestPrimaryData) {
        at = pdata + pl;
        pl += need;
      } else if (ol + need <= abi::kOverflowBytes) {
        in_overflow = true;
        at = overflow + ol;
        ol += need;
      } else {
        break;  // first in the next batch
      }
      std::vector<std::byte> body(rec + kRecordHeader, rec + kRecordHeader + h.length);
      abi::BulkRef ref{bulk_->send(host, Bulk::kRequest, id_, to, std::move(body)), h.length};
      tcp_bytes_sent_ += h.length;
      RequestHeader bh{h.invoker | abi::kInvokerBulk, std::uint32_t(sizeof ref), h.property};
      std::memcpy(at, &bh, sizeof bh);
      std::memcpy(at + sizeof bh, &ref, sizeof ref);
      ch.head += size;
      --ch.queued;
      ++n;
      continue;  // references anywhere in a batch: more large requests ride along
    }
    if (!in_overflow && pl + size <= abi::kRequestPrimaryData) {
      std::memcpy(pdata + pl, rec, size);
      pl += size;
    } else if (ol + size <= abi::kOverflowBytes) {
      in_overflow = true;
      std::memcpy(overflow + ol, rec, size);
      ol += size;
    } else if (remote && size > kMaxInlineRecord && n < UINT16_MAX - 1) {
      // Larger than any block (another host): send the front of its body as
      // a kBuiltinPiece that fills the room left in this block, and keep the
      // rest at the front of the queue for this block's next part or the
      // next batch. The trustee joins pieces in order to the record that
      // ends them, so cutting anywhere (at 8-byte steps) is the same.
      std::uint32_t room = in_overflow ? abi::kOverflowBytes - ol : abi::kRequestPrimaryData - pl;
      std::byte* at = in_overflow ? overflow + ol : pdata + pl;
      if (room >= kRecordHeader + abi::kRecordAlign) {
        std::uint32_t take = (room - kRecordHeader) & ~(abi::kRecordAlign - 1);
        RequestHeader ph{abi::kBuiltinPiece, take, 0};
        std::memcpy(at, &ph, sizeof ph);
        std::memcpy(at + sizeof ph, rec + kRecordHeader, take);
        (in_overflow ? ol : pl) += kRecordHeader + take;
        ++n;
        // The rest: the same header, `take` bytes further (over body bytes
        // already copied out).
        h.length -= take;
        ch.head += take;
        std::memcpy(ch.queue.data() + ch.head, &h, sizeof h);
      }
      if (in_overflow) break;
      in_overflow = true;  // then into the overflow block
      continue;
    } else {
      break;
    }
    ch.head += size;
    --ch.queued;
    ++n;
  }
  // Reclaim what was sent: at once when nothing is left, else when the sent
  // prefix outweighs the rest (the copy is then cheaper than it saves).
  if (ch.queued == 0 || ch.head > ch.queue.size() - ch.head) {
    ch.queue.consume_front(ch.head);
    ch.head = 0;
  }
  abi::RequestSlotHeader hdr{};
  hdr.seq = (remote ? ch.sent : ch.seq) + 1;
  hdr.count = std::uint16_t(n);
  hdr.primary_len = std::uint16_t(pl);
  hdr.overflow_len = std::uint16_t(ol);
  // Fields first, the ready word last with release: the trustee reads the
  // batch only after it sees the new seq.
  std::memcpy(primary + sizeof hdr.seq, reinterpret_cast<std::byte*>(&hdr) + sizeof hdr.seq,
              sizeof hdr - sizeof hdr.seq);
  if (!remote) {
    ch.seq = hdr.seq;
    ch.inflight = n;
  } else {
    // Responses may come in several batches' slots (kResponseMore): a
    // remote batch counts as one.
    ch.sent = hdr.seq;
    if (ch.inflight++ == 0) {
      ch.seq = hdr.seq;
      ch.response_seq = square_.response_primary(id_, to, hdr.seq);
    }
  }
  ch.need_fetch = false;
  store_atomic<std::uint32_t>(primary, hdr.seq, std::memory_order_release);
  if (remote) ring_doorbell(to);
  else rt_.worker(to).wake();
  return true;
}

// Runs the oldest completion of the channel with one response. Rack probes
// and stops (control) are not the application's: they are not counted.
inline void Worker::complete_next(Channel& ch, std::uint32_t status, const std::byte* data, std::uint32_t len) {
  if (const Completion& front = ch.ring[ch.ring_head]; front.fn == wait_slot_fn()) {
    // A blocked fiber's slot (never a control request's): no call, no
    // delegated scope (no user code runs), no copy of the whole completion.
    WaitSlot* w = front.context<WaitSlot*>();
    ch.drop_front();
    fill_wait_slot(*w, status, data, len);
    --tl_state.outstanding;
    ++responses_received_;
    ++activity_;
    return;
  }
  Completion c = ch.pop();
  // Control requests are rare: the function is compared only while one is out.
  const bool control = control_pending_ != 0 && is_control_completion(c.fn);
  control_pending_ -= control;
  {
    DelegatedScope scope;  // then-callbacks must not block
    if (c.fn) c.fn(c, status, data, len);
    else if (status != abi::kOk) report_async_failure(status, data, len);
  }
  if (!control) {
    --tl_state.outstanding;
    ++responses_received_;
    ++activity_;
  }
}

// Walks the response records of a batch in order and runs each completion.
bool Worker::poll_responses(ThreadId to, std::uint32_t min_batch) {
  Channel& ch = channels_[to];
  if (!ch.inflight) return false;
  if (!rt_.is_local(to)) return poll_remote_responses(to);
  std::byte* primary = square_.response_primary(id_, to);
  if (load_atomic<std::uint32_t>(primary, std::memory_order_acquire) != ch.seq) return false;
  abi::ResponseSlotHeader h;
  std::memcpy(&h, primary, sizeof h);
  if (h.count != ch.inflight || h.primary_len > abi::kResponsePrimaryData ||
      h.overflow_len > abi::kOverflowBytes)
    fatal("corrupt response slot header");
  auto* spill = reinterpret_cast<std::vector<std::byte>*>(h.spill);
  // Copy the responses out (at most one slot), so the next batch can go to
  // the trustee before the completions run: it works while we do.
  std::byte* copy = response_copy_.data();
  std::memcpy(copy, primary + sizeof h, h.primary_len);
  std::memcpy(copy + h.primary_len, square_.response_overflow(id_, to), h.overflow_len);
  struct Region {
    const std::byte* p;
    std::uint32_t len;
  } regions[3] = {{copy, h.primary_len},
                  {copy + h.primary_len, h.overflow_len},
                  {spill ? spill->data() : nullptr, spill ? std::uint32_t(spill->size()) : 0}};
  std::uint32_t n = ch.inflight;
  ch.inflight = 0;  // completions may send new requests on this channel
  // The completions below are still at the front of the ring, ahead of
  // those of the batch flushed here, so they are popped in order.
  if (ch.queued >= min_batch) flush(to);
  // Region by region (a region that cannot hold another header ends), its
  // pointer and length in registers: the walk per response is a header
  // load and one bounds check.
  std::uint32_t left = n;
  for (const Region& reg : regions) {
    const std::byte* p = reg.p;
    const std::byte* const end = p + reg.len;
    while (left != 0 && std::size_t(end - p) >= sizeof(ResponseHeader)) {
      ResponseHeader rh;
      std::memcpy(&rh, p, sizeof rh);
      const std::byte* data = p + sizeof rh;
      if (rh.length > std::size_t(end - data)) fatal("response overruns its block");
      // The last record's padding may lie past the region: clamp before
      // forming the pointer (one past the end is the furthest it may go).
      p = data + std::min<std::size_t>(abi::align_record(rh.length), std::size_t(end - data));
      --left;
      complete_next(ch, rh.status, data, rh.length);
    }
  }
  if (left != 0) fatal("response slot holds fewer responses than requests");
  delete spill;
  return true;
}

// Responses from a trustee on another host: a stream of records, some of
// them pieces of one larger response; the trustee may hold the rest back
// (kResponseMore) until the next batch fetches it.
bool Worker::poll_remote_responses(ThreadId to) {
  Channel& ch = channels_[to];
  // The oldest batch's answer, in its lane.
  std::byte* primary = square_.response_primary(id_, to, ch.seq);
  std::byte* const overflow = square_.response_overflow(id_, to, ch.seq);
  if (load_atomic<std::uint32_t>(primary, std::memory_order_acquire) != ch.seq) return false;
  abi::ResponseSlotHeader h;
  std::memcpy(&h, primary, sizeof h);
  if (h.primary_len > abi::kResponsePrimaryData || h.overflow_len > abi::kOverflowBytes)
    fatal("corrupt response slot header from another host");
  // A batch with responses sent over TCP is taken only once every one of
  // them is here (the slot stays as it is until then).
  bool whole = false;
  const BlockView blocks[2] = {{primary + sizeof h, h.primary_len}, {overflow, h.overflow_len}};
  const BulkBody bulk = take_bulk_bodies(blocks, h.count, &ResponseHeader::status, abi::kStatusBulk,
                                         Bulk::kResponse, to, &bulk_responses_, &whole);
  if (bulk == BulkBody::kWaiting) return false;
  if (bulk == BulkBody::kTaken && !whole) fatal("a response over TCP has another length than its reference");
  const std::size_t bulk_count = bulk == BulkBody::kTaken ? bulk_refs_.size() : 0;
  std::size_t bulk_next = 0;
  std::byte* copy = response_copy_.data();
  std::memcpy(copy, primary + sizeof h, h.primary_len);
  std::memcpy(copy + h.primary_len, overflow, h.overflow_len);
  // The next batch out, if any, is now the oldest. Held-back responses
  // (kResponseMore) come with it; with none out, the next flush fetches
  // them, even empty.
  if (--ch.inflight != 0) {
    ++ch.seq;
    ch.response_seq = square_.response_primary(id_, to, ch.seq);
  }
  ch.need_fetch = (h.flags & abi::kResponseMore) && ch.inflight == 0;
  // Deliver after sending the next batch, as for local trustees: copy out
  // what the completions need first.
  struct Region {
    const std::byte* p;
    std::uint32_t len;
  } regions[2] = {{copy, h.primary_len}, {copy + h.primary_len, h.overflow_len}};
  // The completions run below may queue more requests; the flush happens
  // after them, since pieces of this batch may still be needed.
  std::uint32_t seen = 0;
  for (const Region& r : regions) {
    std::uint32_t off = 0;
    while (seen < h.count && off + sizeof(ResponseHeader) <= r.len) {
      ResponseHeader rh;
      std::memcpy(&rh, r.p + off, sizeof rh);
      if (off + sizeof rh + rh.length > r.len) fatal("response overruns its block (from another host)");
      const std::byte* data = r.p + off + sizeof rh;
      off += sizeof rh + abi::align_record(rh.length);
      ++seen;
      if (rh.status & abi::kStatusBulk) {
        if (rh.length != sizeof(abi::BulkRef) || bulk_next >= bulk_count)
          fatal("a response reference to a TCP payload that is not here");
        const std::vector<std::byte>& b = bulk_responses_[bulk_next++];
        data = b.data();
        rh.length = std::uint32_t(b.size());
        rh.status &= ~abi::kStatusBulk;
      }
      if (rh.status & abi::kStatusPiece) {
        ch.partial.insert(ch.partial.end(), data, data + rh.length);
        continue;
      }
      if (!ch.partial.empty()) {
        ch.partial.insert(ch.partial.end(), data, data + rh.length);
        data = ch.partial.data();
        rh.length = std::uint32_t(ch.partial.size());
      }
      if (ch.ring_size == 0) fatal("more responses than requests from another host");
      complete_next(ch, rh.status, data, rh.length);
      ch.partial.clear();
    }
  }
  flush(to);
  return true;
}

}  // namespace gossamer::detail
