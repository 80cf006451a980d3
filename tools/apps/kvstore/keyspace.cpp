// Commands of several steps over several keys: MSETNX, RENAME, RENAMENX,
// COPY, SINTER, SUNION, SDIFF and their STORE forms; and TYPE. Each step is
// one closure on one key's shard; the steps run inside the command's
// transaction (transactions.cpp), so nobody sees the keys between them.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "server.hpp"
#include "types.hpp"

namespace hydra {

// ---- the shard side ---------------------------------------------------------------

Dump shard_dump(Shard& s, std::string key) noexcept {
  Dump d;
  try {
    expire_if_due(s, key);
    if (auto it = s.map.find(key); it != s.map.end()) {
      d.type = Dump::kString;
      d.value = it->second;
    } else if (auto o = s.objs.find(key); o != s.objs.end()) {
      d.type = std::uint8_t(Dump::kHash + o->second.index());
      if (auto* h = std::get_if<Hash>(&o->second)) {
        for (const auto& [f, v] : *h) d.items.push_back(f), d.items.push_back(v);
        d.table = !h->listpack();
      }
      else if (auto* l = std::get_if<List>(&o->second)) d.items.assign(l->begin(), l->end());
      else if (auto* st = std::get_if<Set>(&o->second)) d.items.assign(st->begin(), st->end());
      else if (auto* z = std::get_if<ZSet>(&o->second))
        for (const auto& [sc, m] : z->tree) d.items.emplace_back(m), d.items.push_back(format_score(sc));
    } else {
      return d;
    }
    if (auto e = s.expires.find(key); e != s.expires.end()) d.deadline = e->second;
  } catch (...) {
    d = Dump{};
    d.type = 0xff;  // out of memory: the command answers so
  }
  return d;
}

std::vector<Dump> shard_dump_many(Shard& s, std::vector<std::string> keys) noexcept {
  std::vector<Dump> out;
  for (auto& k : keys) out.push_back(shard_dump_read(s, std::move(k)));  // SINTER..., ZUNION...: reads
  return out;
}

Dump shard_dump_read(Shard& s, std::string key) noexcept {
  Dump d = shard_dump(s, key);
  if (d.type == Dump::kNone) notify(kNotifyKeyMiss, "keymiss", key);
  return d;
}

Count shard_restore(Shard& s, std::string key, Dump d, bool replace) noexcept {
  try {
    const bool exists = key_exists(s, key);
    if (exists && !replace) return {0, Count::kOk};
    if (exists) {
      if (s.map.erase(key) == 0) s.objs.erase(key);
      forget_ttl(s, key);
    }
    touch(s, key);
    switch (d.type) {
      case Dump::kNone: return {exists ? 1 : 0, Count::kOk};
      case Dump::kString: s.map.emplace(key, std::move(d.value)); break;
      case Dump::kHash: {
        // A hashtable stays one (RENAME, COPY); a listpack, or a DUMP
        // payload's hash, is one within this host's limits (Redis's RDB
        // loader converts the others), in the source's order.
        Hash h;
        if (d.table) h.convert();
        else h.reserve_more(d.items.size() / 2, {SIZE_MAX, SIZE_MAX});
        for (std::size_t i = 0; i + 1 < d.items.size(); i += 2) h.append(std::move(d.items[i]), std::move(d.items[i + 1]));
        h.fit(hash_limits());
        s.objs.emplace(key, std::move(h));
        break;
      }
      case Dump::kList: s.objs.emplace(key, List(std::make_move_iterator(d.items.begin()), std::make_move_iterator(d.items.end()))); break;
      case Dump::kSet: s.objs.emplace(key, Set(std::make_move_iterator(d.items.begin()), std::make_move_iterator(d.items.end()))); break;
      case Dump::kZset: {
        ZSet z;
        for (std::size_t i = 0; i + 1 < d.items.size(); i += 2) z.set(d.items[i], std::strtod(d.items[i + 1].c_str(), nullptr));
        s.objs.emplace(key, std::move(z));
        break;
      }
      default: return {0, Count::kOutOfMemory};
    }
    if (d.deadline >= 0) s.expires.insert_or_assign(key, d.deadline);
    if (d.type == Dump::kList || d.type == Dump::kZset) signal_ready(s, key);  // a list or sorted set moved into place wakes its waiters (blocking.cpp)
    return {1, Count::kOk};
  } catch (...) {
    return {0, Count::kOutOfMemory};
  }
}

// ---- the loop side --------------------------------------------------------------

namespace {

// Closures are captureless lambdas, never function pointers: a closure
// crosses hosts as its bytes, and a function's address differs there.
constexpr auto exists_closure = [](Shard& s, std::vector<std::string> keys) { return shard_exists(s, std::move(keys)); };
constexpr auto mset_closure = [](Shard& s, std::vector<std::string> kvs) { return shard_mset(s, std::move(kvs)); };
constexpr auto read_closure = [](Shard& s, std::string key) { return shard_dump_read(s, std::move(key)); };  // LCS
// RENAME's source (a write lookup in Redis: no keymiss) or COPY's (a read: keymiss).
constexpr auto move_src_closure = [](Shard& s, std::string key, bool read) {
  return read ? shard_dump_read(s, std::move(key)) : shard_dump(s, std::move(key));
};
constexpr auto owed_closure = [](Shard&, std::string src, std::uint8_t from, std::uint8_t owed) {
  notify_owed_pop(src, from, owed);
  return Count{};
};
constexpr auto del_closure = [](Shard& s, std::vector<std::string> keys) { return shard_del(s, std::move(keys)); };
// The stores and RENAME's deletion with their keyspace events (notify.cpp).
constexpr auto store_closure = [](Shard& s, std::string key, Dump d, bool replace, std::string event) {
  return shard_store(s, std::move(key), std::move(d), replace, std::move(event));
};
constexpr auto rename_del_closure = [](Shard& s, std::string src, std::string dst) {
  return shard_rename_del(s, std::move(src), std::move(dst));
};

}  // namespace

bool Loop::execute_keyspace(std::uint32_t slot, const std::string& name, Pending& p, std::uint64_t seq,
                            std::uint32_t gen, const std::vector<std::string_view>& args) {
  auto arity = [&](bool ok) {
    if (!ok) resp::error(p.reply, "ERR wrong number of arguments for '" + name + "' command");
    return ok;
  };
  auto shard_index = [&](std::string_view key) { return shard_of(key, nshards_); };
  // Every reply below comes from a step's callback: the Pending waits for one.
  auto integer = [this, slot, gen, seq](std::int64_t n) {
    settle(slot, gen, seq, [n](Pending& q) { resp::integer(q.reply, n); });
  };
  auto fail = [this, slot, gen, seq](std::string text) {
    settle(slot, gen, seq, [&text](Pending& q) { resp::error(q.reply, text); });
  };

  if (name == "type") {
    if (!arity(args.size() == 2)) return true;
    p.waiting = 1;
    ask(shard_index(args[1]), [](Shard& s, std::string k) {
          Value v = shard_type(s, k);
          if (v.data == "none") notify(kNotifyKeyMiss, "keymiss", k);  // TYPE reads (LMOVE's, SMOVE's checks do not)
          return v;
        },
        [this, slot, gen, seq](Value v) { settle(slot, gen, seq, [&v](Pending& q) { resp::simple(q.reply, v.data); }); },
        std::string(args[1]));
    return true;
  }
  if (name == "lmove" || name == "rpoplpush") {  // Redis 7.0's lmoveGenericCommand, in steps
    if (!arity(args.size() == (name == "lmove" ? 5u : 3u))) return true;
    bool from_left = false, to_left = true;  // RPOPLPUSH: RIGHT LEFT
    if (name == "lmove") {
      const std::string w1 = resp::lower(args[3]), w2 = resp::lower(args[4]);
      if ((w1 != "left" && w1 != "right") || (w2 != "left" && w2 != "right")) return resp::error(p.reply, "ERR syntax error"), true;
      from_left = w1 == "left";
      to_left = w2 == "left";
    }
    p.waiting = 1;
    const std::string src(args[1]), dst(args[2]);
    const std::size_t ss = shard_index(src), ds = shard_index(dst);
    auto type_closure = [](Shard& s, std::string k) { return shard_type(s, std::move(k)); };
    auto pop_closure = [](Shard& s, Op op, std::vector<std::string> a) { return shard_move_pop(s, op, std::move(a)); };
    auto push_closure = [](Shard& s, Op op, std::vector<std::string> a, std::string from_key, std::uint8_t from,
                           std::uint8_t owed) { return shard_move_push(s, op, std::move(a), std::move(from_key), from, owed); };
    // 1: the source's type; 2: the destination's; 3: pop; 4: push, then
    // the pop's events (Redis sends the push's first: notify.cpp).
    ask(ss, type_closure, [=, this](Value ts) {
      if (ts.data == "none") return settle(slot, gen, seq, [](Pending& q) { resp::nil(q.reply, q.resp3); });
      if (ts.data != "list") return fail(kWrongType);
      ask(ds, type_closure, [=, this](Value td) {
        if (td.data != "none" && td.data != "list") return fail(kWrongType);
        ask(ss, pop_closure, [=, this](Reply popped) {
          if (popped.kind != Reply::kBulk) return fail(popped.kind == Reply::kError ? popped.s : "ERR no element");
          ask(ds, push_closure, [=, this](Reply pushed) {
            // The push failed (the destination changed type since step 2, or
            // out of memory): the element is lost, the pop's events still owed.
            if (pushed.kind == Reply::kError && popped.n != 0) {
              ask(ss, owed_closure, [=](Count) { fail(pushed.s); }, src, std::uint8_t(from_left ? 0 : 1),
                  std::uint8_t(popped.n));
              return;
            }
            if (pushed.kind == Reply::kError) return fail(pushed.s);
            settle(slot, gen, seq, [&](Pending& q) { resp::bulk(q.reply, popped.s); });
          }, to_left ? Op::kLpush : Op::kRpush, std::vector<std::string>{dst, popped.s}, src, std::uint8_t(from_left ? 0 : 1),
              std::uint8_t(popped.n));
        }, from_left ? Op::kLpop : Op::kRpop, std::vector<std::string>{src});
      }, dst);
    }, src);
    return true;
  }
  if (name == "smove") {  // Redis 7.0's smoveCommand, in steps: both types, then SREM and SADD
    if (!arity(args.size() == 4)) return true;
    p.waiting = 1;
    const std::string src(args[1]), dst(args[2]), member(args[3]);
    const std::size_t ss = shard_index(src), ds = shard_index(dst);
    auto type_closure = [](Shard& s, std::string k) { return shard_type(s, std::move(k)); };
    auto typed_closure = [](Shard& s, Op op, std::vector<std::string> a) { return shard_typed(s, op, std::move(a)); };
    ask(ss, type_closure, [=, this](Value ts) {
      if (ts.data == "none") return integer(0);
      if (ts.data != "set") return fail(kWrongType);
      ask(ds, type_closure, [=, this](Value td) {
        if (td.data != "none" && td.data != "set") return fail(kWrongType);
        const bool same = src == dst;  // then only whether it is a member
        ask(ss, typed_closure, [=, this](Reply removed) {
          if (removed.kind == Reply::kError) return fail(removed.s);
          if (same || removed.n == 0) return integer(removed.n);
          ask(ds, typed_closure, [=](Reply added) { added.kind == Reply::kError ? fail(added.s) : integer(1); },
              Op::kSadd, std::vector<std::string>{dst, member});
        }, same ? Op::kSismember : Op::kSrem, std::vector<std::string>{src, member});
      }, dst);
    }, src);
    return true;
  }
  if (name == "lcs") {  // both values, then lcs.cpp
    if (!arity(args.size() >= 3)) return true;
    p.waiting = 1;
    auto copy = std::make_shared<std::vector<std::string>>(args.begin(), args.end());
    const std::size_t sa = shard_index(args[1]), sb = shard_index(args[2]);
    ask(sa, read_closure, [=, this](Dump da) {
      ask(sb, read_closure, [=, this](Dump db) {
        if (da.type == 0xff || db.type == 0xff) return fail("ERR out of memory");
        if ((da.type != Dump::kNone && da.type != Dump::kString) || (db.type != Dump::kNone && db.type != Dump::kString))
          return fail("ERR The specified keys must contain string values");
        settle(slot, gen, seq, [&](Pending& q) {
          const std::vector<std::string_view> views(copy->begin(), copy->end());
          lcs_reply(q.reply, q.resp3, da.value, db.value, views);
        });
      }, (*copy)[2]);
    }, (*copy)[1]);
    return true;
  }
  if (name == "msetnx") {
    if (!arity(args.size() >= 3 && args.size() % 2 == 1)) return true;
    // Step 1: does any key exist? Step 2: if none, set them all.
    std::vector<std::vector<std::string>> keys(nshards_), kvs(nshards_);
    for (std::size_t i = 1; i + 1 < args.size(); i += 2) {
      auto s = shard_index(args[i]);
      keys[s].emplace_back(args[i]);
      kvs[s].emplace_back(args[i]);
      kvs[s].emplace_back(args[i + 1]);
    }
    struct State {
      std::uint32_t owed = 0;
      std::int64_t found = 0;
      std::int32_t err = Count::kOk;
      std::vector<std::vector<std::string>> kvs;
    };
    auto st = std::make_shared<State>();
    st->kvs = std::move(kvs);
    p.waiting = 1;
    for (std::size_t s = 0; s < nshards_; ++s) st->owed += !keys[s].empty();
    for (std::size_t s = 0; s < nshards_; ++s) {
      if (keys[s].empty()) continue;
      ask(s, exists_closure, [this, st, integer, fail](Count n) {
        st->found += n.n;
        if (--st->owed != 0) return;
        if (st->found) return integer(0);
        for (auto& g : st->kvs) st->owed += !g.empty();
        for (std::size_t t = 0; t < st->kvs.size(); ++t) {
          if (st->kvs[t].empty()) continue;
          ask(t, mset_closure, [st, integer, fail](Count m) {
            if (m.err != Count::kOk) st->err = m.err;
            if (--st->owed == 0) st->err == Count::kOk ? integer(1) : fail(count_error(st->err));
          }, std::move(st->kvs[t]));
        }
      }, std::move(keys[s]));
    }
    return true;
  }
  if (name == "rename" || name == "renamenx" || name == "copy") {
    const bool copy = name == "copy", nx = name == "renamenx";
    bool replace = !nx && !copy;
    if (copy) {
      if (!arity(args.size() >= 3)) return true;
      for (std::size_t i = 3; i < args.size(); ++i) {  // Redis 7.0's copyCommand options
        const std::string o = resp::lower(args[i]);
        long long db;
        if (o == "replace") {
          replace = true;
        } else if (o == "db" && i + 1 < args.size()) {
          if (!resp::parse_int64(args[++i], db)) return resp::error(p.reply, kNotInteger), true;
          if (db != 0) return resp::error(p.reply, "ERR DB index is out of range"), true;
        } else {
          return resp::error(p.reply, "ERR syntax error"), true;
        }
      }
      if (args[1] == args[2]) return resp::error(p.reply, "ERR source and destination objects are the same"), true;
    } else if (!arity(args.size() == 3)) {
      return true;
    }
    // Step 1: the source's value; 2: stored as the destination; 3 (RENAME): the source goes.
    p.waiting = 1;
    const std::string src(args[1]), dst(args[2]);
    const std::size_t ss = shard_index(src), ds = shard_index(dst);
    ask(ss, move_src_closure, [=, this](Dump d) {
      if (d.type == 0xff) return fail("ERR out of memory");
      if (d.type == Dump::kNone) return copy ? integer(0) : fail("ERR no such key");
      if (src == dst) return nx ? integer(0) : settle(slot, gen, seq, [](Pending& q) { resp::simple(q.reply, "OK"); });
      ask(ds, store_closure, [=, this](Count n) {
        if (n.err != Count::kOk) return fail(count_error(n.err));
        if (copy || n.n == 0) return integer(n.n);
        ask(ss, rename_del_closure, [=, this](Count) {
          if (nx) return integer(1);
          settle(slot, gen, seq, [](Pending& q) { resp::simple(q.reply, "OK"); });
        }, src, dst);
      }, dst, std::move(d), replace, std::string(copy ? "copy_to" : "rename_to"));
    }, src, copy);
    return true;
  }
  if (name == "sinter" || name == "sunion" || name == "sdiff" || name == "sinterstore" || name == "sunionstore" ||
      name == "sdiffstore") {
    const bool store = name.ends_with("store");
    if (!arity(args.size() >= (store ? 3u : 2u))) return true;
    const std::size_t first = store ? 2 : 1;
    struct State {
      std::uint32_t owed = 0;
      std::vector<Dump> sets;                           // by key position
      std::vector<std::vector<std::size_t>> positions;  // per shard
    };
    auto st = std::make_shared<State>();
    st->sets.resize(args.size() - first);
    st->positions.resize(nshards_);
    std::vector<std::vector<std::string>> keys(nshards_);
    for (std::size_t i = first; i < args.size(); ++i) {
      auto s = shard_index(args[i]);
      keys[s].emplace_back(args[i]);
      st->positions[s].push_back(i - first);
    }
    for (auto& k : keys) st->owed += !k.empty();
    p.waiting = 1;
    const char op = name[1];  // 'i'nter, 'u'nion, 'd'iff
    const char* store_event = op == 'i' ? "sinterstore" : op == 'u' ? "sunionstore" : "sdiffstore";
    const std::string dst = store ? std::string(args[1]) : std::string();
    const std::size_t ds = store ? shard_index(dst) : 0;
    for (std::size_t s = 0; s < nshards_; ++s) {
      if (keys[s].empty()) continue;
      ask(s, [](Shard& sh, std::vector<std::string> ks) { return shard_dump_many(sh, std::move(ks)); },
          [=, this](std::vector<Dump> got) {
            for (std::size_t i = 0; i < got.size() && i < st->positions[s].size(); ++i)
              st->sets[st->positions[s][i]] = std::move(got[i]);
            if (--st->owed != 0) return;
            for (const Dump& d : st->sets)
              if (d.type != Dump::kNone && d.type != Dump::kSet) return fail(d.type == 0xff ? "ERR out of memory" : kWrongType);
            Set result;
            if (op == 'u') {
              for (auto& d : st->sets) result.insert(d.items.begin(), d.items.end());
            } else {
              result.insert(st->sets[0].items.begin(), st->sets[0].items.end());
              for (std::size_t i = 1; i < st->sets.size() && !result.empty(); ++i) {
                Set other(st->sets[i].items.begin(), st->sets[i].items.end());
                for (auto it = result.begin(); it != result.end();)
                  it = (op == 'i') != (other.count(*it) != 0) ? result.erase(it) : std::next(it);
              }
            }
            if (!store)
              return settle(slot, gen, seq, [&result](Pending& q) {
                resp::set(q.reply, result.size(), q.resp3);
                for (const auto& m : result) resp::bulk(q.reply, m);
              });
            Dump d;  // an empty result deletes the destination (kNone)
            d.type = result.empty() ? Dump::kNone : Dump::kSet;
            d.items.assign(result.begin(), result.end());
            const auto n = std::int64_t(result.size());
            ask(ds, store_closure, [=](Count c) { c.err != Count::kOk ? fail(count_error(c.err)) : integer(n); },
                dst, std::move(d), true, std::string(store_event));
          },
          std::move(keys[s]));
    }
    return true;
  }
  return false;
}

}  // namespace hydra
