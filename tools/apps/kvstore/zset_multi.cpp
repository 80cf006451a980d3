// Sorted-set commands over several keys: ZUNIONSTORE, ZINTERSTORE,
// ZDIFFSTORE, ZUNION, ZINTER, ZDIFF, ZINTERCARD (Redis 7.0's
// zunionInterDiffGenericCommand), ZRANGESTORE and ZMPOP; and SINTERCARD,
// whose numkeys form is theirs. Like SINTERSTORE
// (keyspace.cpp) they run inside a transaction over every shard they name
// (transactions.cpp; Loop::shards_of finds the keys after numkeys), as
// steps: read the sources, compute here on the loop, store the result.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "server.hpp"
#include "types.hpp"

namespace hydra {

namespace {

constexpr const char* kSyntax = "ERR syntax error";

constexpr auto store_closure = [](Shard& s, std::string key, Dump d, bool replace, std::string event) {
  return shard_store(s, std::move(key), std::move(d), replace, std::move(event));
};
constexpr auto typed_closure = [](Shard& s, Op op, std::vector<std::string> a) { return shard_typed(s, op, std::move(a)); };

// One input: a set (scores 1) or a sorted set, as member -> score.
using Input = std::unordered_map<std::string, double>;
Input input_of(const Dump& d) {
  Input in;
  if (d.type == Dump::kSet)
    for (const auto& m : d.items) in.emplace(m, 1.0);
  else if (d.type == Dump::kZset)
    for (std::size_t i = 0; i + 1 < d.items.size(); i += 2) in.emplace(d.items[i], std::strtod(d.items[i + 1].c_str(), nullptr));
  return in;
}

enum class Agg : std::uint8_t { kSum, kMin, kMax };
void aggregate(double& into, double v, Agg a) {
  if (a == Agg::kSum) {
    into += v;
    if (std::isnan(into)) into = 0;  // inf + -inf, as Redis
  } else if (a == Agg::kMin) {
    into = std::min(into, v);
  } else {
    into = std::max(into, v);
  }
}

// The result sorted as a sorted set: (score, member) ascending.
std::vector<std::pair<double, std::string>> sorted(Input&& r) {
  std::vector<std::pair<double, std::string>> out;
  out.reserve(r.size());
  for (auto& [m, sc] : r) out.emplace_back(sc, m);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void Loop::dump_keys(const std::vector<std::string>& keys, std::function<void(std::vector<Dump>)> done) {
  struct State {
    std::uint32_t owed = 0;
    std::vector<Dump> dumps;
    std::vector<std::vector<std::size_t>> positions;
    std::function<void(std::vector<Dump>)> done;
  };
  auto st = std::make_shared<State>();
  st->dumps.resize(keys.size());
  st->positions.resize(nshards_);
  st->done = std::move(done);
  std::vector<std::vector<std::string>> groups(nshards_);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto s = shard_of(keys[i], nshards_);
    groups[s].push_back(keys[i]);
    st->positions[s].push_back(i);
  }
  for (auto& g : groups) st->owed += !g.empty();
  if (st->owed == 0) return st->done({});
  for (std::size_t s = 0; s < nshards_; ++s) {
    if (groups[s].empty()) continue;
    ask(s, [](Shard& sh, std::vector<std::string> ks) { return shard_dump_many(sh, std::move(ks)); },
        [st, s](std::vector<Dump> got) {
          for (std::size_t i = 0; i < got.size() && i < st->positions[s].size(); ++i)
            st->dumps[st->positions[s][i]] = std::move(got[i]);
          if (--st->owed == 0) st->done(std::move(st->dumps));
        },
        std::move(groups[s]));
  }
}

bool Loop::execute_zset_multi(std::uint32_t slot, const std::string& name, Pending& p, std::uint64_t seq,
                              std::uint32_t gen, const std::vector<std::string_view>& args) {
  if (!zset_multi_name(name)) return false;
  const CommandSpec* spec = find_command(name);
  if (!spec || !arity_ok(*spec, args.size()))
    return resp::error(p.reply, "ERR wrong number of arguments for '" + name + "' command"), true;
  auto fail = [this, slot, gen, seq](std::string text) {
    settle(slot, gen, seq, [&text](Pending& q) { resp::error(q.reply, text); });
  };
  auto integer = [this, slot, gen, seq](std::int64_t n) {
    settle(slot, gen, seq, [n](Pending& q) { resp::integer(q.reply, n); });
  };
  // Stores `result` as `dst` (deleting it when empty) and answers its size.
  auto store = [this, integer, fail, event = name](const std::string& dst, std::vector<std::pair<double, std::string>> result) {
    Dump d;
    d.type = result.empty() ? Dump::kNone : Dump::kZset;
    for (auto& [sc, m] : result) d.items.push_back(std::move(m)), d.items.push_back(format_score(sc));
    const auto n = std::int64_t(result.size());
    ask(shard_of(dst, nshards_), store_closure, [=](Count c) { c.err != Count::kOk ? fail(count_error(c.err)) : integer(n); },
        dst, std::move(d), true, event);  // its keyspace event: the command's name (zunionstore...)
  };

  if (name == "zrangestore") {  // ZRANGE's read on the source (scores always), then the store
    for (std::size_t i = 5; i < args.size(); ++i)
      if (resp::lower(args[i]) == "withscores") return resp::error(p.reply, kSyntax), true;
    p.waiting = 1;
    const std::string dst(args[1]);
    std::vector<std::string> read(args.begin() + 2, args.end());
    ask(shard_of(args[2], nshards_), typed_closure, [=](Reply r) {
      if (r.kind == Reply::kError) return fail(r.s);
      std::vector<std::pair<double, std::string>> result;
      for (std::size_t i = 0; i + 1 < r.items.size(); i += 2)
        result.emplace_back(std::strtod(r.items[i + 1].c_str(), nullptr), std::move(r.items[i]));
      store(dst, std::move(result));
    }, Op::kZrangeRead, std::move(read));
    return true;
  }

  if (name == "zmpop") {  // the first non-empty key's elements, Redis 7.0's zmpopGenericCommand
    long long numkeys = 0, count = -1;
    if (!resp::parse_int64(args[1], numkeys) || numkeys < 1) return resp::error(p.reply, "ERR numkeys should be greater than 0"), true;
    const std::size_t where = 2 + std::size_t(std::min<long long>(numkeys, 1LL << 30));
    if (where >= args.size()) return resp::error(p.reply, kSyntax), true;
    const std::string w = resp::lower(args[where]);
    if (w != "min" && w != "max") return resp::error(p.reply, kSyntax), true;
    for (std::size_t j = where + 1; j < args.size(); ++j) {
      if (count == -1 && resp::lower(args[j]) == "count" && j + 1 < args.size()) {
        if (!resp::parse_int64(args[++j], count) || count < 1) return resp::error(p.reply, "ERR count should be greater than 0"), true;
      } else {
        return resp::error(p.reply, kSyntax), true;
      }
    }
    p.waiting = 1;
    auto keys = std::make_shared<std::vector<std::string>>(args.begin() + 2, args.begin() + std::ptrdiff_t(where));
    const Op op = w == "min" ? Op::kZpopmin : Op::kZpopmax;
    const std::string n = std::to_string(count < 0 ? 1 : count);
    // Key after key: a step per key until one has elements. The function
    // holds itself weakly; each step's callback holds it while it runs.
    auto next = std::make_shared<std::function<void(std::size_t)>>();
    std::weak_ptr<std::function<void(std::size_t)>> weak = next;
    *next = [this, keys, op, n, fail, weak, slot, gen, seq](std::size_t i) {
      if (i == keys->size()) return settle(slot, gen, seq, [](Pending& q) { resp::null_array(q.reply, q.resp3); });
      ask(shard_of((*keys)[i], nshards_), typed_closure, [this, keys, self = weak.lock(), i, fail, slot, gen, seq](Reply r) {
        if (r.kind == Reply::kError) return fail(r.s);
        if (r.items.empty()) return (*self)(i + 1);
        r.kind = Reply::kKeyScored;
        r.s = (*keys)[i];
        settle(slot, gen, seq, [&r](Pending& q) { encode_reply(q.reply, r, q.resp3); });
      }, op, std::vector<std::string>{(*keys)[i], n});
    };
    (*next)(0);
    return true;
  }

  if (name == "sintercard") {  // Redis 7.0's sinterCardCommand
    long long numkeys = 0, limit = 0;
    if (!resp::parse_int64(args[1], numkeys) || numkeys < 1) return resp::error(p.reply, "ERR numkeys should be greater than 0"), true;
    if (std::size_t(numkeys) > args.size() - 2) return resp::error(p.reply, "ERR Number of keys can't be greater than number of args"), true;
    for (std::size_t j = 2 + std::size_t(numkeys); j < args.size(); ++j) {
      if (resp::lower(args[j]) == "limit" && j + 1 < args.size()) {
        if (!resp::parse_int64(args[++j], limit) || limit < 0) return resp::error(p.reply, "ERR LIMIT can't be negative"), true;
      } else {
        return resp::error(p.reply, kSyntax), true;
      }
    }
    p.waiting = 1;
    dump_keys(std::vector<std::string>(args.begin() + 2, args.begin() + 2 + numkeys), [=](std::vector<Dump> dumps) {
      for (const Dump& d : dumps)
        if (d.type != Dump::kNone && d.type != Dump::kSet) return fail(d.type == 0xff ? "ERR out of memory" : kWrongType);
      std::vector<Input> in;
      for (const Dump& d : dumps) in.push_back(input_of(d));
      std::int64_t found = 0;
      for (const auto& [m, sc] : in[0]) {
        bool all = true;
        for (std::size_t k = 1; k < in.size() && all; ++k) all = in[k].count(m) != 0;
        if (all && ++found == limit) break;
      }
      integer(found);
    });
    return true;
  }

  // ZUNION/ZINTER/ZDIFF[STORE], ZINTERCARD
  const bool is_store = name.ends_with("store"), card = name == "zintercard";
  const char op = name[1];  // 'u'nion, 'i'nter, 'd'iff
  const std::size_t at = is_store ? 2 : 1;
  long long numkeys;
  if (!resp::parse_int64(args[at], numkeys)) return resp::error(p.reply, "ERR value is not an integer or out of range"), true;
  if (numkeys < 1) return resp::error(p.reply, "ERR at least 1 input key is needed for '" + name + "' command"), true;
  if (std::size_t(numkeys) > args.size() - at - 1) return resp::error(p.reply, kSyntax), true;
  std::vector<std::string> keys(args.begin() + std::ptrdiff_t(at + 1), args.begin() + std::ptrdiff_t(at + 1 + std::size_t(numkeys)));
  auto opts = std::make_shared<std::vector<std::string>>(args.begin() + std::ptrdiff_t(at + 1 + std::size_t(numkeys)), args.end());
  const std::string dst = is_store ? std::string(args[1]) : std::string();
  p.waiting = 1;
  dump_keys(keys, [=, this](std::vector<Dump> dumps) {
    for (const Dump& d : dumps)  // the keys' types first, then the options, as Redis
      if (d.type != Dump::kNone && d.type != Dump::kSet && d.type != Dump::kZset)
        return fail(d.type == 0xff ? "ERR out of memory" : kWrongType);
    const std::size_t n = dumps.size();
    std::vector<double> weights(n, 1.0);
    Agg agg = Agg::kSum;
    bool withscores = false;
    long long limit = 0;
    const auto& o = *opts;
    for (std::size_t j = 0; j < o.size(); ++j) {
      const std::string w = resp::lower(o[j]);
      const std::size_t remaining = o.size() - j;
      if (op != 'd' && !card && remaining >= n + 1 && w == "weights") {
        for (std::size_t i = 0; i < n; ++i)
          if (!parse_score(std::string(o[++j]), weights[i])) return fail("ERR weight value is not a float");
      } else if (op != 'd' && !card && remaining >= 2 && w == "aggregate") {
        const std::string a = resp::lower(o[++j]);
        if (a == "sum") agg = Agg::kSum;
        else if (a == "min") agg = Agg::kMin;
        else if (a == "max") agg = Agg::kMax;
        else return fail(kSyntax);
      } else if (!is_store && !card && w == "withscores") {
        withscores = true;
      } else if (card && remaining >= 2 && w == "limit") {
        if (!resp::parse_int64(o[++j], limit) || limit < 0) return fail("ERR LIMIT can't be negative");
      } else {
        return fail(kSyntax);
      }
    }
    std::vector<Input> in;
    for (const Dump& d : dumps) in.push_back(input_of(d));
    Input result;
    auto weigh = [](double w, double sc) { const double v = w * sc; return std::isnan(v) ? 0.0 : v; };
    if (op == 'u') {
      for (std::size_t i = 0; i < n; ++i)
        for (const auto& [m, sc] : in[i]) {
          auto [it, added] = result.try_emplace(m, weigh(weights[i], sc));
          if (!added) aggregate(it->second, weigh(weights[i], sc), agg);
        }
    } else if (op == 'i') {
      std::vector<std::size_t> order(n);  // smallest first, as Redis
      for (std::size_t i = 0; i < n; ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return in[a].size() < in[b].size(); });
      std::int64_t found = 0;
      for (const auto& [m, sc] : in[order[0]]) {
        double v = weigh(weights[order[0]], sc);
        bool all = true;
        for (std::size_t k = 1; k < n && all; ++k) {
          auto it = in[order[k]].find(m);
          if (it == in[order[k]].end()) all = false;
          else aggregate(v, weigh(weights[order[k]], it->second), agg);
        }
        if (!all) continue;
        if (card) {
          if (++found == limit) break;
          continue;
        }
        result.emplace(m, v);
      }
      if (card) return integer(found);
    } else {
      for (const auto& [m, sc] : in[0]) {
        bool elsewhere = false;
        for (std::size_t k = 1; k < n && !elsewhere; ++k) elsewhere = in[k].count(m) != 0;
        if (!elsewhere) result.emplace(m, sc);
      }
    }
    auto out = sorted(std::move(result));
    if (is_store) return store(dst, std::move(out));
    Reply r;
    r.kind = withscores ? Reply::kScored : Reply::kArray;
    for (auto& [sc, m] : out) {
      r.items.push_back(std::move(m));
      if (withscores) r.items.push_back(format_score(sc));
    }
    settle(slot, gen, seq, [&r](Pending& q) { encode_reply(q.reply, r, q.resp3); });
  });
  return true;
}

}  // namespace hydra
