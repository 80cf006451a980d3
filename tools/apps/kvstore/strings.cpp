// Hydra's single-key string and expiry commands: GET, SET with its options,
// SETEX/PSETEX, INCR/INCRBY/DECR/DECRBY, EXPIRE/PEXPIRE/EXPIREAT/PEXPIREAT,
// TTL/PTTL/EXPIRETIME/PEXPIRETIME, PERSIST. Arguments are checked here, with
// Redis 7.0's error texts, before anything goes to the key's shard.
#include <cctype>
#include <climits>
#include <type_traits>

#include "server.hpp"

namespace hydra {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string invalid_expire(std::string_view cmd) { return "ERR invalid expire time in '" + std::string(cmd) + "' command"; }

// Redis 7.0's getExpireMillisecondsOrReply (SET, SETEX, PSETEX): a positive
// integer; relative ones are added to now. The deadline in Unix ms, or an
// error in `err`.
std::int64_t set_deadline(std::string_view arg, bool seconds, bool relative, std::string_view cmd, std::string& err) {
  long long v;
  if (!resp::parse_int64(arg, v)) {
    err = kNotInteger;
    return 0;
  }
  if (v <= 0 || (seconds && v > LLONG_MAX / 1000)) {
    err = invalid_expire(cmd);
    return 0;
  }
  if (seconds) v *= 1000;
  if (relative) {
    const std::int64_t now = now_ms();
    if (v > LLONG_MAX - now) {
      err = invalid_expire(cmd);
      return 0;
    }
    v += now;
  }
  return v;
}

}  // namespace

bool Loop::execute_string(std::uint32_t slot, const std::string& name, Pending& p, std::uint64_t seq, std::uint32_t gen,
                          const std::vector<std::string_view>& args) {
  auto arity = [&](bool ok) {
    if (!ok) resp::error(p.reply, "ERR wrong number of arguments for '" + name + "' command");
    return ok;
  };
  // Sends one request to the shard of args[1]; `then` fills the Pending.
  // A `then` without captures is not captured either: the callback stays
  // the size of the GET/SET ones before (a larger one costs the runtime a
  // heap allocation per request; callgrind, SET/GET -P 16: +40 Ir each).
  // `at`: the key's shard. Batches (batch.cpp) for that shard leave first,
  // so that this request reaches it after them.
  auto to_shard = [&](std::size_t at, auto fn, auto then, auto&&... extra) {
    using Then = decltype(then);
    p.waiting = 1;
    ++inflight_;
    if (!batch_used_.empty() && at != own_shard_) send_batches();
    auto send = [&](auto callback) {
      shard(at).apply_with_then(fn, std::move(callback), std::string(args[1]), std::forward<decltype(extra)>(extra)...);
    };
    if constexpr (std::is_empty_v<Then>)
      send([this, slot, gen, seq](auto a) { this->answer(slot, gen, seq, [&](Pending& q) { Then{}(q, a); }); });
    else
      send([this, slot, gen, seq, then](auto a) { this->answer(slot, gen, seq, [&](Pending& q) { then(q, a); }); });
  };
  auto to_key = [&](auto fn, auto then, auto&&... extra) {
    to_shard(shard_of(args[1], nshards_), fn, then, std::forward<decltype(extra)>(extra)...);
  };
  // GET and plain SET on another thread's shard join that shard's batch.
  auto batched = [&](std::size_t at, bool set) {
    if (at == own_shard_ || !fences_.empty() || !batch(slot, gen, seq, at, set, args)) return false;
    p.waiting = 1;
    return true;
  };
  auto integer_reply = [](Pending& q, Count n) {
    if (n.err == Count::kOk) resp::integer(q.reply, n.n);
    else resp::error(q.reply, count_error(n.err));
  };

  if (name == "get") {
    if (!arity(args.size() == 2)) return true;
    if (too_large(args)) return resp::error(p.reply, kTooLarge), true;
    const std::size_t home = shard_of(args[1], nshards_);
    if (batched(home, false)) return true;
    to_shard(home, [](Shard& s, std::string k) { return shard_get(s, std::move(k)); },
           [](Pending& q, const Value& v) {
             if (v.kind == Value::kString) resp::bulk(q.reply, v.data);
             else if (v.kind == Value::kNil) resp::nil(q.reply, q.resp3);
             else resp::error(q.reply, v.data);
           });
    return true;
  }
  if (name == "set" || name == "setex" || name == "psetex") {
    std::uint32_t flags = 0;
    std::int64_t at = 0;
    std::string err;
    std::string_view value;
    if (name == "set") {
      if (!arity(args.size() >= 3)) return true;
      value = args[2];
      // Redis 7.0's parseExtendedStringArgumentsOrReply: options in any
      // order, a repeated one allowed, conflicting ones a syntax error;
      // the expire value is checked after all of them.
      enum { kNone, kEx, kPx, kExat, kPxat } unit = kNone;
      std::string_view when;
      for (std::size_t i = 3; i < args.size(); ++i) {
        const std::string_view o = args[i];
        const bool has_next = i + 1 < args.size();
        if (iequals(o, "nx") && !(flags & kSetXx)) flags |= kSetNx;
        else if (iequals(o, "xx") && !(flags & kSetNx)) flags |= kSetXx;
        else if (iequals(o, "get")) flags |= kSetGet;
        else if (iequals(o, "keepttl") && unit == kNone) flags |= kSetKeepTtl;
        else if (has_next && !(flags & kSetKeepTtl) && iequals(o, "ex") && (unit == kNone || unit == kEx)) unit = kEx, when = args[++i];
        else if (has_next && !(flags & kSetKeepTtl) && iequals(o, "px") && (unit == kNone || unit == kPx)) unit = kPx, when = args[++i];
        else if (has_next && !(flags & kSetKeepTtl) && iequals(o, "exat") && (unit == kNone || unit == kExat)) unit = kExat, when = args[++i];
        else if (has_next && !(flags & kSetKeepTtl) && iequals(o, "pxat") && (unit == kNone || unit == kPxat)) unit = kPxat, when = args[++i];
        else return resp::error(p.reply, "ERR syntax error"), true;
      }
      if (unit != kNone) {
        at = set_deadline(when, unit == kEx || unit == kExat, unit == kEx || unit == kPx, name, err);
        flags |= kSetExpire;
      }
    } else {  // SETEX k seconds v, PSETEX k ms v
      if (!arity(args.size() == 4)) return true;
      value = args[3];
      at = set_deadline(args[2], name == "setex", true, name, err);
      flags |= kSetExpire;
    }
    if (!err.empty()) return resp::error(p.reply, err), true;
    if (too_large(args)) return resp::error(p.reply, kTooLarge), true;
    if (flags == 0 && args.size() == 3) {  // plain SET: the hot path, no options to carry
      const std::size_t home = shard_of(args[1], nshards_);
      if (batched(home, true)) return true;
      to_shard(home, [](Shard& s, std::string k, std::string v) { return shard_set(s, std::move(k), std::move(v)); },
             [](Pending& q, Count n) {
               if (n.err == Count::kOk) resp::simple(q.reply, "OK");
               else resp::error(q.reply, count_error(n.err));
             },
             std::string(value));
      return true;
    }
    to_key([](Shard& s, std::string k, std::string v, std::uint32_t f, std::int64_t t) {
             return shard_set_opts(s, std::move(k), std::move(v), f, t);
           },
           [](Pending& q, const Value& v) {
             if (v.kind == Value::kString) resp::bulk(q.reply, v.data);
             else if (v.kind == Value::kOk) resp::simple(q.reply, "OK");
             else if (v.kind == Value::kNil) resp::nil(q.reply, q.resp3);
             else resp::error(q.reply, v.data);
           },
           std::string(value), flags, at);
    return true;
  }
  if (name == "getset") {  // SET k v GET: the old value, the TTL forgotten
    if (!arity(args.size() == 3)) return true;
    if (too_large(args)) return resp::error(p.reply, kTooLarge), true;
    to_key([](Shard& s, std::string k, std::string v, std::uint32_t f, std::int64_t t) {
             return shard_set_opts(s, std::move(k), std::move(v), f, t);
           },
           [](Pending& q, const Value& v) {
             if (v.kind == Value::kString) resp::bulk(q.reply, v.data);
             else if (v.kind == Value::kError) resp::error(q.reply, v.data);
             else resp::nil(q.reply, q.resp3);
           },
           std::string(args[2]), std::uint32_t(kSetGet), std::int64_t(0));
    return true;
  }
  if (name == "setnx") {  // SET k v NX, answered 1 (set) or 0 (the key exists)
    if (!arity(args.size() == 3)) return true;
    if (too_large(args)) return resp::error(p.reply, kTooLarge), true;
    to_key([](Shard& s, std::string k, std::string v, std::uint32_t f, std::int64_t t) {
             return shard_set_opts(s, std::move(k), std::move(v), f, t);
           },
           [](Pending& q, const Value& v) {
             if (v.kind == Value::kOk) resp::integer(q.reply, 1);
             else if (v.kind == Value::kNil) resp::integer(q.reply, 0);
             else resp::error(q.reply, v.data);
           },
           std::string(args[2]), std::uint32_t(kSetNx), std::int64_t(0));
    return true;
  }
  if (name == "incr" || name == "decr" || name == "incrby" || name == "decrby") {
    const bool by = name.size() == 6;
    if (!arity(args.size() == (by ? 3u : 2u))) return true;
    long long step = name[0] == 'i' ? 1 : -1;
    if (by) {
      long long v;
      if (!resp::parse_int64(args[2], v)) return resp::error(p.reply, kNotInteger), true;
      if (step < 0 && v == LLONG_MIN) return resp::error(p.reply, "ERR decrement would overflow"), true;
      step *= v;
    }
    if (too_large(args)) return resp::error(p.reply, kTooLarge), true;
    to_key([](Shard& s, std::string k, std::int64_t n) { return shard_incr(s, std::move(k), n); }, integer_reply,
           std::int64_t(step));
    return true;
  }
  if (name == "expire" || name == "pexpire" || name == "expireat" || name == "pexpireat") {
    if (!arity(args.size() >= 3)) return true;
    // Redis 7.0's expireGenericCommand: options, then the time (negative
    // allowed: the key is deleted), overflow an error.
    std::uint32_t flags = 0;
    for (std::size_t i = 3; i < args.size(); ++i) {
      if (iequals(args[i], "nx")) flags |= kExpNx;
      else if (iequals(args[i], "xx")) flags |= kExpXx;
      else if (iequals(args[i], "gt")) flags |= kExpGt;
      else if (iequals(args[i], "lt")) flags |= kExpLt;
      else return resp::error(p.reply, "ERR Unsupported option " + std::string(args[i])), true;
    }
    if (flags & kExpNx && flags & (kExpXx | kExpGt | kExpLt))
      return resp::error(p.reply, "ERR NX and XX, GT or LT options at the same time are not compatible"), true;
    if (flags & kExpGt && flags & kExpLt)
      return resp::error(p.reply, "ERR GT and LT options at the same time are not compatible"), true;
    long long when;
    if (!resp::parse_int64(args[2], when)) return resp::error(p.reply, kNotInteger), true;
    if (name[0] == 'e') {  // seconds
      if (when > LLONG_MAX / 1000 || when < LLONG_MIN / 1000) return resp::error(p.reply, invalid_expire(name)), true;
      when *= 1000;
    }
    const std::int64_t now = now_ms(), base = name.ends_with("at") ? 0 : now;
    if (when > LLONG_MAX - base) return resp::error(p.reply, invalid_expire(name)), true;
    when += base;
    if (too_large(args)) return resp::error(p.reply, kTooLarge), true;
    to_key([](Shard& s, std::string k, std::int64_t t, std::uint32_t f,
              std::int64_t n) { return shard_expire(s, std::move(k), t, f, n); },
           integer_reply, std::int64_t(when), flags, now);
    return true;
  }
  if (name == "ttl" || name == "pttl" || name == "expiretime" || name == "pexpiretime") {
    if (!arity(args.size() == 2)) return true;
    if (too_large(args)) return resp::error(p.reply, kTooLarge), true;
    const bool ms = name[0] == 'p', absolute = name.ends_with("time");
    to_key([](Shard& s, std::string k) { return shard_deadline(s, std::move(k)); },
           [ms, absolute](Pending& q, Count n) {
             if (n.n < 0) return resp::integer(q.reply, n.n);  // -2 no key, -1 no TTL
             std::int64_t t = absolute ? n.n : n.n - now_ms();
             if (t < 0) t = 0;
             resp::integer(q.reply, ms ? t : (t + 500) / 1000);
           });
    return true;
  }
  if (name == "persist") {
    if (!arity(args.size() == 2)) return true;
    if (too_large(args)) return resp::error(p.reply, kTooLarge), true;
    to_key([](Shard& s, std::string k) { return shard_persist(s, std::move(k)); }, integer_reply);
    return true;
  }
  return false;
}

}  // namespace hydra
