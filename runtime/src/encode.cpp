// Client side of delegation, encoding: a request is written as a record
// into its channel's queue (RecordWriter, or send_record for a closure
// without arguments), its completion pushed onto the channel's ring, and
// counted; client.cpp packs the queue into the slot and completes the
// responses.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "runtime_state.hpp"
#include "worker.hpp"

namespace gossamer::detail {

namespace {
using abi::RequestHeader;
constexpr std::uint32_t kRecordHeader = sizeof(RequestHeader);
// Largest record a block can hold (as in client.cpp).
constexpr std::uint32_t kMaxInlineRecord = abi::kOverflowBytes;
}  // namespace

// ---- encoding ----------------------------------------------------------------

namespace {
// Room a record starts with: closures and arguments up to this size are
// encoded without a call (RecordWriter::append).
constexpr std::size_t kRecordRoom = 256;
}  // namespace

// Inline in close() and send_record(), its callers.
inline void Worker::record_closed(ThreadId to, Channel& ch, bool remote) {
  if (!control_send_) [[likely]] {
    if (remote) count_sent_remote();
    else count_sent();
  }
  if (!is_dirty_[to]) {
    is_dirty_[to] = 1;
    dirty_.push_back(to);
  }
  if (remote) {  // batches to other hosts: at the loop's pace (flush_and_poll), but
    // the first kRemoteEagerBatch for an idle channel when a fiber blocks.
    note_remote_queued(to, ch);
    return;
  }
  if (ch.queued < kEagerBatch) return;  // smaller batches: at the end of the pass
  if (!ch.inflight) {
    // The slot is free and a batch's worth is queued: send it now, so the
    // trustee works while this fiber queues the next one.
    flush(to);
  } else if (response_ready(ch)) {
    // The batch in the slot is answered and a batch's worth waits behind
    // it: the fiber's next operation offers the loop a pass to move both.
    tl_state.budget = 1;
  }
}

RecordWriter::RecordWriter(ThreadId to, std::uint32_t invoker, PropertyHandle prop) : to_(to) {
  Worker* w = tl_state.worker;
  if (to >= w->rt().size()) fatal("request to a trustee that does not exist");
  if (w->record_open())
    fatal("a request was started while another was being encoded (delegation from inside "
          "a serialize() function?)");
  w->set_record_open(true);
  ByteQueue& q = w->channel(to).queue;
  rec_ = q.reserve(kRecordRoom);
  lim_ = q.limit();
  RequestHeader h{invoker, 0, prop.raw};
  std::memcpy(rec_, &h, sizeof h);
  cur_ = rec_ + sizeof h;
}

// The queue's end stays at the record's start until close(): the record's
// bytes are kept across the move by appending them for it, then taking
// them back off.
void RecordWriter::make_room(std::size_t len) {
  ByteQueue& q = tl_state.worker->channel(to_).queue;
  const std::size_t start = std::size_t(rec_ - q.data()), used = std::size_t(cur_ - rec_);
  q.truncate(start + used);
  q.reserve(len + kRecordRoom);
  q.truncate(start);
  rec_ = q.data() + start;
  cur_ = rec_ + used;
  lim_ = q.limit();
}

void RecordWriter::close(Completion done) {
  Worker* w = tl_state.worker;
  Channel& ch = w->channel(to_);
  std::size_t body = std::size_t(cur_ - rec_) - kRecordHeader;
  const bool remote = !w->rt().is_local(to_);
  if (remote && body > kMaxBulkBytes) [[unlikely]] {
    // Across hosts a body is at most 1 GiB (either path): the trustee
    // answers this stand-in with an error, in order with the rest.
    RequestHeader h{abi::kBuiltinTooLarge, 0, 0};
    std::memcpy(rec_, &h, sizeof h);
    cur_ = rec_ + kRecordHeader;
    body = 0;
  }
  if (body > UINT32_MAX) fatal("request body larger than 4 GiB");
  auto* hdr = reinterpret_cast<RequestHeader*>(rec_);
  hdr->length = std::uint32_t(body);
  if (kRecordHeader + abi::align_record(std::uint32_t(body)) > kMaxInlineRecord && !remote) [[unlikely]] {
    // Too big for any block: the body moves to the heap and the record names
    // it (in-process only).
    auto* heap = new std::byte[body];
    std::memcpy(heap, rec_ + kRecordHeader, body);
    abi::ExternalBody ext{reinterpret_cast<std::uint64_t>(heap), body};
    hdr->invoker |= abi::kInvokerExternal;
    hdr->length = sizeof ext;
    cur_ = rec_ + kRecordHeader;
    append(&ext, sizeof ext);
  }
  // Too big for a block, to another host: it stays whole in the queue and
  // flush() cuts it into pieces as large as the room left in each batch.
  pad_to_align();
  ch.queue.truncate(std::size_t(cur_ - ch.queue.data()));
  ++ch.queued;
  ch.push(done);
  w->set_record_open(false);
  w->record_closed(to_, ch, remote);
  if (w->has_deferred_toggles()) [[unlikely]] w->send_deferred_toggles();
}

namespace {
// Whole words (len is a multiple of 8): no call to memcpy for a few bytes.
inline void put_record(std::byte* rec, std::uint32_t invoker, PropertyHandle prop, const std::byte* body,
                       std::uint32_t len) {
  const RequestHeader h{invoker, len, prop.raw};
  std::memcpy(rec, &h, sizeof h);
  for (std::uint32_t i = 0; i < len; i += sizeof(std::uint64_t)) {
    std::uint64_t v;
    std::memcpy(&v, body + i, sizeof v);
    std::memcpy(rec + kRecordHeader + i, &v, sizeof v);
  }
}

// send_record when something on its way may call out: the queue or the
// ring must grow, the channel is not yet dirty, a control request, an
// eager flush, deferred toggles. The same arguments as send_record, so
// that it is a jump from there.
[[gnu::noinline]] void send_record_slow(ThreadId to, std::uint32_t invoker, PropertyHandle prop, const std::byte* body,
                                        std::uint32_t len, const Completion& done) {
  Worker* w = tl_state.worker;
  Channel& ch = w->channel(to);
  std::byte* rec = ch.queue.reserve(kRecordHeader + len);
  put_record(rec, invoker, prop, body, len);
  ch.queue.truncate(std::size_t(rec - ch.queue.data()) + kRecordHeader + len);
  ++ch.queued;
  ch.push(done);
  w->record_closed(to, ch, !w->rt().is_local(to));
  if (w->has_deferred_toggles()) [[unlikely]] w->send_deferred_toggles();
}
}  // namespace

// The common case calls nothing on its way: the record goes into room the
// queue has, its completion into room the ring has, and record_closed's
// work is the counters and, with kEagerBatch records queued behind the
// batch in the slot, the look at its response. To another host the same,
// without the eager flush and the look (batches to other hosts leave at
// the loop's pace, except the first kRemoteEagerBatch records for an idle
// channel when a fiber blocks: record_closed).
void send_record(ThreadId to, std::uint32_t invoker, PropertyHandle prop, const std::byte* body, std::uint32_t len,
                 const Completion& done) {
  Worker* w = tl_state.worker;
  if (to >= w->rt().size()) fatal("request to a trustee that does not exist");
  if (w->record_open())
    fatal("a request was started while another was being encoded (delegation from inside "
          "a serialize() function?)");
  Channel& ch = w->channel(to);
  const bool remote = !w->rt().is_local(to);
  if (!ch.queue.fits(kRecordHeader + len) || ch.ring_size == ch.ring_cap || !w->is_dirty(to) || w->control_send() ||
      (!remote && ch.queued + 1 >= kEagerBatch && !ch.inflight) || w->has_deferred_toggles()) [[unlikely]] {
    send_record_slow(to, invoker, prop, body, len, done);
    return;
  }
  std::byte* rec = ch.queue.reserve(kRecordHeader + len);
  put_record(rec, invoker, prop, body, len);
  ch.queue.truncate(std::size_t(rec - ch.queue.data()) + kRecordHeader + len);
  ++ch.queued;
  ch.push_into_room(done);
  if (remote) {
    w->count_sent_remote();
    w->note_remote_queued(to, ch);
    return;
  }
  w->count_sent();
  // record_closed's rest (the batch is out, or the slow path ran).
  if (ch.queued >= kEagerBatch && Worker::response_ready(ch)) tl_state.budget = 1;
}

void RecordWriter::abandon() noexcept {
  Worker* w = tl_state.worker;
  ByteQueue& q = w->channel(to_).queue;
  q.truncate(std::size_t(rec_ - q.data()));
  w->drop_deferred_toggles();
  w->set_record_open(false);
}

void Worker::send_deferred_toggles() {
  while (!deferred_toggles_.empty()) {
    DeferredToggle t = deferred_toggles_.back();
    deferred_toggles_.pop_back();
    toggle_ref(t.trustee, t.handle, t.id);  // the record is closed: now, or sent
  }
}

void Worker::send_control(ThreadId to, std::uint32_t invoker, Completion done) {
  control_send_ = true;
  ++control_pending_;
  RecordWriter rw(to, invoker, {});
  rw.close(done);
  control_send_ = false;
}

void Worker::wait_for_room() {
  while (tl_state.outstanding >= tl_state.max_outstanding) {
    room_waiters_.push_back(tl_state.fiber);
    suspend();  // flush_and_poll() makes it ready
  }
}

}  // namespace gossamer::detail
