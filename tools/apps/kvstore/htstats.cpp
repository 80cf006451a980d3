// DEBUG HTSTATS-KEY key: Redis 7.0's dictGetStats text for the hash table
// of a value Redis would keep in one (OBJECT ENCODING hashtable, or a
// skiplist sorted set's dict), else its error. Hydra's hashtable hashes,
// sets and sorted sets are std::unordered_map / unordered_set: the numbers are
// their real buckets (table size: bucket_count; a slot: a non-empty
// bucket; a chain: the bucket's elements). Hydra never rehashes
// incrementally, so there is no "rehashing target" table.
#include <cstdio>
#include <string>

#include "types.hpp"

namespace hydra {

namespace {

template <class Table>
std::string stats(const Table& t) {
  constexpr std::size_t kVectLen = 50;  // DICT_STATS_VECTLEN
  if (t.empty()) return "Hash table 0 stats (main hash table):\nNo stats available for empty dictionaries\n";
  std::size_t clvector[kVectLen] = {};
  std::size_t slots = 0, maxchain = 0, total = 0;
  const std::size_t size = t.bucket_count();
  for (std::size_t i = 0; i < size; ++i) {
    const std::size_t chain = t.bucket_size(i);
    ++clvector[chain < kVectLen ? chain : kVectLen - 1];
    if (chain == 0) continue;
    ++slots;
    if (chain > maxchain) maxchain = chain;
    total += chain;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "Hash table 0 stats (main hash table):\n"
                " table size: %zu\n"
                " number of elements: %zu\n"
                " different slots: %zu\n"
                " max chain length: %zu\n"
                " avg chain length (counted): %.02f\n"
                " avg chain length (computed): %.02f\n"
                " Chain length distribution:\n",
                size, t.size(), slots, maxchain, double(float(total) / float(slots)),
                double(float(t.size()) / float(slots)));
  std::string out = buf;
  for (std::size_t i = 0; i < kVectLen - 1; ++i) {
    if (clvector[i] == 0) continue;
    std::snprintf(buf, sizeof buf, "   %zu: %zu (%.02f%%)\n", i, clvector[i],
                  double(float(clvector[i]) / float(size) * 100));
    out += buf;
  }
  return out;
}

}  // namespace

Value shard_htstats(Shard& s, std::string key) noexcept {
  try {
    const Reply enc = shard_object(s, "encoding", key);
    if (enc.kind == Reply::kNil) return {Value::kError, "ERR no such key"};
    auto o = s.objs.find(key);
    if (o != s.objs.end() && (enc.s == "hashtable" || enc.s == "skiplist")) {
      if (const Set* st = std::get_if<Set>(&o->second)) return {Value::kString, stats(*st)};
      if (const Hash* h = std::get_if<Hash>(&o->second); h && h->table()) return {Value::kString, stats(*h->table())};
      if (const ZSet* z = std::get_if<ZSet>(&o->second)) return {Value::kString, stats(z->dict)};
    }
    return {Value::kError, "ERR The value stored at the specified key is not represented using an hash table"};
  } catch (...) {
    return {Value::kError, "ERR out of memory"};
  }
}

}  // namespace hydra
