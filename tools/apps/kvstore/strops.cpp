// The shard side of the string commands beyond GET/SET (GETDEL, GETEX,
// GETRANGE, SETRANGE, APPEND, STRLEN, INCRBYFLOAT, SETBIT, GETBIT, BITCOUNT)
// and of the newer hash, list and set commands (HSTRLEN, HINCRBYFLOAT,
// HRANDFIELD, LINSERT, LPOS, LPUSHX, RPUSHX, SPOP, SRANDMEMBER, SMISMEMBER):
// Redis 7.0's argument checks, in its order, and its error texts. Called by
// shard_typed (objects.cpp) on the key's trustee; may throw (shard_typed
// catches).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <random>

#include "server.hpp"
#include "types.hpp"

namespace hydra {

namespace {

Reply of_kind(std::uint8_t kind, std::int64_t n = 0, std::string s = {}) { return Reply{kind, n, std::move(s), {}, {}}; }
Reply error(std::string text) { return of_kind(Reply::kError, 0, std::move(text)); }
Reply integer(std::int64_t n) { return of_kind(Reply::kInt, n); }
Reply bulk(std::string s) { return of_kind(Reply::kBulk, 0, std::move(s)); }

constexpr const char* kNotFloat = "ERR value is not a valid float";
constexpr const char* kTooBig = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
constexpr const char* kBitOffset = "ERR bit offset is not an integer or out of range";
// SRANDMEMBER / HRANDFIELD with a negative count answer that many elements,
// repeats allowed: Redis streams them; Hydra builds the reply first, so it
// refuses more than this many instead of exhausting its memory.
constexpr long long kMaxRepeats = 1 << 24;
constexpr const char* kTooManyRepeats = "ERR count is out of range for hydra: at most 16777216 elements with repeats";

std::mt19937_64& rng() {
  thread_local std::mt19937_64 g{std::random_device{}()};
  return g;
}

// Redis's string2ld: the whole string a long double, no leading space, not NaN.
bool parse_ld(const std::string& s, long double& v) {
  if (s.empty() || s.size() >= 5 * 1024 || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtold(s.c_str(), &end);
  if (end != s.c_str() + s.size() || std::isnan(v)) return false;  // a NUL inside is not the end
  if (errno == ERANGE && (v == HUGE_VALL || v == -HUGE_VALL || std::fpclassify(v) == FP_ZERO)) return false;
  return true;
}

// Redis's ld2string(LD_STR_HUMAN): 17 decimals, trailing zeros dropped.
std::string format_ld(long double v) {
  char buf[5 * 1024];
  int l = std::snprintf(buf, sizeof buf, "%.17Lf", v);
  if (l <= 0 || std::size_t(l) >= sizeof buf) return "0";
  std::string out(buf, std::size_t(l));
  if (out.find('.') != std::string::npos) {
    while (out.back() == '0') out.pop_back();
    if (out.back() == '.') out.pop_back();
  }
  if (out == "-0") out = "0";
  return out;
}

// The string at `key` (lazy expiry first): null if missing; `wrong` if
// the key holds another type.
Entry* find_str(Shard& s, const std::string& key, bool& wrong) {
  auto it = live(s, key);
  wrong = false;
  if (it != s.map.end()) return &it->second;
  wrong = is_object(s, key);
  return nullptr;
}

void delete_key(Shard& s, const std::string& key) {
  forget_ttl(s, key);
  if (s.map.erase(key) == 0) s.objs.erase(key);
  touch(s, key);
}

// GETRANGE's and BITCOUNT's range over `len` units: false if empty.
bool clamp(long long start, long long end, long long len, long long& from, long long& to) {
  if (start < 0 && end < 0 && start > end) return false;
  if (start < 0) start += len;
  if (end < 0) end += len;
  if (start < 0) start = 0;
  if (end < 0) end = 0;
  if (end >= len) end = len - 1;
  if (start > end || len == 0) return false;
  from = start;
  to = end;
  return true;
}

Reply getex(Shard& s, const std::string& key, const std::vector<std::string>& a) {
  enum { kNone, kEx, kPx, kExat, kPxat, kPersist } unit = kNone;
  std::string when;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::string o = resp::lower(a[i]);
    const bool next = i + 1 < a.size();
    if (o == "persist" && unit == kNone) unit = kPersist;
    else if (o == "ex" && next && (unit == kNone || unit == kEx)) unit = kEx, when = a[++i];
    else if (o == "px" && next && (unit == kNone || unit == kPx)) unit = kPx, when = a[++i];
    else if (o == "exat" && next && (unit == kNone || unit == kExat)) unit = kExat, when = a[++i];
    else if (o == "pxat" && next && (unit == kNone || unit == kPxat)) unit = kPxat, when = a[++i];
    else return error("ERR syntax error");
  }
  std::int64_t at = 0;
  if (unit != kNone && unit != kPersist) {  // Redis 7.0's getExpireMillisecondsOrReply
    long long v;
    if (!resp::parse_int64(when, v)) return error(kNotInteger);
    const bool seconds = unit == kEx || unit == kExat;
    if (v <= 0 || (seconds && v > LLONG_MAX / 1000)) return error("ERR invalid expire time in 'getex' command");
    if (seconds) v *= 1000;
    if (unit == kEx || unit == kPx) {
      const std::int64_t now = now_ms();
      if (v > LLONG_MAX - now) return error("ERR invalid expire time in 'getex' command");
      v += now;
    }
    at = v;
  }
  bool wrong;
  std::string* v = find_str(s, key, wrong);
  if (wrong) return error(kWrongType);
  if (!v) return of_kind(Reply::kNil);
  Reply r = bulk(*v);
  if (unit == kPersist) {
    if (!s.expires.empty() && s.expires.erase(key)) touch(s, key);
  } else if (unit != kNone) {
    if (at <= now_ms()) delete_key(s, key);
    else s.expires.insert_or_assign(key, at), touch(s, key);
  }
  return r;
}

Reply strings(Shard& s, Op op, const std::string& key, std::vector<std::string>& a) {
  bool wrong;
  switch (op) {
    case Op::kGetdel: {
      std::string* v = find_str(s, key, wrong);
      if (wrong) return error(kWrongType);
      if (!v) return of_kind(Reply::kNil);
      Reply r = bulk(std::move(*v));
      delete_key(s, key);
      return r;
    }
    case Op::kGetex: return getex(s, key, a);
    case Op::kGetrange: {
      long long start, end, from, to;
      if (!resp::parse_int64(a[0], start) || !resp::parse_int64(a[1], end)) return error(kNotInteger);
      std::string* v = find_str(s, key, wrong);
      if (wrong) return error(kWrongType);
      if (!v || !clamp(start, end, (long long)v->size(), from, to)) return bulk("");
      return bulk(v->substr(std::size_t(from), std::size_t(to - from + 1)));
    }
    case Op::kSetrange: case Op::kAppend: {
      long long offset = 0;
      if (op == Op::kSetrange) {
        if (!resp::parse_int64(a[0], offset)) return error(kNotInteger);
        if (offset < 0) return error("ERR offset is out of range");
      }
      const std::string& add = a.back();
      Entry* v = find_str(s, key, wrong);
      if (wrong) return error(kWrongType);
      const std::size_t old = v ? v->size() : 0;
      if (op == Op::kAppend) offset = (long long)old;
      if (add.empty() && op == Op::kSetrange) return integer((long long)old);  // nothing written, nothing created
      if (std::size_t(offset) + add.size() > g_config.limits.max_bulk) return error(kTooBig);
      if (!v) v = &s.map.emplace(key, std::string()).first->second;
      if (v->size() < std::size_t(offset) + add.size()) v->resize(std::size_t(offset) + add.size(), '\0');
      v->replace(std::size_t(offset), add.size(), add);
      v->raw = true;
      touch(s, key);
      return integer((long long)v->size());
    }
    case Op::kStrlen: {
      std::string* v = find_str(s, key, wrong);
      if (wrong) return error(kWrongType);
      return integer(v ? (long long)v->size() : 0);
    }
    case Op::kIncrbyfloat: {
      long double by, old = 0;
      std::string* v = find_str(s, key, wrong);
      if (wrong) return error(kWrongType);
      if ((v && !parse_ld(*v, old)) || !parse_ld(a[0], by)) return error(kNotFloat);
      const long double sum = old + by;
      if (std::isnan(sum) || std::isinf(sum)) return error("ERR increment would produce NaN or Infinity");
      std::string text = format_ld(sum);
      if (!v) v = &s.map.emplace(key, std::string()).first->second;
      *v = text;
      touch(s, key);
      return bulk(std::move(text));
    }
    case Op::kSetbit: case Op::kGetbit: {
      long long offset, bit = 0;
      if (!resp::parse_int64(a[0], offset) || offset < 0 || std::size_t(offset >> 3) >= g_config.limits.max_bulk)
        return error(kBitOffset);
      if (op == Op::kSetbit && (!resp::parse_int64(a[1], bit) || (bit != 0 && bit != 1)))
        return error("ERR bit is not an integer or out of range");
      Entry* v = find_str(s, key, wrong);
      if (wrong) return error(kWrongType);
      const std::size_t byte = std::size_t(offset >> 3);
      const unsigned mask = 1u << (7 - (offset & 7));
      const int old = v && byte < v->size() && (static_cast<unsigned char>((*v)[byte]) & mask) ? 1 : 0;
      if (op == Op::kGetbit) return integer(old);
      // Redis 7.0's setbitCommand: a key made or grown, or a bit changed,
      // is a write (WATCH, the setbit event); the same bit again is not.
      const bool dirty = !v || v->size() <= byte || old != bit;
      if (!v) v = &s.map.emplace(key, std::string()).first->second;
      if (v->size() <= byte) v->resize(byte + 1, '\0');
      auto& c = reinterpret_cast<unsigned char&>((*v)[byte]);
      c = bit ? (c | mask) : (c & ~mask);
      v->raw = true;  // Redis unshares the value (dbUnshareStringValue) before it looks at the bit
      if (dirty) touch(s, key);
      return integer(old);
    }
    case Op::kBitcount: {
      std::string* v = find_str(s, key, wrong);
      if (wrong) return error(kWrongType);
      if (!v) return integer(0);  // Redis 7.0 looks the key up before its arguments
      long long start = 0, end = -1, from, to;
      bool bits = false;
      if (a.size() == 2 || a.size() == 3) {
        if (!resp::parse_int64(a[0], start) || !resp::parse_int64(a[1], end)) return error(kNotInteger);
        if (a.size() == 3) {
          const std::string unit = resp::lower(a[2]);
          if (unit == "bit") bits = true;
          else if (unit != "byte") return error("ERR syntax error");
        }
      } else if (!a.empty()) {
        return error("ERR syntax error");
      }
      const long long len = (long long)v->size() * (bits ? 8 : 1);
      if (!clamp(start, end, len, from, to)) return integer(0);
      long long n = 0;
      if (!bits) {
        for (long long i = from; i <= to; ++i) n += std::popcount(static_cast<unsigned char>((*v)[std::size_t(i)]));
      } else {
        for (long long i = from; i <= to; ++i) n += (static_cast<unsigned char>((*v)[std::size_t(i >> 3)]) >> (7 - (i & 7))) & 1;
      }
      return integer(n);
    }
    default: return error("ERR internal: not a string command");
  }
}

// count distinct (count >= 0) or |count| with repeats (count < 0) random
// elements of `c`, as SRANDMEMBER / HRANDFIELD / SPOP pick them.
template <class C>
std::vector<typename C::const_iterator> pick(const C& c, long long count) {
  std::vector<typename C::const_iterator> all;
  all.reserve(c.size());
  for (auto it = c.begin(); it != c.end(); ++it) all.push_back(it);
  std::vector<typename C::const_iterator> out;
  if (all.empty()) return out;
  if (count < 0) {
    std::uniform_int_distribution<std::size_t> d(0, all.size() - 1);
    for (long long i = 0; i < -count; ++i) out.push_back(all[d(rng())]);
    return out;
  }
  const std::size_t n = std::min<std::size_t>(std::size_t(count), all.size());
  for (std::size_t i = 0; i < n; ++i) std::swap(all[i], all[std::uniform_int_distribution<std::size_t>(i, all.size() - 1)(rng())]);
  all.resize(n);
  return all;
}

// HRANDFIELD's fields: as pick, but a positive count of at least the
// hash's size answers the whole hash in its order, and at most a third of a
// listpack's fields keep the listpack's order (Redis 7.0's
// hrandfieldWithCountCommand: CASE 2, and CASE 4's lpRandomPairsUnique;
// CASE 3, more than a third, answers in its scratch dict's order).
std::vector<Hash::const_iterator> pick_fields(const Hash& h, long long count) {
  if (count >= 0 && std::size_t(count) >= h.size()) {  // the whole hash, in its order
    std::vector<Hash::const_iterator> all;
    all.reserve(h.size());
    for (auto it = h.begin(); it != h.end(); ++it) all.push_back(it);
    return all;
  }
  std::vector<Hash::const_iterator> out = pick(h, count);
  // A listpack's pairs are one array: its order is their addresses'.
  if (count >= 0 && h.listpack() && std::size_t(count) * 3 <= h.size())
    std::sort(out.begin(), out.end(), [](Hash::const_iterator a, Hash::const_iterator b) { return &(*a).first < &(*b).first; });
  return out;
}

Reply collections(Shard& s, Op op, const std::string& key, std::vector<std::string>& a) {
  bool wrong;
  switch (op) {
    case Op::kHstrlen: {
      const Hash* h = find_obj<Hash>(s, key, wrong);
      if (wrong) return error(kWrongType);
      const std::string* v = h ? h->find(a[0]) : nullptr;
      return integer(v ? (long long)v->size() : 0);
    }
    case Op::kHincrbyfloat: {
      long double by, old = 0;
      if (!parse_ld(a[1], by)) return error(kNotFloat);
      // Redis 7.0 refuses an infinite increment before it looks at the key.
      if (std::isnan(by) || std::isinf(by)) return error("ERR value is NaN or Infinity");
      Hash* h = make_obj<Hash>(s, key, wrong);
      if (wrong) return error(kWrongType);
      const std::string* was = h->find(a[0]);
      if (was && !parse_ld(*was, old)) return error("ERR hash value is not a float");
      const long double sum = old + by;
      if (std::isnan(sum) || std::isinf(sum)) {
        drop_if_empty(s, key, *h);
        return error("ERR increment would produce NaN or Infinity");
      }
      std::string text = format_ld(sum);
      h->set(std::move(a[0]), text, hash_limits());
      touch(s, key);
      return bulk(std::move(text));
    }
    case Op::kHrandfield: {
      long long count = 1;
      bool values = false;
      if (!a.empty()) {
        if (!resp::parse_int64(a[0], count)) return error(kNotInteger);
        if (a.size() > 2 || (a.size() == 2 && resp::lower(a[1]) != "withvalues")) return error("ERR syntax error");
        values = a.size() == 2;
        if ((values && count < -LLONG_MAX / 2) || count < -LLONG_MAX) return error("ERR value is out of range");
        if (count < -kMaxRepeats) return error(kTooManyRepeats);
      }
      const Hash* h = find_obj<Hash>(s, key, wrong);
      if (wrong) return error(kWrongType);
      if (!h) return of_kind(a.empty() ? Reply::kNil : Reply::kArray);
      Reply r = of_kind(values ? Reply::kPairs : Reply::kArray);
      for (auto it : pick_fields(*h, count)) {
        r.items.push_back((*it).first);
        if (values) r.items.push_back((*it).second);
      }
      if (a.empty()) return bulk(r.items.at(0));
      return r;
    }
    case Op::kLinsert: {
      const std::string where = resp::lower(a[0]);
      if (where != "before" && where != "after") return error("ERR syntax error");
      List* l = find_obj<List>(s, key, wrong);
      if (wrong) return error(kWrongType);
      if (!l) return integer(0);
      auto it = std::find(l->begin(), l->end(), a[1]);
      if (it == l->end()) return integer(-1);
      if (where == "after") ++it;
      l->insert(it, a[2]);
      touch(s, key);
      return integer((long long)l->size());
    }
    case Op::kLpushx: case Op::kRpushx: {
      List* l = find_obj<List>(s, key, wrong);
      if (wrong) return error(kWrongType);
      if (!l) return integer(0);
      for (auto& e : a) {
        if (op == Op::kLpushx) l->push_front(std::move(e));
        else l->push_back(std::move(e));
      }
      touch(s, key);
      return integer((long long)l->size());
    }
    case Op::kLpos: {
      long long rank = 1, count = -1, maxlen = 0;  // count -1: not given
      for (std::size_t i = 1; i < a.size(); i += 2) {
        const std::string o = resp::lower(a[i]);
        if (i + 1 >= a.size()) return error("ERR syntax error");
        long long v;
        if ((o == "rank" || o == "count" || o == "maxlen") && !resp::parse_int64(a[i + 1], v)) return error(kNotInteger);
        if (o == "rank") {
          if (v == 0)
            return error("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... "
                         "or use negative to start from the end of the list");
          if (v == LLONG_MIN) return error("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807");
          rank = v;
        } else if (o == "count") {
          if (v < 0) return error("ERR COUNT can't be negative");
          count = v;
        } else if (o == "maxlen") {
          if (v < 0) return error("ERR MAXLEN can't be negative");
          maxlen = v;
        } else {
          return error("ERR syntax error");
        }
      }
      const List* l = find_obj<List>(s, key, wrong);
      if (wrong) return error(kWrongType);
      Reply r = of_kind(Reply::kInts);
      const long long len = l ? (long long)l->size() : 0;
      long long skip = (rank < 0 ? -rank : rank) - 1;
      for (long long i = 0; i < len && (maxlen == 0 || i < maxlen); ++i) {
        const long long idx = rank > 0 ? i : len - 1 - i;
        if ((*l)[std::size_t(idx)] != a[0]) continue;
        if (skip > 0) {
          --skip;
          continue;
        }
        r.items.push_back(std::to_string(idx));
        if (count < 0 || (count > 0 && (long long)r.items.size() >= count)) break;  // COUNT 0: every match
      }
      if (count >= 0) return r;
      if (r.items.empty()) return of_kind(Reply::kNil);
      return integer(std::stoll(r.items[0]));
    }
    case Op::kSpop: case Op::kSrandmember: {
      long long count = 1;
      const bool with_count = !a.empty();
      if (a.size() > 1) return error("ERR syntax error");
      if (with_count) {
        if (!resp::parse_int64(a[0], count)) return error(kNotInteger);
        if (op == Op::kSpop && count < 0) return error("ERR value is out of range, must be positive");
        if (count == LLONG_MIN) return error("ERR value is out of range");
        if (count < -kMaxRepeats) return error(kTooManyRepeats);
      }
      Set* st = find_obj<Set>(s, key, wrong);
      if (wrong) return error(kWrongType);
      if (!st) return of_kind(with_count ? (op == Op::kSpop ? Reply::kSet : Reply::kArray) : Reply::kNil);
      Reply r = of_kind(op == Op::kSpop ? Reply::kSet : Reply::kArray);
      for (auto it : pick(*st, count)) r.items.push_back(*it);
      if (op == Op::kSpop && !r.items.empty()) {
        for (const auto& m : r.items) st->erase(m);
        touch(s, key);
        drop_if_empty(s, key, *st);
      }
      if (!with_count) return r.items.empty() ? of_kind(Reply::kNil) : bulk(r.items[0]);
      return r;
    }
    case Op::kSmismember: {
      const Set* st = find_obj<Set>(s, key, wrong);
      if (wrong) return error(kWrongType);
      Reply r = of_kind(Reply::kInts);
      for (const auto& m : a) r.items.push_back(st && st->count(m) ? "1" : "0");
      return r;
    }
    default: return error("ERR internal: not a collection command");
  }
}

}  // namespace

Reply shard_strops(Shard& s, Op op, std::vector<std::string> args) {
  const std::string key = args[0];
  std::vector<std::string> a(std::make_move_iterator(args.begin() + 1), std::make_move_iterator(args.end()));
  if (op <= Op::kBitcount) return strings(s, op, key, a);
  return collections(s, op, key, a);
}

}  // namespace hydra
