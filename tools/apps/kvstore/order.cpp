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
//   - while some connection of the host is blocked or about to be, the
//     commands that can serve it (pushes to lists and sorted sets, the
//     commands that move a value to a key) and EXEC (its WATCHed keys
//     against a push that serves a BLMOVE to one of them).
// Other commands are not ordered across connections (as with Redis's I/O
// threads); one connection's commands always run in its order.
//
// How. Every connection asks the kernel for receive time stamps
// (SO_TIMESTAMPNS); a command's arrival is the stamp of the read that
// completed it. An ordered command runs only once
//   1. every ordered command of this loop that arrived before it, on
//      another connection, has taken effect (its reply is out, or, for a
//      blocking command, every shard of its keys has registered it), and
//   2. every other loop of the host has published a frontier after its
//      arrival: each loop, at the start of each poll, takes the time T and,
//      once it has read everything that was ready, publishes min(T, the
//      arrival of its own oldest ordered command not yet in effect). So
//      a frontier past the arrival means that loop has read everything
//      that arrived before it, and what it read of that is in effect.
// Until then the command is held (the connection reads nothing more, as
// for a fence) and retried every round. A loop asleep in a nap publishes
// no frontier; instead it marks the nap (an odd nap_seq), and another loop
// asks its epoll set with poll(): nothing ready, the nap still the same
// one, and the frontier is now (bounded by its oldest ordered command).
// A socket the host's listening loop accepted but its loop has not read yet
// (g_order_transit) keeps the listening loop's frontier where it was
// before the accept; that loop is read first. After kOrderWait a held
// command runs anyway (counted in INFO's hydra_arrival_order_timeouts):
// a loop that cannot run for that long must not stop the others.
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

#include "server.hpp"

namespace hydra {

OrderSlot g_order[kMaxThreads];
std::atomic<std::uint32_t> g_order_transit{0};
std::atomic<std::uint32_t> g_order_blocking{0};
std::atomic<std::uint64_t> g_order_timeouts{0};

namespace {

constexpr auto kOrderWait = std::chrono::milliseconds(100);

// Commands that can make a list or sorted set of some key non-empty, and so
// serve a blocked connection.
bool serving_name(const std::string& n) {
  static const char* const kNames[] = {"lpush",       "rpush",       "lpushx",     "rpushx",      "linsert",
                                       "lmove",       "rpoplpush",   "zadd",       "zincrby",     "zunionstore",
                                       "zinterstore", "zdiffstore",  "zrangestore", "rename",     "renamenx",
                                       "copy",        "restore",     "sort"};
  for (const char* k : kNames)
    if (n == k) return true;
  return false;
}

bool before(const OrderEntry& a, const OrderEntry& b) { return a.stamp < b.stamp || (a.stamp == b.stamp && a.n < b.n); }

// Loop k's frontier, as above (a nap answered by its epoll set).
std::int64_t frontier_of(std::size_t k) {
  OrderSlot& s = g_order[k];
  const std::uint32_t nap = s.nap_seq.load(std::memory_order_seq_cst);
  if (nap & 1) {
    const std::int64_t now = realtime_ns();
    pollfd p{s.epoll.load(std::memory_order_relaxed), POLLIN, 0};
    if (p.fd >= 0 && ::poll(&p, 1, 0) == 0 && s.nap_seq.load(std::memory_order_seq_cst) == nap &&
        (k != 0 || g_order_transit.load(std::memory_order_acquire) == 0))
      return std::min(now, s.oldest.load(std::memory_order_acquire));
  }
  return s.frontier.load(std::memory_order_acquire);
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

bool Loop::order_kind(const Connection& c, const std::string& name) const {
  if (local_count_ == 1 || c.in_exec || name.empty()) return false;
  if (name[0] == 'b' && blocking_name(name)) return !c.in_multi;
  if (g_stats.blocked_clients.load(std::memory_order_relaxed) == 0 &&
      g_order_blocking.load(std::memory_order_relaxed) == 0)
    return false;
  return name == "exec" ? c.in_multi : !c.in_multi && serving_name(name);
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
    e.since = std::chrono::steady_clock::now();
    e.blocking = name[0] == 'b';  // order_kind: a blocking name, or nothing else starting with 'b'
    if (e.blocking) g_order_blocking.fetch_add(1, std::memory_order_relaxed);
    c.order_id = e.n;
    it = es.end() - 1;
  } else if (it = std::find_if(es.begin(), es.end(), [&](const OrderEntry& e) { return e.n == c.order_id; });
             it == es.end()) {  // not found (cannot happen: it leaves only once done): run it unordered
    c.order_id = 0;
    return true;
  }
  if (it->started) return true;  // a fence held it after the order let it go
  if (!order_ready(*it)) {
    if (std::chrono::steady_clock::now() - it->since < kOrderWait) {
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
  for (OrderEntry& e : order_.entries)
    if (e.n == c->order_id && e.blocking) e.block = c->blocked;
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
  for (const OrderEntry& o : order_.entries)
    if ((o.slot != e.slot || o.gen != e.gen) && before(o, e) && !order_done(o)) return false;
  // The listening loop (local index 0) first: its frontier stays put while
  // a socket it dealt is unread, and that loop publishes before it tells.
  for (std::size_t k = 0; k < local_count_; ++k) {
    if (k != local_index_) {
      if (frontier_of(k) <= e.stamp) return false;
    } else if (k == 0 && g_order_transit.load(std::memory_order_acquire) != 0) {
      return false;
    }
  }
  return true;
}

// A poll starts: its time, and a nap's mark (with what is oldest now).
void Loop::order_begin(bool nap) {
  if (local_count_ == 1) return;
  order_.t0 = realtime_ns();
  order_.cut = false;
  if (!nap) return;
  std::int64_t oldest = INT64_MAX;
  for (const OrderEntry& e : order_.entries) oldest = std::min(oldest, e.stamp);
  OrderSlot& s = g_order[local_index_];
  s.oldest.store(oldest, std::memory_order_release);
  order_.frontier = std::min(order_.frontier, oldest);
  s.frontier.store(order_.frontier, std::memory_order_release);
  s.nap_seq.fetch_add(1, std::memory_order_seq_cst);  // odd: napping
}

void Loop::order_woke(bool nap) {
  if (local_count_ > 1 && nap) g_order[local_index_].nap_seq.fetch_add(1, std::memory_order_seq_cst);
}

// A poll has read what was ready: the frontier moves to its start, unless
// it left input unread or (the listening loop) a socket it dealt is unread.
void Loop::order_publish() {
  if (local_count_ == 1) return;
  std::int64_t oldest = INT64_MAX;
  for (const OrderEntry& e : order_.entries) oldest = std::min(oldest, e.stamp);
  std::int64_t f = order_.cut ? order_.frontier : order_.t0;
  if (leader_ && g_order_transit.load(std::memory_order_acquire) != 0) f = order_.frontier;
  order_.frontier = f = std::min(f, oldest);
  OrderSlot& s = g_order[local_index_];
  s.oldest.store(oldest, std::memory_order_release);
  s.frontier.store(f, std::memory_order_release);
  if (order_.adopted) {  // the sockets dealt to it are read, and the frontier says so
    g_order_transit.fetch_sub(order_.adopted, std::memory_order_acq_rel);
    order_.adopted = 0;
  }
}

// Each round while there are ordered commands: those in place leave, held
// ones are retried.
void Loop::order_rounds() {
  std::erase_if(order_.entries, [this](const OrderEntry& e) {
    if (!order_done(e)) return false;
    if (e.blocking) g_order_blocking.fetch_sub(1, std::memory_order_relaxed);
    return true;
  });
  std::vector<std::uint32_t> waiting;
  waiting.swap(order_.waiting);
  for (std::uint32_t slot : waiting)
    if (slot < conns_.size() && conns_[slot] && !conns_[slot]->held.empty()) mark_dirty(slot);
}

}  // namespace hydra
