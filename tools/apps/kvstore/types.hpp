// Hashes, lists and sets (Shard::objs), and moving a key of any type
// between shards (RENAME, COPY). The closures run on the key's shard and
// never throw; their answers say what to reply, in RESP2 or RESP3 as the
// connection speaks (types.cpp encodes them).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shard.hpp"

namespace hydra {

// Helpers of the typed closures (objects.cpp, strops.cpp).
// The collection of type T at `key`: null if there is none; `wrong` if the
// key holds another type.
template <class T>
inline T* find_obj(Shard& s, const std::string& key, bool& wrong) {
  wrong = false;
  expire_if_due(s, key);
  if (s.map.count(key)) {
    wrong = true;
    return nullptr;
  }
  auto it = s.objs.find(key);
  if (it == s.objs.end()) return nullptr;
  it->second.lru = tl_lru_clock;
  T* t = std::get_if<T>(&it->second);
  wrong = t == nullptr;
  return t;
}

// The same, created empty if missing (a write).
template <class T>
inline T* make_obj(Shard& s, const std::string& key, bool& wrong) {
  T* t = find_obj<T>(s, key, wrong);
  if (t || wrong) return t;
  return &std::get<T>(s.objs.emplace(key, Object(std::in_place_type<T>)).first->second);
}

// After a write that may have emptied it.
template <class T>
inline void drop_if_empty(Shard& s, const std::string& key, const T& t) {
  if (!t.empty()) return;
  s.objs.erase(key);
  if (!s.expires.empty()) s.expires.erase(key);
}

// A typed command's answer.
struct Reply {
  enum Kind : std::uint8_t {
    kInt,        // n
    kBulk,       // s
    kNil,        // a missing value
    kOk,         // +OK
    kError,      // s
    kArray,      // items (nil[i]: element i is a nil)
    kMap,        // items as field, value pairs (HGETALL): % under RESP3
    kSet,        // items (SMEMBERS, SINTER...): ~ under RESP3
    kScan,       // [cursor n, items]
    kNullArray,  // LPOP k count of a missing key
    kInts,       // items, each an integer (LPOS ... COUNT, SMISMEMBER)
    kPairs,      // items as pairs: flat under RESP2, an array of 2-arrays under RESP3 (HRANDFIELD WITHVALUES)
    // sorted sets (zset.cpp): scores are text (format_score), doubles (,) under RESP3
    kDouble,     // s (ZSCORE, ZINCRBY)
    kDoubles,    // items, nil[i] a nil (ZMSCORE)
    kScored,     // member, score...: flat under RESP2, 2-arrays under RESP3 (WITHSCORES)
    kScoredFlat, // member, score...: flat in both, the scores doubles under RESP3 (ZPOPMIN k)
    kKeyScored,  // [s, [[member, score]...]] (ZMPOP)
  };
  std::uint8_t kind = kNil;
  std::int64_t n = 0;
  std::string s;
  std::vector<std::string> items;
  std::vector<std::uint8_t> nil;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(kind, n, s, items, nil);
  }
};

// The single-key typed commands, one closure for all (shard_typed), args
// as the client sent them after the command name.
enum class Op : std::uint8_t {
  kHset, kHsetnx, kHmset, kHget, kHmget, kHgetall, kHdel, kHincrby, kHexists, kHlen, kHkeys, kHvals, kHscan,
  kLpush, kRpush, kLpop, kRpop, kLrange, kLlen, kLindex, kLrem, kLset, kLtrim,
  kSadd, kSrem, kSmembers, kSismember, kScard, kSscan,
  // strops.cpp: strings beyond GET/SET, and the newer hash, list and set commands
  kGetdel, kGetex, kGetrange, kSetrange, kAppend, kStrlen, kIncrbyfloat, kSetbit, kGetbit, kBitcount,
  kHstrlen, kHincrbyfloat, kHrandfield, kLinsert, kLpos, kLpushx, kRpushx, kSpop, kSrandmember, kSmismember,
  // zset.cpp: sorted sets, one key
  kZadd, kZincrby, kZrem, kZcard, kZscore, kZmscore, kZrank, kZrevrank, kZcount, kZlexcount, kZrange, kZrevrange,
  kZrangebyscore, kZrevrangebyscore, kZrangebylex, kZrevrangebylex, kZremrangebyrank, kZremrangebyscore,
  kZremrangebylex, kZpopmin, kZpopmax, kZrandmember, kZscan,
  kZrangeRead,  // ZRANGESTORE's read: ZRANGE's arguments, scores always (no name)
};
Reply shard_typed(Shard& s, Op op, std::vector<std::string> args) noexcept;
Reply shard_typed_plain(Shard& s, Op op, std::vector<std::string> args) noexcept;
// notify.cpp: shard_typed with keyspace notifications on (its events).
Reply shard_typed_events(Shard& s, Op op, std::vector<std::string> args) noexcept;
// LMOVE, RPOPLPUSH, BLMOVE in two steps (notify.cpp): the pop, its events
// owed (n: 0 none, 1 the pop's, 2 and del: the source emptied), then the
// push, its events, then the pop's (Redis's lmoveHandlePush comes first),
// then the waiters the push serves. `from`: 0 LEFT (lpop), 1 RIGHT.
Reply shard_move_pop(Shard& s, Op op, std::vector<std::string> args) noexcept;
Reply shard_move_push(Shard& s, Op op, std::vector<std::string> args, std::string src, std::uint8_t from,
                      std::uint8_t owed) noexcept;
// The pop events a move's pop left owed (`owed` 1: lpop/rpop, 2: and del)
// where its element is lost instead of pushed or given back (notify.cpp).
void notify_owed_pop(const std::string& src, std::uint8_t from, std::uint8_t owed) noexcept;
// strops.cpp: the ops from kGetdel on (args[0] the key).
Reply shard_strops(Shard& s, Op op, std::vector<std::string> args);
// zset.cpp: the ops from kZadd on (args[0] the key).
Reply shard_zset(Shard& s, Op op, std::vector<std::string> args);
// HSCAN/SSCAN/ZSCAN's arguments after the key (objects.cpp): false with
// `err` on a bad one; `pattern` the MATCH glob ("" none).
bool scan_args(const std::vector<std::string>& args, std::string& pattern, std::string& err);
bool matches(const std::string& pattern, const std::string& s);
// Blocked connections (blocking.cpp, wake.cpp): whether `key` has something
// for a waiter of kind `where` (`wrong`: it holds the other kind), a pop for
// a waiter (its events owed to the push when `owed`), forgetting one, and
// the claims.
bool has_for(Shard& s, const std::string& key, std::uint8_t where, bool& wrong);
std::vector<std::string> pop_key(Shard& s, const std::string& key, std::uint8_t where, std::int64_t count, bool& wrong,
                                 std::uint8_t* owed = nullptr);
void forget_waiter(Shard& s, std::uint64_t id);
std::shared_ptr<std::atomic<std::uint8_t>> new_claim(std::uint64_t id);
std::shared_ptr<std::atomic<std::uint8_t>> find_claim(std::uint64_t id);  // null: none (its loop is on another host)
void drop_claim(std::uint64_t id);
// LPUSH, RPUSH: the reply, and the credit its cross-shard moves took (wake.cpp).
struct Tracked {
  Reply r;
  std::uint64_t given = 0;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(r, given);
  }
};
// A Reply as RESP2 or RESP3 (types.cpp).
void encode_reply(std::string& out, const Reply& r, bool resp3);

// The encoding thresholds (Redis 7.0's defaults, src/config.c; CONFIG SET
// changes them on this host: config.cpp). A hash converts when a write
// passes hash_entries / hash_value (hash.hpp); OBJECT ENCODING compares the
// other collections with theirs.
struct Encodings {
  std::atomic<long long> hash_entries{512};  // hash-max-listpack-entries
  std::atomic<long long> hash_value{64};     // hash-max-listpack-value
  std::atomic<long long> set_intset{512};    // set-max-intset-entries
  std::atomic<long long> zset_entries{128};  // zset-max-listpack-entries
  std::atomic<long long> zset_value{64};     // zset-max-listpack-value
};
extern Encodings g_encodings;
// This host's hash-max-listpack-entries and -value now (a negative one: 0).
inline Hash::Limits hash_limits() noexcept {
  auto get = [](const std::atomic<long long>& v) { return std::size_t(std::max(0LL, v.load(std::memory_order_relaxed))); };
  return {get(g_encodings.hash_entries), get(g_encodings.hash_value)};
}

// keys.cpp: the key space as a whole, on one shard.
// KEYS: every live key matching the glob `pattern` (kArray).
Reply shard_keys(Shard& s, std::string pattern) noexcept;
// SCAN's share of one shard: keys in the order of scan_hash, from hash
// `from` on, at least `count` visited (all keys of the last hash visited),
// those matching `pattern` and `type` ("" any) answered (kScan, n: the next
// hash to visit, -1 when none is left).
Reply shard_scan(Shard& s, std::int64_t from, std::int64_t count, std::string pattern, std::string type) noexcept;
// RANDOMKEY's share: a random live key (kBulk, n the shard's keys), or kNil.
Reply shard_random(Shard& s) noexcept;
// OBJECT ENCODING|REFCOUNT|IDLETIME|FREQ key: kNil for a missing key.
Reply shard_object(Shard& s, std::string sub, std::string key) noexcept;
// DEBUG HTSTATS-KEY key (htstats.cpp): the text, or kError.
Value shard_htstats(Shard& s, std::string key) noexcept;
// A key's place in SCAN's order: 56 bits, the same on every host.
std::int64_t scan_hash(std::string_view key) noexcept;
// What OBJECT ENCODING says of a string value.
const char* string_encoding(const std::string& v) noexcept;

// A key's whole value and deadline, to copy it to another shard.
struct Dump {
  enum Type : std::uint8_t { kNone, kString, kHash, kList, kSet, kZset };  // kHash + the Object's variant index
  std::uint8_t type = kNone;
  std::string value;               // kString
  std::vector<std::string> items;  // kHash: field, value...; kList: in order; kSet: members; kZset: member, score...
  std::int64_t deadline = -1;      // Unix ms, -1: none
  bool table = false;              // kHash: a hashtable (RENAME and COPY keep the encoding, as Redis)
  template <class Ar>
  void serialize(Ar& ar) {
    ar(type, value, items, deadline, table);
  }
};
Dump shard_dump(Shard& s, std::string key) noexcept;
// The same for a command that reads the key (DUMP, LCS, SORT, SINTER...):
// keymiss if missing (Redis's lookupKeyRead); RENAME's and COPY's do not.
Dump shard_dump_read(Shard& s, std::string key) noexcept;
// Stores `d` as `key` (with its deadline) unless the key exists and not
// `replace`: n = 1 stored, 0 not. kNone deletes the key (n = 1 if it was).
Count shard_restore(Shard& s, std::string key, Dump d, bool replace) noexcept;
// notify.cpp: shard_restore that sends "new", then `event` ("del" for an
// empty result), for the multi-key commands that store a key whole; and
// RENAME's deletion of its source with rename_from and rename_to.
Count shard_store(Shard& s, std::string key, Dump d, bool replace, std::string event) noexcept;
Count shard_rename_del(Shard& s, std::string src, std::string dst) noexcept;
// Each key's value for SINTER and the like: kNone, kSet, or another type
// (the command answers WRONGTYPE).
std::vector<Dump> shard_dump_many(Shard& s, std::vector<std::string> keys) noexcept;
// TYPE: none, string, hash, list, set or zset.
Value shard_type(Shard& s, std::string key) noexcept;

}  // namespace hydra
