// MULTI / EXEC / DISCARD / WATCH / UNWATCH, and the commands that must see
// every shard they touch at once (MSET, MGET, DEL, EXISTS over several
// shards; MSETNX, RENAME, RENAMENX, COPY, SINTER... always): each runs as one
// transaction over its shards, atomic across shards and hosts.
//
// A transaction, run by the I/O loop of its connection (the coordinator):
//  1. Claims its shards one by one in ascending order (a closure that sets
//     Shard::owner; while another transaction holds the shard, the claim
//     waits in the shard's queue and the release hands the shard over).
//     One global order: no deadlock.
//  2. Fences them: tells every loop of the rack to send nothing more to
//     those shards. A loop that gets a fence holds each command touching a
//     fenced shard (it stops reading that connection), sends one empty
//     closure ("marker") to each fenced shard, and when the markers are
//     served (requests from one thread to one trustee are served in order,
//     so its earlier requests to those shards are too) confirms to the
//     coordinator.
//  3. Runs: with every loop confirmed, nothing but this transaction reaches
//     its shards. It checks its WATCHed keys' versions, then executes its
//     commands as ordinary requests (in order per shard); a marker request
//     queued after them tells, when it reaches the front of the replies,
//     that all have answered.
//  4. Releases: unclaims its shards and lifts its fence on every loop; held
//     commands run again.
// The connection reads nothing more meanwhile. Commands on other shards
// never wait; commands on the shards pay one branch when no fence is up.
#include <algorithm>
#include <climits>
#include <memory>

#include "server.hpp"

namespace hydra {

namespace {

// Closures that reach another thread's loop: they run on that thread, by
// its trustee, and find the loop in a thread_local.
// A captureless lambda, not a function: a closure crosses hosts as its
// bytes, and a function pointer would not be valid there.
constexpr auto fence_closure = [](Shard&, std::uint64_t id, std::uint32_t coordinator, std::vector<std::uint32_t> shards) {
  Loop* l = Loop::current();
  if (!l) return Count{1, Count::kOk};  // no loop (stopped): nothing to hold
  l->on_fence(id, coordinator, std::move(shards));
  return Count{};
};

}  // namespace

std::vector<std::uint32_t> Loop::shards_of(const std::string& name, const std::vector<std::string_view>& args) const {
  std::vector<std::uint32_t> out;
  const CommandSpec* spec = find_command(name);
  if (!spec || !arity_ok(*spec, args.size())) return out;
  if (spec->all_shards) {
    for (std::uint32_t i = 0; i < nshards_; ++i) out.push_back(i);
    return out;
  }
  if (name == "sort" || name == "sort_ro") {  // the key, STORE's destination; every shard for BY/GET patterns
    if (sort_reads_patterns(args)) {
      for (std::uint32_t i = 0; i < nshards_; ++i) out.push_back(i);
      return out;
    }
    out.push_back(std::uint32_t(shard_of(args[1], nshards_)));
    for (std::size_t i = 2; i + 1 < args.size(); ++i)
      if (resp::lower(args[i]) == "store") out.push_back(std::uint32_t(shard_of(args[i + 1], nshards_)));
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  const bool znumkeys = name == "zunionstore" || name == "zinterstore" || name == "zdiffstore" || name == "zunion" ||
                        name == "zinter" || name == "zdiff" || name == "zintercard" || name == "zmpop" || name == "sintercard";
  if (name == "blmpop" || name == "lmpop" || name == "bzmpop" || znumkeys) {  // keys after numkeys
    const std::size_t at = name == "blmpop" || name == "bzmpop" || name.ends_with("store") ? 2 : 1;
    if (name.ends_with("store")) out.push_back(std::uint32_t(shard_of(args[1], nshards_)));
    long long n = 0;
    if (!resp::parse_int64(args[at], n) || n < 1 || std::size_t(n) > args.size() - at - 1) return out;
    for (std::size_t i = at + 1; i <= at + std::size_t(n); ++i) out.push_back(std::uint32_t(shard_of(args[i], nshards_)));
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  if (spec->first == 0) return out;
  // last: -1 the last argument, -2 the one before (BLPOP's keys, then its timeout)
  const std::size_t last = spec->last < 0 ? args.size() + spec->last : std::min<std::size_t>(spec->last, args.size() - 1);
  for (std::size_t i = std::size_t(spec->first); i <= last; i += std::size_t(spec->step))
    out.push_back(std::uint32_t(shard_of(args[i], nshards_)));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool Loop::fenced(const std::string& name, const std::vector<std::string_view>& args) const {
  for (std::uint32_t s : shards_of(name, args))
    if (fenced_[s]) return true;
  return false;
}

bool Loop::transaction_command(std::uint32_t slot, Connection& c, const std::string& name,
                               const std::vector<std::string_view>& args) {
  auto reply = [&](auto fill) {
    Pending& p = c.pending.emplace_back();
    p.resp3 = c.resp3;
    fill(p.reply);
    return true;
  };
  // Until a fence lifts (fence_rounds marks it dirty), or until the
  // replies before it complete (each answer marks it dirty).
  auto hold = [&](bool fence) {
    c.held.assign(args.begin(), args.end());
    if (fence) held_.push_back(slot);
    return true;
  };
  const bool control = name == "exec" || name == "discard" || name == "multi" || name == "watch" || name == "quit";
  if (control && name != "quit") {
    const CommandSpec* spec = find_command(name);
    if (!arity_ok(*spec, args.size())) {  // refused as Redis 7.0's rejectCommand: it fails the MULTI
      const std::string text = "wrong number of arguments for '" + name + "' command";
      if (name != "exec") {
        c.multi_error = c.in_multi;
        return reply([&](std::string& r) { resp::error(r, "ERR " + text); });
      }
      c.in_multi = c.multi_error = false;  // EXEC's abort: discards, whether in MULTI or not
      c.queued.clear();
      unwatch_all(c);
      return reply([&](std::string& r) { resp::error(r, "EXECABORT Transaction discarded because of: " + text); });
    }
  }
  if (c.in_multi && !control) {
    // Redis 7.0's processCommand: an unknown command or a wrong arity is
    // refused now and fails the EXEC; anything else is queued as it is.
    const CommandSpec* spec = find_command(name);
    if (!spec || !arity_ok(*spec, args.size())) {
      c.multi_error = true;
      if (!spec) return reply([&](std::string& r) { resp::error(r, unknown_command(args)); });
      return reply([&](std::string& r) { resp::error(r, "ERR wrong number of arguments for '" + name + "' command"); });
    }
    if (name == "shutdown") {  // Redis 7.0's CMD_NO_MULTI (of the commands Hydra knows)
      c.multi_error = true;
      return reply([](std::string& r) { resp::error(r, "ERR Command not allowed inside a transaction"); });
    }
    c.queued.emplace_back(args.begin(), args.end());
    return reply([](std::string& r) { resp::simple(r, "QUEUED"); });
  }
  auto arity_error = [&](std::string& r) { resp::error(r, "ERR wrong number of arguments for '" + name + "' command"); };
  // MONITOR (monitor.cpp): the control commands that run here, as Redis
  // shows them; EXEC's commands and EXEC itself when they run (run_queue).
  if (g_monitors.load(std::memory_order_relaxed) && (name == "multi" || name == "discard" || name == "unwatch" ||
      (name == "exec" && (!c.in_multi || c.multi_error)) || (name == "watch" && (c.in_multi || c.in_exec || fences_.empty() || !fenced(name, args)))))
    feed_monitors(c, args);
  if (name == "multi") {
    if (c.in_multi) return reply([](std::string& r) { resp::error(r, "ERR MULTI calls can not be nested"); });
    c.in_multi = true;
    c.multi_error = false;
    return reply([](std::string& r) { resp::simple(r, "OK"); });
  }
  if (name == "discard") {
    if (!c.in_multi) return reply([](std::string& r) { resp::error(r, "ERR DISCARD without MULTI"); });
    c.in_multi = c.multi_error = false;
    c.queued.clear();
    unwatch_all(c);
    return reply([](std::string& r) { resp::simple(r, "OK"); });
  }
  if (name == "exec") {
    if (!c.in_multi) return reply([](std::string& r) { resp::error(r, "ERR EXEC without MULTI"); });
    if (c.multi_error) {
      c.in_multi = c.multi_error = false;
      c.queued.clear();
      unwatch_all(c);
      return reply([](std::string& r) { resp::error(r, "EXECABORT Transaction discarded because of previous errors."); });
    }
    // WATCH's versions must have arrived: wait for the replies before this.
    for (const Pending& q : c.pending)
      if (q.waiting) return hold(false);
    std::vector<std::uint32_t> shards;
    for (const auto& cmd : c.queued) {
      std::vector<std::string_view> a(cmd.begin(), cmd.end());
      for (std::uint32_t s : shards_of(resp::lower(cmd[0]), a)) shards.push_back(s);
    }
    for (const auto& w : c.watches) shards.push_back(std::uint32_t(shard_of(w.key, nshards_)));
    std::sort(shards.begin(), shards.end());
    shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
    c.in_multi = false;
    Pending& p = c.pending.emplace_back();  // the array's header, once the shards are ours
    p.resp3 = c.resp3;
    p.waiting = 1;
    begin_txn(slot, c, std::move(shards), true, std::vector<std::string>(args.begin(), args.end()));  // EXEC as sent: MONITOR
    return true;
  }
  if (name == "watch") {
    if (c.in_multi) return reply([](std::string& r) { resp::error(r, "ERR WATCH inside MULTI is not allowed"); });
    if (!c.in_exec && !fences_.empty() && fenced(name, args)) return hold(true);
    Pending& p = c.pending.emplace_back();
    p.resp3 = c.resp3;
    watch(slot, c, p, c.base + c.pending.size() - 1, args);
    return true;
  }
  if (name == "unwatch") {
    if (args.size() != 1) return reply(arity_error);
    unwatch_all(c);
    return reply([](std::string& r) { resp::simple(r, "OK"); });
  }
  if (c.in_exec) return false;  // inside a transaction: run as it is
  if (!fences_.empty() && fenced(name, args)) return hold(true);
  const CommandSpec* spec = find_command(name);
  if (!spec || !arity_ok(*spec, args.size()) || ((name == "mset" || name == "msetnx") && args.size() % 2 == 0))
    return false;  // execute() answers the error
  if (blocking_name(name)) return false;  // BLPOP...: blocking.cpp, never a transaction of its own
  if (!always_transaction(name)) {  // MSET, MGET, DEL, EXISTS: a transaction if on several shards
    std::vector<std::uint32_t> shards = shards_of(name, args);
    if (shards.size() < 2) return false;
    begin_txn(slot, c, std::move(shards), false, std::vector<std::string>(args.begin(), args.end()));
    return true;
  }
  begin_txn(slot, c, shards_of(name, args), false, std::vector<std::string>(args.begin(), args.end()));
  return true;
}

// WATCH k...: each key's shard registers a watcher and answers the key's
// version, which EXEC compares.
void Loop::watch(std::uint32_t slot, Connection& c, Pending& p, std::uint64_t seq,
                 const std::vector<std::string_view>& args) {
  std::vector<std::vector<std::string>> groups(nshards_);
  std::vector<std::uint32_t> used;
  for (std::size_t i = 1; i < args.size(); ++i) {
    auto s = std::uint32_t(shard_of(args[i], nshards_));
    if (groups[s].empty()) used.push_back(s);
    groups[s].emplace_back(args[i]);
  }
  p.kind = Pending::Kind::kOk;
  p.waiting = std::uint32_t(used.size());
  inflight_ += used.size();
  const std::uint32_t gen = c.gen;
  for (std::uint32_t s : used) {
    std::vector<std::string> keys = groups[s];
    shard(s).apply_with_then(
        [](Shard& sh, std::vector<std::string> ks) {
          std::vector<std::uint64_t> versions;
          try {
            for (auto& k : ks) {
              expire_if_due(sh, k);  // a key already stale does not fail the EXEC (Redis 7.0)
              Watch& w = sh.watched[k];
              ++w.watchers;
              versions.push_back(w.version);
            }
          } catch (...) {  // out of memory: the keys counted so far stay watched (unwatch_all undoes them)
          }
          return versions;
        },
        [this, slot, gen, seq, keys](std::vector<std::uint64_t> versions) {
          Connection* conn = find(slot, gen);
          if (conn)
            for (std::size_t i = 0; i < versions.size() && i < keys.size(); ++i)
              conn->watches.push_back({keys[i], versions[i]});
          answer(slot, gen, seq, [](Pending&) {});
        },
        std::move(groups[s]));
  }
}

void Loop::unwatch_all(Connection& c) {
  if (c.watches.empty()) return;
  std::vector<std::vector<std::string>> groups(nshards_);
  for (auto& w : c.watches) groups[shard_of(w.key, nshards_)].push_back(std::move(w.key));
  c.watches.clear();
  for (std::uint32_t s = 0; s < nshards_; ++s) {
    if (groups[s].empty()) continue;
    ++inflight_;
    shard(s).apply_with_then(
        [](Shard& sh, std::vector<std::string> ks) {
          for (const auto& k : ks) {
            auto w = sh.watched.find(k);
            if (w != sh.watched.end() && --w->second.watchers == 0) sh.watched.erase(w);
          }
          return Count{};
        },
        [this](Count) { --inflight_; }, std::move(groups[s]));
  }
}

// ---- the coordinator -------------------------------------------------------------

void Loop::begin_txn(std::uint32_t slot, Connection& c, std::vector<std::uint32_t> shards, bool exec,
                     std::vector<std::string> command) {
  const std::uint64_t id = (std::uint64_t(gossamer::thread_index()) << 48) | ++next_txn_;  // unique in the rack
  Txn& t = txns_[id];
  t.slot = slot;
  t.gen = c.gen;
  t.shards = std::move(shards);
  t.exec = exec;
  t.command = std::move(command);
  c.txn = id;
  c.txn_end = c.txn_resume = UINT64_MAX;
  if (t.shards.empty()) advance_.push_back(id);
  else claim_next(id);  // now: a command this loop reads after it finds the shard claimed
}

void Loop::advance_txns() {
  std::vector<std::uint64_t> ids;
  ids.swap(advance_);
  for (std::uint64_t id : ids) {
    auto it = txns_.find(id);
    if (it == txns_.end()) continue;
    Txn& t = it->second;
    if (t.phase == Txn::kClaiming && t.claimed < t.shards.size()) {
      claim_next(id);
    } else if (t.phase == Txn::kClaiming) {
      t.phase = Txn::kFencing;
      if (t.shards.empty()) {
        run_txn(id);
        continue;
      }
      t.acks_owed = std::uint32_t(nshards_);  // one loop per thread, every host
      inflight_ += nshards_;
      for (std::uint32_t i = 0; i < nshards_; ++i)
        shard(i).apply_with_then(fence_closure, [this, id](Count n) {
          --inflight_;
          if (n.n) on_ack(id);
        }, id, std::uint32_t(gossamer::thread_index()), t.shards);
    } else if (t.phase == Txn::kRunning) {
      run_txn(id);
    } else if (t.phase == Txn::kExecuting) {
      run_queue(id);
    }
  }
}

// A shard held by another transaction queues the claim (Shard::waiting,
// first come first served); the release hands the shard to the next in
// line and tells its coordinator (release, on_granted). No polling.
void Loop::claim_next(std::uint64_t id) {
  const Txn& t = txns_.at(id);
  ++inflight_;
  shard(t.shards[t.claimed]).apply_with_then(
      [](Shard& s, std::uint64_t txn, std::uint32_t coordinator) {
        if (s.owner == 0 || s.owner == txn) {
          s.owner = txn;
          return Count{1, Count::kOk};
        }
        try {
          s.waiting.emplace_back(txn, coordinator);
        } catch (...) {
          return Count{0, Count::kOutOfMemory};  // not queued: the coordinator asks again
        }
        return Count{0, Count::kOk};
      },
      [this, id](Count granted) {
        --inflight_;
        auto it = txns_.find(id);
        if (it == txns_.end()) return;
        it->second.claimed += std::size_t(granted.n);
        if (granted.n || granted.err != Count::kOk) advance_.push_back(id);  // the next shard, or again
      },
      id, std::uint32_t(gossamer::thread_index()));
}

void Loop::on_granted(std::uint64_t id, std::uint32_t shard_index) {
  auto it = txns_.find(id);
  if (it != txns_.end() && it->second.phase == Txn::kClaiming && it->second.claimed < it->second.shards.size() &&
      it->second.shards[it->second.claimed] == shard_index) {
    ++it->second.claimed;
    advance_.push_back(id);
    return;
  }
  release(shard_index, id);  // nobody wants it any more (cannot happen while transactions end only once claimed)
}

// Gives up `txn`'s hold on a shard: to the next transaction in its queue
// (whose coordinator is told), or free; then `then` (its waiters served).
void Loop::release(std::uint32_t shard_index, std::uint64_t txn, std::function<void()> then) {
  ++inflight_;
  shard(shard_index).apply_with_then([](Shard& s, std::uint64_t id) {
    if (s.owner != id) return Count{};
    if (s.waiting.empty()) {
      s.owner = 0;
      if (!s.ready.empty() || !s.parked.empty()) shard_unowned(s);  // pushes wake blocked connections (wake.cpp)
      return Count{};
    }
    auto [next, coordinator] = s.waiting.front();
    s.waiting.pop_front();
    s.owner = next;
    return Count{std::int64_t(next), Count::kOk, std::int64_t(coordinator)};
  }, [this, shard_index, then = std::move(then)](Count next) {
    --inflight_;
    if (then) then();
    if (next.n == 0) return;
    ++inflight_;
    shard(std::size_t(next.expiring)).apply_with_then([](Shard&, std::uint64_t id, std::uint32_t s) {
      if (Loop* l = Loop::current()) l->on_granted(id, s);
      return Count{};
    }, [this](Count) { --inflight_; }, std::uint64_t(next.n), shard_index);
  }, txn);
}

void Loop::on_ack(std::uint64_t id) {
  auto it = txns_.find(id);
  if (it == txns_.end() || it->second.acks_owed == 0) return;
  if (--it->second.acks_owed == 0) {
    it->second.phase = Txn::kRunning;
    advance_.push_back(id);
  }
}

// Every loop holds nothing for these shards now: check the WATCHed keys,
// then run the commands, then a marker request whose turn in the reply
// queue ends the transaction (Loop::flush).
void Loop::run_txn(std::uint64_t id) {
  Txn& t = txns_.at(id);
  Connection* c = find(t.slot, t.gen);
  if (!c || c->dead) return end_txn(id);
  if (t.exec && !t.checked && !c->watches.empty()) {
    // One closure per watched key's shard: how many of its keys changed.
    std::vector<std::vector<std::string>> keys(nshards_);
    std::vector<std::vector<std::uint64_t>> versions(nshards_);
    for (const auto& w : c->watches) {
      auto s = shard_of(w.key, nshards_);
      keys[s].push_back(w.key);
      versions[s].push_back(w.version);
    }
    auto state = std::make_shared<std::pair<std::uint32_t, bool>>(0, false);  // checks owed, some key changed
    for (std::uint32_t s = 0; s < nshards_; ++s) {
      if (keys[s].empty()) continue;
      ++state->first;
      ++inflight_;
      shard(s).apply_with_then(
          [](Shard& sh, std::vector<std::string> ks, std::vector<std::uint64_t> vs) {
            std::int64_t changed = 0;
            for (std::size_t i = 0; i < ks.size(); ++i) {
              expire_if_due(sh, ks[i]);  // expired since WATCH: changed
              auto w = sh.watched.find(ks[i]);
              if (w == sh.watched.end() || w->second.version != vs[i]) ++changed;
            }
            return Count{changed, Count::kOk};
          },
          [this, id, state](Count changed) {
            --inflight_;
            if (changed.n) state->second = true;
            if (--state->first == 0) {
              auto it = txns_.find(id);
              if (it == txns_.end()) return;
              it->second.checked = true;
              it->second.aborted = state->second;
              run_txn(id);
            }
          },
          std::move(keys[s]), std::move(versions[s]));
    }
    unwatch_all(*c);  // EXEC unwatches, whatever happens (after the checks: in order per shard)
    return;
  }
  if (t.exec) unwatch_all(*c);  // a command's own transaction (RENAME, SORT ... STORE) keeps the connection's WATCHes
  Pending* header = nullptr;
  if (t.exec) {  // EXEC: its header is the last reply (input stopped since)
    header = &c->pending.back();
    header->waiting = 0;
    if (t.aborted) {  // a WATCHed key changed
      feed_exec(*c, t.command);
      resp::null_array(header->reply, header->resp3);
      c->queued.clear();
      mark_dirty(t.slot);
      return end_txn(id);
    }
    resp::array(header->reply, c->queued.size());
    header->counted += header->reply.size();
    c->reply_bytes += header->reply.size();
  }
  c->in_exec = true;
  if (header) t.queue.swap(c->queued);
  else t.queue.push_back(std::move(t.command));
  t.phase = Txn::kExecuting;
  run_queue(id);
}

// Sends the transaction's commands in order, pipelined; after a command of
// several steps (RENAME...), waits for its reply (Loop::settle) so that the
// commands after it see all of its steps.
void Loop::run_queue(std::uint64_t id) {
  Txn& t = txns_.at(id);
  Connection* c = find(t.slot, t.gen);
  if (!c) return end_txn(id);
  while (t.next < t.queue.size()) {
    const auto& cmd = t.queue[t.next++];
    std::vector<std::string_view> a(cmd.begin(), cmd.end());
    execute(t.slot, *c, a);
    const std::string n = resp::lower(cmd[0]);
    if ((always_transaction(n) || blocking_name(n)) && !c->pending.empty() && c->pending.back().waiting) {
      c->txn_resume = c->base + c->pending.size() - 1;
      return;
    }
  }
  if (t.exec) feed_exec(*c, t.command);  // MONITOR shows EXEC after its commands, as Redis
  Pending& end = c->pending.emplace_back();  // no bytes: its turn ends the transaction
  end.waiting = 1;
  c->txn_end = c->base + c->pending.size() - 1;
  mark_dirty(t.slot);
}

void Loop::feed_exec(const Connection& c, const std::vector<std::string>& exec) const {
  if (!g_monitors.load(std::memory_order_relaxed)) return;
  feed_monitors(c, std::vector<std::string_view>(exec.begin(), exec.end()));
}

void Loop::end_txn(std::uint64_t id) {
  auto it = txns_.find(id);
  if (it == txns_.end()) return;
  Txn t = std::move(it->second);
  txns_.erase(it);
  // With connections of this host blocked, one shard after the other,
  // ascending (its waiters served before the next's: wake.cpp); else at once.
  if (t.claimed > 1 && g_stats.blocked_clients.load(std::memory_order_relaxed) > 0) {
    struct Step {  // releases shards[i], then the next
      Loop* loop; std::shared_ptr<const std::vector<std::uint32_t>> shards; std::uint64_t txn; std::size_t i;
      void operator()() const {
        if (i + 1 < shards->size()) loop->release((*shards)[i], txn, Step{loop, shards, txn, i + 1});
        else loop->release((*shards)[i], txn);
      }
    };
    Step{this, std::make_shared<const std::vector<std::uint32_t>>(t.shards.begin(), t.shards.begin() + std::ptrdiff_t(t.claimed)),
         id, 0}();
  } else {
    for (std::size_t i = 0; i < t.claimed; ++i) release(t.shards[i], id);
  }
  if (t.phase != Txn::kClaiming) {
    if (!t.shards.empty()) {  // the fence went out: lift it everywhere
      inflight_ += nshards_;
      for (std::uint32_t i = 0; i < nshards_; ++i)
        shard(i).apply_with_then([](Shard&, std::uint64_t txn) {
          if (Loop* l = Loop::current()) l->on_unfence(txn);
          return Count{};
        }, [this](Count) { --inflight_; }, id);
    }
  }
  if (Connection* c = find(t.slot, t.gen); c && c->txn == id) {
    c->txn = 0;
    c->txn_end = UINT64_MAX;
    c->in_exec = false;
    mark_dirty(t.slot);  // reads again
  }
}

// ---- fences, on every loop ----------------------------------------------------------

void Loop::on_fence(std::uint64_t id, std::uint32_t coordinator, std::vector<std::uint32_t> shards) {
  for (std::uint32_t s : shards) ++fenced_[s];
  fences_.push_back({id, coordinator, std::move(shards), 0, false});
  fence_work_ = true;  // the markers go out this loop's next round
}

void Loop::on_unfence(std::uint64_t id) {
  for (std::size_t i = 0; i < fences_.size(); ++i) {
    if (fences_[i].id != id) continue;
    for (std::uint32_t s : fences_[i].shards) --fenced_[s];
    fences_.erase(fences_.begin() + std::ptrdiff_t(i));
    fence_work_ = true;  // held commands may run now
    return;
  }
}

// A round's transaction work: coordinated transactions' next steps, the
// markers of new fences, and held commands to retry.
void Loop::fence_rounds() {
  if (!advance_.empty()) advance_txns();
  if (!fence_work_) return;
  fence_work_ = false;
  // What to send is copied first: a send may suspend this fiber (the
  // runtime's bound on requests in flight), and meanwhile this thread's
  // trustee may run on_fence / on_unfence, which change fences_.
  std::vector<std::pair<std::uint64_t, std::uint32_t>> markers;  // (fence id, shard)
  for (Fence& f : fences_) {
    if (f.started) continue;
    f.started = true;
    f.markers_owed = std::uint32_t(f.shards.size());
    for (std::uint32_t s : f.shards) markers.emplace_back(f.id, s);
  }
  inflight_ += markers.size();
  for (auto [id, s] : markers)
    shard(s).apply_then([](Shard&) { return Count{}; }, [this, id](Count) {
      --inflight_;
      auto f = std::find_if(fences_.begin(), fences_.end(), [id](const Fence& g) { return g.id == id; });
      if (f == fences_.end() || --f->markers_owed != 0) return;
      const std::uint32_t coordinator = f->coordinator;  // f may not outlive the send
      ++inflight_;  // this loop's requests to the shards are served: confirm
      shard(coordinator).apply_with_then([](Shard&, std::uint64_t txn) {
        if (Loop* l = Loop::current()) l->on_ack(txn);
        return Count{};
      }, [this](Count) { --inflight_; }, id);
    });
  std::vector<std::uint32_t> held;
  held.swap(held_);
  for (std::uint32_t slot : held)
    if (slot < conns_.size() && conns_[slot] && !conns_[slot]->held.empty()) mark_dirty(slot);
}

void Loop::retry_held(std::uint32_t slot, Connection& c) {
  std::vector<std::string> cmd;
  cmd.swap(c.held);
  std::vector<std::string_view> args(cmd.begin(), cmd.end());
  execute(slot, c, args);
}

}  // namespace hydra
