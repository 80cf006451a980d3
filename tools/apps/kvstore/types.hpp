// Hashes, lists and sets (Shard::objs), and moving a key of any type
// between shards (RENAME, COPY). The closures run on the key's shard and
// never throw; their answers say what to reply, in RESP2 or RESP3 as the
// connection speaks (types.cpp encodes them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shard.hpp"

namespace hydra {

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
};
Reply shard_typed(Shard& s, Op op, std::vector<std::string> args) noexcept;

// A key's whole value and deadline, to copy it to another shard.
struct Dump {
  enum Type : std::uint8_t { kNone, kString, kHash, kList, kSet };  // kHash + the Object's variant index
  std::uint8_t type = kNone;
  std::string value;               // kString
  std::vector<std::string> items;  // kHash: field, value...; kList: in order; kSet: members
  std::int64_t deadline = -1;      // Unix ms, -1: none
  template <class Ar>
  void serialize(Ar& ar) {
    ar(type, value, items, deadline);
  }
};
Dump shard_dump(Shard& s, std::string key) noexcept;
// Stores `d` as `key` (with its deadline) unless the key exists and not
// `replace`: n = 1 stored, 0 not. kNone deletes the key (n = 1 if it was).
Count shard_restore(Shard& s, std::string key, Dump d, bool replace) noexcept;
// Each key's value for SINTER and the like: kNone, kSet, or another type
// (the command answers WRONGTYPE).
std::vector<Dump> shard_dump_many(Shard& s, std::vector<std::string> keys) noexcept;
// TYPE: none, string, hash, list or set.
Value shard_type(Shard& s, std::string key) noexcept;

}  // namespace hydra
