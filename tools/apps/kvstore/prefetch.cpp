// Prefetching the keys of a pipeline (README, Performance: cache misses).
//
// With 1 M keys most of a shard's map is not in cache, and a GET or SET
// waits on a chain of dependent misses in libstdc++'s unordered_map
// (callgrind --cache-sim: 4.5 of Hydra's 4.9 LL read misses per command
// are in _M_find_before_node): the bucket's slot, which points to the node
// *before* the bucket's first; that node, for its next pointer; the first
// node itself (its hash code and key, two lines of a 96-byte node); the
// key's own buffer (redis-benchmark's keys are 16 bytes, one more than a
// string keeps inline). One command at a time, those misses are paid one
// after the other.
//
// When a connection's input holds several requests, process_input first
// calls prefetch_keys: it scans the requests' lengths (no parse, nothing
// executed, nothing kept), takes each one's second argument (a key, for
// GET, SET and most commands) when it lives in this thread's own shard, and
// walks the chains of all of them one step at a time, prefetching the next
// step of every key before reading any: the misses of up to 16 keys
// overlap instead of queueing (the memory-level parallelism of Dragonfly's
// and KeyDB's pipelines). It only reads pointers; what then runs, and
// every reply, is the same as without it.
//
// The walk itself is key_prefetch.hpp (shared with tools/bench's
// hydra-prefetch-bench); with a standard library other than libstdc++ the
// scan does nothing.
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "key_prefetch.hpp"
#include "server.hpp"

namespace hydra {
namespace {

// The length in a "*N\r\n" or "$N\r\n" line whose digits start at p (at
// most 9 of them); p moves past the CRLF. False for anything unexpected or
// incomplete. One and two digits (command names, keys, small values) take
// the short way.
[[gnu::always_inline]] inline bool length_at(const char*& p, const char* end, std::size_t& n) {
  if (end - p >= 4) {
    const unsigned d0 = unsigned(p[0] - '0'), d1 = unsigned(p[1] - '0');
    if (d0 < 10 && p[1] == '\r' && p[2] == '\n') return n = d0, p += 3, true;
    if (d0 < 10 && d1 < 10 && p[2] == '\r' && p[3] == '\n') return n = d0 * 10 + d1, p += 4, true;
  }
  const char* q = p;
  std::size_t v = 0;
  while (q < end && unsigned(*q - '0') < 10 && q - p < 9) v = v * 10 + std::size_t(*q++ - '0');
  if (q == p || end - q < 2 || q[0] != '\r' || q[1] != '\n') return false;
  n = v;
  p = q + 2;
  return true;
}

// One bulk argument at p ("$N\r\n" and N bytes and CRLF, all in the
// buffer): its bytes, and p moved past it.
[[gnu::always_inline]] inline bool bulk_at(const char*& p, const char* end, std::string_view& arg) {
  std::size_t len = 0;
  if (p == end || *p != '$') return false;
  ++p;
  if (!length_at(p, end, len) || std::size_t(end - p) < len + 2) return false;
  arg = std::string_view(p, len);
  p += len + 2;
  return true;
}

// The second argument of the complete multibulk request at in[pos], and
// pos moved past the request. False (pos unchanged) for an inline request,
// fewer than 2 or more than 64 arguments, or one not all in the buffer.
bool next_key(std::string_view in, std::size_t& pos, std::string_view& key) {
  const char* p = in.data() + pos;
  const char* const end = in.data() + in.size();
  std::size_t argc = 0;
  std::string_view arg;
  if (p == end || *p != '*') return false;
  ++p;
  if (!length_at(p, end, argc) || argc < 2 || argc > 64) return false;
  if (!bulk_at(p, end, arg) || !bulk_at(p, end, key)) return false;
  for (std::size_t i = 2; i < argc; ++i)
    if (!bulk_at(p, end, arg)) return false;
  pos = std::size_t(p - in.data());
  return true;
}

}  // namespace

std::size_t Loop::prefetch_keys(const Connection& c) {
  std::string_view in(c.in);
  std::size_t pos = c.consumed;
#ifdef HYDRA_PREFETCH
  if (own_ == nullptr) return in.size();
  StringMap& map = own_->map;
  if (map.bucket_count() < kPrefetchMinBuckets) return in.size();
  std::string_view keys[kPrefetchWindow];
  std::size_t n = 0, requests = 0;
  while (n < kPrefetchWindow && next_key(in, pos, keys[n])) {
    ++requests;
    if (keys[n].size() <= 256 && (nshards_ == 1 || shard_of(keys[n], nshards_) == own_shard_)) ++n;
  }
  if (requests == 0) return in.size();  // not a multibulk: do not look again in this input
  if (n >= 2) prefetch_chains(map, keys, n);  // one key: nothing to overlap
  return pos;
#else
  (void)pos;
  return in.size();
#endif
}

void prefetch_shard_keys(Shard& s, const std::string_view* keys, std::size_t n) noexcept {
#ifdef HYDRA_PREFETCH
  if (n >= 2 && n <= kPrefetchWindow && s.map.bucket_count() >= kPrefetchMinBuckets) prefetch_chains(s.map, keys, n);
#else
  (void)s, (void)keys, (void)n;
#endif
}

// Called once at the start of Loop::run: the own shard's address, for
// prefetch_keys only (it reads the map's pointers between commands, on the
// shard's own thread, so never while a closure changes it). Only when this
// thread is the shard's trustee: then the apply runs here at once.
void Loop::find_own_shard() {
  static thread_local Shard* seen = nullptr;
  own_ = nullptr;
  if (shard(own_shard_).trustee_index() != gossamer::thread_index()) return;
  seen = nullptr;
  shard(own_shard_).apply_then([](Shard& s) { seen = &s; return true; }, [](bool) {});
  own_ = seen;
  seen = nullptr;
}

}  // namespace hydra
