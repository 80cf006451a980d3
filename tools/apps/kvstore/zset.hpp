// Sorted sets (Shard::objs' fourth type): a hash map member -> score for
// ZSCORE and membership, and an order-statistics red-black tree of
// (score, member) for ranges and ranks in O(log n) (libstdc++'s policy-based
// tree with tree_order_statistics_node_update, the role of Redis's
// skiplist). The tree's members are views of the map's keys: a node of an
// unordered_map never moves, so each member is stored once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>

namespace hydra {

using ZEntry = std::pair<double, std::string_view>;
struct ZLess {
  bool operator()(const ZEntry& a, const ZEntry& b) const noexcept {
    return a.first < b.first || (a.first == b.first && a.second < b.second);
  }
};
using ZTree = __gnu_pbds::tree<ZEntry, __gnu_pbds::null_type, ZLess, __gnu_pbds::rb_tree_tag,
                               __gnu_pbds::tree_order_statistics_node_update>;

struct ZSet {
  std::unordered_map<std::string, double> dict;
  ZTree tree;

  ZSet() = default;
  ZSet(const ZSet& o) : dict(o.dict) {
    for (const auto& [m, sc] : dict) tree.insert({sc, m});
  }
  ZSet(ZSet&& o) noexcept : dict(std::move(o.dict)) { tree.swap(o.tree); }  // nodes keep their addresses
  ZSet& operator=(ZSet o) noexcept {
    dict.swap(o.dict);
    tree.swap(o.tree);
    return *this;
  }

  std::size_t size() const noexcept { return dict.size(); }
  bool empty() const noexcept { return dict.empty(); }
  // Iteration (MEMORY USAGE, eviction's estimate, DEBUG): member, score.
  auto begin() const noexcept { return dict.begin(); }
  auto end() const noexcept { return dict.end(); }

  // Sets `member`'s score: true if it is new.
  bool set(const std::string& member, double score) {
    auto [it, added] = dict.try_emplace(member, score);
    if (!added) {
      if (it->second == score) return false;
      tree.erase({it->second, it->first});
      it->second = score;
    }
    try {
      tree.insert({score, it->first});
    } catch (...) {
      dict.erase(it);  // never a member of the map alone
      throw;
    }
    return added;
  }
  bool erase(const std::string& member) {
    auto it = dict.find(member);
    if (it == dict.end()) return false;
    tree.erase({it->second, it->first});
    dict.erase(it);
    return true;
  }
  // The 0-based rank of (score, member), which must be present.
  std::size_t rank(double score, std::string_view member) const { return tree.order_of_key({score, member}); }
};

// Redis 7.0's addReplyDouble text: "inf", "-inf", else %.17g.
std::string format_score(double d);
// A score or weight as Redis's getDoubleFromObject reads it: the whole
// text, no leading space, not NaN, not out of range.
bool parse_score(const std::string& t, double& d);

}  // namespace hydra
