// The key space as a whole: KEYS, SCAN, RANDOMKEY (every shard of the rack)
// and OBJECT (one key's shard).
//
// SCAN's cursor: the top 8 bits are a shard index (at most 256 shards), the
// low 56 bits a position in that shard's keys ordered by scan_hash, a hash
// of the key alone (the same on every host and for every size of the
// shard's map). One SCAN call visits one shard: the keys whose hash is at
// least the position, the `count` smallest of them and every other key
// sharing the last hash, and answers the next position; after the last
// shard the cursor is 0. A key present from the first call to the last has
// a fixed hash, so whatever is added, deleted or rehashed meanwhile it is
// visited exactly once (Redis guarantees at least once). The price: each
// call looks at every key of its shard (O(keys of the shard), where Redis's
// reverse-binary bucket cursor visits only about `count`).
#include <fnmatch.h>

#include <algorithm>
#include <climits>
#include <random>

#include "server.hpp"
#include "types.hpp"

namespace hydra {

namespace {

using resp::lower;

constexpr int kShardShift = 56;
constexpr std::int64_t kPositionMask = (std::int64_t(1) << kShardShift) - 1;

bool glob(const std::string& pattern, const std::string& s) {
  return pattern.empty() || pattern == "*" || ::fnmatch(pattern.c_str(), s.c_str(), 0) == 0;
}

bool due(const Shard& s, const std::string& key, std::int64_t now) {
  if (s.expires.empty()) return false;
  auto e = s.expires.find(key);
  return e != s.expires.end() && e->second <= now;
}

const char* type_name(const Shard& s, const std::string& key) {
  static const char* const kNames[] = {"hash", "list", "set", "zset"};
  if (s.map.count(key)) return "string";
  auto it = s.objs.find(key);
  return it == s.objs.end() ? "none" : kNames[it->second.index()];
}

std::mt19937_64& rng() {
  thread_local std::mt19937_64 g{std::random_device{}()};
  return g;
}

bool strict_int(const std::string& v, long long& n) { return v.size() <= 20 && resp::parse_int64(v, n); }

}  // namespace

std::int64_t scan_hash(std::string_view key) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull ^ 0x9e3779b97f4a7c15ull;  // FNV-1a from another seed than shard_of's
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return std::int64_t(h & std::uint64_t(kPositionMask));
}

Reply shard_keys(Shard& s, std::string pattern) noexcept {
  Reply r;
  r.kind = Reply::kArray;
  try {
    const std::int64_t now = now_ms();
    auto add = [&](const std::string& k) {
      if (!due(s, k, now) && glob(pattern, k)) r.items.push_back(k);
    };
    for (const auto& [k, v] : s.map) add(k);
    for (const auto& [k, v] : s.objs) add(k);
  } catch (...) {
    r = Reply{Reply::kError, 0, "ERR out of memory", {}, {}};
  }
  return r;
}

Reply shard_scan(Shard& s, std::int64_t from, std::int64_t count, std::string pattern, std::string type) noexcept {
  Reply r;
  r.kind = Reply::kScan;
  r.n = -1;
  try {
    std::vector<std::pair<std::int64_t, const std::string*>> ahead;
    auto consider = [&](const std::string& k) {
      const std::int64_t h = scan_hash(k);
      if (h >= from) ahead.emplace_back(h, &k);
    };
    for (const auto& [k, v] : s.map) consider(k);
    for (const auto& [k, v] : s.objs) consider(k);
    if (ahead.size() > std::size_t(count)) {
      std::nth_element(ahead.begin(), ahead.begin() + (count - 1), ahead.end());
      const std::int64_t last = ahead[std::size_t(count - 1)].first;  // every key of this hash is visited now
      std::erase_if(ahead, [last](const auto& e) { return e.first > last; });
      if (last < kPositionMask) r.n = last + 1;
    }
    std::sort(ahead.begin(), ahead.end());
    const std::int64_t now = now_ms();
    for (const auto& [h, k] : ahead)
      if (!due(s, *k, now) && glob(pattern, *k) && (type.empty() || type == type_name(s, *k))) r.items.push_back(*k);
  } catch (...) {
    r = Reply{Reply::kError, 0, "ERR out of memory", {}, {}};
  }
  return r;
}

Reply shard_random(Shard& s) noexcept {
  Reply r;
  try {
    const std::int64_t now = now_ms();
    // A random bucket, then the next non-empty one, of the map holding the
    // chosen position's key; tries a few times past expired keys.
    const std::size_t total = s.map.size() + s.objs.size();
    for (int attempt = 0; attempt < 16 && total > 0; ++attempt) {
      const std::size_t pick = std::uniform_int_distribution<std::size_t>(0, total - 1)(rng());
      const std::string* key = nullptr;
      auto from = [&](const auto& m) {
        const std::size_t nb = m.bucket_count();
        std::size_t b = std::uniform_int_distribution<std::size_t>(0, nb - 1)(rng());
        for (std::size_t i = 0; i < nb; ++i, b = (b + 1) % nb)
          if (m.bucket_size(b) > 0) {
            auto it = m.begin(b);
            std::advance(it, std::uniform_int_distribution<std::size_t>(0, m.bucket_size(b) - 1)(rng()));
            key = &it->first;
            return;
          }
      };
      if (pick < s.map.size()) from(s.map);
      else from(s.objs);
      if (key && !due(s, *key, now)) {
        r.kind = Reply::kBulk;
        r.s = *key;
        r.n = std::int64_t(total);
        return r;
      }
    }
  } catch (...) {
  }
  r.kind = Reply::kNil;
  return r;
}

const char* string_encoding(const std::string& v) noexcept {
  long long n;
  if (strict_int(v, n)) return "int";
  return v.size() <= 44 ? "embstr" : "raw";
}

Reply shard_object(Shard& s, std::string sub, std::string key) noexcept {
  Reply r;
  try {
    expire_if_due(s, key);
    auto str = s.map.find(key);
    auto obj = s.objs.find(key);
    if (str == s.map.end() && obj == s.objs.end()) return r;  // kNil
    if (sub == "encoding") {
      r.kind = Reply::kBulk;
      if (str != s.map.end()) {
        r.s = str->second.raw ? "raw" : string_encoding(str->second);
      } else if (const Hash* h = std::get_if<Hash>(&obj->second)) {
        r.s = h->listpack() ? "listpack" : "hashtable";  // what its writes made it (hash.hpp)
      } else if (std::holds_alternative<List>(obj->second)) {
        r.s = "quicklist";  // Redis 7.0's only list encoding
      } else if (const ZSet* z = std::get_if<ZSet>(&obj->second)) {
        const auto max = std::size_t(g_encodings.zset_value.load(std::memory_order_relaxed));
        bool small = z->size() <= std::size_t(g_encodings.zset_entries.load(std::memory_order_relaxed));
        for (auto it = z->begin(); small && it != z->end(); ++it) small = it->first.size() <= max;
        r.s = small ? "listpack" : "skiplist";
      } else {
        const Set& set = std::get<Set>(obj->second);
        bool ints = !obj->second.big && set.size() <= std::size_t(g_encodings.set_intset.load(std::memory_order_relaxed));
        long long n;
        for (auto it = set.begin(); ints && it != set.end(); ++it) ints = strict_int(*it, n);
        r.s = ints ? "intset" : "hashtable";
      }
    } else if (sub == "refcount") {
      // Redis shares the integers 0..9999 (refcount INT_MAX); other values
      // have one reference.
      long long n = -1;
      const bool shared = str != s.map.end() && strict_int(str->second, n) && n >= 0 && n < 10000;
      r.kind = Reply::kInt;
      r.n = shared ? INT_MAX : 1;
    } else if (sub == "memory") {  // MEMORY USAGE: an estimate of the bytes the key takes in its shard's maps
      auto heap = [](const std::string& x) { return x.capacity() > 15 ? x.capacity() + 1 : 0; };
      constexpr std::size_t kNode = 16 + 8;
      constexpr std::size_t kZTreeNode = 64;  // a sorted set's tree node: (score, view), 3 pointers, color, subtree size  // hash-map node: next pointer and cached hash, plus its bucket
      std::size_t bytes = kNode + heap(key);
      if (str != s.map.end()) {
        bytes += sizeof(*str) + heap(str->second);
      } else {
        bytes += sizeof(*obj);
        std::visit([&](const auto& c) {
          if constexpr (std::is_same_v<std::decay_t<decltype(c)>, Hash>) {
            if (c.listpack()) {  // one array of pairs, no nodes
              bytes += c.pairs().capacity() * sizeof(Hash::Pair);
              for (const auto& [f, v] : c) bytes += heap(f) + heap(v);
            } else {
              for (const auto& [f, v] : c) bytes += sizeof(Hash::Pair) + kNode + heap(f) + heap(v);
            }
          } else {
            for (const auto& e : c) {
              if constexpr (std::is_same_v<std::decay_t<decltype(e)>, std::string>) bytes += sizeof(e) + kNode + heap(e);
              else bytes += sizeof(e) + kNode + heap(e.first) + kZTreeNode;  // a sorted set: the map's node and the tree's
            }
          }
        }, obj->second);
      }
      r.kind = Reply::kInt;
      r.n = std::int64_t(bytes);
    } else if (sub == "idletime") {
      r.kind = Reply::kInt;  // seconds since the key was last read or written (shard.hpp: tl_lru_clock)
      r.n = idle_ms(str != s.map.end() ? str->second.lru : obj->second.lru) / 1000;
    } else {  // freq: Hydra has no LFU policy
      r.kind = Reply::kError;
      r.s = "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when "
            "switching between policies at runtime LRU and LFU data will take some time to adjust.";
    }
  } catch (...) {
    r = Reply{Reply::kError, 0, "ERR out of memory", {}, {}};
  }
  return r;
}

// KEYS, SCAN, RANDOMKEY, OBJECT, MEMORY USAGE: true if `name` is one of them.
bool Loop::execute_keys(std::uint32_t slot, const std::string& name, Pending& p, std::uint64_t seq, std::uint32_t gen,
                        const std::vector<std::string_view>& args) {
  auto wrong_args = [&](const std::string& cmd) {
    resp::error(p.reply, "ERR wrong number of arguments for '" + cmd + "' command");
    return true;
  };
  auto each_shard = [&](Pending::Kind kind, auto fn, auto&&... extra) {
    p.kind = kind;
    p.waiting = std::uint32_t(nshards_);
    inflight_ += nshards_;
    for (std::size_t i = 0; i < nshards_; ++i)
      shard(i).apply_with_then(fn, [this, slot, gen, seq](Reply r) { answer(slot, gen, seq, [&](Pending& q) { gather(q, r); }); },
                               extra...);
  };
  if (name == "keys") {
    if (args.size() != 2) return wrong_args(name);
    each_shard(Pending::Kind::kKeys, [](Shard& s, std::string pat) { return shard_keys(s, std::move(pat)); },
               std::string(args[1]));
    return true;
  }
  if (name == "randomkey") {
    if (args.size() != 1) return wrong_args(name);
    each_shard(Pending::Kind::kRandom, [](Shard& s) { return shard_random(s); });
    return true;
  }
  if (name == "scan") {
    if (args.size() < 2) return wrong_args(name);
    // Redis 7.0's parseScanCursorOrReply (strtoul: "-1" is a large cursor), then the options.
    const std::string text(args[1]);
    char* end = nullptr;
    errno = 0;
    const unsigned long long cursor = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || errno != 0 || *end != '\0')
      return resp::error(p.reply, "ERR invalid cursor"), true;
    long long count = 10;
    std::string pattern, type;
    for (std::size_t i = 2; i < args.size(); i += 2) {
      const std::string o = lower(args[i]);
      if (i + 1 >= args.size()) return resp::error(p.reply, "ERR syntax error"), true;
      if (o == "count") {
        if (!resp::parse_int64(args[i + 1], count)) return resp::error(p.reply, kNotInteger), true;
        if (count < 1) return resp::error(p.reply, "ERR syntax error"), true;
      } else if (o == "match") {
        pattern = args[i + 1];
      } else if (o == "type") {
        type = lower(args[i + 1]);
      } else {
        return resp::error(p.reply, "ERR syntax error"), true;
      }
    }
    const std::uint64_t index = cursor >> kShardShift;
    if (index >= nshards_) {  // not a cursor Hydra gave: the scan is over, as Redis for a cursor past the table
      resp::array(p.reply, 2);
      resp::bulk(p.reply, "0");
      resp::array(p.reply, 0);
      return true;
    }
    p.waiting = 1;
    scan_step(slot, gen, seq, std::uint32_t(index), std::int64_t(cursor & std::uint64_t(kPositionMask)), count,
              std::move(pattern), std::move(type), {});
    return true;
  }
  if (name == "memory") {  // MEMORY USAGE key [SAMPLES n]: OBJECT's closure with "memory"
    if (args.size() < 2) return wrong_args(name);
    const std::string sub = lower(args[1]);
    if (sub != "usage")
      return resp::error(p.reply, "ERR unknown subcommand '" + std::string(args[1].substr(0, 128)) + "'. Try MEMORY HELP."), true;
    long long samples;
    if (args.size() < 3) return wrong_args("memory|usage");
    if (args.size() != 3 && !(args.size() == 5 && lower(args[3]) == "samples" && resp::parse_int64(args[4], samples)))
      return resp::error(p.reply, "ERR syntax error"), true;
  }
  if (name == "object" || name == "memory") {
    if (args.size() < 2) return wrong_args(name);
    const std::string sub = name == "memory" ? "memory" : lower(args[1]);
    if (sub == "help" && args.size() == 2) {
      help_reply(p.reply, {
          "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
          "ENCODING <key>",
          "    Return the kind of internal representation Redis 7.0 would use for the value stored at <key>.",
          "FREQ <key>",
          "    Return the access logarithmic access frequency counter (needs an LFU policy: none in Hydra).",
          "IDLETIME <key>",
          "    Return the idle time of the key, that is the approximated number of seconds elapsed since the last access to the key.",
          "REFCOUNT <key>",
          "    Return the number of references of the value associated with the specified key.",
          "HELP",
          "    Print this help."});
      return true;
    }
    if (name == "object" && sub != "encoding" && sub != "refcount" && sub != "idletime" && sub != "freq")
      return resp::error(p.reply, "ERR unknown subcommand '" + std::string(args[1].substr(0, 128)) + "'. Try OBJECT HELP."), true;
    if (args.size() != 3 && sub != "memory") return wrong_args("object|" + sub);
    p.waiting = 1;
    ++inflight_;
    shard(shard_of(args[2], nshards_))
        .apply_with_then([](Shard& s, std::string sb, std::string k) { return shard_object(s, std::move(sb), std::move(k)); },
                         [this, slot, gen, seq](Reply r) {
                           answer(slot, gen, seq, [&](Pending& q) { encode_reply(q.reply, r, q.resp3); });
                         },
                         sub, std::string(args[2]));
    return true;
  }
  return false;
}

// One SCAN call's visit of shard `index` from position `from`: answers the
// cursor of the next position there, or goes on to the next shard while it
// has found fewer than `count` keys (so an empty key space answers cursor 0
// at once), or answers 0 after the last shard.
void Loop::scan_step(std::uint32_t slot, std::uint32_t gen, std::uint64_t seq, std::uint32_t index, std::int64_t from,
                     std::int64_t count, std::string pattern, std::string type, std::vector<std::string> found) {
  ++inflight_;
  shard(index).apply_with_then(
      [](Shard& s, std::int64_t f, std::int64_t n, std::string pat, std::string ty) {
        return shard_scan(s, f, n, std::move(pat), std::move(ty));
      },
      [this, slot, gen, seq, index, count, pattern, type, found = std::move(found)](Reply r) mutable {
        if (r.kind == Reply::kScan) {
          found.insert(found.end(), std::make_move_iterator(r.items.begin()), std::make_move_iterator(r.items.end()));
          if (r.n < 0 && index + 1 < nshards_ && std::int64_t(found.size()) < count && find(slot, gen)) {
            --inflight_;  // this answer; the next shard's is owed instead
            return scan_step(slot, gen, seq, index + 1, 0, count, std::move(pattern), std::move(type), std::move(found));
          }
          r.items = std::move(found);  // the rack's cursor: this shard's next position, or the next shard, or 0
          if (r.n >= 0) r.n = std::int64_t((std::uint64_t(index) << kShardShift) | std::uint64_t(r.n));
          else r.n = index + 1 < nshards_ ? std::int64_t(std::uint64_t(index + 1) << kShardShift) : 0;
        }
        answer(slot, gen, seq, [&](Pending& q) { encode_reply(q.reply, r, q.resp3); });
      },
      from, count, pattern, type);
}

// One shard's part of KEYS (its keys) or RANDOMKEY (a candidate, chosen with
// probability proportional to its shard's keys: uniform over the rack).
void Loop::gather(Pending& q, Reply& r) {
  if (r.kind == Reply::kError) {
    if (q.error.empty()) q.error = r.s;
  } else if (q.kind == Pending::Kind::kKeys) {
    for (auto& k : r.items) q.values.push_back(Value{Value::kString, std::move(k)});
  } else if (r.kind == Reply::kBulk && r.n > 0) {
    q.sum += r.n;
    if (std::uniform_int_distribution<std::int64_t>(1, q.sum)(rng()) <= r.n) q.values.assign(1, Value{Value::kString, std::move(r.s)});
  }
}

}  // namespace hydra
