// The shard side of hashes, lists and sets (types.hpp): Redis 7.0's
// semantics and error texts, run by the key's trustee. A collection left
// empty is deleted with its TTL, as in Redis.
#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "resp.hpp"
#include "types.hpp"

namespace hydra {

namespace {

constexpr const char* kNotInt = "ERR value is not an integer or out of range";

Reply of_kind(std::uint8_t kind, std::int64_t n = 0, std::string s = {}) { return Reply{kind, n, std::move(s), {}, {}}; }
Reply error(std::string text) { return of_kind(Reply::kError, 0, std::move(text)); }
Reply integer(std::int64_t n) { return of_kind(Reply::kInt, n); }
Reply bulk(std::string s) { return of_kind(Reply::kBulk, 0, std::move(s)); }

// LRANGE / LTRIM's indexes: negative from the end, clamped. False if empty.
bool range(long long start, long long stop, std::size_t len, std::size_t& from, std::size_t& to) {
  const long long n = static_cast<long long>(len);
  if (start < 0) start += n;
  if (stop < 0) stop += n;
  if (start < 0) start = 0;
  if (start > stop || start >= n) return false;
  if (stop >= n) stop = n - 1;
  from = std::size_t(start);
  to = std::size_t(stop);
  return true;
}

}  // namespace

// HSCAN / SSCAN key cursor [MATCH p] [COUNT n]: everything matching in one
// reply with cursor 0 (as Redis for small collections; COUNT is a hint).
// args: cursor and options. False with `err` set on a bad argument.
bool scan_args(const std::vector<std::string>& args, std::string& pattern, std::string& err) {
  unsigned long long cursor;
  char* end = nullptr;
  errno = 0;
  // Redis 7.0's parseScanCursorOrReply: strtoul, so "-1" is a (large) cursor.
  if (args.empty() || std::isspace(static_cast<unsigned char>(args[0].c_str()[0])) ||
      (cursor = std::strtoull(args[0].c_str(), &end, 10), errno != 0 || *end != '\0')) {
    err = "ERR invalid cursor";
    return false;
  }
  (void)cursor;
  for (std::size_t i = 1; i < args.size(); i += 2) {
    const std::string o = resp::lower(args[i]);
    if (i + 1 >= args.size()) {
      err = "ERR syntax error";
      return false;
    }
    if (o == "count") {
      long long n;
      if (!resp::parse_int64(args[i + 1], n)) {
        err = kNotInt;
        return false;
      }
      if (n < 1) {
        err = "ERR syntax error";
        return false;
      }
    } else if (o == "match") {
      pattern = args[i + 1];
    } else {
      err = "ERR syntax error";
      return false;
    }
  }
  return true;
}

bool matches(const std::string& pattern, const std::string& s) {
  return pattern.empty() || pattern == "*" || ::fnmatch(pattern.c_str(), s.c_str(), 0) == 0;
}

namespace {

Reply hashes(Shard& s, Op op, const std::string& key, std::vector<std::string>& a) {
  bool wrong;
  switch (op) {
    case Op::kHset: case Op::kHmset: case Op::kHsetnx: {
      Hash* h = make_obj<Hash>(s, key, wrong);
      if (wrong) return error(kWrongType);
      std::int64_t added = 0;
      const Hash::Limits lim = hash_limits();
      if (op == Op::kHsetnx) {
        if (!h->find(a[0])) added = h->set(std::move(a[0]), std::move(a[1]), lim);
      } else {
        if (a.size() > 2) h->reserve_more(a.size() / 2, lim);  // several fields: one allocation
        for (std::size_t i = 0; i + 1 < a.size(); i += 2) added += h->set(std::move(a[i]), std::move(a[i + 1]), lim);
      }
      if (added || op != Op::kHsetnx) touch(s, key);
      return op == Op::kHmset ? of_kind(Reply::kOk) : integer(added);
    }
    case Op::kHincrby: {
      long long by;
      if (!resp::parse_int64(a[1], by)) return error(kNotInt);
      Hash* h = make_obj<Hash>(s, key, wrong);
      if (wrong) return error(kWrongType);
      const std::string* old = h->find(a[0]);
      long long v = 0;
      if (old && !resp::parse_int64(*old, v)) return error("ERR hash value is not an integer");
      if ((by < 0 && v < 0 && by < LLONG_MIN - v) || (by > 0 && v > 0 && by > LLONG_MAX - v)) {
        drop_if_empty(s, key, *h);
        return error("ERR increment or decrement would overflow");
      }
      h->set(std::move(a[0]), std::to_string(v + by), hash_limits());
      touch(s, key);
      return integer(v + by);
    }
    case Op::kHdel: {
      Hash* h = find_obj<Hash>(s, key, wrong);
      if (wrong) return error(kWrongType);
      std::int64_t n = 0;
      if (h) {
        for (const auto& f : a) n += std::int64_t(h->erase(f));
        if (n) touch(s, key);
        drop_if_empty(s, key, *h);
      }
      return integer(n);
    }
    default: break;
  }
  // The read-only ones.
  const Hash* h = find_obj<Hash>(s, key, wrong);
  if (wrong) return error(kWrongType);
  static const Hash kEmpty;
  if (!h) h = &kEmpty;
  switch (op) {
    case Op::kHget: {
      const std::string* v = h->find(a[0]);
      return v ? bulk(*v) : of_kind(Reply::kNil);
    }
    case Op::kHmget: {
      Reply r = of_kind(Reply::kArray);
      for (const auto& f : a) {
        const std::string* v = h->find(f);
        r.items.push_back(v ? *v : std::string());
        r.nil.push_back(!v);
      }
      return r;
    }
    case Op::kHexists: return integer(h->find(a[0]) ? 1 : 0);
    case Op::kHlen: return integer(std::int64_t(h->size()));
    case Op::kHgetall: case Op::kHkeys: case Op::kHvals: case Op::kHscan: {
      std::string pattern, err;
      if (op == Op::kHscan && !scan_args(a, pattern, err)) return error(err);
      Reply r = of_kind(op == Op::kHgetall ? Reply::kMap : op == Op::kHscan ? Reply::kScan : Reply::kArray);
      if (op == Op::kHscan && a[0] != "0") return r;  // everything went with cursor 0
      for (const auto& [f, v] : *h) {
        if (op == Op::kHscan && !matches(pattern, f)) continue;
        if (op != Op::kHvals) r.items.push_back(f);
        if (op != Op::kHkeys) r.items.push_back(v);
      }
      return r;
    }
    default: return error("ERR internal: not a hash command");
  }
}

Reply lists(Shard& s, Op op, const std::string& key, std::vector<std::string>& a) {
  bool wrong;
  if (op == Op::kLpush || op == Op::kRpush) {
    List* l = make_obj<List>(s, key, wrong);
    if (wrong) return error(kWrongType);
    for (auto& e : a) {
      if (op == Op::kLpush) l->push_front(std::move(e));
      else l->push_back(std::move(e));
    }
    touch(s, key);
    return integer(std::int64_t(l->size()));
  }
  long long x = 0, y = 0;  // the integer arguments, parsed before the key is looked at (as Redis)
  if (op == Op::kLpop || op == Op::kRpop) {
    if (!a.empty() && (!resp::parse_int64(a[0], x) || x < 0)) return error("ERR value is out of range, must be positive");
  } else if (op == Op::kLrange || op == Op::kLtrim) {
    if (!resp::parse_int64(a[0], x) || !resp::parse_int64(a[1], y)) return error(kNotInt);
  } else if (op == Op::kLrem) {
    if (!resp::parse_int64(a[0], x)) return error(kNotInt);
  }
  List* l = find_obj<List>(s, key, wrong);
  if (wrong) return error(kWrongType);
  if (op == Op::kLindex || op == Op::kLset) {  // these look the key up first
    if (!l) return op == Op::kLset ? error("ERR no such key") : of_kind(Reply::kNil);
    if (!resp::parse_int64(a[0], x)) return error(kNotInt);
  }
  switch (op) {
    case Op::kLpop: case Op::kRpop: {
      const bool count = !a.empty();
      if (!l) return of_kind(count ? Reply::kNullArray : Reply::kNil);
      if (!count) {
        std::string v = std::move(op == Op::kLpop ? l->front() : l->back());
        if (op == Op::kLpop) l->pop_front();
        else l->pop_back();
        touch(s, key);
        drop_if_empty(s, key, *l);
        return bulk(std::move(v));
      }
      Reply r = of_kind(Reply::kArray);
      for (long long i = 0; i < x && !l->empty(); ++i) {
        r.items.push_back(std::move(op == Op::kLpop ? l->front() : l->back()));
        r.nil.push_back(0);
        if (op == Op::kLpop) l->pop_front();
        else l->pop_back();
      }
      if (x > 0) touch(s, key);
      drop_if_empty(s, key, *l);
      return r;
    }
    case Op::kLlen: return integer(l ? std::int64_t(l->size()) : 0);
    case Op::kLindex: {
      if (!l) return of_kind(Reply::kNil);
      long long i = x < 0 ? x + static_cast<long long>(l->size()) : x;
      if (i < 0 || i >= static_cast<long long>(l->size())) return of_kind(Reply::kNil);
      return bulk((*l)[std::size_t(i)]);
    }
    case Op::kLrange: {
      Reply r = of_kind(Reply::kArray);
      std::size_t from, to;
      if (l && range(x, y, l->size(), from, to))
        for (std::size_t i = from; i <= to; ++i) {
          r.items.push_back((*l)[i]);
          r.nil.push_back(0);
        }
      return r;
    }
    case Op::kLset: {
      if (!l) return error("ERR no such key");
      long long i = x < 0 ? x + static_cast<long long>(l->size()) : x;
      if (i < 0 || i >= static_cast<long long>(l->size())) return error("ERR index out of range");
      (*l)[std::size_t(i)] = std::move(a[1]);
      touch(s, key);
      return of_kind(Reply::kOk);
    }
    case Op::kLtrim: {
      if (!l) return of_kind(Reply::kOk);
      std::size_t from, to;
      if (!range(x, y, l->size(), from, to)) {
        l->clear();
      } else {
        l->erase(l->begin() + std::ptrdiff_t(to + 1), l->end());
        l->erase(l->begin(), l->begin() + std::ptrdiff_t(from));
      }
      touch(s, key);
      drop_if_empty(s, key, *l);
      return of_kind(Reply::kOk);
    }
    case Op::kLrem: {
      if (!l) return integer(0);
      std::int64_t removed = 0;
      const std::string& e = a[1];
      if (x >= 0) {
        for (auto it = l->begin(); it != l->end() && (x == 0 || removed < x);) {
          if (*it == e) it = l->erase(it), ++removed;
          else ++it;
        }
      } else {
        for (std::size_t i = l->size(); i > 0 && removed < -x; --i) {
          if ((*l)[i - 1] == e) {
            l->erase(l->begin() + std::ptrdiff_t(i - 1));
            ++removed;
          }
        }
      }
      if (removed) touch(s, key);
      drop_if_empty(s, key, *l);
      return integer(removed);
    }
    default: return error("ERR internal: not a list command");
  }
}

Reply sets(Shard& s, Op op, const std::string& key, std::vector<std::string>& a) {
  bool wrong;
  if (op == Op::kSadd) {
    Set* st = make_obj<Set>(s, key, wrong);
    if (wrong) return error(kWrongType);
    std::int64_t n = 0;
    bool ints = true;
    for (auto& m : a) {
      long long v;
      ints = ints && m.size() <= 20 && resp::parse_int64(m, v);  // as keys.cpp's strict_int
      n += st->insert(std::move(m)).second;
    }
    if (n && (!ints || st->size() > std::size_t(g_encodings.set_intset.load(std::memory_order_relaxed))))
      s.objs.find(key)->second.big = true;
    if (n) touch(s, key);
    drop_if_empty(s, key, *st);  // SADD of nothing new to a new key cannot happen (arity), but stay safe
    return integer(n);
  }
  Set* st = find_obj<Set>(s, key, wrong);
  if (wrong) return error(kWrongType);
  static const Set kEmpty;
  const Set& view = st ? *st : kEmpty;
  switch (op) {
    case Op::kSrem: {
      std::int64_t n = 0;
      if (st) {
        for (const auto& m : a) n += std::int64_t(st->erase(m));
        if (n) touch(s, key);
        drop_if_empty(s, key, *st);
      }
      return integer(n);
    }
    case Op::kSismember: return integer(view.count(a[0]) ? 1 : 0);
    case Op::kScard: return integer(std::int64_t(view.size()));
    case Op::kSmembers: case Op::kSscan: {
      std::string pattern, err;
      if (op == Op::kSscan && !scan_args(a, pattern, err)) return error(err);
      Reply r = of_kind(op == Op::kSscan ? Reply::kScan : Reply::kSet);
      if (op == Op::kSscan && a[0] != "0") return r;
      for (const auto& m : view)
        if (op != Op::kSscan || matches(pattern, m)) r.items.push_back(m);
      return r;
    }
    default: return error("ERR internal: not a set command");
  }
}

}  // namespace

namespace {
// The ops that may add to the data (Redis's denyoom ones).
bool grows(Op op) {
  switch (op) {
    case Op::kHset: case Op::kHsetnx: case Op::kHmset: case Op::kHincrby: case Op::kLpush: case Op::kRpush:
    case Op::kLset: case Op::kSadd: case Op::kSetrange: case Op::kAppend: case Op::kIncrbyfloat: case Op::kSetbit:
    case Op::kHincrbyfloat: case Op::kLinsert: case Op::kLpushx: case Op::kRpushx: case Op::kZadd: case Op::kZincrby:
      return true;
    default:
      return false;
  }
}
}  // namespace

Reply shard_typed(Shard& s, Op op, std::vector<std::string> args) noexcept {
  if (notifying()) [[unlikely]] return shard_typed_events(s, op, std::move(args));  // notify.cpp
  return shard_typed_plain(s, op, std::move(args));
}

Reply shard_typed_plain(Shard& s, Op op, std::vector<std::string> args) noexcept {
  try {
    if (args.empty()) return error("ERR internal: no key");
    if (g_evicting.load(std::memory_order_relaxed) && grows(op)) {  // --maxmemory: room for what it may add
      std::size_t bytes = 96;
      for (const auto& a : args) bytes += a.size() + 48;
      evict_for(s, bytes);
    }
    if (op >= Op::kZadd) {
      const std::string key = args[0];
      Reply r = shard_zset(s, op, std::move(args));
      if ((op == Op::kZadd || op == Op::kZincrby) && r.kind != Reply::kError) signal_ready(s, key);  // BZPOPMIN... (blocking.cpp)
      return r;
    }
    if (op >= Op::kGetdel) return shard_strops(s, op, std::move(args));
    const std::string key = args[0];
    std::vector<std::string> a(std::make_move_iterator(args.begin() + 1), std::make_move_iterator(args.end()));
    if (op <= Op::kHscan) return hashes(s, op, key, a);
    if (op <= Op::kLtrim) {
      Reply r = lists(s, op, key, a);
      if ((op == Op::kLpush || op == Op::kRpush) && r.kind == Reply::kInt) signal_ready(s, key);  // blocking.cpp
      return r;
    }
    return sets(s, op, key, a);
  } catch (...) {
    return error("ERR out of memory");
  }
}

Value shard_type(Shard& s, std::string key) noexcept {
  static const char* const kNames[] = {"hash", "list", "set", "zset"};
  Value v{Value::kString, "none"};
  expire_if_due(s, key);
  if (s.map.count(key)) v.data = "string";
  else if (auto it = s.objs.find(key); it != s.objs.end()) v.data = kNames[it->second.index()];
  return v;
}

}  // namespace hydra
