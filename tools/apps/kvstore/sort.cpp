// SORT and SORT_RO (Redis 7.0's sortCommandGeneric): a list, set or sorted
// set's elements, numerically or ALPHA, ASC or DESC, LIMIT, BY a pattern
// (the weight of element e is the string at the key the pattern names with
// e for its first '*', or a hash field with "->field"; a pattern without
// '*' does not sort), GET patterns ('#': the element), STORE as a list.
//
// Atomic: SORT runs inside a transaction (transactions.cpp). Without BY/GET
// patterns that read keys it holds the key's shard and STORE's; with them
// it claims every shard of the rack (Loop::shards_of), because the keys a
// pattern names are known only once the elements are read. The elements,
// the weights and the values it GETs are one snapshot of the whole key
// space, at the price of a rack-wide transaction per such SORT.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>

#include "server.hpp"
#include "types.hpp"

namespace hydra {

namespace {

constexpr auto dump_closure = [](Shard& s, std::string key) { return shard_dump_read(s, std::move(key)); };  // keymiss
constexpr auto store_closure = [](Shard& s, std::string key, Dump d, bool replace, std::string event) {
  return shard_store(s, std::move(key), std::move(d), replace, std::move(event));
};

// What lookupKeyByPattern reads: a string key, or a field of a hash key
// (`fields[i]` non-empty). kNil where there is none or the type differs.
std::vector<Value> shard_lookup(Shard& s, std::vector<std::string> keys, std::vector<std::string> fields) noexcept {
  std::vector<Value> out(keys.size());
  try {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      expire_if_due(s, keys[i]);
      if ((g_notify.load(std::memory_order_relaxed) & kNotifyKeyMiss) && !key_exists(s, keys[i])) [[unlikely]]
        notify(kNotifyKeyMiss, "keymiss", keys[i]);  // lookupKeyByPattern reads with lookupKeyRead
      if (fields[i].empty()) {
        if (auto it = s.map.find(keys[i]); it != s.map.end()) out[i] = {Value::kString, it->second};
      } else if (auto o = s.objs.find(keys[i]); o != s.objs.end()) {
        if (const Hash* h = std::get_if<Hash>(&o->second))
          if (const std::string* f = h->find(fields[i])) out[i] = {Value::kString, *f};
      }
    }
  } catch (...) {
    out.assign(keys.size(), Value{});
  }
  return out;
}

// The key and hash field `pattern` names for element `e`; false: none
// ('#' is handled by the caller).
bool substitute(const std::string& pattern, const std::string& e, std::string& key, std::string& field) {
  const auto star = pattern.find('*');
  if (star == std::string::npos) return false;
  auto arrow = pattern.find("->", star + 1);
  std::size_t end = pattern.size();
  field.clear();
  if (arrow != std::string::npos && arrow + 2 < pattern.size()) {
    field = pattern.substr(arrow + 2);
    end = arrow;
  }
  key = pattern.substr(0, star) + e + pattern.substr(star + 1, end - star - 1);
  return true;
}

struct SortOpts {
  bool desc = false, alpha = false, dontsort = false;
  long long start = 0, count = -1;
  bool limited = false;
  std::string by, store;
  bool has_by = false, has_store = false;
  std::vector<std::string> gets;
};

// Redis's option loop; "" on success, else the error.
std::string parse(const std::vector<std::string_view>& args, bool ro, SortOpts& o) {
  for (std::size_t j = 2; j < args.size(); ++j) {
    const std::string w = resp::lower(args[j]);
    const std::size_t left = args.size() - j - 1;
    if (w == "asc") o.desc = false;
    else if (w == "desc") o.desc = true;
    else if (w == "alpha") o.alpha = true;
    else if (w == "limit" && left >= 2) {
      if (!resp::parse_int64(args[j + 1], o.start) || !resp::parse_int64(args[j + 2], o.count))
        return "ERR value is not an integer or out of range";
      o.limited = true;
      j += 2;
    } else if (w == "store" && left >= 1 && !ro) {
      o.store = args[++j];
      o.has_store = true;
    } else if (w == "by" && left >= 1) {
      o.by = args[++j];
      o.has_by = true;
      if (o.by.find('*') == std::string::npos) o.dontsort = true;
    } else if (w == "get" && left >= 1) {
      o.gets.emplace_back(args[++j]);
    } else {
      return "ERR syntax error";
    }
  }
  return {};
}

}  // namespace

bool sort_reads_patterns(const std::vector<std::string_view>& args) {
  SortOpts o;
  if (!parse(args, false, o).empty()) return false;
  if (o.has_by && !o.dontsort) return true;
  for (const auto& g : o.gets)
    if (g != "#" && g.find('*') != std::string::npos) return true;
  return false;
}

bool Loop::execute_sort(std::uint32_t slot, const std::string& name, Pending& p, std::uint64_t seq, std::uint32_t gen,
                        const std::vector<std::string_view>& args) {
  if (name != "sort" && name != "sort_ro") return false;
  if (args.size() < 2) return resp::error(p.reply, "ERR wrong number of arguments for '" + name + "' command"), true;
  auto o = std::make_shared<SortOpts>();
  if (std::string err = parse(args, name == "sort_ro", *o); !err.empty()) return resp::error(p.reply, err), true;
  auto fail = [this, slot, gen, seq](std::string text) {
    settle(slot, gen, seq, [&text](Pending& q) { resp::error(q.reply, text); });
  };
  p.waiting = 1;
  const std::string key(args[1]);
  ask(shard_of(key, nshards_), dump_closure, [=, this](Dump d) {
    if (d.type == 0xff) return fail("ERR out of memory");
    if (d.type != Dump::kNone && d.type != Dump::kList && d.type != Dump::kSet && d.type != Dump::kZset)
      return fail(kWrongType);
    auto elems = std::make_shared<std::vector<std::string>>();
    if (d.type == Dump::kZset) {
      for (std::size_t i = 0; i < d.items.size(); i += 2) elems->push_back(std::move(d.items[i]));
    } else {
      *elems = std::move(d.items);
    }
    // A set to STORE is sorted even BY nosort, ALPHA by its elements (Redis:
    // the stored list must be deterministic); a list or sorted set BY nosort
    // keeps its order, reversed by DESC.
    if (o->dontsort && d.type == Dump::kSet && o->has_store) o->dontsort = false, o->alpha = true, o->has_by = false;
    const bool dontsort = o->dontsort;
    if (dontsort && d.type != Dump::kSet && o->desc) std::reverse(elems->begin(), elems->end());
    // LIMIT's window (sortCommandGeneric's start/end)
    const long long len = static_cast<long long>(elems->size());
    // (start and count clamped to the length first: LIMIT 5 LLONG_MAX must
    // not overflow start + count)
    long long start = o->limited ? std::min(std::max(0LL, o->start), len) : 0;
    long long end = o->limited && o->count >= 0 ? start + std::min(o->count, len) - 1 : len - 1;
    if (start >= len) start = len - 1, end = len - 2;
    if (end >= len) end = len - 1;
    // The keys the patterns read: BY's (when sorting), then each GET's.
    std::vector<std::string> keys, fields;
    std::map<std::pair<std::string, std::string>, std::size_t> index;
    auto want = [&](const std::string& pattern, const std::string& e) -> std::int64_t {
      std::string k, f;
      if (!substitute(pattern, e, k, f)) return -1;
      auto [it, added] = index.try_emplace({k, f}, keys.size());
      if (added) keys.push_back(std::move(k)), fields.push_back(std::move(f));
      return std::int64_t(it->second);
    };
    auto by_ref = std::make_shared<std::vector<std::int64_t>>();
    if (!dontsort && o->has_by)
      for (const auto& e : *elems) by_ref->push_back(want(o->by, e));
    // GETs are read for every element: the window is known only after sorting.
    auto get_ref = std::make_shared<std::vector<std::int64_t>>();
    for (const auto& e : *elems)
      for (const auto& g : o->gets) get_ref->push_back(g == "#" ? -2 : want(g, e));
    auto finish = [=, this](std::vector<Value> vals) {
      // Weights, then the order.
      std::vector<std::size_t> order(elems->size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      if (!dontsort) {
        auto weight_text = [&](std::size_t i) -> const std::string* {
          if (!o->has_by) return &(*elems)[i];
          const std::int64_t r = (*by_ref)[i];
          return r >= 0 && vals[std::size_t(r)].kind == Value::kString ? &vals[std::size_t(r)].data : nullptr;
        };
        std::vector<double> scores(order.size(), 0);
        if (!o->alpha) {
          for (std::size_t i = 0; i < order.size(); ++i) {
            const std::string* t = weight_text(i);
            if (!t) continue;
            char* endp = nullptr;
            errno = 0;
            scores[i] = std::strtod(t->c_str(), &endp);
            if (*endp != '\0' || errno == ERANGE || std::isnan(scores[i]))
              return fail("ERR One or more scores can't be converted into double");
          }
        }
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
          int cmp;
          if (!o->alpha) {
            cmp = scores[a] < scores[b] ? -1 : scores[a] > scores[b] ? 1 : (*elems)[a].compare((*elems)[b]);
          } else {
            const std::string* x = weight_text(a);
            const std::string* y = weight_text(b);
            if (!x || !y) cmp = x == y ? 0 : (!x ? -1 : 1);
            else cmp = x->compare(*y);
          }
          return o->desc ? cmp > 0 : cmp < 0;
        });
      }
      Reply r;
      r.kind = Reply::kArray;
      for (long long i = start; i <= end; ++i) {
        const std::size_t e = order[std::size_t(i)];
        if (o->gets.empty()) {
          r.items.push_back((*elems)[e]);
          r.nil.push_back(0);
          continue;
        }
        for (std::size_t g = 0; g < o->gets.size(); ++g) {
          const std::int64_t ref = (*get_ref)[e * o->gets.size() + g];
          const bool none = ref == -1 || (ref >= 0 && vals[std::size_t(ref)].kind != Value::kString);
          r.items.push_back(ref == -2 ? (*elems)[e] : none ? std::string() : vals[std::size_t(ref)].data);
          r.nil.push_back(none);
        }
      }
      if (!o->has_store) return settle(slot, gen, seq, [&r](Pending& q) { encode_reply(q.reply, r, q.resp3); });
      Dump out;  // nils are stored as empty strings, as Redis
      out.type = r.items.empty() ? Dump::kNone : Dump::kList;
      const auto n = std::int64_t(r.items.size());
      out.items = std::move(r.items);
      ask(shard_of(o->store, nshards_), store_closure, [=, this](Count c) {
        if (c.err != Count::kOk) return fail(count_error(c.err));
        settle(slot, gen, seq, [n](Pending& q) { resp::integer(q.reply, n); });
      }, o->store, std::move(out), true, std::string("sortstore"));
    };
    if (keys.empty()) return finish({});
    // One lookup per shard; the answers in the order of `keys`.
    struct State {
      std::uint32_t owed = 0;
      std::vector<Value> vals;
      std::vector<std::vector<std::size_t>> positions;
    };
    auto st = std::make_shared<State>();
    st->vals.resize(keys.size());
    st->positions.resize(nshards_);
    std::vector<std::vector<std::string>> gk(nshards_), gf(nshards_);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const auto s = shard_of(keys[i], nshards_);
      st->positions[s].push_back(i);
      gk[s].push_back(std::move(keys[i]));
      gf[s].push_back(std::move(fields[i]));
    }
    for (auto& g : gk) st->owed += !g.empty();
    for (std::size_t s = 0; s < nshards_; ++s) {
      if (gk[s].empty()) continue;
      ask(s, [](Shard& sh, std::vector<std::string> k, std::vector<std::string> f) { return shard_lookup(sh, std::move(k), std::move(f)); },
          [st, s, finish](std::vector<Value> got) {
            for (std::size_t i = 0; i < got.size() && i < st->positions[s].size(); ++i) st->vals[st->positions[s][i]] = std::move(got[i]);
            if (--st->owed == 0) finish(std::move(st->vals));
          },
          std::move(gk[s]), std::move(gf[s]));
    }
  }, key);
  return true;
}

}  // namespace hydra
