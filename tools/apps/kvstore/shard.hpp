// One shard of Hydra's key space: a hash map owned by one trustee. Every
// access is a closure the trustee runs, so the map needs no lock; the
// closures below capture nothing (keys and values travel as apply_with
// arguments) and never throw, because a failed apply_then aborts the
// process.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <gossamer/gossamer.hpp>

#include "hash.hpp"
#include "notify.hpp"
#include "zset.hpp"

namespace hydra {

// Keys with a time to live also have an entry in `expires` (as Redis's
// db->expires): the deadline in Unix milliseconds. Expiry is lazy (every
// closure that reads or writes a key first drops it if its deadline has
// passed: live()) and active (shard_sweep, run every 100 ms on each shard by
// its own thread's I/O loop, samples keys of `expires` and drops those past
// their deadline, as Redis's activeExpireCycle).
//
// Strings live in `map`, the other types (hash, list, set, zset) in `objs`; a key
// is in at most one of them. So GET and SET pay nothing for the types but
// a test of `objs.empty()` on a miss or an overwrite.
// Hash: hash.hpp (a listpack or a hashtable, as Redis's).
using List = std::deque<std::string>;
using Set = std::unordered_set<std::string>;
using Object = std::variant<Hash, List, Set, ZSet>;  // index: Object types below

// The access clock of keys (OBJECT IDLETIME, the LRU eviction policies):
// milliseconds of CLOCK_MONOTONIC_COARSE, wrapping after 49 days (idle
// times are differences). Each I/O loop sets its thread's copy every round
// (Loop::run); a shard's closures run on its own thread, so they read it
// without a clock call or a shared cache line.
inline thread_local std::uint32_t tl_lru_clock = 0;
// How long ago `lru` was, in ms.
inline std::uint32_t idle_ms(std::uint32_t lru) noexcept { return tl_lru_clock - lru; }

// A string value and when it was last read or written (Redis keeps the
// clock in its robj header), and whether it was changed in place (SETRANGE,
// APPEND, SETBIT): Redis's encoding is then `raw`, even for digits, until
// the value is replaced. Both fill padding: a node of the map is still one
// 96-byte allocation.
struct Entry : std::string {
  std::uint32_t lru = tl_lru_clock;
  bool raw = false;
  Entry() = default;
  Entry(std::string&& v) noexcept : std::string(std::move(v)) {}
  Entry(const std::string& v) : std::string(v) {}
  using std::string::operator=;
  Entry& operator=(std::string&& v) noexcept {
    std::string::operator=(std::move(v));
    raw = false;
    return *this;
  }
  Entry& operator=(const std::string& v) {
    std::string::operator=(v);
    raw = false;
    return *this;
  }
};
// A hash, list or set and its access clock, and for a set whether SADD
// ever made it one Redis would hold as a `hashtable` (a member that is not
// an integer, or more than set-max-intset-entries): Redis never converts
// it back to an intset, so OBJECT ENCODING stays `hashtable`.
struct Obj : Object {
  std::uint32_t lru = tl_lru_clock;
  bool big = false;
  template <class T>
    requires(!std::is_same_v<std::decay_t<T>, Obj>)
  Obj(T&& v) : Object(std::forward<T>(v)) {}
};

// A key some connection WATCHes: its version grows with every write to it
// (touch), and EXEC compares it with the one WATCH saw.
struct Watch {
  std::uint32_t watchers = 0;
  std::uint64_t version = 0;
};

// The eviction pool (eviction.cpp): keys sampled from the shard, the most
// idle kept, as Redis's evictionPoolEntry.
struct EvictCandidate {
  std::uint32_t idle = 0;
  std::uint32_t lru = 0;  // the key's clock when sampled: read since, it is no candidate any more
  std::string key;
};

// Blocking list commands (blocking.cpp): a connection blocked on keys of
// this shard. `id` names it in the rack: its loop's thread in the top 24
// bits. `where`: 0 pops the head (BLPOP), 1 the tail; `count` -1 for one
// element (BLPOP, BLMOVE), else up to that many (BLMPOP). `move`: BLMOVE's
// pop, whose events wait for the push to the destination (Served::owed);
// `dst`, `to`, `dst_shard`: its destination, the side pushed to, the
// destination's shard (a move within this shard is done here, wake.cpp).
// `claim` (wake.cpp): set by whichever serves or ends the blocked command
// first, so that one shard only ever serves it; null when its loop is on
// another host (then served elements may go back, blocking.cpp).
struct BlockedOn {
  std::uint64_t id = 0;
  std::uint8_t where = 0;
  std::int64_t count = -1;
  bool move = false;
  std::uint8_t to = 0;
  std::uint32_t dst_shard = UINT32_MAX;
  std::string dst;
  std::shared_ptr<std::atomic<std::uint8_t>> claim;
};
inline std::uint32_t block_thread(std::uint64_t id) { return std::uint32_t(id >> 40); }

// The push command (LPUSH, RPUSH) whose serving a cross-shard BLMOVE
// continues on other threads: its loop holds the push's reply until every
// such move has pushed (wake.cpp). `weight`: the part of the push's credit
// this message carries (weighted reference counting: the parts come back
// to the loop in any order and sum to what was given out).
struct Origin {
  std::uint32_t thread = 0, slot = 0, gen = 0;
  std::uint64_t seq = 0;
  std::uint64_t weight = 0;  // 0: untracked
  template <class Ar>
  void serialize(Ar& ar) {
    ar(thread, slot, gen, seq, weight);
  }
};
// Set by the tracked push's closure while it runs (wake.cpp).
inline thread_local Origin* tl_origin = nullptr;
// Credit coming back to the pushes' loops, sent by this thread's loop.
inline thread_local std::vector<Origin> tl_returns;

// Elements a shard popped for a blocked connection (or gives back): sent to
// the connection's loop, which replies or, if the connection no longer
// waits, gives them back to the list (blocking.cpp).
struct Served {
  std::uint64_t id = 0;
  std::string key;
  std::vector<std::string> values;  // in the order popped
  std::uint8_t where = 0;
  // BLMOVE's pop with notifications on: its events, owed until the push
  // (Redis sends the destination's push first): 0 none, 1 the pop's, 2 and del.
  std::uint8_t owed = 0;
  // BLMOVE within one shard (wake.cpp): 1 moved (pushed already), 2 the
  // destination holds another type (nothing popped: WRONGTYPE); a push
  // parked while a transaction held its shard, done: 3 pushed, 4 refused
  // (values: the element, the error).
  std::uint8_t moved = 0;
  Origin origin;  // a cross-shard move's credit (weight 0: none)
  template <class Ar>
  void serialize(Ar& ar) {
    ar(id, key, values, where, owed, moved, origin);
  }
};
// What this thread's shard served, for its loop to send on (Loop::run):
// a shard's closures run on its own thread.
inline thread_local std::vector<Served> tl_served;
// A BLMOVE's push to a shard a transaction holds waits for the release
// (wake.cpp, shard_unowned): `sv` as served (key: the source), then where to.
struct Parked {
  Served sv;
  std::string dst;
  std::uint8_t to = 0;
};

struct Shard {
  std::unordered_map<std::string, Entry> map;
  std::unordered_map<std::string, Obj> objs;
  std::unordered_map<std::string, std::int64_t> expires;
  std::unordered_map<std::string, Watch> watched;
  std::size_t sweep_bucket = 0;  // shard_sweep's cursor over the buckets of `expires`
  bool active_expire = true;     // DEBUG SET-ACTIVE-EXPIRE: shard_sweep runs (expiry stays lazy otherwise)
  // The transaction that holds this shard (transactions.cpp), 0: none.
  std::uint64_t owner = 0;
  std::deque<std::pair<std::uint64_t, std::uint32_t>> waiting;  // claims queued: (transaction, its coordinator's thread)
  // Pub/sub's registry (pubsub.cpp): per channel whose home this shard is
  // (shard_of(channel)), and per pattern (every pattern, on every shard),
  // the threads with subscribers and how many each has.
  using ThreadCounts = std::vector<std::pair<std::uint32_t, std::uint32_t>>;
  std::unordered_map<std::string, ThreadCounts> channels, patterns;
  std::vector<EvictCandidate> pool;  // eviction.cpp: ascending idle time, at most 16
  // Blocking list commands (blocking.cpp): per key, the connections
  // blocked on it in the order they blocked; per connection, its keys
  // here; keys pushed to while a transaction owned the shard (served when
  // it releases the shard, as Redis serves after EXEC).
  std::unordered_map<std::string, std::deque<BlockedOn>> blocked;
  std::unordered_map<std::uint64_t, std::vector<std::string>> blocked_keys;
  std::vector<std::string> ready;  // in the order they became ready (Redis's ready_keys)
  bool serving = false;             // serve_ready runs: keys made ready meanwhile join `ready`
  std::vector<Parked> parked;       // BLMOVE pushes waiting for the transaction that holds the shard
  // Entrusting a shard to another host's trustee sends it serialized. Only
  // empty shards are entrusted (main.cpp), so the strings and TTLs are all
  // it carries (the strings as plain pairs: their clocks restart); `objs`,
  // `watched` and `owner` start empty there.
  template <class Ar>
  void save(Ar& ar) const {
    std::vector<std::pair<std::string, std::string>> strings(map.begin(), map.end());
    ar(strings, expires);
  }
  template <class Ar>
  void load(Ar& ar) {
    std::vector<std::pair<std::string, std::string>> strings;
    ar(strings, expires);
    for (auto& [k, v] : strings) map.emplace(std::move(k), std::move(v));
  }
};

// --maxmemory with an evicting maxmemory-policy (memory.cpp sets the
// flags, eviction.cpp evicts). While g_evicting, every write adds what it
// stores to its shard's part of the bytes this host is over maxmemory
// (over_of: the host's excess, measured every 10 ms and split evenly
// between its threads' shards, estimated in between), and first evicts
// keys of its own shard until that part is not positive: so memory stays
// near the bound between measurements, and each shard pays its part of
// what a measurement finds. Without an evicting policy a write pays one load.
enum class Policy : std::uint8_t { kNoEviction, kAllkeysLru, kVolatileLru, kAllkeysRandom, kVolatileRandom };
extern std::atomic<std::uint8_t> g_policy;    // a Policy
extern std::atomic<bool> g_evicting;          // maxmemory set and the policy evicts
std::atomic<std::int64_t>& over_of(std::size_t thread);  // bytes over maxmemory, that thread's shard's part (negative: room left)
extern std::atomic<std::uint64_t> g_evicted;  // INFO's evicted_keys (this host)
// A write calls it, when g_evicting, with the bytes it will store.
void evict_for(Shard& s, std::size_t incoming) noexcept;
// What a key and its value take in a shard, about: the node and the
// strings' own buffers (a short string lives in the node).
inline std::size_t entry_bytes(std::size_t key, std::size_t value) noexcept {
  return 96 + (key > 15 ? key + 17 : 0) + (value > 15 ? value + 17 : 0);
}

constexpr const char* kWrongType = "WRONGTYPE Operation against a key holding the wrong kind of value";

// A write to `key`: EXEC of a connection that WATCHes it must fail. One
// test when nobody watches a key of this shard.
inline void touch(Shard& s, const std::string& key) noexcept {
  if (s.watched.empty()) return;
  auto w = s.watched.find(key);
  if (w != s.watched.end()) ++w->second.version;
}

// Unix time in milliseconds (deadlines are absolute, as EXPIREAT gives them).
inline std::int64_t now_ms() noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Lazy expiry: drops `key` if its deadline has passed. Costs one test when
// the shard has no key with a TTL.
inline void expire_if_due(Shard& s, const std::string& key) noexcept {
  if (s.expires.empty()) return;
  auto e = s.expires.find(key);
  if (e == s.expires.end() || e->second > now_ms()) return;
  s.expires.erase(e);
  if (s.map.erase(key) == 0) s.objs.erase(key);
  touch(s, key);  // as Redis 7.0: a WATCHed key that expires fails the EXEC
  notify(kNotifyExpired, "expired", key);
}

// True if `key` is a hash, list or set (after lazy expiry): string commands
// answer WRONGTYPE for it.
inline bool is_object(const Shard& s, const std::string& key) noexcept {
  return !s.objs.empty() && s.objs.count(key) != 0;
}

// Redis's lookupKeyRead of a key that is no string: keymiss if it is no
// other type either. One test when notify-keyspace-events has no m.
inline void notify_miss(const Shard& s, const std::string& key) noexcept {
  const std::uint32_t f = g_notify.load(std::memory_order_relaxed);
  if (f & kNotifyKeyMiss) [[unlikely]]
    if (!is_object(s, key)) notify_slow(f, "keymiss", key);
}

// A string write over a key that may hold another type: the old value goes.
inline void drop_object(Shard& s, const std::string& key) noexcept {
  if (!s.objs.empty()) s.objs.erase(key);
}

// Whether `key` exists (any type), after lazy expiry.
inline bool key_exists(Shard& s, const std::string& key) noexcept {
  expire_if_due(s, key);
  return s.map.count(key) != 0 || is_object(s, key);
}

// The live entry of `key`, or end().
inline auto live(Shard& s, const std::string& key) noexcept {
  expire_if_due(s, key);
  auto it = s.map.find(key);
  if (it != s.map.end()) it->second.lru = tl_lru_clock;
  return it;
}

// A write that replaces the value forgets the TTL (as SET and MSET do).
inline void forget_ttl(Shard& s, const std::string& key) noexcept {
  if (!s.expires.empty()) s.expires.erase(key);
}

// A GET / MGET answer.
struct Value {
  // kOk: SET without GET stored its value (kNil: it did not, NX or XX).
  enum Kind : std::uint8_t { kNil, kString, kError, kOk };
  std::uint8_t kind = kNil;
  std::string data;  // the value, or the error message for kError
  template <class Ar>
  void serialize(Ar& ar) {
    ar(kind, data);
  }
};

// A count (DEL, EXISTS, DBSIZE, INCR's new value, a TTL) or an error code;
// `expiring`: DBSIZE's keys with a TTL, for INFO's keyspace line.
struct Count {
  enum Err : std::int32_t { kOk, kNotInteger, kOverflow, kOutOfMemory, kWrongType, kNoSuchKey, kNotFloat };
  std::int64_t n = 0;
  std::int32_t err = kOk;
  std::int64_t expiring = 0;
};

// The key prefetch (prefetch.cpp, key_prefetch.hpp): keys whose chains are
// walked at once, and the smallest map worth it (a smaller one stays in cache).
constexpr std::size_t kPrefetchWindow = 16;            // keys in flight at once (about the line fill buffers)
constexpr std::size_t kPrefetchMinBuckets = 1u << 15;  // a smaller table stays in cache: nothing to hide

// Prefetches the lookup chains of keys[0, n) (n <= kPrefetchWindow) in s's
// string map, when it has kPrefetchMinBuckets or more; reads only pointers,
// changes nothing. For s's trustee (batch.cpp); defined in prefetch.cpp.
void prefetch_shard_keys(Shard& s, const std::string_view* keys, std::size_t n) noexcept;

// Where a key lives: the same on every host (the same binary), and not
// std::hash, which the shard's own unordered_map uses: keys of one shard
// must still spread over that map's buckets.
inline std::size_t shard_of(std::string_view key, std::size_t shards) {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a, then a murmur finalizer
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return static_cast<std::size_t>(h % shards);
}

// ---- the closures, run by the shard's trustee ---------------------------------

inline Value shard_get(Shard& s, std::string key) noexcept {
  Value v;
  try {
    auto it = live(s, key);
    if (it != s.map.end()) {
      v.kind = Value::kString;
      v.data = it->second;
    } else if (is_object(s, key)) {
      v.kind = Value::kError;
      v.data = kWrongType;
    } else {
      notify_miss(s, key);
    }
  } catch (...) {
    v.kind = Value::kError;
    v.data = "ERR out of memory";
  }
  return v;
}

// shard_set with keyspace notifications on (out of line: SET's own path stays as small as it was).
Count shard_set_events(Shard& s, std::string key, std::string value) noexcept;

inline Count shard_set(Shard& s, std::string key, std::string value) noexcept {
  try {
    if (notifying()) [[unlikely]] return shard_set_events(s, std::move(key), std::move(value));  // notify.cpp
    if (g_evicting.load(std::memory_order_relaxed)) evict_for(s, entry_bytes(key.size(), value.size()));
    forget_ttl(s, key);
    touch(s, key);
    drop_object(s, key);
    s.map.insert_or_assign(std::move(key), std::move(value)).first->second.lru = tl_lru_clock;
    return {};
  } catch (...) {
    return {0, Count::kOutOfMemory};
  }
}

// MSET's share of one shard: key, value, key, value... in request order, so
// that a key given twice ends with its last value.
inline Count shard_mset(Shard& s, std::vector<std::string> kvs) noexcept {
  try {
    if (g_evicting.load(std::memory_order_relaxed)) {
      std::size_t bytes = 0;
      for (std::size_t i = 0; i + 1 < kvs.size(); i += 2) bytes += entry_bytes(kvs[i].size(), kvs[i + 1].size());
      evict_for(s, bytes);
    }
    const bool events = notifying();
    for (std::size_t i = 0; i + 1 < kvs.size(); i += 2) {
      const bool fresh = events && !key_exists(s, kvs[i]);
      forget_ttl(s, kvs[i]);
      touch(s, kvs[i]);
      drop_object(s, kvs[i]);
      auto it = s.map.insert_or_assign(std::move(kvs[i]), std::move(kvs[i + 1])).first;
      it->second.lru = tl_lru_clock;
      if (events) [[unlikely]] {
        if (fresh) notify(kNotifyNew, "new", it->first);
        notify(kNotifyString, "set", it->first);
      }
    }
    return {};
  } catch (...) {
    return {0, Count::kOutOfMemory};
  }
}

inline std::vector<Value> shard_mget(Shard& s, std::vector<std::string> keys) noexcept {
  std::vector<Value> out;
  try {
    out.resize(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      auto it = live(s, keys[i]);
      if (it != s.map.end()) {
        out[i].kind = Value::kString;
        out[i].data = it->second;
      } else {
        notify_miss(s, keys[i]);
      }
    }
  } catch (...) {
    out.assign(1, Value{Value::kError, "ERR out of memory"});
  }
  return out;
}

// DEL k k deletes once; EXISTS k k counts twice (as Redis).
inline Count shard_del(Shard& s, std::vector<std::string> keys) noexcept {
  Count c;
  for (const auto& k : keys) {
    expire_if_due(s, k);
    forget_ttl(s, k);
    std::size_t gone = s.map.erase(k);
    if (gone == 0 && !s.objs.empty()) gone = s.objs.erase(k);
    if (gone) {
      touch(s, k);
      notify(kNotifyGeneric, "del", k);
    }
    c.n += static_cast<std::int64_t>(gone);
  }
  return c;
}

// TOUCH: EXISTS that sets the keys' access clocks; a read (Redis's
// lookupKeyRead): keymiss for a missing key.
inline Count shard_touch(Shard& s, std::vector<std::string> keys) noexcept {
  Count c;
  for (const auto& k : keys) {
    expire_if_due(s, k);
    if (auto it = s.map.find(k); it != s.map.end()) it->second.lru = tl_lru_clock, ++c.n;
    else if (auto o = s.objs.find(k); o != s.objs.end()) o->second.lru = tl_lru_clock, ++c.n;
    else notify(kNotifyKeyMiss, "keymiss", k);
  }
  return c;
}

inline Count shard_exists(Shard& s, std::vector<std::string> keys) noexcept {
  Count c;
  for (const auto& k : keys) c.n += key_exists(s, k) ? 1 : 0;
  return c;
}
// EXISTS with notifications on (notify.cpp): keymiss for each missing key.
Count shard_exists_read(Shard& s, std::vector<std::string> keys) noexcept;

// blocking.cpp: a push may have made `key` a non-empty list: serve the
// connections blocked on it (at once, or when the transaction that owns
// the shard releases it). One test when nobody is blocked on this shard.
// While tl_hold_serving (notify.cpp's ServeAfterEvents, with notifications
// on) the keys wait in Shard::ready, so the write's own events go first.
inline thread_local bool tl_hold_serving = false;
void serve_key(Shard& s, const std::string& key) noexcept;
inline void signal_ready(Shard& s, const std::string& key) noexcept {
  if (!s.blocked.empty()) serve_key(s, key);
}
void serve_ready(Shard& s) noexcept;
void shard_unowned(Shard& s) noexcept;  // a transaction released it: the parked pushes, then serve_ready

// shard.cpp: INCRBY (and INCR, DECR, DECRBY), SET with options, the
// expiry commands and the active sweep.
Count shard_incr(Shard& s, std::string key, std::int64_t by) noexcept;

// SET's options, as flags of shard_set_opts.
enum SetFlag : std::uint32_t { kSetNx = 1, kSetXx = 2, kSetGet = 4, kSetKeepTtl = 8, kSetExpire = 16 };
// kOk stored (no GET), kNil not stored (no GET) or no old value (GET),
// kString the old value (GET).
Value shard_set_opts(Shard& s, std::string key, std::string value, std::uint32_t flags, std::int64_t at_ms) noexcept;

// EXPIRE's conditions.
enum ExpireFlag : std::uint32_t { kExpNx = 1, kExpXx = 2, kExpGt = 4, kExpLt = 8 };
// 1 if the deadline was set (or the key deleted, the deadline being past), 0 if not.
Count shard_expire(Shard& s, std::string key, std::int64_t at_ms, std::uint32_t flags, std::int64_t now) noexcept;
// The deadline in Unix ms, -1 without TTL, -2 without the key.
Count shard_deadline(Shard& s, std::string key) noexcept;
Count shard_persist(Shard& s, std::string key) noexcept;
// One active expiry cycle; n = keys dropped.
Count shard_sweep(Shard& s) noexcept;

inline Count shard_size(Shard& s) noexcept {
  return {static_cast<std::int64_t>(s.map.size() + s.objs.size()), Count::kOk, static_cast<std::int64_t>(s.expires.size())};
}

inline Count shard_flush(Shard& s) noexcept {
  // swap, not clear(): clear keeps the bucket array of the largest size the
  // map ever had.
  for (auto& [k, w] : s.watched)  // as Redis: FLUSHALL touches the watched keys that exist
    if (s.map.count(k) || s.objs.count(k)) ++w.version;
  decltype(s.map)().swap(s.map);
  decltype(s.objs)().swap(s.objs);
  s.pool.clear();
  std::unordered_map<std::string, std::int64_t>().swap(s.expires);
  s.sweep_bucket = 0;
  return {};
}

}  // namespace hydra
