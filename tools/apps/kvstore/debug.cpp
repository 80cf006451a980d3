// DEBUG: the subcommands Redis's test suite uses, where they mean something
// for Hydra.
//   SET-ACTIVE-EXPIRE 0|1   active expiry on every shard of the rack
//   PROTOCOL <type>         Redis 7.0's sample replies of each RESP type
//   DIGEST-VALUE key...     a digest of each value (equal values, equal
//                           digests; not Redis's SHA1 bytes)
//   OBJECT key              Redis's line: the value's address (stable while
//                           the key lives), refcount, encoding as OBJECT
//                           ENCODING, serializedlength the value's bytes
//   HTSTATS-KEY key         Redis's hash table statistics of a hashtable-
//                           encoded value, from its std::unordered_* buckets
//   SLEEP s                 this connection's thread sleeps (Redis's whole
//                           server does); at most 10 s
//   QUICKLIST-PACKED-THRESHOLD n   accepted, no effect: Hydra's lists have no nodes
//   RELOAD, LOADAOF         OK and nothing done: Hydra persists nothing, and
//                           what a reload guarantees (the same data) holds
// Others answer Redis's unknown-subcommand error.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "server.hpp"
#include "types.hpp"

namespace hydra {

namespace {

using resp::lower;

std::uint64_t mix(std::uint64_t seed, std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull ^ (seed * 0x9e3779b97f4a7c15ull);
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  h ^= bytes.size();
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  return h;
}

// 160 bits of digest as 40 hex digits, as Redis prints its SHA1 digests:
// three independent 64-bit digests of the value, cut to 20 bytes.
// Ordered for strings and lists, order-free (xor) for hashes and sets.
Value digest(Shard& s, const std::string& key) {
  Value v{Value::kString, std::string(40, '0')};
  std::uint64_t d[3] = {0, 0, 0};
  auto str = s.map.find(key);
  auto obj = s.objs.find(key);
  if (str == s.map.end() && obj == s.objs.end()) return v;  // no key: zeros, as Redis
  for (std::uint64_t k = 0; k < 3; ++k) {
    if (str != s.map.end()) {
      d[k] = mix(k, "string") ^ mix(k + 3, str->second);
    } else if (const Hash* h = std::get_if<Hash>(&obj->second)) {
      d[k] = mix(k, "hash");
      for (const auto& [f, val] : *h) d[k] ^= mix(k + 3, f + '\0' + std::to_string(f.size()) + val);
    } else if (const List* l = std::get_if<List>(&obj->second)) {
      d[k] = mix(k, "list");
      for (const auto& e : *l) d[k] = mix(d[k], e);
    } else if (const ZSet* z = std::get_if<ZSet>(&obj->second)) {
      d[k] = mix(k, "zset");
      for (const auto& [m, sc] : *z) d[k] ^= mix(k + 3, m + '\0' + format_score(sc));
    } else {
      d[k] = mix(k, "set");
      for (const auto& m : std::get<Set>(obj->second)) d[k] ^= mix(k + 3, m);
    }
    if (s.expires.count(key)) d[k] ^= mix(k, "!!expire!!");
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%016llx%016llx%08llx", (unsigned long long)d[0], (unsigned long long)d[1],
                (unsigned long long)(d[2] >> 32));
  v.data = buf;
  return v;
}

Value debug_object(Shard& s, const std::string& key) {
  expire_if_due(s, key);
  auto str = s.map.find(key);
  auto obj = s.objs.find(key);
  if (str == s.map.end() && obj == s.objs.end()) return {Value::kError, "ERR no such key"};
  const Reply enc = shard_object(s, "encoding", key);
  const Reply ref = shard_object(s, "refcount", key);
  const void* at = str != s.map.end() ? static_cast<const void*>(&str->second) : static_cast<const void*>(&obj->second);
  std::size_t bytes = 0;
  if (str != s.map.end()) bytes = str->second.size();
  else std::visit([&](const auto& c) {
    for (const auto& e : c) {
      if constexpr (std::is_same_v<std::decay_t<decltype(e)>, std::string>) bytes += e.size();
      else if constexpr (std::is_same_v<std::decay_t<decltype(e.second)>, double>) bytes += e.first.size() + 8;
      else bytes += e.first.size() + e.second.size();
    }
  }, obj->second);
  char buf[256];
  std::snprintf(buf, sizeof buf, "Value at:%p refcount:%lld encoding:%s serializedlength:%zu lru:0 lru_seconds_idle:0", at,
                (long long)ref.n, enc.s.c_str(), bytes);
  return {Value::kString, buf};
}

// DEBUG PROTOCOL's replies (Redis 7.0's debug.c), in the connection's protocol.
bool protocol_sample(std::string& out, const std::string& type, bool resp3) {
  auto boolean = [&](bool b) {
    if (resp3) out += b ? "#t\r\n" : "#f\r\n";
    else resp::integer(out, b ? 1 : 0);
  };
  if (type == "string") resp::bulk(out, "Hello World");
  else if (type == "integer") resp::integer(out, 12345);
  else if (type == "double") resp3 ? void(out += ",3.141\r\n") : resp::bulk(out, "3.141");
  else if (type == "bignum") resp3 ? void(out += "(1234567999999999999999999999999999999\r\n") : resp::bulk(out, "1234567999999999999999999999999999999");
  else if (type == "null") resp::nil(out, resp3);
  else if (type == "array" || type == "set") {
    if (type == "set") resp::set(out, 3, resp3);
    else resp::array(out, 3);
    for (int j = 0; j < 3; ++j) resp::integer(out, j);
  } else if (type == "map") {
    resp::map(out, 3, resp3);
    for (int j = 0; j < 3; ++j) {
      resp::integer(out, j);
      boolean(j == 1);
    }
  } else if (type == "attrib") {
    if (resp3) {
      out += "|1\r\n";
      resp::bulk(out, "key-popularity");
      resp::array(out, 2);
      resp::bulk(out, "key:123");
      resp::integer(out, 90);
    }
    resp::bulk(out, "Some real reply following the attribute");
  } else if (type == "push") {
    if (!resp3) {
      resp::error(out, "ERR RESP2 is not supported by this command");
      return true;
    }
    out += ">2\r\n";
    resp::bulk(out, "server-cpu-usage");
    resp::integer(out, 42);
    resp::bulk(out, "Some real reply following the push reply");
  } else if (type == "true" || type == "false") {
    boolean(type == "true");
  } else if (type == "verbatim") {
    resp::verbatim(out, "This is a verbatim\nstring", resp3);
  } else {
    return false;
  }
  return true;
}

}  // namespace

void Loop::debug_command(std::uint32_t slot, Pending& p, std::uint64_t seq, std::uint32_t gen,
                         const std::vector<std::string_view>& args) {
  const std::string sub = lower(args[1]);
  auto unknown = [&] {
    resp::error(p.reply, "ERR unknown subcommand '" + std::string(args[1].substr(0, 128)) + "'. Try DEBUG HELP.");
  };
  long long n;
  if (sub == "set-active-expire") {
    if (args.size() != 3 || !resp::parse_int64(args[2], n))
      return resp::error(p.reply, "ERR Invalid argument for DEBUG SET-ACTIVE-EXPIRE (0 or 1)");
    p.kind = Pending::Kind::kOk;
    p.waiting = std::uint32_t(nshards_);
    inflight_ += nshards_;
    for (std::size_t i = 0; i < nshards_; ++i)
      shard(i).apply_with_then(
          [](Shard& s, bool on) {
            s.active_expire = on;
            return Count{};
          },
          [this, slot, gen, seq](Count) { answer(slot, gen, seq, [](Pending&) {}); }, n != 0);
    return;
  }
  if (sub == "protocol" && args.size() == 3) {
    if (!protocol_sample(p.reply, lower(args[2]), p.resp3))
      resp::error(p.reply, "ERR Wrong protocol type name. Please use one of the following: "
                           "string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false");
    return;
  }
  if ((sub == "digest-value" && args.size() >= 2) || (sub == "object" && args.size() == 3)) {
    const bool object = sub == "object";
    p.kind = object ? Pending::Kind::kDone : Pending::Kind::kStatuses;
    p.values.resize(args.size() - 2);
    p.waiting = std::uint32_t(args.size() - 2);
    if (p.waiting == 0) return resp::array(p.reply, 0);
    inflight_ += p.waiting;
    for (std::size_t i = 2; i < args.size(); ++i)
      shard(shard_of(args[i], nshards_))
          .apply_with_then(
              [](Shard& s, std::string k, bool obj) noexcept {
                try {
                  return obj ? debug_object(s, k) : digest(s, k);
                } catch (...) {
                  return Value{Value::kError, "ERR out of memory"};
                }
              },
              [this, slot, gen, seq, i, object](Value v) {
                answer(slot, gen, seq, [&](Pending& q) {
                  if (!object) q.values[i - 2] = std::move(v);
                  else if (v.kind == Value::kError) resp::error(q.reply, v.data);
                  else resp::simple(q.reply, v.data);
                });
              },
              std::string(args[i]), object);
    return;
  }
  if (sub == "htstats-key" && args.size() == 3) {  // htstats.cpp
    p.waiting = 1;
    ask(shard_of(args[2], nshards_), [](Shard& s, std::string k) { return shard_htstats(s, std::move(k)); },
        [this, slot, gen, seq](Value v) {
          settle(slot, gen, seq, [&v](Pending& q) {
            if (v.kind == Value::kError) resp::error(q.reply, v.data);
            else resp::verbatim(q.reply, v.data, q.resp3);
          });
        },
        std::string(args[2]));
    return;
  }
  if (sub == "sleep" && args.size() == 3) {
    const double s = std::strtod(std::string(args[2]).c_str(), nullptr);
    if (s > 0) std::this_thread::sleep_for(std::chrono::microseconds(std::llround(std::min(s, 10.0) * 1e6)));
    return resp::simple(p.reply, "OK");
  }
  if (sub == "quicklist-packed-threshold" && args.size() == 3) return resp::simple(p.reply, "OK");
  // Redis saves and loads its data again, which leaves the same data; Hydra
  // persists nothing, and its data stay as they are.
  if ((sub == "reload" || sub == "loadaof") && args.size() <= 4) return resp::simple(p.reply, "OK");
  if (sub == "help" && args.size() == 2) {
    help_reply(p.reply, {
        "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "DIGEST-VALUE <key> [<key> ...]", "    Output a digest of each key's value (not Redis's SHA1 bytes).",
        "OBJECT <key>", "    Show low level info about the value at <key>.",
        "HTSTATS-KEY <key>", "    Hash table statistics of the value at <key> (hashtable encodings only).",
        "PROTOCOL <type>", "    Reply with a sample of a RESP type (string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false).",
        "SET-ACTIVE-EXPIRE <0|1>", "    Turn active expiry off or on, on every shard of the rack.",
        "SLEEP <seconds>", "    Stop this connection's thread for <seconds> (at most 10).",
        "QUICKLIST-PACKED-THRESHOLD <size>", "    Accepted; no effect on Hydra's lists.",
        "RELOAD, LOADAOF", "    Accepted; nothing to save or load (Hydra persists nothing).",
        "HELP", "    Print this help."});
    return;
  }
  unknown();
}

}  // namespace hydra
