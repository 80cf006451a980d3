// One shard of Hydra's key space: a hash map owned by one trustee. Every
// access is a closure the trustee runs, so the map needs no lock; the
// closures below capture nothing (keys and values travel as apply_with
// arguments) and never throw, because a failed apply_then aborts the
// process.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <gossamer/gossamer.hpp>

namespace hydra {

struct Shard {
  std::unordered_map<std::string, std::string> map;
  // Entrusting a shard to another host's trustee sends it serialized (empty).
  template <class Ar>
  void serialize(Ar& ar) {
    ar(map);
  }
};

// A GET / MGET answer.
struct Value {
  enum Kind : std::uint8_t { kNil, kString, kError };
  std::uint8_t kind = kNil;
  std::string data;  // the value, or the error message for kError
  template <class Ar>
  void serialize(Ar& ar) {
    ar(kind, data);
  }
};

// A count (DEL, EXISTS, DBSIZE, INCR's new value) or an error code.
struct Count {
  enum Err : std::int32_t { kOk, kNotInteger, kOverflow, kOutOfMemory };
  std::int64_t n = 0;
  std::int32_t err = kOk;
};

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
    auto it = s.map.find(key);
    if (it != s.map.end()) {
      v.kind = Value::kString;
      v.data = it->second;
    }
  } catch (...) {
    v.kind = Value::kError;
    v.data = "ERR out of memory";
  }
  return v;
}

inline Count shard_set(Shard& s, std::string key, std::string value) noexcept {
  try {
    s.map.insert_or_assign(std::move(key), std::move(value));
    return {};
  } catch (...) {
    return {0, Count::kOutOfMemory};
  }
}

// MSET's share of one shard: key, value, key, value... in request order, so
// that a key given twice ends with its last value.
inline Count shard_mset(Shard& s, std::vector<std::string> kvs) noexcept {
  try {
    for (std::size_t i = 0; i + 1 < kvs.size(); i += 2) s.map.insert_or_assign(std::move(kvs[i]), std::move(kvs[i + 1]));
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
      auto it = s.map.find(keys[i]);
      if (it != s.map.end()) {
        out[i].kind = Value::kString;
        out[i].data = it->second;
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
  for (const auto& k : keys) c.n += static_cast<std::int64_t>(s.map.erase(k));
  return c;
}

inline Count shard_exists(Shard& s, std::vector<std::string> keys) noexcept {
  Count c;
  for (const auto& k : keys) c.n += s.map.count(k) ? 1 : 0;
  return c;
}

Count shard_incr(Shard& s, std::string key) noexcept;  // commands.cpp

inline Count shard_size(Shard& s) noexcept { return {static_cast<std::int64_t>(s.map.size()), Count::kOk}; }

inline Count shard_flush(Shard& s) noexcept {
  // swap, not clear(): clear keeps the bucket array of the largest size the
  // map ever had.
  std::unordered_map<std::string, std::string>().swap(s.map);
  return {};
}

}  // namespace hydra
