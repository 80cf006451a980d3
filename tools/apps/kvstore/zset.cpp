// The shard side of sorted sets (zset.hpp): the single-key commands, with
// Redis 7.0's argument rules, error texts and reply shapes (t_zset.c). As
// there, a command parses its ranges before it looks the key up, and a
// sorted set left empty is deleted with its TTL.
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "resp.hpp"
#include "types.hpp"

namespace hydra {

std::string format_score(double d) {
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return "0";  // -0 too: Redis's listpack keeps it as the integer 0
  char buf[64];
  const int n = std::snprintf(buf, sizeof buf, "%.17g", d);
  return std::string(buf, std::size_t(n));
}

// Redis's getDoubleFromObject (zset.hpp).
bool parse_score(const std::string& t, double& d) {
  if (t.empty() || t.size() > 5120 || std::isspace(static_cast<unsigned char>(t[0]))) return false;
  char* end = nullptr;
  errno = 0;
  d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || std::isnan(d)) return false;
  return !(errno == ERANGE && (d == HUGE_VAL || d == -HUGE_VAL || d == 0));
}

namespace {

std::mt19937_64& tl_rng() {
  thread_local std::mt19937_64 g{std::random_device{}()};
  return g;
}

constexpr const char* kNotInt = "ERR value is not an integer or out of range";
constexpr const char* kNotFloat = "ERR value is not a valid float";
constexpr const char* kSyntax = "ERR syntax error";

Reply of_kind(std::uint8_t kind, std::int64_t n = 0, std::string s = {}) { return Reply{kind, n, std::move(s), {}, {}}; }
Reply error(std::string text) { return of_kind(Reply::kError, 0, std::move(text)); }
Reply integer(std::int64_t n) { return of_kind(Reply::kInt, n); }

// ZRANGEBYSCORE's bounds: "(x" exclusive, else inclusive (zslParseRange).
struct ScoreRange {
  double min = 0, max = 0;
  bool minex = false, maxex = false;
  bool gte_min(double v) const { return minex ? v > min : v >= min; }
  bool lte_max(double v) const { return maxex ? v < max : v <= max; }
};
bool parse_bound(const std::string& t, double& v, bool& ex) {
  ex = !t.empty() && t[0] == '(';
  const char* p = t.c_str() + (ex ? 1 : 0);
  char* end = nullptr;
  v = std::strtod(p, &end);
  return *end == '\0' && !std::isnan(v);
}
bool parse_score_range(const std::string& lo, const std::string& hi, ScoreRange& r) {
  return parse_bound(lo, r.min, r.minex) && parse_bound(hi, r.max, r.maxex);
}

// ZRANGEBYLEX's bounds: "[x" inclusive, "(x" exclusive, "-" and "+" the ends.
struct LexBound {
  enum : std::uint8_t { kMin, kMax, kIn, kEx } kind = kMin;
  std::string s;
};
bool parse_lex(const std::string& t, LexBound& b) {
  if (t == "-") return b.kind = LexBound::kMin, true;
  if (t == "+") return b.kind = LexBound::kMax, true;
  if (t.empty() || (t[0] != '[' && t[0] != '(')) return false;
  b.kind = t[0] == '[' ? LexBound::kIn : LexBound::kEx;
  b.s = t.substr(1);
  return true;
}
// A range request of any kind: the elements' ranks [from, to] in ascending
// order, found from the tree (O(log n) to locate, then the elements).
struct Query {
  enum By : std::uint8_t { kRank, kScore, kLex } by = kRank;
  bool rev = false, withscores = false, limited = false;
  long long start = 0, stop = 0, offset = 0, count = -1;
  ScoreRange score;
  LexBound lo, hi;  // ascending: lo <= member <= hi
};

// Ranks [first, last) of a score or lex range, ascending: two
// order-statistics lookups. A lex range assumes, as Redis does, that every
// element has the same score (the first's).
std::pair<std::size_t, std::size_t> bounds(const ZSet& z, const Query& q) {
  const std::size_t n = z.size();
  if (n == 0) return {0, 0};
  std::size_t first = 0, last = n;
  if (q.by == Query::kScore) {
    // (+inf: nothing is above +inf, and nextafter(+inf) is +inf itself
    if (q.score.minex && q.score.min == INFINITY) return {n, n};
    const double lo = q.score.minex ? std::nextafter(q.score.min, INFINITY) : q.score.min;
    first = z.tree.order_of_key({lo, std::string_view()});
    if (!(q.score.max == INFINITY && !q.score.maxex)) {
      const double hi = q.score.maxex ? q.score.max : std::nextafter(q.score.max, INFINITY);
      last = z.tree.order_of_key({hi, std::string_view()});
    }
  } else {
    const double s0 = z.tree.begin()->first;
    auto rank_of = [&](const LexBound& b, bool upper) -> std::size_t {
      switch (b.kind) {
        case LexBound::kMin: return 0;
        case LexBound::kMax: return n;
        default: {
          // the first member after the bound: the bound itself followed by NUL
          const bool after = (b.kind == LexBound::kEx) != upper;
          const std::string key = after ? b.s + '\0' : b.s;
          return z.tree.order_of_key({s0, key});
        }
      }
    };
    first = rank_of(q.lo, false);
    last = rank_of(q.hi, true);
  }
  return {first, std::max(first, last)};
}

// Ranks [first, last) the query selects (ascending positions), in the
// order the reply lists them (`rev`: from last-1 down).
void select(const ZSet& z, const Query& q, std::size_t& first, std::size_t& last) {
  const long long n = static_cast<long long>(z.size());
  if (q.by == Query::kRank) {
    long long start = q.start, stop = q.stop;
    if (start < 0) start += n;
    if (stop < 0) stop += n;
    if (start < 0) start = 0;
    if (start > stop || start >= n) return void(first = last = 0);
    if (stop >= n) stop = n - 1;
    // REV: ranks count from the highest score
    first = std::size_t(q.rev ? n - 1 - stop : start);
    last = std::size_t(q.rev ? n - start : stop + 1);
    return;
  }
  std::tie(first, last) = bounds(z, q);
  if (!q.limited) return;
  const std::size_t len = last - first;
  if (q.offset < 0 || std::size_t(q.offset) >= len) return void(first = last = 0);
  const std::size_t take = q.count < 0 ? len - std::size_t(q.offset) : std::min<std::size_t>(std::size_t(q.count), len - std::size_t(q.offset));
  if (q.rev) last -= std::size_t(q.offset), first = last - take;
  else first += std::size_t(q.offset), last = first + take;
}

// The elements of ranks [first, last), ascending or not.
template <class F>
void each(const ZSet& z, std::size_t first, std::size_t last, bool rev, F f) {
  if (first >= last) return;
  if (!rev) {
    auto it = z.tree.find_by_order(first);
    for (std::size_t i = first; i < last; ++i, ++it) f(*it);
  } else {
    auto it = z.tree.find_by_order(last - 1);
    for (std::size_t i = last; i > first; --i, --it) f(*it);
  }
}

// ZRANGE key min max [BYSCORE|BYLEX] [REV] [LIMIT o c] [WITHSCORES] and the
// older forms: Redis 7.0's zrangeGenericCommand checks. `a` after the key.
bool parse_query(Op op, const std::vector<std::string>& a, Query& q, std::string& err) {
  const bool zrange = op == Op::kZrange || op == Op::kZrangeRead;
  if (op == Op::kZrevrange || op == Op::kZrevrangebyscore || op == Op::kZrevrangebylex) q.rev = true;
  if (op == Op::kZrangebyscore || op == Op::kZrevrangebyscore) q.by = Query::kScore;
  if (op == Op::kZrangebylex || op == Op::kZrevrangebylex) q.by = Query::kLex;
  for (std::size_t i = 2; i < a.size(); ++i) {
    const std::string o = resp::lower(a[i]);
    if (o == "withscores") q.withscores = true;
    else if (o == "limit" && i + 2 < a.size()) {
      if (!resp::parse_int64(a[i + 1], q.offset) || !resp::parse_int64(a[i + 2], q.count)) return err = kNotInt, false;
      q.limited = true;
      i += 2;
    } else if (zrange && o == "byscore" && q.by == Query::kRank) q.by = Query::kScore;
    else if (zrange && o == "bylex" && q.by == Query::kRank) q.by = Query::kLex;
    else if (zrange && o == "rev" && !q.rev) q.rev = true;
    else return err = kSyntax, false;
  }
  if (op == Op::kZrangeRead) q.withscores = true;
  if (q.limited && q.by == Query::kRank) return err = "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX", false;
  if (q.withscores && q.by == Query::kLex && op != Op::kZrangeRead) return err = "ERR syntax error, WITHSCORES not supported in combination with BYLEX", false;
  // REV takes max before min (ZREVRANGEBYSCORE's order too)
  const std::string& lo = q.rev && q.by != Query::kRank ? a[1] : a[0];
  const std::string& hi = q.rev && q.by != Query::kRank ? a[0] : a[1];
  if (q.by == Query::kRank) {
    if (!resp::parse_int64(a[0], q.start) || !resp::parse_int64(a[1], q.stop)) return err = kNotInt, false;
  } else if (q.by == Query::kScore) {
    if (!parse_score_range(lo, hi, q.score)) return err = "ERR min or max is not a float", false;
  } else if (!parse_lex(lo, q.lo) || !parse_lex(hi, q.hi)) {
    return err = "ERR min or max not valid string range item", false;
  }
  return true;
}

Reply zadd(Shard& s, const std::string& key, std::vector<std::string>& a, bool zincrby) {
  bool nx = false, xx = false, gt = false, lt = false, ch = false, incr = zincrby;
  std::size_t i = 0;
  for (; !zincrby && i < a.size(); ++i) {
    const std::string o = resp::lower(a[i]);
    if (o == "nx") nx = true;
    else if (o == "xx") xx = true;
    else if (o == "gt") gt = true;
    else if (o == "lt") lt = true;
    else if (o == "ch") ch = true;
    else if (o == "incr") incr = true;
    else break;
  }
  const std::size_t elements = a.size() - i;
  if (elements == 0 || elements % 2) return error(kSyntax);
  if (nx && xx) return error("ERR XX and NX options at the same time are not compatible");
  if ((gt && nx) || (lt && nx) || (gt && lt)) return error("ERR GT, LT, and/or NX options at the same time are not compatible");
  if (incr && elements > 2) return error("ERR INCR option supports a single increment-element pair");
  std::vector<double> scores;
  for (std::size_t j = i; j < a.size(); j += 2) {
    double d;
    if (!parse_score(a[j], d)) return error(kNotFloat);
    scores.push_back(d);
  }
  bool wrong;
  ZSet* z = find_obj<ZSet>(s, key, wrong);
  if (wrong) return error(kWrongType);
  Reply nil = of_kind(Reply::kNil);
  if (!z && xx) return incr ? nil : integer(0);
  if (!z) z = make_obj<ZSet>(s, key, wrong);
  std::int64_t added = 0, updated = 0;
  double last = 0;
  bool nop = false;
  for (std::size_t j = 0; j < scores.size(); ++j) {
    const std::string& m = a[i + 2 * j + 1];
    double score = scores[j];
    auto it = z->dict.find(m);
    nop = false;
    if (it != z->dict.end()) {
      if (nx) { nop = true; continue; }
      const double cur = it->second;
      if (incr) {
        score += cur;
        if (std::isnan(score)) {
          drop_if_empty(s, key, *z);
          return error("ERR resulting score is not a number (NaN)");
        }
      }
      if ((gt && score <= cur) || (lt && score >= cur)) { nop = true; last = cur; continue; }
      if (score != cur) z->set(m, score), ++updated;
    } else {
      if (xx) { nop = true; continue; }
      z->set(m, score);
      ++added;
    }
    last = score;
  }
  if (added || updated) touch(s, key);
  drop_if_empty(s, key, *z);
  if (incr) return nop ? nil : of_kind(Reply::kDouble, 0, format_score(last));
  return integer(ch ? added + updated : added);
}

Reply pop(Shard& s, const std::string& key, std::vector<std::string>& a, bool max) {
  long long count = -1;
  if (a.size() > 1) return error(kSyntax);
  if (a.size() == 1 && (!resp::parse_int64(a[0], count) || count < 0))
    return error("ERR value is out of range, must be positive");
  bool wrong;
  ZSet* z = find_obj<ZSet>(s, key, wrong);
  if (wrong) return error(kWrongType);
  Reply r = of_kind(a.empty() ? Reply::kScoredFlat : Reply::kScored);
  if (!z) return r;
  for (long long n = count < 0 ? 1 : count; n > 0 && !z->empty(); --n) {
    auto it = max ? std::prev(z->tree.end()) : z->tree.begin();
    std::string m(it->second);
    r.items.push_back(m);
    r.items.push_back(format_score(it->first));
    z->erase(m);
  }
  if (!r.items.empty()) touch(s, key);
  drop_if_empty(s, key, *z);
  return r;
}

Reply randmember(const ZSet* z, std::vector<std::string>& a) {
  if (a.empty()) {
    if (!z) return of_kind(Reply::kNil);
    return of_kind(Reply::kBulk, 0, std::string(z->tree.find_by_order(std::uniform_int_distribution<std::size_t>(0, z->size() - 1)(tl_rng()))->second));
  }
  long long count;
  if (!resp::parse_int64(a[0], count) || count == LLONG_MIN) return error(kNotInt);
  bool withscores = false;
  if (a.size() > 2 || (a.size() == 2 && resp::lower(a[1]) != "withscores")) return error(kSyntax);
  if (a.size() == 2) withscores = true;
  if (withscores && (count < -LLONG_MAX / 2 || count > LLONG_MAX / 2)) return error("ERR value is out of range");
  Reply r = of_kind(withscores ? Reply::kScored : Reply::kArray);
  if (!z || count == 0) return r;
  auto add = [&](const ZEntry& e) {
    r.items.emplace_back(e.second);
    if (withscores) r.items.push_back(format_score(e.first));
  };
  std::uniform_int_distribution<std::size_t> pick(0, z->size() - 1);
  if (count < 0) {
    if (-count > (1LL << 24)) return error("ERR count is too large for hydra (at most 16777216 repeated elements)");
    for (long long n = -count; n > 0; --n) add(*z->tree.find_by_order(pick(tl_rng())));
  } else if (std::size_t(count) >= z->size()) {
    for (const auto& e : z->tree) add(e);
  } else {
    std::vector<std::size_t> ranks(z->size());
    for (std::size_t i = 0; i < ranks.size(); ++i) ranks[i] = i;
    for (std::size_t i = 0; i < std::size_t(count); ++i) {
      std::swap(ranks[i], ranks[std::uniform_int_distribution<std::size_t>(i, ranks.size() - 1)(tl_rng())]);
      add(*z->tree.find_by_order(ranks[i]));
    }
  }
  return r;
}

}  // namespace

Reply shard_zset(Shard& s, Op op, std::vector<std::string> args) {
  const std::string key = args[0];
  std::vector<std::string> a(std::make_move_iterator(args.begin() + 1), std::make_move_iterator(args.end()));
  if (op == Op::kZadd || op == Op::kZincrby) {
    return zadd(s, key, a, op == Op::kZincrby);
  }
  // Ranges parse before the lookup, as Redis's.
  Query q;
  std::string err, pattern;
  switch (op) {
    case Op::kZrange: case Op::kZrevrange: case Op::kZrangebyscore: case Op::kZrevrangebyscore:
    case Op::kZrangebylex: case Op::kZrevrangebylex: case Op::kZrangeRead:
      if (!parse_query(op, a, q, err)) return error(err);
      break;
    case Op::kZcount: case Op::kZremrangebyscore:
      q.by = Query::kScore;
      if (!parse_score_range(a[0], a[1], q.score)) return error("ERR min or max is not a float");
      break;
    case Op::kZlexcount: case Op::kZremrangebylex:
      q.by = Query::kLex;
      if (!parse_lex(a[0], q.lo) || !parse_lex(a[1], q.hi)) return error("ERR min or max not valid string range item");
      break;
    case Op::kZremrangebyrank:
      if (!resp::parse_int64(a[0], q.start) || !resp::parse_int64(a[1], q.stop)) return error(kNotInt);
      break;
    case Op::kZscan:
      if (!scan_args(a, pattern, err)) return error(err);
      break;
    default: break;
  }
  if (op == Op::kZpopmin || op == Op::kZpopmax) return pop(s, key, a, op == Op::kZpopmax);
  bool wrong;
  ZSet* z = find_obj<ZSet>(s, key, wrong);
  if (wrong) return error(kWrongType);
  static const ZSet kEmpty;
  const ZSet& view = z ? *z : kEmpty;
  std::size_t first = 0, last = 0;
  switch (op) {
    case Op::kZrem: {
      std::int64_t n = 0;
      if (z) {
        for (const auto& m : a) n += z->erase(m);
        if (n) touch(s, key);
        drop_if_empty(s, key, *z);
      }
      return integer(n);
    }
    case Op::kZcard: return integer(std::int64_t(view.size()));
    case Op::kZscore: case Op::kZmscore: {
      Reply r = of_kind(op == Op::kZscore ? Reply::kDouble : Reply::kDoubles);
      for (const auto& m : a) {
        auto it = view.dict.find(m);
        r.items.push_back(it == view.dict.end() ? std::string() : format_score(it->second));
        r.nil.push_back(it == view.dict.end());
      }
      if (op == Op::kZmscore) return r;
      return r.nil[0] ? of_kind(Reply::kNil) : of_kind(Reply::kDouble, 0, r.items[0]);
    }
    case Op::kZrank: case Op::kZrevrank: {
      auto it = view.dict.find(a[0]);
      if (it == view.dict.end()) return of_kind(Reply::kNil);
      const std::size_t r = view.rank(it->second, it->first);
      return integer(std::int64_t(op == Op::kZrank ? r : view.size() - 1 - r));
    }
    case Op::kZcount: case Op::kZlexcount:
      std::tie(first, last) = bounds(view, q);
      return integer(std::int64_t(last - first));
    case Op::kZremrangebyrank: case Op::kZremrangebyscore: case Op::kZremrangebylex: {
      if (!z) return integer(0);
      select(view, q, first, last);
      std::vector<std::string> gone;
      each(view, first, last, false, [&](const ZEntry& e) { gone.emplace_back(e.second); });
      for (const auto& m : gone) z->erase(m);
      if (!gone.empty()) touch(s, key);
      drop_if_empty(s, key, *z);
      return integer(std::int64_t(gone.size()));
    }
    case Op::kZrandmember: return randmember(z, a);
    case Op::kZscan: {
      Reply r = of_kind(Reply::kScan);
      if (a[0] != "0") return r;
      for (const auto& e : view.tree)
        if (matches(pattern, std::string(e.second))) r.items.emplace_back(e.second), r.items.push_back(format_score(e.first));
      return r;
    }
    default: break;
  }
  // the ranges
  select(view, q, first, last);
  Reply r = of_kind(q.withscores ? Reply::kScored : Reply::kArray);
  each(view, first, last, q.rev, [&](const ZEntry& e) {
    r.items.emplace_back(e.second);
    if (q.withscores) r.items.push_back(format_score(e.first));
  });
  return r;
}

}  // namespace hydra
