// Blocking list commands: BLPOP, BRPOP, BLMPOP, BLMOVE, BRPOPLPUSH (and
// LMPOP, BLMPOP's non-blocking twin), and the sorted sets' BZPOPMIN,
// BZPOPMAX, BZMPOP (where 2 and 3: the lowest and highest scores), Redis
// 7.0's replies and errors.
//
// A connection blocks on keys that may live on several shards, of this
// host or another. Each shard keeps, per key, the connections blocked on it
// in the order they blocked (Shard::blocked). A push that makes a key a
// non-empty list serves them there and then (wake.cpp: keys in the order
// they became ready, per key first come first served): the shard pops for
// the first (as many elements as it asked for), forgets it on all its keys
// of that shard, and puts the elements in its thread's outbox (tl_served);
// the thread's loop sends them to the blocked connection's loop
// (Loop::dispatch_served), which replies. A connection of this host blocked
// on keys of several shards has a claim (wake.cpp) that one shard takes:
// the others forget it. One of another host can be served by two shards at
// once: its loop takes the first and gives the others' elements back to
// their lists (where they were popped, then served to the next in line),
// and tells every shard to forget it. So no element is lost or served twice.
//
// Blocking: a command whose keys are all on one shard asks that shard to
// pop or else register it, in one closure, so no push can slip in between.
// Keys on several shards are first tried in turn without registering (the
// first non-empty list, in the order of the keys' shards); if all are
// empty, every shard is asked to pop or register, and a pop there counts as
// being served (the rest is as above). A push inside MULTI/EXEC, or by
// RENAME, LMOVE and other transactions, serves the waiters when the
// transaction releases the shard (Redis serves them after EXEC).
//
// Inside MULTI, and for LMPOP, nothing blocks: an empty list answers a
// null at once, as Redis does. A blocked connection executes nothing more
// until it is served, times out (timeout 0: never) or closes; closing
// tells the shards to forget it. A served BLMOVE whose destination is on
// the source's shard moves there at once (wake.cpp); otherwise it pops like
// BLPOP and then pushes to the destination as a second step from its loop
// (not atomic across shards, unlike LMOVE; LPUSH and RPUSH answer only once
// it is done, and a shard a transaction holds parks it until the release);
// a destination that is not a list gets the element back to the source and
// the client WRONGTYPE.
//
// Keyspace events, as Redis 7.0's: with notifications on, a push serves its
// waiters only after its own events are out (notify.cpp's
// ServeAfterEvents), so RPUSH's rpush comes before the served lpop; a
// served BLMOVE's pop owes its events (Served::owed) to the push on the
// destination's shard, which sends the push's, then the pop's
// (shard_move_push).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "server.hpp"
#include "types.hpp"

namespace hydra {

namespace {

using resp::lower;

// A pop, or a registration, on one shard.
struct BlockReq {
  std::uint64_t id = 0;
  std::uint8_t where = 0;
  std::int64_t count = -1;
  bool block = false;  // register if nothing to pop
  bool move = false;   // BLMOVE: the pop's events wait for the push (Served::owed)
  std::uint8_t to = 0;  // BLMOVE: the side, the destination and its shard (BlockedOn)
  std::uint32_t dst_shard = UINT32_MAX;
  std::string dst;
  std::vector<std::string> keys;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(id, where, count, block, move, to, dst_shard, dst, keys);
  }
};

std::vector<std::string> pop_n(List& l, std::uint8_t where, std::int64_t count) {
  const std::size_t n = count < 0 ? 1 : std::min(std::size_t(count), l.size());
  std::vector<std::string> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (where == 0) {
      out.push_back(std::move(l.front()));
      l.pop_front();
    } else {
      out.push_back(std::move(l.back()));
      l.pop_back();
    }
  }
  return out;
}

}  // namespace

// Pops from `key` for a waiter: a list's head or tail (where 0, 1) or a
// sorted set's lowest or highest scores (2, 3: member, score pairs). Empty
// if there is nothing to pop; `wrong` if the key holds another type.
// With notifications on, Redis's pop events (and "del" if emptied): sent
// now, or, given `owed` (BLMOVE's pop), left there for the push's shard
// (shard_move_push), as Redis sends the destination's push first.
std::vector<std::string> pop_key(Shard& s, const std::string& key, std::uint8_t where, std::int64_t count, bool& wrong,
                                 std::uint8_t* owed) {
  std::vector<std::string> out;
  if (where < 2) {
    List* l = find_obj<List>(s, key, wrong);
    if (!l || l->empty()) return out;
    out = pop_n(*l, where, count);
    drop_if_empty(s, key, *l);
  } else {
    ZSet* z = find_obj<ZSet>(s, key, wrong);
    if (!z || z->empty()) return out;
    for (std::int64_t n = count < 0 ? 1 : count; n > 0 && !z->empty(); --n) {
      auto it = where == 2 ? z->tree.begin() : std::prev(z->tree.end());
      std::string m(it->second);
      out.push_back(m);
      out.push_back(format_score(it->first));
      z->erase(m);
    }
    drop_if_empty(s, key, *z);
  }
  touch(s, key);
  if (notifying()) [[unlikely]] {  // BLPOP..., BZPOPMIN... served: Redis's pop events, "del" if emptied
    if (owed) {
      *owed = s.objs.count(key) ? 1 : 2;
      return out;
    }
    static const char* const kPops[] = {"lpop", "rpop", "zpopmin", "zpopmax"};
    notify(where < 2 ? kNotifyList : kNotifyZset, kPops[where & 3], key);
    if (!s.objs.count(key)) notify(kNotifyGeneric, "del", key);
  }
  return out;
}

namespace {

// kError (WRONGTYPE: the first key in order that is not a list), kArray
// (items: the key, then the elements popped), or kNil (nothing to pop; the
// connection registered if `block`).
Reply shard_block(Shard& s, BlockReq r) noexcept {
  try {
    // Its claim (wake.cpp), if its loop is on this host: set, it was served
    // elsewhere or ended; free, a pop here takes it.
    const auto claim = find_claim(r.id);
    if (claim && claim->load(std::memory_order_acquire) != 0) return Reply{};
    for (const auto& key : r.keys) {
      bool wrong;
      std::uint8_t owed = 0;
      std::vector<std::string> popped;
      if (claim) {
        const bool has = has_for(s, key, r.where, wrong);
        if (has && claim->exchange(1) != 0) return Reply{};  // served meanwhile by another shard
        if (has) popped = pop_key(s, key, r.where, r.count, wrong, r.move ? &owed : nullptr);
      } else {
        popped = pop_key(s, key, r.where, r.count, wrong, r.move ? &owed : nullptr);
      }
      if (wrong) return Reply{Reply::kError, 0, kWrongType, {}, {}};
      if (popped.empty()) continue;
      Reply out{Reply::kArray, owed, {}, {key}, {}};  // n: the pop's events owed (BLMOVE)
      for (auto& v : popped) out.items.push_back(std::move(v));
      return out;
    }
    if (r.block) {
      auto& mine = s.blocked_keys[r.id];
      for (auto& key : r.keys) {
        if (std::find(mine.begin(), mine.end(), key) != mine.end()) continue;  // BLPOP k k 0
        s.blocked[key].push_back(BlockedOn{r.id, r.where, r.count, r.move, r.to, r.dst_shard, r.dst, claim});
        mine.push_back(std::move(key));
      }
    }
    return Reply{};
  } catch (...) {
    return Reply{Reply::kError, 0, "ERR out of memory", {}, {}};
  }
}

// Elements back where they were popped from, then to the next in line.
Count shard_give_back(Shard& s, Served sv) noexcept {
  try {
    bool wrong;
    if (sv.where >= 2) {  // member, score pairs back into the sorted set
      ZSet* z = make_obj<ZSet>(s, sv.key, wrong);
      if (wrong || !z) return {};
      for (std::size_t i = 0; i + 1 < sv.values.size(); i += 2) z->set(sv.values[i], std::strtod(sv.values[i + 1].c_str(), nullptr));
      touch(s, sv.key);
      signal_ready(s, sv.key);
      return {};
    }
    List* l = make_obj<List>(s, sv.key, wrong);
    if (wrong || !l) {  // the key became another type meanwhile: the elements go, and a move's pop events are owed
      notify_owed_pop(sv.key, sv.where, sv.owed);
      return {};
    }
    for (auto it = sv.values.rbegin(); it != sv.values.rend(); ++it) {
      if (sv.where == 0) l->push_front(std::move(*it));
      else l->push_back(std::move(*it));
    }
    touch(s, sv.key);
    signal_ready(s, sv.key);
  } catch (...) {
  }
  return {};
}

constexpr auto block_closure = [](Shard& s, BlockReq r) { return shard_block(s, std::move(r)); };
constexpr auto unblock_closure = [](Shard& s, std::uint64_t id) {
  forget_waiter(s, id);
  return Count{};
};
constexpr auto give_back_closure = [](Shard& s, Served sv) { return shard_give_back(s, std::move(sv)); };
constexpr auto deliver_closure = [](Shard&, Served sv) {
  if (Loop* l = Loop::current()) l->on_served(std::move(sv));
  return Count{};
};

// Redis 7.0's getTimeoutFromObjectOrReply (seconds, as a long double): ms,
// 0 for none; false with `err` set.
bool parse_timeout(std::string_view text, long long& ms, std::string& err) {
  const std::string t(text);
  char* end = nullptr;
  errno = 0;
  long double v = t.empty() || t.size() > 5120 || std::isspace(static_cast<unsigned char>(t[0])) ? NAN : std::strtold(t.c_str(), &end);
  if (std::isnan(v) || end == nullptr || *end != '\0' || (errno == ERANGE && std::isinf(v))) {
    err = "ERR timeout is not a float or out of range";
    return false;
  }
  const long double scaled = std::ceil(v * 1000.0L);
  if (scaled >= 9.2e18L) {
    err = "ERR timeout is out of range";
    return false;
  }
  ms = (long long)scaled;
  if (ms < 0) {
    err = "ERR timeout is negative";
    return false;
  }
  return true;
}

// LEFT or RIGHT (any case): 0 or 1; -1 otherwise.
int side(std::string_view w) {
  const std::string l = lower(w);
  return l == "left" ? 0 : l == "right" ? 1 : -1;
}

}  // namespace

bool Loop::execute_blocking(std::uint32_t slot, Connection& c, const std::string& name, Pending& p, std::uint64_t seq,
                            const std::vector<std::string_view>& args) {
  if (!blocking_name(name)) return false;
  const CommandSpec* spec = find_command(name);
  if (!spec || !arity_ok(*spec, args.size()))
    return resp::error(p.reply, "ERR wrong number of arguments for '" + name + "' command"), true;
  Blocked b;
  b.slot = slot;
  b.gen = c.gen;
  b.seq = seq;
  std::vector<std::string_view> keys;
  std::string_view timeout;
  if (name == "blpop" || name == "brpop" || name == "bzpopmin" || name == "bzpopmax") {
    keys.assign(args.begin() + 1, args.end() - 1);
    timeout = args.back();
    b.where = name[1] == 'z' ? (name == "bzpopmin" ? 2 : 3) : name[1] == 'r';
  } else if (name == "blmove" || name == "brpoplpush") {
    b.kind = Blocked::kMove;
    keys.push_back(args[1]);
    b.dst = std::string(args[2]);
    if (name == "blmove") {
      const int from = side(args[3]), to = side(args[4]);
      if (from < 0 || to < 0) return resp::error(p.reply, "ERR syntax error"), true;
      b.where = std::uint8_t(from);
      b.to = std::uint8_t(to);
      timeout = args[5];
    } else {
      b.where = 1;
      b.to = 0;
      timeout = args[3];
    }
  } else {  // [B]LMPOP / BZMPOP [timeout] numkeys key... LEFT|RIGHT (MIN|MAX) [COUNT n]: Redis 7.0's lmpopGenericCommand
    b.kind = Blocked::kMpop;
    const bool zset = name == "bzmpop";
    const std::size_t at = name == "lmpop" ? 1 : 2;
    long long n;
    if (!resp::parse_int64(args[at], n) || n < 1)
      return resp::error(p.reply, "ERR numkeys should be greater than 0"), true;
    const std::size_t where_at = at + std::size_t(n) + 1;
    if (std::size_t(n) >= args.size() || where_at >= args.size()) return resp::error(p.reply, "ERR syntax error"), true;
    const std::string word = lower(args[where_at]);
    const int w = zset ? (word == "min" ? 2 : word == "max" ? 3 : -1) : side(word);
    if (w < 0) return resp::error(p.reply, "ERR syntax error"), true;
    b.where = std::uint8_t(w);
    for (std::size_t j = where_at + 1; j < args.size(); ++j) {
      if (b.count == -1 && lower(args[j]) == "count" && j + 1 < args.size()) {
        long long cnt;
        if (!resp::parse_int64(args[++j], cnt) || cnt < 1)
          return resp::error(p.reply, "ERR count should be greater than 0"), true;
        b.count = cnt;
      } else {
        return resp::error(p.reply, "ERR syntax error"), true;
      }
    }
    if (b.count == -1) b.count = 1;
    keys.assign(args.begin() + std::ptrdiff_t(at) + 1, args.begin() + std::ptrdiff_t(where_at));
    if (name != "lmpop") timeout = args[1];
  }
  long long ms = 0;
  std::string err;
  if (!timeout.empty() || name != "lmpop") {
    if (!parse_timeout(timeout, ms, err)) return resp::error(p.reply, err), true;
  }
  if (too_large(args)) return resp::error(p.reply, kTooLarge), true;
  b.nonblocking = c.in_exec || name == "lmpop";  // inside MULTI: never blocks (Redis's CLIENT_DENY_BLOCKING)
  b.forever = ms == 0;
  b.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (auto k : keys) {  // the keys by shard, shards in the order of their first key
    const auto s = std::uint32_t(shard_of(k, nshards_));
    auto g = std::find_if(b.groups.begin(), b.groups.end(), [s](const auto& e) { return e.first == s; });
    if (g == b.groups.end()) b.groups.emplace_back(s, std::vector<std::string>{std::string(k)});
    else g->second.emplace_back(k);
  }
  const std::uint64_t id = (std::uint64_t(gossamer::thread_index()) << 40) | ++next_block_;
  p.waiting = 1;
  c.blocked = id;  // executes nothing more until answered
  if (!b.nonblocking) {
    b.claim = new_claim(id);  // wake.cpp: one shard serves it
    for (auto k : keys) b.marks.add(k);  // pushes to these keys are ordered (order.cpp)
  }
  blocked_.emplace(id, std::move(b));
  try_pop(id, 0);
  return true;
}

// Group i of a blocking command: pop, or (one group, may block) pop or register.
void Loop::try_pop(std::uint64_t id, std::size_t i) {
  Blocked& b = blocked_.at(id);
  const bool register_now = !b.nonblocking && b.groups.size() == 1;
  b.registered |= register_now;
  ask(b.groups[i].first, block_closure, [this, id, i, register_now, where = b.where](Reply r) {
    auto it = blocked_.find(id);
    if (r.kind == Reply::kArray) {  // handle_served replies, or gives it back if the connection is gone
      served_.push_back(Served{id, r.items[0], std::vector<std::string>(std::make_move_iterator(r.items.begin() + 1),
                                                                        std::make_move_iterator(r.items.end())), where,
                               std::uint8_t(r.n)});
      return;
    }
    if (it == blocked_.end() || it->second.done) return;  // closed, or served by another shard
    Blocked& bl = it->second;
    if (r.kind == Reply::kError) return finish_blocked(id, [&r](Pending& q) { resp::error(q.reply, r.s); });
    if (register_now) return now_blocked(bl);
    if (i + 1 < bl.groups.size()) return try_pop(id, i + 1);
    if (bl.nonblocking) {
      const bool bulk = bl.kind == Blocked::kMove;
      return finish_blocked(id, [bulk](Pending& q) {
        if (bulk) resp::nil(q.reply, q.resp3);
        else resp::null_array(q.reply, q.resp3);
      });
    }
    // Every list was empty: register everywhere, popping if one was pushed to meanwhile.
    bl.registered = true;
    bl.registering = std::uint32_t(bl.groups.size());  // in place once all have answered (order.cpp)
    now_blocked(bl);
    const auto groups = bl.groups;  // an answer may end the command (and `bl`) at once
    const std::int64_t count = bl.count;
    const bool move = bl.kind == Blocked::kMove;
    const std::uint8_t to = bl.to;
    const std::uint32_t dst_shard = move ? std::uint32_t(shard_of(bl.dst, nshards_)) : UINT32_MAX;
    const std::string dst = bl.dst;
    for (const auto& [shard_index, keys] : groups)
      ask(shard_index, block_closure, [this, id, where](Reply again) {
        if (auto bi = blocked_.find(id); bi != blocked_.end() && bi->second.registering) --bi->second.registering;
        if (again.kind == Reply::kError) {
          if (blocked_.count(id)) finish_blocked(id, [&again](Pending& q) { resp::error(q.reply, again.s); });
          return;
        }
        if (again.kind != Reply::kArray) return;
        served_.push_back(Served{id, again.items[0], std::vector<std::string>(std::make_move_iterator(again.items.begin() + 1),
                                                                              std::make_move_iterator(again.items.end())), where,
                                 std::uint8_t(again.n)});
      }, BlockReq{id, where, count, true, move, to, dst_shard, dst, keys});
  }, BlockReq{id, b.where, b.count, register_now, b.kind == Blocked::kMove, b.to,
              b.kind == Blocked::kMove ? std::uint32_t(shard_of(b.dst, nshards_)) : UINT32_MAX, b.dst, b.groups[i].second});
}

void Loop::now_blocked(Blocked& b) {
  if (b.counted) return;
  b.counted = true;
  g_stats.blocked_clients.fetch_add(1, std::memory_order_relaxed);
}

template <class Fill>
void Loop::finish_blocked(std::uint64_t id, Fill&& fill) {
  auto it = blocked_.find(id);
  if (it == blocked_.end()) return;
  Blocked b = std::move(it->second);
  blocked_.erase(it);
  if (b.claim) drop_claim(id);
  if (b.counted) g_stats.blocked_clients.fetch_sub(1, std::memory_order_relaxed);
  if (b.registered)  // every shard forgets it (the one that served already has)
    for (const auto& g : b.groups) ask(g.first, unblock_closure, [](Count) {}, id);
  Connection* c = find(b.slot, b.gen);
  if (!c) return;
  if (c->blocked == id) c->blocked = 0;
  settle(b.slot, b.gen, b.seq, std::forward<Fill>(fill));  // EXEC may wait for it (Loop::run_queue)
}

void Loop::on_served(Served sv) { served_.push_back(std::move(sv)); }

// CLIENT UNBLOCK id [TIMEOUT|ERROR]: answered as a timeout (a null) or
// with Redis's UNBLOCKED error, in this loop's next round (handle_served).
std::int64_t Loop::on_unblock(std::uint64_t client, bool error) {
  for (const auto& c : conns_) {
    if (!c || c->id != client || !c->blocked) continue;
    auto it = blocked_.find(c->blocked);
    if (it == blocked_.end() || !it->second.counted || it->second.done) return 0;
    if (it->second.claim && it->second.claim->exchange(1) != 0) return 0;  // a shard served it: its answer is on the way
    unblocks_.emplace_back(c->blocked, error);
    return 1;
  }
  return 0;
}

// The shard's outbox: to the blocked connections' loops.
void Loop::dispatch_served() {
  std::vector<Served> out;
  out.swap(tl_served);
  for (auto& sv : out) {
    const std::uint32_t t = block_thread(sv.id);
    if (t == gossamer::thread_index()) served_.push_back(std::move(sv));
    else ask(t, deliver_closure, [](Count) {}, std::move(sv));
  }
}

// Elements popped for this loop's blocked connections: the reply, or back
// to the list when the connection no longer waits.
void Loop::handle_served() {
  std::vector<std::pair<std::uint64_t, bool>> unblocks;
  unblocks.swap(unblocks_);
  for (auto [id, error] : unblocks)
    finish_blocked(id, [error](Pending& q) {
      if (error) resp::error(q.reply, "UNBLOCKED client unblocked via CLIENT UNBLOCK");
      else resp::null_array(q.reply, q.resp3);
    });
  std::vector<Served> in;
  in.swap(served_);
  for (auto& sv : in) {
    auto it = blocked_.find(sv.id);
    if (sv.moved >= 3) {  // a parked push done (wake.cpp): the answer; refused, the element goes back
      if (sv.moved == 4) {
        std::string err = sv.values.size() > 1 ? sv.values[1] : std::string(kWrongType);
        sv.values.resize(1);
        ask(shard_of(sv.key, nshards_), give_back_closure, [](Count) {}, sv);
        if (it != blocked_.end()) finish_blocked(sv.id, [&err](Pending& q) { resp::error(q.reply, err); });
      } else if (it != blocked_.end()) {
        finish_blocked(sv.id, [&sv](Pending& q) { resp::bulk(q.reply, sv.values.empty() ? std::string() : sv.values[0]); });
      }
      continue;
    }
    if (it == blocked_.end() || it->second.done) {
      if (sv.origin.weight) tl_returns.push_back(sv.origin);  // the push's reply waits no longer for it
      if (sv.moved) continue;  // moved within its shard (or WRONGTYPE, nothing popped): nothing to give back
      const auto home = shard_of(sv.key, nshards_);
      ask(home, give_back_closure, [](Count) {}, std::move(sv));
      continue;
    }
    Blocked& b = it->second;
    b.done = true;
    const std::uint64_t id = sv.id;
    if (sv.moved == 2) {  // BLMOVE within a shard, the destination of another type (wake.cpp)
      finish_blocked(id, [](Pending& q) { resp::error(q.reply, kWrongType); });
    } else if (sv.moved == 1) {  // ... moved there already
      finish_blocked(id, [&sv](Pending& q) { resp::bulk(q.reply, sv.values.empty() ? std::string() : sv.values[0]); });
    } else if (sv.where >= 2) {  // BZPOPMIN/BZPOPMAX: [key, member, score]; BZMPOP: [key, [[member, score]...]]
      const bool mpop = b.kind == Blocked::kMpop;
      finish_blocked(id, [&sv, mpop](Pending& q) {
        resp::array(q.reply, mpop ? 2 : 3);
        resp::bulk(q.reply, sv.key);
        if (mpop) resp::array(q.reply, sv.values.size() / 2);
        for (std::size_t i = 0; i + 1 < sv.values.size(); i += 2) {
          if (mpop) resp::array(q.reply, 2);
          resp::bulk(q.reply, sv.values[i]);
          resp::dbl(q.reply, sv.values[i + 1], q.resp3);
        }
      });
    } else if (b.kind == Blocked::kPop) {
      finish_blocked(id, [&sv](Pending& q) {
        resp::array(q.reply, 2);
        resp::bulk(q.reply, sv.key);
        resp::bulk(q.reply, sv.values.empty() ? std::string() : sv.values[0]);
      });
    } else if (b.kind == Blocked::kMpop) {
      finish_blocked(id, [&sv](Pending& q) {
        resp::array(q.reply, 2);
        resp::bulk(q.reply, sv.key);
        resp::array(q.reply, sv.values.size());
        for (const auto& v : sv.values) resp::bulk(q.reply, v);
      });
    } else {  // BLMOVE: then the push to the destination, and there the pop's events (owed)
      // With credit (an LPUSH or RPUSH waits for this push): the moves it
      // serves in turn take part of it, the rest goes back (wake.cpp).
      // A shard a transaction holds parks it until the release (wake.cpp);
      // the credit goes back at once (the transaction may wait for the
      // push's reply on its own connection).
      auto push = [](Shard& s, Op op, std::vector<std::string> a, std::string src, std::uint8_t from, std::uint8_t owed,
                     Origin credit, std::uint64_t waiter, bool may_park) {
        if (may_park && s.owner) {  // (inside EXEC, BLMOVE never blocks: the shard is its own transaction's)
          if (credit.weight) tl_returns.push_back(credit);
          s.parked.push_back(Parked{Served{waiter, std::move(src), {std::move(a[1])}, from, owed, 0, {}}, std::move(a[0]),
                                    std::uint8_t(op == Op::kLpush ? 0 : 1)});
          return Reply{};  // kNil: parked
        }
        tl_origin = credit.weight ? &credit : nullptr;
        Reply r = shard_move_push(s, op, std::move(a), std::move(src), from, owed);
        tl_origin = nullptr;
        if (credit.weight) tl_returns.push_back(credit);
        return r;
      };
      const std::string value = sv.values.empty() ? std::string() : sv.values[0];
      const std::string src = sv.key;
      const std::uint8_t from = sv.where, owed = sv.owed;
      const Origin credit = sv.origin;
      auto back = std::make_shared<Served>(std::move(sv));  // owed: sent if the give-back fails
      ask(shard_of(b.dst, nshards_), push, [this, id, back, value](Reply pushed) {
        if (pushed.kind == Reply::kNil) return;  // parked: its Served (moved 3 or 4) comes after the release
        if (pushed.kind == Reply::kError) {
          ask(shard_of(back->key, nshards_), give_back_closure, [](Count) {}, *back);
          return finish_blocked(id, [&pushed](Pending& q) { resp::error(q.reply, pushed.s); });
        }
        finish_blocked(id, [&value](Pending& q) { resp::bulk(q.reply, value); });
      }, b.to == 0 ? Op::kLpush : Op::kRpush, std::vector<std::string>{b.dst, value}, src, from, owed, credit, id, !b.nonblocking);
    }
  }
}

// Blocked connections past their timeout: a null array, as Redis.
void Loop::block_timeouts() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::uint64_t> due;
  for (const auto& [id, b] : blocked_)
    if (!b.forever && !b.done && b.counted && now >= b.deadline && (!b.claim || b.claim->exchange(1) == 0)) due.push_back(id);
  for (std::uint64_t id : due) finish_blocked(id, [](Pending& q) { resp::null_array(q.reply, q.resp3); });
}

// A blocked connection closed: the shards forget it; elements served to it
// meanwhile go back (handle_served).
void Loop::drop_blocked(Connection& c) {
  auto it = blocked_.find(c.blocked);
  c.blocked = 0;
  if (it == blocked_.end()) return;
  Blocked& b = it->second;
  if (b.claim) {  // served meanwhile: what it was served comes back to handle_served, which finds no connection
    b.claim->exchange(1);
    drop_claim(it->first);
  }
  if (b.counted) g_stats.blocked_clients.fetch_sub(1, std::memory_order_relaxed);
  if (b.registered)
    for (const auto& g : b.groups) ask(g.first, unblock_closure, [](Count) {}, it->first);
  if (b.done) {  // BLMOVE's push under way: its answer finds nothing to answer
    b.counted = false;
    b.registered = false;
    return;
  }
  blocked_.erase(it);
}

}  // namespace hydra
