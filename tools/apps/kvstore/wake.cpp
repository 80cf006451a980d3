// Serving blocked connections (blocking.cpp blocks them), as Redis 7.0's
// handleClientsBlockedOnKeys: a write that makes keys ready serves their
// waiters before anything else runs on the shard, key by key in the order
// the keys became ready (Shard::ready), and per key in blocking order.
//
// Claims. A connection blocked on keys of several shards is registered on
// each; so that only one of them serves it, each blocked command of this
// host has a claim (an atomic byte, in a registry by id): the shard that
// serves it, or its loop when it times out, is unblocked or closes, sets
// it first, and a shard finding it set forgets the waiter. A waiter whose
// loop is on another host has no claim here: it may be served by two
// shards, and its loop gives the surplus back (blocking.cpp).
//
// Moves. A BLMOVE (BRPOPLPUSH) waiter whose destination is on the same
// shard is served here at once: the pop and the push in one step, as
// Redis's serveClientBlockedOnList, and the push makes its destination
// ready in turn (so a chain of moves ends before the write's closure
// returns). A destination of another type leaves the element where it is
// and answers WRONGTYPE. A destination on another shard takes a second
// step from the connection's loop (blocking.cpp); LPUSH and RPUSH then hold
// their reply until those steps (and the moves they serve in turn) are
// done: credit (Origin::weight) goes with each, and comes back to the
// push's loop when the step ends (Loop::on_credit).
#include <algorithm>
#include <mutex>

#include "server.hpp"
#include "types.hpp"

namespace hydra {

namespace {

std::mutex g_claims_mu;
std::unordered_map<std::uint64_t, std::shared_ptr<std::atomic<std::uint8_t>>> g_claims;

// True if `w` is ours to serve now (its claim, if any, was free: taken).
bool take(const BlockedOn& w) { return !w.claim || w.claim->exchange(1) == 0; }

// Serves `key`'s waiters in blocking order, skipping those of the other
// kind (a list waiter on a key that now holds a sorted set, or the
// reverse), as Redis serves only the clients whose blocking type matches.
void serve_one(Shard& s, const std::string& key) {
  for (std::size_t i = 0;;) {
    auto b = s.blocked.find(key);
    if (b == s.blocked.end() || i >= b->second.size()) return;
    const BlockedOn w = b->second[i];
    if (w.claim && w.claim->load(std::memory_order_acquire) != 0) {  // served by another shard, or ended
      forget_waiter(s, w.id);
      continue;
    }
    bool wrong = false;
    if (!has_for(s, key, w.where, wrong)) {
      if (!wrong) return;  // the key is empty or gone
      ++i;                 // the other kind: the next waiter may match
      continue;
    }
    const bool here = w.move && w.claim && w.dst_shard == gossamer::thread_index();
    if (here) {  // BLMOVE within this shard: check the destination first, as Redis
      bool dst_wrong = false;
      find_obj<List>(s, w.dst, dst_wrong);
      if (!take(w)) {
        forget_waiter(s, w.id);
        continue;
      }
      forget_waiter(s, w.id);  // out of this queue: index i names the next one
      if (dst_wrong) {
        tl_served.push_back(Served{w.id, key, {}, w.where, 0, 2, {}});
        continue;
      }
      std::uint8_t owed = 0;
      std::vector<std::string> popped = pop_key(s, key, w.where, -1, wrong, &owed);
      if (popped.empty()) continue;  // cannot be: has_for said so
      // The push makes `dst` ready in turn: it joins s.ready (s.serving).
      Reply r = shard_move_push(s, w.to == 0 ? Op::kLpush : Op::kRpush, std::vector<std::string>{w.dst, popped[0]}, key,
                                w.where, owed);
      if (r.kind == Reply::kError) {  // out of memory: the element is lost; answer the error
        tl_served.push_back(Served{w.id, key, {}, w.where, 0, 2, {}});
        continue;
      }
      tl_served.push_back(Served{w.id, key, std::move(popped), w.where, 0, 1, {}});
      continue;
    }
    if (!take(w)) {
      forget_waiter(s, w.id);
      continue;
    }
    std::uint8_t owed = 0;
    std::vector<std::string> popped = pop_key(s, key, w.where, w.count, wrong, w.move ? &owed : nullptr);
    forget_waiter(s, w.id);
    Origin credit;
    if (w.move && tl_origin && tl_origin->weight >= 2) {  // the rest of the move is tracked: half the credit left
      credit = *tl_origin;
      credit.weight = tl_origin->weight / 2;
      tl_origin->weight -= credit.weight;
    }
    tl_served.push_back(Served{w.id, key, std::move(popped), w.where, owed, 0, credit});
  }
}

}  // namespace

bool has_for(Shard& s, const std::string& key, std::uint8_t where, bool& wrong) {
  if (where < 2) {
    const List* l = find_obj<List>(s, key, wrong);
    return l && !l->empty();
  }
  const ZSet* z = find_obj<ZSet>(s, key, wrong);
  return z && !z->empty();
}

std::shared_ptr<std::atomic<std::uint8_t>> new_claim(std::uint64_t id) {
  auto c = std::make_shared<std::atomic<std::uint8_t>>(0);
  std::lock_guard<std::mutex> lock(g_claims_mu);
  g_claims[id] = c;
  return c;
}

std::shared_ptr<std::atomic<std::uint8_t>> find_claim(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(g_claims_mu);
  auto it = g_claims.find(id);
  return it == g_claims.end() ? nullptr : it->second;
}

void drop_claim(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(g_claims_mu);
  g_claims.erase(id);
}

void forget_waiter(Shard& s, std::uint64_t id) {
  auto it = s.blocked_keys.find(id);
  if (it == s.blocked_keys.end()) return;
  for (const auto& k : it->second) {
    auto b = s.blocked.find(k);
    if (b == s.blocked.end()) continue;
    auto& q = b->second;
    q.erase(std::remove_if(q.begin(), q.end(), [id](const BlockedOn& w) { return w.id == id; }), q.end());
    if (q.empty()) s.blocked.erase(b);
  }
  s.blocked_keys.erase(it);
}

void serve_key(Shard& s, const std::string& key) noexcept {
  try {
    if (!s.blocked.count(key)) return;
    if (std::find(s.ready.begin(), s.ready.end(), key) == s.ready.end()) s.ready.push_back(key);
    // Inside a transaction: when it releases the shard; while the write's
    // events go out: after them; while serving: in turn.
    if (s.owner != 0 || tl_hold_serving || s.serving) return;
    serve_ready(s);
  } catch (...) {
  }
}

void serve_ready(Shard& s) noexcept {
  if (s.serving) return;
  s.serving = true;
  try {
    while (!s.ready.empty()) {
      const std::string key = std::move(s.ready.front());
      s.ready.erase(s.ready.begin());
      serve_one(s, key);
    }
  } catch (...) {
    s.ready.clear();
  }
  s.serving = false;
}

void shard_unowned(Shard& s) noexcept {
  std::vector<Parked> parked;
  parked.swap(s.parked);
  for (auto& p : parked) {
    try {
      Served& sv = p.sv;
      Reply r = shard_move_push(s, p.to == 0 ? Op::kLpush : Op::kRpush, std::vector<std::string>{p.dst, sv.values[0]}, sv.key,
                                sv.where, sv.owed);
      sv.moved = r.kind == Reply::kError ? 4 : 3;
      if (sv.moved == 4) sv.values.push_back(r.s);
      tl_served.push_back(std::move(sv));
    } catch (...) {
    }
  }
  serve_ready(s);
}

// ---- the push's loop: its reply waits for the credit to come back ----------

void Loop::dispatch_returns() {
  std::vector<Origin> out;
  out.swap(tl_returns);
  for (const Origin& o : out) {
    if (o.thread == gossamer::thread_index()) {
      on_credit(o);
      continue;
    }
    ask(o.thread, [](Shard&, Origin back) {
      if (Loop* l = Loop::current()) l->on_credit(back);
      return Count{};
    }, [](Count) {}, o);
  }
}

void Loop::on_credit(const Origin& o) {
  const auto k = std::make_tuple(o.slot, o.gen, o.seq);
  auto& [owed, held] = credits_[k];
  owed -= std::int64_t(o.weight);
  if (owed != 0) return;
  const bool release = held;
  credits_.erase(k);
  if (release) settle(o.slot, o.gen, o.seq, [](Pending&) {});
}

bool Loop::hold_for_credit(std::uint32_t slot, std::uint32_t gen, std::uint64_t seq, std::uint64_t given) {
  if (given == 0) return false;
  const auto k = std::make_tuple(slot, gen, seq);
  auto& [owed, held] = credits_[k];
  owed += std::int64_t(given);
  if (owed == 0) {  // every part came back before the push's own answer
    credits_.erase(k);
    return false;
  }
  held = true;
  return true;
}

}  // namespace hydra
