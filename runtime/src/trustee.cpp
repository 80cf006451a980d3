// Trustee side: serve every request slot addressed to this thread. Each
// record is validated (lengths, invoker id, property handle and type) before
// anything runs; a bad record gets an error response, never trust.
#include <cstring>
#include <exception>

#include "runtime_state.hpp"
#include "worker.hpp"

namespace gossamer::detail {

namespace {
using abi::RequestHeader;
using abi::ResponseHeader;
constexpr std::uint64_t kNoProperty = type_key<void>();

// Writes a batch's responses in order: primary block, then overflow, then a
// heap spill buffer for whatever is left (001 §5.3: responses larger than the
// slot still arrive).
class SlotResponseWriter final : public ResponseWriter {
 public:
  SlotResponseWriter(std::byte* primary, std::byte* overflow)
      : primary_(primary), overflow_(overflow) {}

  std::byte* reserve(std::uint32_t len) override { return put(len, abi::kOk); }
  void fail(std::uint32_t status, std::string_view message) override {
    auto len = std::uint32_t(std::min<std::size_t>(message.size(), 256));
    std::byte* p = put(len, status);
    if (len) std::memcpy(p, message.data(), len);
  }

  std::uint32_t written() const { return written_; }
  void finish(std::uint32_t seq, std::uint16_t count) {
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
  std::byte* put(std::uint32_t len, std::uint32_t status) {
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
    return at + sizeof h;
  }

  std::byte* primary_;
  std::byte* overflow_;
  std::vector<std::byte>* spill_ = nullptr;
  std::uint32_t pl_ = 0, ol_ = 0, written_ = 0;
  int stage_ = 0;
};

// Runs one record (already bounds-checked against its block).
void dispatch(Worker& w, ThreadId client, const RequestHeader& h, const std::byte* body,
              ResponseWriter& out) {
  PropertyHandle prop{h.property};
  std::uint32_t invoker = h.invoker & ~abi::kInvokerExternal;
  switch (invoker) {
    case abi::kBuiltinToggleRef: {
      std::uint64_t id;
      if (h.length != sizeof id) return out.fail(abi::kMalformed, "toggle body size");
      std::memcpy(&id, body, sizeof id);
      if (!w.properties().toggle(prop, id)) return out.fail(abi::kStaleProperty, "");
      out.reserve(0);
      return;
    }
    case abi::kBuiltinComplete: {
      if (h.length < 16) return out.fail(abi::kMalformed, "completion body size");
      std::uint64_t token;
      std::uint32_t status;
      std::memcpy(&token, body, sizeof token);
      std::memcpy(&status, body + 8, sizeof status);
      out.reserve(0);  // answer first: the completion may wake fibers
      w.complete_parked(token, status, body + 16, h.length - 16);
      return;
    }
    default:
      break;
  }
  const InvokerEntry* inv = w.rt().invoker(invoker);
  if (!inv) return out.fail(abi::kBadInvoker, "unknown invoker id");
  void* obj = nullptr;
  if (inv->property_type != kNoProperty) {
    std::uint32_t status;
    obj = w.properties().find(prop, inv->property_type, &status);
    if (!obj) return out.fail(status, "");
  }
  Invocation call{obj, prop, body, h.length, client, &out};
  try {
    inv->fn(call);
  } catch (const std::exception& e) {
    out.fail(abi::kException, e.what());
  } catch (...) {
    out.fail(abi::kException, "the closure threw something that is not a std::exception");
  }
}
}  // namespace

bool Worker::serve_requests() {
  bool worked = false;
  std::uint32_t n = rt_.size();
  for (ThreadId c = 0; c < n; ++c) {
    std::byte* primary = square_.request_primary(id_, c);
    std::uint32_t seq = std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(primary))
                            .load(std::memory_order_acquire);
    if (seq == served_seq_[c]) continue;
    abi::RequestSlotHeader h;
    std::memcpy(&h, primary, sizeof h);  // copy, then validate
    h.seq = seq;
    serve_slot(c, h);
    served_seq_[c] = seq;
    worked = true;
  }
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
  for (const Region& r : regions) {
    std::uint32_t off = 0;
    while (done < h.count && off + sizeof(RequestHeader) <= r.len) {
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
      std::uint32_t before = out.written();
      dispatch(*this, client, rh, body, out);
      if (out.written() == before) out.reserve(0);  // an invoker that said nothing
      if (out.written() != before + 1) fatal("an invoker wrote more than one response");
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

}  // namespace gossamer::detail
