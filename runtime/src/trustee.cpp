// Trustee side: serve every request slot addressed to this thread. Each
// record is validated (lengths, invoker id, property handle and type) before
// anything runs; a bad record gets an error response, never trust.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "runtime_state.hpp"
#include "worker.hpp"

namespace gossamer::detail {

namespace {
using abi::RequestHeader;
using abi::ResponseHeader;
constexpr std::uint64_t kNoProperty = type_key<void>();
constexpr std::uint32_t kPrefetchAhead = 256;  // bytes: 4 lines, ~10 records

// Writes a batch's responses in order: primary block, then overflow, then a
// heap spill buffer for whatever is left (001 §5.3: responses larger than the
// slot still arrive). The block being filled is the inline room of
// ResponseWriter::reserve; put() handles what does not fit it.
class SlotResponseWriter final : public ResponseWriter {
 public:
  SlotResponseWriter(std::byte* primary, std::byte* overflow)
      : primary_(primary), overflow_(overflow) {
    cur_ = primary + sizeof(abi::ResponseSlotHeader);
    lim_ = primary + abi::kPrimaryBytes;
  }

  void fail(std::uint32_t status, std::string_view message) override {
    auto len = std::uint32_t(std::min<std::size_t>(message.size(), 256));
    std::byte* p = put(len, status);
    if (len) std::memcpy(p, message.data(), len);
  }

  // Asks for the line `ahead` bytes past the next response, to be written:
  // its client read it last, so it is in the client core's cache.
  void prefetch(std::uint32_t ahead) const { __builtin_prefetch(cur_ + ahead, 1); }

  void finish(std::uint32_t seq, std::uint16_t count) {
    sync();
    abi::ResponseSlotHeader h{};
    h.seq = seq;
    h.count = count;
    h.primary_len = std::uint16_t(pl_);
    h.overflow_len = std::uint16_t(ol_);
    h.spill_len = spill_ ? std::uint32_t(spill_->size()) : 0;
    h.spill = reinterpret_cast<std::uint64_t>(spill_);
    std::memcpy(primary_ + sizeof h.seq, reinterpret_cast<std::byte*>(&h) + sizeof h.seq,
                sizeof h - sizeof h.seq);
    std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(primary_))
        .store(seq, std::memory_order_release);
  }

 private:
  std::byte* reserve_slow(std::uint32_t len) override { return put(len, abi::kOk); }

  // The inline writes since the last put(), into the block's length.
  void sync() {
    if (stage_ == 0) pl_ = std::uint32_t(cur_ - (primary_ + sizeof(abi::ResponseSlotHeader)));
    else if (stage_ == 1) ol_ = std::uint32_t(cur_ - overflow_);
  }

  std::byte* put(std::uint32_t len, std::uint32_t status) {
    sync();
    ++written_;
    std::uint32_t size = sizeof(ResponseHeader) + abi::align_record(len);
    ResponseHeader h{len, status};
    std::byte* at;
    if (stage_ == 0 && pl_ + size <= abi::kResponsePrimaryData) {
      at = primary_ + sizeof(abi::ResponseSlotHeader) + pl_;
      pl_ += size;
    } else if (stage_ <= 1 && ol_ + size <= abi::kOverflowBytes) {
      stage_ = 1;
      at = overflow_ + ol_;
      ol_ += size;
    } else {
      stage_ = 2;
      if (!spill_) spill_ = new std::vector<std::byte>();  // the client frees it
      std::size_t off = spill_->size();
      spill_->resize(off + size);
      at = spill_->data() + off;
    }
    std::memcpy(at, &h, sizeof h);
    // The inline room is now the rest of the block this went to.
    if (stage_ == 0) {
      cur_ = primary_ + sizeof(abi::ResponseSlotHeader) + pl_;
      lim_ = primary_ + abi::kPrimaryBytes;
    } else if (stage_ == 1) {
      cur_ = overflow_ + ol_;
      lim_ = overflow_ + abi::kOverflowBytes;
    } else {
      cur_ = lim_ = nullptr;
    }
    return at + sizeof h;
  }

  std::byte* primary_;
  std::byte* overflow_;
  std::vector<std::byte>* spill_ = nullptr;
  std::uint32_t pl_ = 0, ol_ = 0;
  int stage_ = 0;
};

// What a record's invoker and property resolve to: the invoker to call on
// the object, or fn null when the record was answered here (a builtin, or
// an error: unknown invoker, stale or mistyped property).
struct Resolved {
  InvokeFn fn = nullptr;
  void* obj = nullptr;
};

// Validates one record (already bounds-checked against its block) and
// resolves it; builtins run here.
Resolved resolve(Worker& w, ThreadId client, const RequestHeader& h, const std::byte* body,
                 ResponseWriter& out) {
  // The record's answer is an error: nothing to invoke.
  auto refuse = [&out](std::uint32_t status, std::string_view message) {
    out.fail(status, message);
    return Resolved{};
  };
  PropertyHandle prop{h.property};
  std::uint32_t invoker = h.invoker & ~abi::kInvokerExternal;
  if (invoker < abi::kFirstUserInvoker) [[unlikely]] switch (invoker) {
    case abi::kBuiltinToggleRef: {
      std::uint64_t id;
      if (h.length != sizeof id) return refuse(abi::kMalformed, "toggle body size");
      std::memcpy(&id, body, sizeof id);
      if (!w.properties().toggle(prop, id)) return refuse(abi::kStaleProperty, "");
      out.reserve(0);
      return {};
    }
    case abi::kBuiltinProbe: {
      if (w.rt().is_local(client) || w.rt().rack()->host_of(client) != 0)
        return refuse(abi::kNotAcrossHosts, "probes come from host 0");
      w.publish_counters();  // our own latest state, not the last loop's
      abi::RackProbe pr = w.rt().local_probe();
      std::memcpy(out.reserve(sizeof pr), &pr, sizeof pr);
      return {};
    }
    case abi::kBuiltinStop: {
      if (w.rt().is_local(client) || w.rt().rack()->host_of(client) != 0)
        return refuse(abi::kNotAcrossHosts, "stops come from host 0");
      out.reserve(0);
      w.rt().rack()->finishing();
      w.rt().stop();
      return {};
    }
    case abi::kBuiltinTooLarge:
      return refuse(abi::kMalformed, "request larger than 1 GiB (refused by the client)");
    case abi::kBuiltinComplete: {
      if (h.length < 16) return refuse(abi::kMalformed, "completion body size");
      std::uint64_t token;
      std::uint32_t status;
      std::memcpy(&token, body, sizeof token);
      std::memcpy(&status, body + 8, sizeof status);
      out.reserve(0);  // answer first: the completion may wake fibers
      w.complete_parked(token, status, body + 16, h.length - 16);
      return {};
    }
    default:
      break;  // no such builtin: the invoker lookup below refuses it
  }
  if ((h.invoker & abi::kInvokerExternal) && !w.rt().is_local(client)) [[unlikely]]
    return refuse(abi::kNotAcrossHosts, "an in-process body cannot come from another host");
  const InvokerEntry* inv = w.rt().invoker(invoker);
  if (!inv) return refuse(abi::kBadInvoker, "unknown invoker id");
  void* obj = nullptr;
  if (inv->property_type != kNoProperty) {
    std::uint32_t status;
    obj = w.properties().find(prop, inv->property_type, &status);
    if (!obj) return refuse(status, "");
  }
  return {inv->fn, obj};
}

// Runs a resolved record's invoker (inlined: once per request).
[[gnu::always_inline]] inline void invoke(const Resolved& r, ThreadId client, const RequestHeader& h,
                                          const std::byte* body, ResponseWriter& out) {
  Invocation call{r.obj, PropertyHandle{h.property}, body, h.length, client, &out};
  try {
    r.fn(call);
  } catch (const std::exception& e) {
    out.fail(abi::kException, e.what());
  } catch (...) {
    out.fail(abi::kException, "the closure threw something that is not a std::exception");
  }
}

// Serves the records of one batch, in order. A record that names the same
// user invoker and property as the one before it reuses that record's
// resolution (no invoker or property lookup) while the property table is
// unchanged: a batch of one client's calls on one object resolves once
// (issue 20, "a property's address resolved once per batch"). Exactly one
// response per record, whatever the invoker did.
class BatchDispatch {
 public:
  BatchDispatch(Worker& w, ThreadId client) : w_(w), client_(client) {}

  template <class Writer>
  [[gnu::always_inline]] void operator()(const RequestHeader& h, const std::byte* body, Writer& out) {
    const std::uint32_t before = out.written();
    if (last_.fn && h.invoker == invoker_ && h.property == property_ &&
        w_.properties().changes() == changes_) [[likely]] {
      invoke(last_, client_, h, body, out);
    } else {
      const Resolved r = resolve(w_, client_, h, body, out);
      if (r.fn) {
        // Not a record that resolve() answered, nor one with an in-process
        // body (checked per record, as its client may be on another host).
        if (!(h.invoker & abi::kInvokerExternal)) {
          invoker_ = h.invoker;
          property_ = h.property;
          changes_ = w_.properties().changes();
          last_ = r;
        }
        invoke(r, client_, h, body, out);
      }
    }
    if (out.written() == before) out.reserve(0);  // an invoker that said nothing
    if (out.written() != before + 1) fatal("an invoker wrote more than one response");
  }

 private:
  Worker& w_;
  ThreadId client_;
  // Nothing cached until last_.fn is set: a record may carry any invoker
  // and property (a malformed one too), so the fields alone never match.
  std::uint32_t invoker_ = 0;
  std::uint64_t property_ = 0;
  std::uint64_t changes_ = 0;
  Resolved last_;
};
}  // namespace

bool Worker::serve_requests() {
  bool worked = false;
  std::uint64_t t0 = 0;  // the TSC when the first batch was found (serve_cycles_)
  std::uint32_t n = rt_.size();
  for (ThreadId c = 0; c < n; ++c) {
    // The slot of the client's next batch (lane 0, or its lane across
    // hosts): served once it holds that batch, so in seq order. Across
    // hosts, the next lanes' batches too if they are in, one lap of the
    // lanes at most (the client refills a lane as soon as its answer is
    // back): a body larger than a slot comes as a batch per lane, and a
    // thread that computes between passes would otherwise take a pass for
    // each.
    const bool local = rt_.is_local(c);
    const std::uint32_t lap = local ? 1 : abi::kLanes;
    for (std::uint32_t k = 0; k < lap; ++k) {
      const std::uint32_t next = served_seq_[c] + 1;
      std::byte* primary = reinterpret_cast<std::byte*>(const_cast<std::uint32_t*>(request_words_[c]));
      std::uint32_t seq = std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(primary))
                              .load(std::memory_order_acquire);
      if (seq != next) break;
      if (!t0) t0 = __builtin_ia32_rdtsc();
      abi::RequestSlotHeader h;
      std::memcpy(&h, primary, sizeof h);  // copy, then validate
      h.seq = seq;
      if (local) {
        serve_slot(c, h);
      } else {
        if (!serve_remote_slot(c, h)) break;  // its payload is on its way (TCP)
        request_words_[c] = reinterpret_cast<const std::uint32_t*>(square_.request_primary(id_, c, next + 1));
      }
      served_seq_[c] = seq;
      worked = true;
    }
  }
  if (t0) serve_cycles_ += __builtin_ia32_rdtsc() - t0;
  return worked;
}

void Worker::serve_slot(ThreadId client, const abi::RequestSlotHeader& h) {
  SlotResponseWriter out(square_.response_primary(client, id_),
                         square_.response_overflow(client, id_));
  struct Region {
    const std::byte* p;
    std::uint32_t len;
  } regions[2] = {
      {square_.request_primary(id_, client) + sizeof(abi::RequestSlotHeader),
       std::min<std::uint32_t>(h.primary_len, abi::kRequestPrimaryData)},
      {square_.request_overflow(id_, client),
       std::min<std::uint32_t>(h.overflow_len, abi::kOverflowBytes)}};
  std::uint32_t done = 0;
  DelegatedScope scope;
  BatchDispatch dispatch(*this, client);
  for (const Region& r : regions) {
    std::uint32_t off = 0;
    while (done < h.count && off + sizeof(RequestHeader) <= r.len) {
      // The batch's lines were written by the client's core. A closure
      // that waits (a `pause`, a cache miss of its own) stalls the loads
      // of the records after it, so each next line would be fetched only
      // then: ask for them a few records ahead instead.
      __builtin_prefetch(r.p + off + kPrefetchAhead);
      out.prefetch(kPrefetchAhead);
      RequestHeader rh;
      std::memcpy(&rh, r.p + off, sizeof rh);
      std::uint32_t size = sizeof rh + abi::align_record(rh.length);
      if (rh.length > r.len || off + size > r.len) break;  // malformed: stop this block
      const std::byte* body = r.p + off + sizeof rh;
      std::byte* external = nullptr;
      if (rh.invoker & abi::kInvokerExternal) {
        abi::ExternalBody ext;
        if (rh.length != sizeof ext) break;
        std::memcpy(&ext, body, sizeof ext);
        external = reinterpret_cast<std::byte*>(ext.address);
        body = external;
        rh.length = std::uint32_t(ext.length);
      }
      dispatch(rh, body, out);
      delete[] external;
      ++done;
      off += size;
    }
  }
  // Every request gets exactly one response, malformed ones included, so the
  // client's completions stay matched.
  for (std::uint32_t i = done; i < h.count; ++i) out.fail(abi::kMalformed, "record unreadable");
  requests_served_ += h.count;
  ++slots_served_;
  out.finish(h.seq, h.count);
  rt_.worker(client).wake();
}

// ---- clients on other hosts -------------------------------------------------

namespace {
// Appends a batch's responses to the client's stream; emit_remote() moves
// as much of it as fits into the response slot.
class StreamResponseWriter final : public ResponseWriter {
 public:
  explicit StreamResponseWriter(ByteQueue& q) : q_(q) {}  // no inline room: all through put()
  void fail(std::uint32_t status, std::string_view message) override {
    auto len = std::uint32_t(std::min<std::size_t>(message.size(), 256));
    std::byte* p = put(len, status);
    if (len) std::memcpy(p, message.data(), len);
  }

 private:
  std::byte* reserve_slow(std::uint32_t len) override { return put(len, abi::kOk); }
  std::byte* put(std::uint32_t len, std::uint32_t status) {
    ++written_;
    std::uint32_t size = sizeof(ResponseHeader) + abi::align_record(len);
    std::byte* at = q_.grow(size);
    ResponseHeader h{len, status};
    std::memcpy(at, &h, sizeof h);
    std::memset(at + sizeof h + len, 0, size - sizeof h - len);
    return at + sizeof h;
  }
  ByteQueue& q_;
};
}  // namespace

// Serves a batch from a client on another host; false (nothing done) while
// a body one of its records names, sent over TCP, has not arrived.
bool Worker::serve_remote_slot(ThreadId client, const abi::RequestSlotHeader& h) {
  const BlockView regions[2] = {
      {square_.request_primary(id_, client, h.seq) + sizeof(abi::RequestSlotHeader),
       std::min<std::uint32_t>(h.primary_len, abi::kRequestPrimaryData)},
      {square_.request_overflow(id_, client, h.seq),
       std::min<std::uint32_t>(h.overflow_len, abi::kOverflowBytes)}};
  // Every body its references name must be here before any record runs.
  bool whole = false;  // each of the reference's length; else malformed below
  const BulkBody bulk = take_bulk_bodies(regions, h.count, &RequestHeader::invoker, abi::kInvokerBulk,
                                         Bulk::kRequest, client, &bulk_requests_, &whole);
  if (bulk == BulkBody::kWaiting) return false;
  const std::size_t bulk_count = bulk == BulkBody::kTaken && whole ? bulk_refs_.size() : 0;
  std::size_t bulk_next = 0;
  auto& rc = remote_clients_[client];
  if (!rc) rc = std::make_unique<RemoteClient>();
  StreamResponseWriter out(rc->out);
  std::uint32_t done = 0, pieces = 0;
  DelegatedScope scope;
  BatchDispatch dispatch(*this, client);
  for (const BlockView& r : regions) {
    std::uint32_t off = 0;
    while (done < h.count && off + sizeof(RequestHeader) <= r.len) {
      RequestHeader rh;
      std::memcpy(&rh, r.p + off, sizeof rh);
      std::uint32_t size = sizeof rh + abi::align_record(rh.length);
      if (rh.length > r.len || off + size > r.len) break;  // malformed: stop this block
      const std::byte* body = r.p + off + sizeof rh;
      ++done;
      off += size;
      if (rh.invoker & abi::kInvokerBulk) {
        // Its body in hand (taken above, in record order), of its length.
        if (rh.length != sizeof(abi::BulkRef) || bulk_next >= bulk_count) {
          rc->in_partial = {};
          rc->discarding = false;
          out.fail(abi::kMalformed, "a reference to a body sent over TCP that is not here");
          continue;
        }
        const std::vector<std::byte>& b = bulk_requests_[bulk_next++];
        body = b.data();
        rh.length = std::uint32_t(b.size());
        rh.invoker &= ~abi::kInvokerBulk;
      }
      if (rh.invoker == abi::kBuiltinPiece) {
        // No response for a piece; the record that ends them gets one.
        ++pieces;
        if (rc->discarding) continue;
        if (rc->in_partial.size() + rh.length > kMaxBulkBytes) {
          rc->in_partial = {};
          rc->discarding = true;  // until the record that ends them
          continue;
        }
        rc->in_partial.insert(rc->in_partial.end(), body, body + rh.length);
        continue;
      }
      if (rc->discarding || rc->in_partial.size() + rh.length > kMaxBulkBytes) {
        rc->in_partial = {};
        rc->discarding = false;
        out.fail(abi::kMalformed, "request larger than 1 GiB");
        continue;
      }
      if (!rc->in_partial.empty()) {
        rc->in_partial.insert(rc->in_partial.end(), body, body + rh.length);
        body = rc->in_partial.data();
        rh.length = std::uint32_t(rc->in_partial.size());
      }
      dispatch(rh, body, out);
      rc->in_partial.clear();
    }
  }
  if (done < h.count) {  // unreadable records: whatever they continued is lost
    rc->in_partial = {};
    rc->discarding = false;
  }
  for (std::uint32_t i = done; i < h.count; ++i) out.fail(abi::kMalformed, "record unreadable");
  requests_served_ += h.count - pieces;
  requests_served_remote_ += h.count - pieces;
  ++slots_served_;
  emit_remote(client, h.seq);
  return true;
}

// Writes the front of the client's response stream into its slot: whole
// responses while they fit, then a piece of the next one; kResponseMore
// when something is left for the next batch to fetch.
void Worker::emit_remote(ThreadId client, std::uint32_t seq) {
  RemoteClient& rc = *remote_clients_[client];
  std::byte* primary = square_.response_primary(client, id_, seq);
  std::byte* overflow = square_.response_overflow(client, id_, seq);
  std::uint32_t pl = 0, ol = 0, count = 0;
  int stage = 0;
  const std::uint32_t host = bulk_ ? rt_.rack()->host_of(client) : 0;
  while (rc.out_head < rc.out.size()) {
    ResponseHeader rh;
    std::memcpy(&rh, rc.out.data() + rc.out_head, sizeof rh);
    const std::byte* data = rc.out.data() + rc.out_head + sizeof rh + rc.front_sent;
    std::uint32_t left = rh.length - rc.front_sent;
    std::uint32_t size = sizeof rh + abi::align_record(left);
    std::byte* at;
    if (rc.front_sent == 0 && rh.length > bulk_threshold_ && rh.length <= kMaxBulkBytes && bulk_->usable(host)) {
      // Larger than the threshold: over TCP, with a reference in this batch
      // (the client takes the batch once every response it names is in).
      constexpr std::uint32_t need = sizeof rh + sizeof(abi::BulkRef);
      if (stage == 0 && pl + need <= abi::kResponsePrimaryData) {
        at = primary + sizeof(abi::ResponseSlotHeader) + pl;
        pl += need;
      } else if (ol + need <= abi::kOverflowBytes) {
        stage = 1;  // never back to the primary block: records stay in order
        at = overflow + ol;
        ol += need;
      } else {
        break;
      }
      abi::BulkRef ref{bulk_->send(host, Bulk::kResponse, id_, client, std::vector<std::byte>(data, data + left)),
                       left};
      tcp_bytes_sent_ += left;
      ResponseHeader wh{std::uint32_t(sizeof ref), rh.status | abi::kStatusBulk};
      std::memcpy(at, &wh, sizeof wh);
      std::memcpy(at + sizeof wh, &ref, sizeof ref);
      rc.out_head += sizeof rh + abi::align_record(rh.length);
      ++count;
      continue;  // references anywhere in a batch
    }
    if (stage == 0 && pl + size <= abi::kResponsePrimaryData) {
      at = primary + sizeof(abi::ResponseSlotHeader) + pl;
      pl += size;
    } else if (ol + size <= abi::kOverflowBytes) {
      stage = 1;
      at = overflow + ol;
      ol += size;
    } else {
      stage = 1;
      std::uint32_t room = abi::kOverflowBytes - ol;
      if (room < sizeof rh + abi::kRecordAlign) break;
      std::uint32_t piece = (room - sizeof rh) & ~(abi::kRecordAlign - 1);
      ResponseHeader ph{piece, rh.status | abi::kStatusPiece};
      std::memcpy(overflow + ol, &ph, sizeof ph);
      std::memcpy(overflow + ol + sizeof ph, data, piece);
      ol += sizeof ph + piece;
      rc.front_sent += piece;
      ++count;
      break;
    }
    ResponseHeader wh{left, rh.status};
    std::memcpy(at, &wh, sizeof wh);
    std::memcpy(at + sizeof wh, data, left);
    std::memset(at + sizeof wh + left, 0, abi::align_record(left) - left);
    rc.out_head += sizeof rh + abi::align_record(rh.length);
    rc.front_sent = 0;
    ++count;
  }
  bool more = rc.out_head < rc.out.size();
  if (!more) {
    rc.out.truncate(0);
    rc.out_head = 0;
  } else if (rc.out_head > rc.out.size() / 2) {
    rc.out.consume_front(rc.out_head);
    rc.out_head = 0;
  }
  abi::ResponseSlotHeader hdr{};
  hdr.seq = seq;
  hdr.count = std::uint16_t(count);
  hdr.primary_len = std::uint16_t(pl);
  hdr.overflow_len = std::uint16_t(ol);
  hdr.flags = more ? abi::kResponseMore : 0;
  std::memcpy(primary + sizeof hdr.seq, reinterpret_cast<std::byte*>(&hdr) + sizeof hdr.seq,
              sizeof hdr - sizeof hdr.seq);
  std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(primary))
      .store(seq, std::memory_order_release);
  ring_doorbell(abi::kDoorbellResponse | client);
}

}  // namespace gossamer::detail
