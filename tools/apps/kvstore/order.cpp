// Arrival order across a host's I/O loops.
//
// Redis runs every command on one thread, in the order its event loop
// finds them: a client that sends a command on one connection and then,
// without waiting for the reply, another on a second connection sees them
// take effect in that order. Redis's own tests rely on it (type/list's
// "BRPOPLPUSH with multiple blocked clients": two clients block on one
// list, then a third pushes; the first to block must be served first).
// Hydra's loops read their connections independently: a loop that is
// napping or waiting for its core reads later than one that spins, so
// two commands reach their shards in whatever order the loops got to them.
//
// For the commands whose order a client can see in this way, the host
// restores the order in which their bytes arrived:
//   - blocking commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN,
//     BZPOPMAX, BZMPOP), always: who blocked first is served first;
//   - commands that can serve a blocked connection (pushes to lists and
//     sorted sets, the commands that store a value at a key: serving_key),
//     while a blocking command is on its way, or when a connection of the
//     host is blocked on their key (g_block_marks);
//   - EXEC while a connection of the host is blocked (its WATCHed keys
//     against a push that serves a BLMOVE onto one of them).
// Of those, each waits only for the kinds whose order changes its outcome
// (kWaitsFor): a blocking command for blocking commands, a push for
// blocking commands and EXECs, an EXEC for blocking commands and pushes.
// Other commands are not ordered across connections (as with Redis's I/O
// threads); one connection's commands always run in its order.
//
// How. Every connection asks the kernel for receive time stamps
// (SO_TIMESTAMPNS); a command's arrival is the stamp of the read that
// completed it. An ordered command runs only once
//   1. every ordered command of this loop of a kind it waits for that
//      arrived before it, on another connection, has taken effect (its
//      reply is out, or, for a blocking command, every shard of its keys
//      has registered it), and
//   2. every other loop of the host has read everything that arrived before
//      it, and its ordered commands of those kinds that arrived before it
//      have taken effect. Each loop, at the start of each poll, takes the
//      time and, once it has read everything that was ready, publishes it
//      as its frontier, with the arrival of its oldest ordered command of
//      each kind not yet in effect. Between polls (and in a nap) it marks
//      itself as not reading (OrderSlot::outside), and another loop may
//      ask its epoll set with poll(): nothing ready, and still the same
//      spell, means it has read everything that arrived until now.
// Until then the command is held (the connection reads nothing more, as
// for a fence) and retried after the loop's next poll. A socket the host's
// listening loop accepted but its loop has not read yet (g_order_transit)
// keeps the listening loop's frontier where it was before the accept;
// that loop is asked first. After kOrderWait a held command runs anyway
// (counted in INFO's hydra_arrival_order_timeouts; hydra_arrival_order_holds
// counts those that waited at all): a loop that cannot run for that long
// (DEBUG SLEEP) must not stop the others for longer.
//
// Not covered: commands a connection read while it could not execute them
// (its earlier command blocked or held, or its replies over --max-pending
// or --max-output) take the arrival of the last read; and hosts of a rack
// are not ordered against each other (their clocks differ).
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <string_view>

#include "server.hpp"

namespace hydra {

OrderSlot g_order[kMaxThreads];
std::atomic<std::uint32_t> g_order_transit{0};
std::atomic<std::uint32_t> g_order_blocking{0};
std::atomic<std::uint64_t> g_order_timeouts{0};
std::atomic<std::uint64_t> g_order_holds{0};
std::atomic<std::uint32_t> g_block_marks[kBlockMarks];

std::size_t block_mark(std::string_view key) { return std::hash<std::string_view>{}(key) % kBlockMarks; }

namespace {

constexpr auto kOrderWait = std::chrono::milliseconds(100);

// Commands that can make a list or sorted set of some key non-empty, and so
// serve a blocked connection: where that key is among the arguments (1: the
// first key; 2: the second; -1: any, SORT's STORE), 0 for other commands.
// Asked of every command while a connection of the host is blocked: by
// first letter, then lengths before bytes.
int serving_key(std::string_view n) {
  using namespace std::string_view_literals;
  switch (n[0]) {
    case 'l':
      if (n == "lpush"sv || n == "lpushx"sv || n == "linsert"sv) return 1;
      return n == "lmove"sv ? 2 : 0;
    case 'r':
      if (n == "rpush"sv || n == "rpushx"sv || n == "restore"sv) return 1;
      return n == "rpoplpush"sv || n == "rename"sv || n == "renamenx"sv ? 2 : 0;
    case 'z':
      return n == "zadd"sv || n == "zincrby"sv || n == "zunionstore"sv || n == "zinterstore"sv ||
             n == "zdiffstore"sv || n == "zrangestore"sv;
    case 'c': return n == "copy"sv ? 2 : 0;
    case 's': return n == "sort"sv ? -1 : 0;
    default: return 0;
  }
}

bool before(const OrderEntry& a, const OrderEntry& b) { return a.stamp < b.stamp || (a.stamp == b.stamp && a.n < b.n); }

// Which earlier commands one of kind `k` waits for (a bit per kind): a
// blocking command for the blocking ones (who blocked first); a push for
// blocking commands (whom it serves) and EXECs (whose WATCHed keys a
// served BLMOVE may change); an EXEC for blocking commands and pushes.
// A blocking command does not wait for pushes that arrived before it: the
// push landing first (the BLPOP then pops at once) or the BLPOP
// registering first (the push then serves it) ends the same way. Nor do
// pushes wait for pushes.
constexpr std::uint8_t kWaitsFor[OrderEntry::kKinds] = {1u << OrderEntry::kBlock,
                                                        1u << OrderEntry::kBlock | 1u << OrderEntry::kExec,
                                                        1u << OrderEntry::kBlock | 1u << OrderEntry::kPush};

// Loop k's frontier for a command of kind `kind`: how far it has read
// (`read`), and the arrival of its oldest command of the kinds that one
// waits for (`oldest`). A loop that is not reading now and has nothing
// ready in its epoll set has read everything that arrived until now.
struct Frontier {
  std::int64_t read, oldest;
};
Frontier frontier_of(std::size_t k, OrderEntry::Kind kind) {
  OrderSlot& s = g_order[k];
  Frontier f{-1, INT64_MAX};
  const std::uint32_t outside = s.outside.load(std::memory_order_seq_cst);
  if (outside & 1) {
    const std::int64_t now = realtime_ns();
    pollfd p{s.epoll.load(std::memory_order_relaxed), POLLIN, 0};
    if (p.fd >= 0 && ::poll(&p, 1, 0) == 0 && s.outside.load(std::memory_order_seq_cst) == outside &&
        (k != 0 || g_order_transit.load(std::memory_order_acquire) == 0))
      f.read = now;
  }
  if (f.read < 0) f.read = s.frontier.load(std::memory_order_acquire);
  // The oldest commands after what was read: the loop publishes them before
  // its frontier and before it marks itself outside (order_publish), so
  // these loads see those of the poll the frontier came from, or later.
  for (int j = 0; j < OrderEntry::kKinds; ++j)
    if (kWaitsFor[kind] >> j & 1) f.oldest = std::min(f.oldest, s.oldest[j].load(std::memory_order_acquire));
  return f;
}

}  // namespace

std::int64_t realtime_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return std::int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

long recv_stamped(int fd, char* buf, std::size_t len, std::int64_t& stamp) {
  iovec iov{buf, len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(fd, &m, 0);
  if (n > 0)
    for (cmsghdr* h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
      if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_TIMESTAMPNS) {
        timespec ts;
        std::memcpy(&ts, CMSG_DATA(h), sizeof ts);
        if (ts.tv_sec) stamp = std::int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
      }
  return n;
}

// Past the inline tests of Loop::order_kind (server.hpp). A push is ordered
// while some blocking command is on its way (it may block on any key), or
// when a connection is blocked on its key.
bool Loop::order_kind_named(const Connection& c, const std::string& name,
                            const std::vector<std::string_view>& args) const {
  if (name[0] == 'b' && blocking_name(name)) return !c.in_multi;
  if (g_stats.blocked_clients.load(std::memory_order_relaxed) == 0 &&
      g_order_blocking.load(std::memory_order_relaxed) == 0)
    return false;
  if (std::string_view(name) == "exec") return c.in_multi;
  const int at = c.in_multi ? 0 : serving_key(name);
  if (at == 0) return false;
  if (g_order_blocking.load(std::memory_order_relaxed) != 0) return true;
  auto marked = [](std::string_view k) { return g_block_marks[block_mark(k)].load(std::memory_order_relaxed) != 0; };
  if (at > 0) return std::size_t(at) < args.size() && marked(args[std::size_t(at)]);
  return std::any_of(args.begin() + 1, args.end(), marked);
}

// True: run it now. False: held (retried by order_rounds).
bool Loop::order_gate(std::uint32_t slot, Connection& c, const std::string& name,
                      const std::vector<std::string_view>& args) {
  auto& es = order_.entries;
  auto it = es.end();
  if (c.order_id == 0) {
    OrderEntry& e = es.emplace_back();
    e.stamp = c.rx_stamp ? c.rx_stamp : realtime_ns();
    e.n = ++order_.next;
    e.slot = slot;
    e.gen = c.gen;
    // order_kind: a blocking name, or nothing else starting with 'b'
    e.kind = name[0] == 'b' ? OrderEntry::kBlock : name[0] == 'e' ? OrderEntry::kExec : OrderEntry::kPush;
    if (e.kind == OrderEntry::kBlock) g_order_blocking.fetch_add(1, std::memory_order_relaxed);
    ++order_.count[e.kind];
    c.order_id = e.n;
    it = es.end() - 1;
  } else if (it = std::find_if(es.begin(), es.end(), [&](const OrderEntry& e) { return e.n == c.order_id; });
             it == es.end()) {  // not found (cannot happen: it leaves only once done): run it unordered
    c.order_id = 0;
    return true;
  }
  if (it->started) return true;  // a fence held it after the order let it go
  if (!order_ready(*it)) {
    const auto now = std::chrono::steady_clock::now();
    if (it->since == std::chrono::steady_clock::time_point{}) {  // its first wait
      it->since = now;
      g_order_holds.fetch_add(1, std::memory_order_relaxed);
    }
    if (now - it->since < kOrderWait) {
      c.held.assign(args.begin(), args.end());
      order_.waiting.push_back(slot);
      return false;
    }
    g_order_timeouts.fetch_add(1, std::memory_order_relaxed);
  }
  it->started = true;
  it->seq = c.base + c.pending.size();
  return true;
}

// After an ordered command ran: a blocking one that blocked is in place once
// registered, not when answered.
void Loop::order_after(std::uint32_t slot, std::uint32_t gen) {
  Connection* c = find(slot, gen);
  if (!c || !c->held.empty()) return;  // closed, or held by a fence: the same command comes again
  for (auto e = order_.entries.rbegin(); e != order_.entries.rend(); ++e)  // usually the last
    if (e->n == c->order_id) {
      if (e->kind == OrderEntry::kBlock) e->block = c->blocked;
      break;
    }
  c->order_id = 0;
}

bool Loop::order_done(const OrderEntry& e) {
  const Connection* c = find(e.slot, e.gen);
  if (!c) return true;
  if (!e.started) return false;
  if (c->base > e.seq) return true;
  if (e.block == 0) return false;
  auto b = blocked_.find(e.block);
  return b != blocked_.end() && b->second.counted && b->second.registering == 0;
}

bool Loop::order_ready(const OrderEntry& e) {
  if (order_.seen.empty()) order_.seen.assign(local_count_ * OrderEntry::kKinds, 0);
  bool own = false;  // this loop has entries of the kinds it waits for
  for (int j = 0; j < OrderEntry::kKinds; ++j) own |= (kWaitsFor[e.kind] >> j & 1) && order_.count[j];
  if (own)
    for (const OrderEntry& o : order_.entries)
      if ((kWaitsFor[e.kind] >> o.kind & 1) && (o.slot != e.slot || o.gen != e.gen) && before(o, e) && !order_done(o))
        return false;
  // The listening loop (local index 0) first: its frontier stays put while
  // a socket it dealt is unread, and that loop publishes before it tells.
  for (std::size_t k = 0; k < local_count_; ++k) {
    if (k != local_index_) {
      std::int64_t& seen = order_.seen[k * OrderEntry::kKinds + e.kind];
      if (seen > e.stamp) continue;
      const Frontier f = frontier_of(k, e.kind);
      seen = std::max(seen, std::min(f.read, f.oldest));
      if (seen > e.stamp) continue;
      // Equal arrivals on two loops (the clock's resolution): the lower
      // loop's goes first, or each would wait for the other.
      if (f.oldest == e.stamp && f.read > e.stamp && k > local_index_) continue;
      return false;
    } else if (k == 0 && g_order_transit.load(std::memory_order_acquire) != 0) {
      return false;
    }
  }
  return true;
}

// The oldest ordered command of each kind not yet in effect, for the others.
void Loop::publish_oldest() {
  std::int64_t oldest[OrderEntry::kKinds] = {INT64_MAX, INT64_MAX, INT64_MAX};
  for (const OrderEntry& e : order_.entries) oldest[e.kind] = std::min(oldest[e.kind], e.stamp);
  for (int j = 0; j < OrderEntry::kKinds; ++j)
    g_order[local_index_].oldest[j].store(oldest[j], std::memory_order_release);
}

// A poll starts: its time, and it is reading (a nap: once it wakes; what
// is oldest now, for the others meanwhile).
void Loop::order_begin(bool nap) {
  if (local_count_ == 1) return;
  order_.t0 = realtime_ns();
  if (order_.t0 < order_.frontier) [[unlikely]] {  // the clock stepped back: what was seen of the others is ahead
    std::fill(order_.seen.begin(), order_.seen.end(), 0);
    order_.frontier = 0;  // until a whole poll reads again
  }
  order_.cut = false;
  if (nap) publish_oldest();
  else g_order[local_index_].outside.fetch_add(1, std::memory_order_seq_cst);  // even: reading
}

void Loop::order_woke(bool nap) {
  if (local_count_ > 1 && nap) g_order[local_index_].outside.fetch_add(1, std::memory_order_seq_cst);
}

// A poll has read what was ready: the frontier moves to its start, unless
// it left input unread or (the listening loop) a socket it dealt is unread.
void Loop::order_publish() {
  if (local_count_ == 1) return;
  publish_oldest();
  // The listening loop: a socket dealt and not yet read, or connections
  // left in the backlog while it is out of descriptors (accept_all counts
  // them in g_order_transit too), hold it back.
  if (!order_.cut && (!leader_ || g_order_transit.load(std::memory_order_acquire) == 0)) order_.frontier = order_.t0;
  g_order[local_index_].frontier.store(order_.frontier, std::memory_order_release);
  g_order[local_index_].outside.fetch_add(1, std::memory_order_seq_cst);  // odd: not reading
  if (order_.adopted) {  // the sockets dealt to it are read, and the frontier says so
    g_order_transit.fetch_sub(order_.adopted, std::memory_order_acq_rel);
    order_.adopted = 0;
  }
}

// Each round while there are ordered commands: those in place leave, held
// ones are retried (marked dirty; returns how many).
std::size_t Loop::order_rounds() {
  std::erase_if(order_.entries, [this](const OrderEntry& e) {
    if (!order_done(e)) return false;
    if (e.kind == OrderEntry::kBlock) g_order_blocking.fetch_sub(1, std::memory_order_relaxed);
    --order_.count[e.kind];
    return true;
  });
  std::vector<std::uint32_t> waiting;
  waiting.swap(order_.waiting);
  std::size_t marked = 0;
  for (std::uint32_t slot : waiting)
    if (slot < conns_.size() && conns_[slot] && !conns_[slot]->held.empty() && !conns_[slot]->dirty) {
      mark_dirty(slot);
      ++marked;
    }
  return marked;
}

}  // namespace hydra
