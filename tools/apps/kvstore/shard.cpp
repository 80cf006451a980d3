// The shard closures with more to them than a lookup (shard.hpp): INCRBY,
// SET with options, the expiry commands and the active expiry sweep. Each
// runs on the shard's trustee and never throws.
#include <climits>
#include <iterator>

#include "resp.hpp"
#include "shard.hpp"

namespace hydra {

// Redis's rules: the old value must be a strict decimal int64 (a missing
// key counts as 0) and the sum must not overflow. The TTL stays, as in Redis.
Count shard_incr(Shard& s, std::string key, std::int64_t by) noexcept {
  try {
    expire_if_due(s, key);
    if (is_object(s, key)) return {0, Count::kWrongType};
    touch(s, key);
    auto [it, inserted] = s.map.try_emplace(std::move(key));
    long long v = 0;
    if (!inserted && !resp::parse_int64(it->second, v)) return {0, Count::kNotInteger};
    if ((by < 0 && v < 0 && by < LLONG_MIN - v) || (by > 0 && v > 0 && by > LLONG_MAX - v)) {
      if (inserted) s.map.erase(it);
      return {0, Count::kOverflow};
    }
    v += by;
    it->second = std::to_string(v);
    if (inserted) notify(kNotifyNew, "new", it->first);
    notify(kNotifyString, "incrby", it->first);  // INCR, DECR, DECRBY too, as Redis
    return {v, Count::kOk};
  } catch (...) {
    return {0, Count::kOutOfMemory};
  }
}

Value shard_set_opts(Shard& s, std::string key, std::string value, std::uint32_t flags, std::int64_t at_ms) noexcept {
  Value v;
  try {
    if (g_evicting.load(std::memory_order_relaxed)) evict_for(s, entry_bytes(key.size(), value.size()));
    auto it = live(s, key);
    const bool object = it == s.map.end() && is_object(s, key);
    const bool exists = it != s.map.end() || object;
    if (flags & kSetGet && object) return {Value::kError, kWrongType};  // SET ... GET of a hash: nothing stored
    if (flags & kSetGet && !exists) notify(kNotifyKeyMiss, "keymiss", key);  // GETSET, SET ... GET: a read first
    if (flags & kSetGet && exists) {
      v.kind = Value::kString;
      v.data = it->second;
    }
    if ((flags & kSetNx && exists) || (flags & kSetXx && !exists)) return v;  // not stored
    touch(s, key);
    if (object) s.objs.erase(key);
    const bool string = it != s.map.end();
    if (flags & kSetExpire) s.expires.insert_or_assign(key, at_ms);
    else if (!(flags & kSetKeepTtl)) forget_ttl(s, key);
    if (notifying()) [[unlikely]] {
      if (!exists) notify(kNotifyNew, "new", key);
      notify(kNotifyString, "set", key);
      if (flags & kSetExpire) notify(kNotifyGeneric, "expire", key);
    }
    if (string) it->second = std::move(value);
    else s.map.emplace(std::move(key), std::move(value));
    if (!(flags & kSetGet)) v.kind = Value::kOk;
  } catch (...) {
    v.kind = Value::kError;
    v.data = "ERR out of memory";
  }
  return v;
}

// Redis 7.0's expireGenericCommand after its argument checks.
// now: the time the loop read when it parsed the command (the base of a
// relative TTL), as Redis compares with the time it computed `when` from: a
// positive relative TTL is never already past, however long the hop took.
Count shard_expire(Shard& s, std::string key, std::int64_t at_ms, std::uint32_t flags, std::int64_t now) noexcept {
  try {
    if (!key_exists(s, key)) return {0, Count::kOk};
    auto e = s.expires.find(key);
    const std::int64_t current = e == s.expires.end() ? -1 : e->second;
    if (flags & kExpNx && current != -1) return {0, Count::kOk};
    if (flags & kExpXx && current == -1) return {0, Count::kOk};
    if (flags & kExpGt && (current == -1 || at_ms <= current)) return {0, Count::kOk};  // no TTL: infinite
    if (flags & kExpLt && current != -1 && at_ms >= current) return {0, Count::kOk};
    touch(s, key);
    if (at_ms <= now) {  // already past: the key goes now
      if (e != s.expires.end()) s.expires.erase(e);
      if (s.map.erase(key) == 0) s.objs.erase(key);
      notify(kNotifyGeneric, "del", key);
    } else if (e != s.expires.end()) {
      e->second = at_ms;
      notify(kNotifyGeneric, "expire", key);
    } else {
      notify(kNotifyGeneric, "expire", s.expires.emplace(std::move(key), at_ms).first->first);
    }
    return {1, Count::kOk};
  } catch (...) {
    return {0, Count::kOutOfMemory};
  }
}

Count shard_deadline(Shard& s, std::string key) noexcept {
  if (!key_exists(s, key)) {
    notify(kNotifyKeyMiss, "keymiss", key);  // TTL, PTTL, EXPIRETIME: Redis's lookupKeyRead
    return {-2, Count::kOk};
  }
  auto e = s.expires.find(key);
  return {e == s.expires.end() ? -1 : e->second, Count::kOk};
}

Count shard_persist(Shard& s, std::string key) noexcept {
  if (!key_exists(s, key)) return {0, Count::kOk};
  const std::size_t n = s.expires.erase(key);
  if (n) {
    touch(s, key);
    notify(kNotifyGeneric, "persist", key);
  }
  return {static_cast<std::int64_t>(n), Count::kOk};
}

// Redis 7.0's activeExpireCycle, per shard: visit the buckets of `expires`
// from where the last cycle stopped, 20 keys with a TTL per round, dropping
// those past their deadline; another round while more than 10 % of the
// sample had expired, at most 16 rounds and 1 ms (the shard's trustee
// serves nothing else meanwhile). Empty buckets count too (at most 20 per
// key wanted), so a sparse table costs a bounded walk.
Count shard_sweep(Shard& s) noexcept {
  constexpr std::size_t kKeysPerRound = 20, kRounds = 16;
  Count dropped;  // n: keys dropped; expiring: keys with a TTL left
  // A transaction's keys stay as it sees them; DEBUG SET-ACTIVE-EXPIRE 0
  // leaves expiry to the lookups.
  if (s.expires.empty() || s.owner != 0 || !s.active_expire) return dropped;
  const std::int64_t now = now_ms();
  const auto start = std::chrono::steady_clock::now();
  try {
    std::vector<std::string> due;
    for (std::size_t round = 0; round < kRounds && !s.expires.empty(); ++round) {
      const std::size_t buckets = s.expires.bucket_count();
      std::size_t sampled = 0, expired = 0, visited = 0;
      while (sampled < kKeysPerRound && visited < kKeysPerRound * 20) {
        if (s.sweep_bucket >= buckets) s.sweep_bucket = 0;
        const std::size_t b = s.sweep_bucket++;
        ++visited;
        due.clear();
        for (auto it = s.expires.begin(b); it != s.expires.end(b); ++it) {
          ++sampled;
          if (it->second <= now) due.push_back(it->first);
        }
        for (const auto& k : due) {
          s.expires.erase(k);
          if (s.map.erase(k) == 0) s.objs.erase(k);
          touch(s, k);
          notify(kNotifyExpired, "expired", k);
        }
        expired += due.size();
      }
      dropped.n += static_cast<std::int64_t>(expired);
      if (expired * 10 <= sampled) break;  // at most 10 % stale: enough for now
      if (std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(1)) break;
    }
  } catch (...) {  // the vector of due keys: nothing dropped is lost, the next cycle retries
  }
  dropped.expiring = static_cast<std::int64_t>(s.expires.size());
  return dropped;
}

}  // namespace hydra
