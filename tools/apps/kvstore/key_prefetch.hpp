// The chain walk of the key prefetch (prefetch.cpp; README, Performance):
// for up to kPrefetchWindow keys of one shard's map, prefetch each step of
// libstdc++'s lookup chain for all keys before reading any step, so their
// misses overlap. Header-only so that tools/bench's prefetch bench runs the
// same code; include it from one file per program (it explicitly
// instantiates the accessor of a private member, which may appear once).
//
// The chain is libstdc++'s (bits/hashtable.h): _M_buckets[hash % count]
// points to the node *before* the bucket's first; nodes cache the hash
// code (std::string keys), 80 bytes in. The bucket array is private, so it
// is reached through the explicit instantiation rule ([temp.spec]: names
// in an explicit instantiation are not access checked). With another
// standard library (HYDRA_PREFETCH undefined) prefetch_chains does nothing.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "shard.hpp"

namespace hydra {

using StringMap = decltype(Shard::map);
// kPrefetchWindow and kPrefetchMinBuckets: shard.hpp.

namespace prefetch_detail {
#if defined(__GLIBCXX__) && defined(_GLIBCXX_RELEASE) && _GLIBCXX_RELEASE >= 11 && _GLIBCXX_RELEASE <= 14
#define HYDRA_PREFETCH 1
using Table = std::__umap_hashtable<std::string, Entry, std::hash<std::string>, std::equal_to<std::string>,
                                    std::allocator<std::pair<const std::string, Entry>>>;
using NodeBase = std::__detail::_Hash_node_base;
using Node = std::__detail::_Hash_node<std::pair<const std::string, Entry>, true>;
static_assert(std::__cache_default<std::string, std::hash<std::string>>::value,
              "libstdc++ caches std::string keys' hash codes in the node");

template <class Tag, typename Tag::type M>
struct Expose {
  friend typename Tag::type member(Tag) { return M; }
};
struct TableOf {
  using type = Table StringMap::*;
  friend type member(TableOf);
};
struct BucketsOf {
  using type = NodeBase** Table::*;
  friend type member(BucketsOf);
};
template struct Expose<TableOf, &StringMap::_M_h>;
template struct Expose<BucketsOf, &Table::_M_buckets>;
#endif
}  // namespace prefetch_detail

// Prefetches the places of keys[0, n) (n <= kPrefetchWindow) in `map`. Reads
// only the map's pointers; changes nothing.
inline void prefetch_chains(StringMap& map, const std::string_view* keys, std::size_t n) {
#ifdef HYDRA_PREFETCH
  using namespace prefetch_detail;
  NodeBase** const buckets = map.*member(TableOf{}).*member(BucketsOf{});
  const std::size_t nb = map.bucket_count();
  std::size_t hash[kPrefetchWindow];
  NodeBase* step[kPrefetchWindow];  // the bucket's slot, then the node before the first, then the first
  for (std::size_t i = 0; i < n; ++i) {
    hash[i] = std::hash<std::string_view>{}(keys[i]);  // the same as std::hash<std::string>
    NodeBase** slot = &buckets[hash[i] % nb];          // _Mod_range_hashing
    __builtin_prefetch(slot);
    step[i] = reinterpret_cast<NodeBase*>(slot);
  }
  for (std::size_t i = 0; i < n; ++i) {  // the slot: the node before the bucket's first
    step[i] = *reinterpret_cast<NodeBase**>(step[i]);
    if (step[i] != nullptr) __builtin_prefetch(step[i]);
  }
  for (std::size_t i = 0; i < n; ++i) {  // the bucket's first node: its key and, a line on, its hash code
    if (step[i] == nullptr) continue;
    step[i] = step[i]->_M_nxt;
    __builtin_prefetch(step[i]);
    __builtin_prefetch(reinterpret_cast<const char*>(step[i]) + 64);
  }
  for (std::size_t i = 0; i < n; ++i) {  // the key's buffer if the hash matches, else the next node
    if (step[i] == nullptr) continue;
    const Node* node = static_cast<const Node*>(step[i]);
    if (node->_M_hash_code == hash[i]) __builtin_prefetch(node->_M_v().first.data());
    else if (node->_M_nxt != nullptr) __builtin_prefetch(node->_M_nxt);
  }
#else
  (void)map, (void)keys, (void)n;
#endif
}

}  // namespace hydra
