// Batches: GETs and plain SETs for another thread's shard, gathered over a
// loop round and sent as one request per shard.
//
// A request through a slot costs far more than the command it carries: the
// runtime encodes a std::string argument and a Value result through cereal
// (an archive and its hash maps, on both sides, for every request; until
// the runtime kept one std::ostream per thread, also an ios_base, a locale
// and facets found by dynamic_cast). Under callgrind (2 threads,
// redis-benchmark -P 16, README, Performance) that was about a third of
// the instructions of a command for the other shard. A batch pays it once for all the commands a round sends to one
// shard: the request is one string of packed operations, the answer one
// string of the operations' RESP replies, each built by the trustee with
// the same shard functions and reply texts as strings.cpp's path.
//
// Order: a batch leaves before anything else this loop sends (Loop::execute
// sends the batches before any other command, the loop before it yields),
// and one thread's requests to one trustee are served in order, so the
// commands of a connection reach a shard in the order it sent them. No
// batching while a fence is up (transactions.cpp): those commands take the
// ordinary path, after the batches.
#include <cstring>

#include "server.hpp"

namespace hydra {

namespace {

// Operations in a batch: the code, the key's length and bytes, and for a
// SET the value's length and bytes (lengths as 4 bytes, host order: the
// hosts of a rack run the same binary on the same machine type).
enum : char { kOpGet = 'g', kOpGet3 = 'G', kOpSet = 's' };

constexpr std::size_t kBatchBytes = 64u << 10;  // a batch larger than this leaves at once
constexpr std::size_t kBatchOps = 512;          // ... and one with this many operations
constexpr std::size_t kBatchArg = 16u << 10;    // a key and value larger than this go alone
// A batch's answer is one string, which a response carries (and across
// hosts, at most 1 GiB): a GET whose value would take it past this is
// answered with an error instead (a pipeline of hundreds of GETs of
// megabyte values; its other operations run).
constexpr std::size_t kBatchAnswerMax = std::size_t(1) << 30;
constexpr const char* kTooLargeForBatch =
    "ERR the replies of this pipeline's GETs on one shard would exceed 1 GiB: send fewer large GETs at once";

void put_len(std::string& out, std::size_t n) {
  const auto v = std::uint32_t(n);
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Reads a length and that many bytes from `in` at `at`; false if `in` ends first.
bool take(std::string_view in, std::size_t& at, std::string_view& field) {
  std::uint32_t n;
  if (in.size() - at < sizeof n) return false;
  std::memcpy(&n, in.data() + at, sizeof n);
  at += sizeof n;
  if (in.size() - at < n) return false;
  field = in.substr(at, n);
  at += n;
  return true;
}

// The keys of the next operations from `at` on, up to kPrefetchWindow of
// them, have their chains in s's map prefetched (shard.hpp): with 1 M keys a
// batch's lookups would otherwise miss the cache one after another, as a
// pipeline's did before prefetch.cpp. Returns where the scan stopped: the
// first operation not prefetched, or the end (also after a malformed one,
// which the caller then meets and stops at).
std::size_t prefetch_ops(Shard& s, std::string_view in, std::size_t at) {
  std::string_view keys[kPrefetchWindow];
  std::size_t n = 0;
  while (n < kPrefetchWindow && at < in.size()) {
    const char op = in[at++];
    std::string_view value;
    if ((op != kOpGet && op != kOpGet3 && op != kOpSet) || !take(in, at, keys[n]) ||
        (op == kOpSet && !take(in, at, value))) {
      at = in.size();  // malformed: the keys before it are still worth it
      break;
    }
    if (keys[n].size() <= 256) ++n;  // as prefetch_keys: a long key is not hashed twice
  }
  prefetch_shard_keys(s, keys, n);
  return at;
}

// The trustee's side: runs the operations in order, and answers each one's
// reply (length, bytes) in order. A malformed batch (it may come from
// another host) stops at the first bad operation: the loop answers the
// operations left without a reply with an error.
std::string shard_batch(Shard& s, const std::string& ops) noexcept {
  std::string out;
  std::size_t mark = 0;  // where the reply being built starts
  try {
    std::string_view in(ops);
    std::size_t at = 0;
    // Operations before `ahead` had their keys prefetched; none when the
    // map is small enough to stay in cache.
    std::size_t ahead = s.map.bucket_count() < kPrefetchMinBuckets ? in.size() : 0;
    while (at < in.size()) {
      if (at >= ahead) ahead = prefetch_ops(s, in, at);
      const char op = in[at++];
      std::string_view key, value;
      if (!take(in, at, key) || (op == kOpSet && !take(in, at, value))) break;
      mark = out.size();
      put_len(out, 0);
      if (op == kOpGet || op == kOpGet3) {
        Value v = shard_get(s, std::string(key));
        if (v.kind == Value::kString && out.size() + v.data.size() > kBatchAnswerMax) resp::error(out, kTooLargeForBatch);
        else if (v.kind == Value::kString) resp::bulk(out, v.data);
        else if (v.kind == Value::kNil) resp::nil(out, op == kOpGet3);
        else resp::error(out, v.data);
      } else if (op == kOpSet) {
        Count n = shard_set(s, std::string(key), std::string(value));
        if (n.err == Count::kOk) resp::simple(out, "OK");
        else resp::error(out, count_error(n.err));
      } else {
        out.resize(mark);
        break;
      }
      const auto len = std::uint32_t(out.size() - mark - sizeof(std::uint32_t));
      std::memcpy(out.data() + mark, &len, sizeof len);
    }
  } catch (...) {  // out of memory: the replies so far stand, the rest are errors
    out.resize(mark);  // without the one that was being built (shrinking does not allocate)
  }
  return out;
}

// A captureless lambda, not a function: a closure crosses hosts as its bytes.
constexpr auto batch_closure = [](Shard& s, std::string ops) { return shard_batch(s, ops); };

}  // namespace

bool Loop::batch(std::uint32_t slot, std::uint32_t gen, std::uint64_t seq, std::size_t shard_index, bool set,
                 const std::vector<std::string_view>& args) {
  if (shard_index == own_shard_ || !fences_.empty()) return false;  // own shard: applied at once
  const Connection& c = *conns_[slot];  // slot and gen name a live connection: it is executing
  if (c.in_exec || args[1].size() + (set ? args[2].size() : 0) > kBatchArg) return false;
  if (batches_.empty()) batches_.resize(nshards_);
  Batch& b = batches_[shard_index];
  if (b.targets.empty()) batch_used_.push_back(std::uint32_t(shard_index));
  b.ops += set ? kOpSet : c.resp3 ? kOpGet3 : kOpGet;
  put_len(b.ops, args[1].size());
  b.ops += args[1];
  if (set) {
    put_len(b.ops, args[2].size());
    b.ops += args[2];
  }
  b.targets.push_back({slot, gen, seq});
  ++inflight_;
  ++conns_[slot]->batched;
  if (b.ops.size() >= kBatchBytes || b.targets.size() >= kBatchOps) send_batch(shard_index);
  return true;
}

void Loop::send_batches() {
  // A send may suspend this fiber (the runtime's bound on requests in
  // flight); whatever is batched meanwhile joins the list again.
  while (!batch_used_.empty()) {
    const std::uint32_t s = batch_used_.back();
    batch_used_.pop_back();
    send_batch(s);
  }
}

void Loop::send_batch(std::size_t shard_index) {
  Batch& b = batches_[shard_index];
  if (b.targets.empty()) return;  // sent already (a full batch leaves at once)
  std::vector<BatchTarget> targets;
  targets.swap(b.targets);
  std::string ops;
  ops.swap(b.ops);
  b.ops.reserve(ops.capacity());
  shard(shard_index).apply_with_then(
      batch_closure,
      [this, targets = std::move(targets)](std::string replies) {
        std::string_view in(replies);
        std::size_t at = 0;
        for (const BatchTarget& t : targets) {
          if (Connection* c = find(t.slot, t.gen)) --c->batched;
          std::string_view reply;
          if (take(in, at, reply)) answer(t.slot, t.gen, t.seq, [&](Pending& q) { q.reply.append(reply); });
          else answer(t.slot, t.gen, t.seq, [](Pending& q) { resp::error(q.reply, "ERR out of memory"); });
        }
      },
      std::move(ops));
}

// Replies are held back while answers to the connection's batched
// commands are owed (they come at the latest with its next batch's answer,
// which flushes it) and less than 64 KiB wait: 1 send per pipeline instead
// of 1.5 with 2 threads (README, Performance). Used by Loop::flush and
// Loop::update_events (io_loop.cpp).
bool Loop::holding(const Connection& c) { return c.batched > 0 && c.out.size() - c.written < (64u << 10); }

}  // namespace hydra
