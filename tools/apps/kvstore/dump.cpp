// DUMP key, RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]:
// Redis 7.0's dumpCommand / restoreCommand. The payload is encoded and
// decoded on the connection's thread (rdb.cpp); the key's shard only
// copies the value out (shard_dump) or stores it (shard_restore_key), one
// closure each, so RESTORE writes one key on its own trustee and is
// atomic as any single-key command.
#include <algorithm>
#include <cstdlib>

#include "rdb.hpp"
#include "server.hpp"
#include "types.hpp"

namespace hydra {

namespace {

using resp::lower;

constexpr const char* kBusyKey = "BUSYKEY Target key name already exists.";

// RESTORE on the key's shard, in Redis's order: an existing key without
// REPLACE is BUSYKEY before any other error (`err`: the TTL's or the
// payload's, found by the loop); then the value replaces the key. `d` of
// kNone (a deadline already past) stores nothing but still deletes the
// old value under REPLACE, as Redis does. `idle` (ms, -1 none) backdates
// the key's access clock (IDLETIME).
Value shard_restore_key(Shard& s, std::string key, Dump d, bool replace, std::string err, std::int64_t idle) noexcept {
  if (!replace && key_exists(s, key)) return {Value::kError, kBusyKey};
  if (!err.empty()) return {Value::kError, std::move(err)};
  const Count c = shard_store(s, key, std::move(d), true, "restore");  // its keyspace events (notify.cpp)
  if (c.err != Count::kOk) return {Value::kError, count_error(c.err)};
  if (idle >= 0) {
    const auto back = std::uint32_t(std::min<std::int64_t>(idle, 0x7fffffff));
    if (auto it = s.map.find(key); it != s.map.end()) it->second.lru = tl_lru_clock - back;
    else if (auto o = s.objs.find(key); o != s.objs.end()) o->second.lru = tl_lru_clock - back;
  }
  return {Value::kOk, {}};
}

rdb::Object to_rdb(Dump& d) {
  rdb::Object o;
  o.type = d.type;  // the same numbering (rdb.hpp)
  o.value = std::move(d.value);
  if (d.type == Dump::kZset) {
    for (std::size_t i = 0; i + 1 < d.items.size(); i += 2) {
      o.items.push_back(std::move(d.items[i]));
      o.scores.push_back(std::strtod(d.items[i + 1].c_str(), nullptr));  // format_score's text: exact
    }
  } else {
    o.items = std::move(d.items);
  }
  return o;
}

Dump from_rdb(rdb::Object& o) {
  Dump d;
  d.type = o.type;
  d.value = std::move(o.value);
  if (o.type == rdb::Object::kZset) {
    d.items.reserve(o.items.size() * 2);
    for (std::size_t i = 0; i < o.items.size(); ++i) {
      d.items.push_back(std::move(o.items[i]));
      d.items.push_back(format_score(o.scores[i]));
    }
  } else {
    d.items = std::move(o.items);
  }
  return d;
}

}  // namespace

bool Loop::execute_dump(std::uint32_t slot, const std::string& name, Pending& p, std::uint64_t seq,
                        std::uint32_t gen, const std::vector<std::string_view>& args) {
  if (name != "dump" && name != "restore") return false;
  auto arity = [&](bool ok) {
    if (!ok) resp::error(p.reply, "ERR wrong number of arguments for '" + name + "' command");
    return ok;
  };
  const std::size_t shard_index = args.size() > 1 ? shard_of(args[1], nshards_) : 0;
  if (name == "dump") {
    if (!arity(args.size() == 2)) return true;
    p.waiting = 1;
    ask(shard_index, [](Shard& s, std::string k) { return shard_dump_read(s, std::move(k)); },
        [this, slot, gen, seq](Dump d) {
          if (d.type == 0xff) return settle(slot, gen, seq, [](Pending& q) { resp::error(q.reply, "ERR out of memory"); });
          if (d.type == Dump::kNone) return settle(slot, gen, seq, [](Pending& q) { resp::nil(q.reply, q.resp3); });
          std::string payload;
          try {
            payload = rdb::encode(to_rdb(d));
          } catch (const std::bad_alloc&) {
            return settle(slot, gen, seq, [](Pending& q) { resp::error(q.reply, "ERR out of memory"); });
          }
          settle(slot, gen, seq, [&payload](Pending& q) { resp::bulk(q.reply, payload); });
        },
        std::string(args[1]));
    return true;
  }

  // RESTORE: the options first, as Redis parses them (their errors come
  // before the key is looked at).
  if (!arity(args.size() >= 4)) return true;
  bool replace = false, absttl = false;
  long long idle = -1, freq = -1;
  for (std::size_t j = 4; j < args.size(); ++j) {
    const std::string opt = lower(args[j]);
    const bool more = j + 1 < args.size();
    if (opt == "replace") {
      replace = true;
    } else if (opt == "absttl") {
      absttl = true;
    } else if (opt == "idletime" && more && freq == -1) {
      if (!resp::parse_int64(args[j + 1], idle)) return resp::error(p.reply, kNotInteger), true;
      if (idle < 0) return resp::error(p.reply, "ERR Invalid IDLETIME value, must be >= 0"), true;
      ++j;
    } else if (opt == "freq" && more && idle == -1) {
      if (!resp::parse_int64(args[j + 1], freq)) return resp::error(p.reply, kNotInteger), true;
      if (freq < 0 || freq > 255) return resp::error(p.reply, "ERR Invalid FREQ value, must be >= 0 and <= 255"), true;
      ++j;  // accepted: Hydra has no LFU counter to set
    } else {
      return resp::error(p.reply, "ERR syntax error"), true;
    }
  }
  // The TTL and the payload: their errors wait for the BUSYKEY check on
  // the shard, which Redis makes first.
  std::string err;
  Dump d;
  long long ttl = 0;
  if (!resp::parse_int64(args[2], ttl)) {
    err = kNotInteger;
  } else if (ttl < 0) {
    err = "ERR Invalid TTL value, must be >= 0";
  } else {
    rdb::Object o;
    err = rdb::decode(args[3], o, g_config.max_shard_request);
    if (err.empty()) {
      d = from_rdb(o);
      if (ttl != 0) {
        const std::int64_t now = now_ms();
        const std::int64_t deadline = absttl ? ttl : (ttl > INT64_MAX - now ? INT64_MAX : now + ttl);
        if (deadline <= now) d = Dump{};  // already expired: nothing stored (REPLACE still deletes)
        else d.deadline = deadline;
      }
    }
  }
  if (!err.empty()) d = Dump{};  // nothing to carry
  p.waiting = 1;
  ask(shard_index,
      [](Shard& s, std::string k, Dump v, bool r, std::string e, std::int64_t i) {
        return shard_restore_key(s, std::move(k), std::move(v), r, std::move(e), i);
      },
      [this, slot, gen, seq](Value v) {
        settle(slot, gen, seq, [&v](Pending& q) {
          if (v.kind == Value::kError) resp::error(q.reply, v.data);
          else resp::simple(q.reply, "OK");
        });
      },
      std::string(args[1]), std::move(d), replace, std::move(err), std::int64_t(idle < 0 ? -1 : std::min(idle, 1LL << 40) * 1000));
  return true;
}

}  // namespace hydra
