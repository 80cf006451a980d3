// Keyspace notifications, as Redis 7.0's notify.c (notify.hpp says how they
// travel): the flags of notify-keyspace-events, the messages a change
// makes, the events of the typed commands (one wrapper around shard_typed
// instead of a call in every command), the stores of the multi-key
// commands (RENAME, COPY, SINTERSTORE...), and each loop's mailbox.
#include <algorithm>

#include <gossamer/abi/attach.hpp>

#include "server.hpp"
#include "types.hpp"

namespace hydra {

std::atomic<std::uint32_t> g_notify{0};
std::array<Mailbox, kMailboxes> g_mailboxes;
std::atomic<std::uint32_t> g_monitors{0};
static_assert(kMailboxes == kMaxThreads, "one mailbox per thread of the rack");

long notify_flags(std::string_view classes) {
  long flags = 0;
  for (char c : classes) {
    switch (c) {
      case 'A': flags |= kNotifyAll; break;
      case 'g': flags |= kNotifyGeneric; break;
      case '$': flags |= kNotifyString; break;
      case 'l': flags |= kNotifyList; break;
      case 's': flags |= kNotifySet; break;
      case 'h': flags |= kNotifyHash; break;
      case 'z': flags |= kNotifyZset; break;
      case 'x': flags |= kNotifyExpired; break;
      case 'e': flags |= kNotifyEvicted; break;
      case 'K': flags |= kNotifyKeyspace; break;
      case 'E': flags |= kNotifyKeyevent; break;
      case 't': flags |= kNotifyStream; break;
      case 'm': flags |= kNotifyKeyMiss; break;
      case 'd': flags |= kNotifyModule; break;
      case 'n': flags |= kNotifyNew; break;
      default: return -1;
    }
  }
  return flags;
}

std::string notify_string(std::uint32_t flags) {
  std::string s;
  if ((flags & kNotifyAll) == kNotifyAll) {
    s += 'A';
  } else {
    static const std::pair<std::uint32_t, char> kClasses[] = {
        {kNotifyGeneric, 'g'}, {kNotifyString, '$'}, {kNotifyList, 'l'},    {kNotifySet, 's'},
        {kNotifyHash, 'h'},    {kNotifyZset, 'z'},   {kNotifyExpired, 'x'}, {kNotifyEvicted, 'e'},
        {kNotifyStream, 't'},  {kNotifyModule, 'd'}, {kNotifyNew, 'n'}};
    for (auto [bit, c] : kClasses)
      if (flags & bit) s += c;
  }
  if (flags & kNotifyKeyspace) s += 'K';
  if (flags & kNotifyKeyevent) s += 'E';
  if (flags & kNotifyKeyMiss) s += 'm';
  return s;
}

namespace {

struct HostThreads {
  std::uint32_t first = 0, count = 1, total = 1;
};
const HostThreads& host_threads() {
  static const HostThreads h = [] {
    HostThreads t;
    std::uint32_t n = 0;
    t.total = std::uint32_t(gossamer::thread_count());
    gossamer::abi::host_threads(t.total, std::uint32_t(gossamer::host_count()), std::uint32_t(gossamer::host_index()),
                                &t.first, &n);
    t.count = n ? n : 1;
    return t;
  }();
  return h;
}

// One message to every loop of this host that may have a subscriber for
// it, and, on a rack of several hosts, to this thread's loop for the others.
void hand_out(std::string channel, std::string message) {
  const HostThreads& h = host_threads();
  for (std::uint32_t t = h.first; t < h.first + h.count && t < kMailboxes; ++t) {
    Mailbox& m = g_mailboxes[t];
    if (m.key_subs.load(std::memory_order_acquire) == 0) continue;
    std::lock_guard lock(m.lock);
    m.messages.emplace_back(channel, message);
    m.ready.store(true, std::memory_order_release);
  }
  if (h.count < h.total) tl_remote_events.emplace_back(std::move(channel), std::move(message));
}

bool key_channel(std::string_view n) { return n.starts_with("__keyspace@") || n.starts_with("__keyevent@"); }

}  // namespace

void notify_slow(std::uint32_t flags, const char* event, const std::string& key) noexcept {
  try {
    if (flags & kNotifyKeyspace) hand_out("__keyspace@0__:" + key, event);
    if (flags & kNotifyKeyevent) hand_out(std::string("__keyevent@0__:") + event, key);
  } catch (...) {  // out of memory: this event is lost, the command is not
  }
}

Count shard_set_events(Shard& s, std::string key, std::string value) noexcept {
  try {
    if (g_evicting.load(std::memory_order_relaxed)) evict_for(s, entry_bytes(key.size(), value.size()));
    const bool fresh = !key_exists(s, key);  // lazy expiry: "expired" first
    forget_ttl(s, key);
    touch(s, key);
    drop_object(s, key);
    auto it = s.map.insert_or_assign(std::move(key), std::move(value)).first;
    it->second.lru = tl_lru_clock;
    if (fresh) notify(kNotifyNew, "new", it->first);
    notify(kNotifyString, "set", it->first);
    return {};
  } catch (...) {
    return {0, Count::kOutOfMemory};
  }
}

// ---- the typed commands ------------------------------------------------------------

namespace {

// Whether an option word (lower case) follows the key: GETEX's PERSIST,
// ZADD's INCR.
bool has_option(const std::vector<std::string>& args, std::string_view word) {
  for (std::size_t i = 1; i < args.size(); ++i)
    if (resp::lower(args[i]) == word) return true;
  return false;
}

// Redis 7.0's event for a typed command that changed its key, and its class.
std::pair<const char*, std::uint32_t> op_event(Op op, const std::vector<std::string>& args) {
  switch (op) {
    case Op::kHset: case Op::kHsetnx: case Op::kHmset: return {"hset", kNotifyHash};
    case Op::kHdel: return {"hdel", kNotifyHash};
    case Op::kHincrby: return {"hincrby", kNotifyHash};
    case Op::kHincrbyfloat: return {"hincrbyfloat", kNotifyHash};
    case Op::kLpush: case Op::kLpushx: return {"lpush", kNotifyList};
    case Op::kRpush: case Op::kRpushx: return {"rpush", kNotifyList};
    case Op::kLpop: return {"lpop", kNotifyList};
    case Op::kRpop: return {"rpop", kNotifyList};
    case Op::kLrem: return {"lrem", kNotifyList};
    case Op::kLset: return {"lset", kNotifyList};
    case Op::kLtrim: return {"ltrim", kNotifyList};
    case Op::kLinsert: return {"linsert", kNotifyList};
    case Op::kSadd: return {"sadd", kNotifySet};
    case Op::kSrem: return {"srem", kNotifySet};
    case Op::kSpop: return {"spop", kNotifySet};
    case Op::kGetdel: return {"del", kNotifyGeneric};
    case Op::kGetex:  // PERSIST, or a new deadline (a past one deletes: "del", below)
      return {has_option(args, "persist") ? "persist" : "expire", kNotifyGeneric};
    case Op::kSetrange: return {"setrange", kNotifyString};
    case Op::kAppend: return {"append", kNotifyString};
    case Op::kIncrbyfloat: return {"incrbyfloat", kNotifyString};
    case Op::kSetbit: return {"setbit", kNotifyString};
    case Op::kZadd: return {has_option(args, "incr") ? "zincr" : "zadd", kNotifyZset};
    case Op::kZincrby: return {"zincr", kNotifyZset};
    case Op::kZrem: return {"zrem", kNotifyZset};
    case Op::kZremrangebyrank: return {"zremrangebyrank", kNotifyZset};
    case Op::kZremrangebyscore: return {"zremrangebyscore", kNotifyZset};
    case Op::kZremrangebylex: return {"zremrangebylex", kNotifyZset};
    case Op::kZpopmin: return {"zpopmin", kNotifyZset};
    case Op::kZpopmax: return {"zpopmax", kNotifyZset};
    default: return {nullptr, 0};  // the reads
  }
}

// Runs `run` on `key` and sends what it did: "new" if it made the key, its
// own event if it wrote (every write calls touch(), which bumps a watched
// key's version: the key is watched meanwhile), "del" if it emptied the key.
template <class Run>
auto with_events(Shard& s, const std::string& key, const char* event, std::uint32_t type, Run run) {
  const bool existed = key_exists(s, key);  // lazy expiry first: "expired" before the rest, as Redis
  Watch& w = s.watched[key];
  ++w.watchers;
  const std::uint64_t version = w.version;
  auto r = run();
  const bool changed = w.version != version;
  if (--w.watchers == 0) s.watched.erase(key);
  if (!changed || !event) return r;
  const bool exists = s.map.count(key) || s.objs.count(key);
  if (!existed && exists) notify(kNotifyNew, "new", key);
  if (exists || std::string_view(event) != "expire") notify(type, event, key);
  if (existed && !exists && std::string_view(event) != "del") notify(kNotifyGeneric, "del", key);
  return r;
}

// While it lives, a push serves no blocked client (serve_key leaves the
// keys in Shard::ready); then those waiting are served: Redis sends the
// write's events, then the served pops' (handleClientsBlockedOnKeys runs
// after the command). Nested holds serve once, at the outermost; inside a
// transaction, as before, when it releases the shard.
class ServeAfterEvents {
 public:
  explicit ServeAfterEvents(Shard& s) : s_(s), outer_(!tl_hold_serving) { tl_hold_serving = true; }
  ~ServeAfterEvents() {
    if (!outer_) return;
    tl_hold_serving = false;
    if (s_.owner == 0 && !s_.ready.empty()) serve_ready(s_);
  }
  ServeAfterEvents(const ServeAfterEvents&) = delete;
  ServeAfterEvents& operator=(const ServeAfterEvents&) = delete;

 private:
  Shard& s_;
  bool outer_;
};

}  // namespace

Reply shard_typed_events(Shard& s, Op op, std::vector<std::string> args) noexcept {
  try {
    if (args.empty()) return shard_typed_plain(s, op, std::move(args));
    const auto [event, type] = op_event(op, args);
    const std::string key = args[0];
    // A read of a missing key (Redis's lookupKeyRead; GETDEL and GETEX
    // look up as reads too): keymiss, after "expired" if it just expired.
    if (!event || op == Op::kGetdel || op == Op::kGetex)
      if ((g_notify.load(std::memory_order_relaxed) & kNotifyKeyMiss) && !key_exists(s, key))
        notify(kNotifyKeyMiss, "keymiss", key);
    ServeAfterEvents hold(s);
    return with_events(s, key, event, type, [&] { return shard_typed_plain(s, op, std::move(args)); });
  } catch (...) {
    return Reply{Reply::kError, 0, "ERR out of memory", {}, {}};
  }
}

Reply shard_move_pop(Shard& s, Op op, std::vector<std::string> args) noexcept {
  if (!notifying() || args.empty()) return shard_typed(s, op, std::move(args));
  const std::string key = args[0];
  Reply r = shard_typed_plain(s, op, std::move(args));  // LMOVE's type step expired the key if due
  if (r.kind == Reply::kBulk) r.n = s.objs.count(key) ? 1 : 2;
  return r;
}

Reply shard_move_push(Shard& s, Op op, std::vector<std::string> args, std::string src, std::uint8_t from,
                      std::uint8_t owed) noexcept {
  if (owed > 2) owed = 0;  // it comes off the wire: 1 or 2 only
  if (owed == 0 || !notifying() || args.empty()) return shard_typed(s, op, std::move(args));
  ServeAfterEvents hold(s);
  const bool same = args[0] == src;  // then the push refilled it: no del (Redis pops after pushing)
  Reply r;
  if (same && owed == 2) {  // the pop emptied the key, the push refills it: for Redis it never went, no "new"
    r = shard_typed_plain(s, op, std::move(args));
    if (r.kind != Reply::kError) notify(kNotifyList, op == Op::kLpush ? "lpush" : "rpush", src);
  } else {
    r = shard_typed_events(s, op, std::move(args));
  }
  if (r.kind != Reply::kError) {
    notify(kNotifyList, from ? "rpop" : "lpop", src);
    if (owed == 2 && !same) notify(kNotifyGeneric, "del", src);
  }
  return r;
}

void notify_owed_pop(const std::string& src, std::uint8_t from, std::uint8_t owed) noexcept {
  if (owed == 0 || owed > 2) return;
  notify(kNotifyList, from ? "rpop" : "lpop", src);
  if (owed == 2) notify(kNotifyGeneric, "del", src);
}

// A key written whole by a command of several keys (RENAME's and COPY's
// destination, SINTERSTORE, ZUNIONSTORE, SORT ... STORE): "new" if it
// made the key, then `event` (class from its name), or "del" if an empty
// result deleted the destination.
Count shard_store(Shard& s, std::string key, Dump d, bool replace, std::string event) noexcept {
  if (!notifying()) return shard_restore(s, std::move(key), std::move(d), replace);
  try {
    const bool existed = key_exists(s, key);
    const bool none = d.type == Dump::kNone;
    ServeAfterEvents hold(s);  // a list stored wakes its waiters after the store's events
    Count c = shard_restore(s, key, std::move(d), replace);
    if (c.err != Count::kOk || c.n == 0) return c;
    if (none) {
      if (existed) notify(kNotifyGeneric, "del", key);
      return c;
    }
    // RENAME, COPY and RESTORE delete a destination they replace, then add
    // (Redis's dbDelete + dbAdd): "new" even over an existing key. The
    // *STORE commands overwrite (setKey): "new" only for a key they make.
    const bool re_adds = event == "rename_to" || event == "copy_to" || event == "restore";
    if (!existed || re_adds) notify(kNotifyNew, "new", key);
    std::uint32_t type = kNotifyGeneric;
    if (event.starts_with("z")) type = kNotifyZset;
    else if (event.starts_with("s") && event != "sortstore") type = kNotifySet;
    else if (event == "sortstore") type = kNotifyList;
    if (!event.empty() && event != "rename_to") notify(type, event.c_str(), key);
    return c;
  } catch (...) {
    return {0, Count::kOutOfMemory};
  }
}

// RENAME's last step, on the source's shard: the source goes, then Redis's
// two events (the destination is stored by then).
Count shard_rename_del(Shard& s, std::string src, std::string dst) noexcept {
  expire_if_due(s, src);
  forget_ttl(s, src);
  std::size_t gone = s.map.erase(src);
  if (gone == 0 && !s.objs.empty()) gone = s.objs.erase(src);
  if (gone) touch(s, src);
  notify(kNotifyGeneric, "rename_from", src);
  notify(kNotifyGeneric, "rename_to", dst);
  return {std::int64_t(gone), Count::kOk};
}

Count shard_exists_read(Shard& s, std::vector<std::string> keys) noexcept {
  Count c;
  for (const auto& k : keys) {
    if (key_exists(s, k)) ++c.n;
    else notify(kNotifyKeyMiss, "keymiss", k);
  }
  return c;
}

// ---- the loop side -----------------------------------------------------------------

// CONFIG SET notify-keyspace-events on a rack of several hosts: config.cpp
// set this host's flags; the other hosts get them too before the reply.
void Loop::notify_rack(std::uint32_t slot, std::uint32_t gen, std::uint64_t seq, Pending& p,
                       const std::vector<std::string_view>& args) {
  if (local_count_ >= nshards_ || p.reply != "+OK\r\n" || args.size() < 4 || resp::lower(args[1]) != "set") return;
  bool named = false;
  for (std::size_t i = 2; i < args.size(); i += 2) named |= resp::lower(args[i]) == "notify-keyspace-events";
  if (!named) return;
  const std::uint32_t flags = g_notify.load(std::memory_order_relaxed);
  // All the answers counted before the first send: a send may suspend this
  // loop, and an answer arriving then must not find the count complete.
  const std::uint32_t remote = nshards_ - local_count_;
  p.waiting += remote;
  inflight_ += remote;
  for (std::uint32_t t = 0; t < nshards_; ++t) {
    if (t >= first_local_ && t < first_local_ + local_count_) continue;
    shard(t).apply_with_then([](Shard&, std::uint32_t f) {
      g_notify.store(f, std::memory_order_relaxed);
      return Count{};
    }, [this, slot, gen, seq](Count) { answer(slot, gen, seq, [](Pending&) {}); }, flags);
  }
}

// Each round that finds mail: events for this loop's subscribers, lines
// for its monitors; and this thread's shard's events for other hosts,
// published as PUBLISH does, in order, to those hosts' threads only.
void Loop::take_mail() {
  Mailbox& box = g_mailboxes[own_shard_];
  std::vector<std::pair<std::string, std::string>> messages;
  std::vector<MonitorLine> lines;
  if (box.ready.load(std::memory_order_acquire)) {
    std::lock_guard lock(box.lock);
    messages.swap(box.messages);
    lines.swap(box.monitor_lines);
    box.ready.store(false, std::memory_order_relaxed);
  }
  for (auto& [channel, message] : messages) on_message(std::move(channel), std::move(message));
  if (!messages_.empty()) deliver_messages();
  for (const MonitorLine& line : lines) {
    for (std::size_t i = 0; i < monitors_.size();) {
      auto [slot, gen] = monitors_[i];
      Connection* c = find(slot, gen);
      if (!c || c->fd < 0 || !c->monitor) {  // closed since: forgotten here
        monitors_.erase(monitors_.begin() + std::ptrdiff_t(i));
        box.monitors.fetch_sub(1, std::memory_order_relaxed);
        g_monitors.fetch_sub(1, std::memory_order_relaxed);
        continue;
      }
      if (!line.text) {  // never built: over the limit whatever the monitor owes
        evict(slot, *c, line.size, "a MONITOR line, over --pubsub-output-limit");
        continue;  // the next round forgets it (closed)
      }
      queue_push(slot, *c, std::string(*line.text));
      ++i;
    }
  }
  if (tl_remote_events.empty()) return;
  std::vector<std::pair<std::string, std::string>> remote;
  remote.swap(tl_remote_events);
  for (auto& [channel, message] : remote) publish_event(std::move(channel), std::move(message));
}

// This loop's subscriptions that a keyspace event could reach (patterns,
// __keyspace@/__keyevent@ channels), for notify_slow to skip loops without.
void Loop::count_key_subs() {
  std::uint32_t n = std::uint32_t(local_patterns_.size());
  for (const auto& [name, subs] : local_channels_) n += key_channel(name);
  g_mailboxes[own_shard_].key_subs.store(n, std::memory_order_release);
}

}  // namespace hydra
