// Pub/sub across the threads and hosts of a rack: SUBSCRIBE, UNSUBSCRIBE,
// PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH and PUBSUB, with Redis 7.0's replies
// (RESP2 arrays, RESP3 push frames) and its subscribed-mode rules.
//
// Two levels of registry, both delegated:
//  - Each I/O loop knows its own subscribers: channel -> connections, and
//    pattern -> connections (local_channels_, local_patterns_).
//  - The rack knows which threads have subscribers: a channel's entry lives
//    on its home shard, shard_of(channel), as the keys do; every pattern is
//    on every shard (PSUBSCRIBE is rare, PUBLISH frequent: one lookup then
//    finds both the channel's threads and those of the patterns matching).
//    Each entry counts subscribing connections per thread (PUBSUB NUMSUB).
// PUBLISH asks the channel's home shard for its threads, then sends the
// message to each of them (a closure their trustee runs; it finds the
// thread's loop, which queues the message for its subscribers and answers
// how many there are); the sum is PUBLISH's reply. A loop dispatches its
// PUBLISHes in request order, so one connection's messages reach every
// subscriber in the order published. SUBSCRIBE answers once the home
// shards have counted it: a PUBLISH issued after the reply, from anywhere,
// reaches the new subscriber.
#include <fnmatch.h>
#include <sys/socket.h>

#include <algorithm>
#include <functional>

#include "server.hpp"

namespace hydra {

namespace {

using resp::lower;

// Adds `delta` to this thread's count of subscribers for each name.
constexpr auto registry_update = [](Shard& s, std::vector<std::string> names, std::uint32_t thread, std::int32_t delta,
                                    bool pattern) {
  auto& table = pattern ? s.patterns : s.channels;
  try {
    for (auto& n : names) {
      auto it = table.find(n);
      if (it == table.end()) {
        if (delta < 0) continue;
        it = table.emplace(std::move(n), Shard::ThreadCounts{}).first;
      }
      auto& counts = it->second;
      auto c = std::find_if(counts.begin(), counts.end(), [&](const auto& e) { return e.first == thread; });
      if (c == counts.end()) {
        if (delta > 0) counts.emplace_back(thread, std::uint32_t(delta));
      } else if (delta < 0 && c->second <= std::uint32_t(-delta)) {
        counts.erase(c);
      } else {
        c->second = std::uint32_t(std::int64_t(c->second) + delta);
      }
      if (counts.empty()) table.erase(it);
    }
  } catch (...) {  // out of memory: this subscription is not counted
    return Count{0, Count::kOutOfMemory};
  }
  return Count{};
};

bool glob(const std::string& pattern, const std::string& s) { return ::fnmatch(pattern.c_str(), s.c_str(), 0) == 0; }

// The threads with a subscriber to `channel` or to a pattern matching it.
constexpr auto lookup_threads = [](Shard& s, std::string channel) {
  std::vector<std::uint32_t> threads;
  try {
    if (auto it = s.channels.find(channel); it != s.channels.end())
      for (const auto& [t, n] : it->second) threads.push_back(t);
    for (const auto& [pat, counts] : s.patterns)
      if (glob(pat, channel))
        for (const auto& [t, n] : counts) threads.push_back(t);
    std::sort(threads.begin(), threads.end());
    threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
  } catch (...) {
  }
  return threads;
};

// A message reaching a thread: its loop counts its receivers and queues it.
constexpr auto deliver_closure = [](Shard&, std::string channel, std::string message) {
  Loop* l = Loop::current();
  return Count{l ? l->on_message(std::move(channel), std::move(message)) : 0, Count::kOk};
};

void remove_subscriber(std::unordered_map<std::string, std::vector<std::pair<std::uint32_t, std::uint32_t>>>& table,
                       const std::string& name, std::uint32_t slot) {
  auto it = table.find(name);
  if (it == table.end()) return;
  auto& v = it->second;
  v.erase(std::remove_if(v.begin(), v.end(), [slot](const auto& e) { return e.first == slot; }), v.end());
  if (v.empty()) table.erase(it);
}

// A (un)subscription that keyspace events could reach (notify.cpp counts
// them per loop: Loop::count_key_subs).
bool keyish(bool pattern, const std::vector<std::string>& names) {
  if (names.empty()) return false;
  if (pattern) return true;
  for (const auto& n : names)
    if (n.starts_with("__keyspace@") || n.starts_with("__keyevent@")) return true;
  return false;
}

void notice(std::string& out, bool resp3, std::string_view kind, const std::string* name, std::size_t count) {
  resp::push(out, 3, resp3);
  resp::bulk(out, kind);
  if (name) resp::bulk(out, *name);
  else resp::nil(out, resp3);
  resp::integer(out, static_cast<long long>(count));
}

}  // namespace

// Redis 7.0's processCommand: a RESP2 connection with subscriptions may
// only (un)subscribe, PING, QUIT and RESET. Unknown commands and wrong
// arities get their own errors first, as in Redis. True if refused.
bool Loop::pubsub_refused(Connection& c, const std::string& name, const std::vector<std::string_view>& args) {
  if (name == "subscribe" || name == "unsubscribe" || name == "psubscribe" || name == "punsubscribe" ||
      name == "ping" || name == "quit" || name == "reset" || name == "ssubscribe" || name == "sunsubscribe")
    return false;
  const CommandSpec* spec = find_command(name);
  if (!spec) return false;  // execute answers unknown command
  if (!arity_ok(*spec, args.size())) return false;
  std::string full = name;
  if ((name == "client" || name == "config" || name == "pubsub" || name == "function" || name == "object" ||
       name == "command" || name == "memory") && args.size() > 1)
    full += "|" + lower(args[1]);
  Pending& p = c.pending.emplace_back();
  p.resp3 = c.resp3;
  resp::error(p.reply, "ERR Can't execute '" + full +
                           "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context");
  return true;
}

bool Loop::execute_pubsub(std::uint32_t slot, Connection& c, const std::string& name, Pending& p, std::uint64_t seq,
                          const std::vector<std::string_view>& args) {
  auto arity = [&](bool ok) {
    if (!ok) resp::error(p.reply, "ERR wrong number of arguments for '" + name + "' command");
    return ok;
  };
  if (name == "subscribe" || name == "psubscribe") {
    if (arity(args.size() >= 2)) subscribe(slot, c, p, seq, name[0] == 'p', args);
  } else if (name == "unsubscribe" || name == "punsubscribe") {
    unsubscribe(slot, c, p, seq, name[0] == 'p', args);
  } else if (name == "publish") {
    if (arity(args.size() == 3)) publish(slot, c, p, seq, std::string(args[1]), std::string(args[2]));
  } else if (name == "pubsub") {
    pubsub_command(slot, c, p, seq, args);
  } else {
    return false;
  }
  return true;
}

// PUBSUB CHANNELS [pattern] (every shard's channels), NUMSUB (each
// channel's home shard), NUMPAT (any shard: each has every pattern), HELP.
void Loop::pubsub_command(std::uint32_t slot, Connection& c, Pending& p, std::uint64_t seq,
                          const std::vector<std::string_view>& args) {
  {
    if (args.size() < 2) return resp::error(p.reply, "ERR wrong number of arguments for 'pubsub' command");
    const std::string sub = lower(args[1]);
    const std::uint32_t gen = c.gen;
    if ((sub == "channels" || sub == "shardchannels") && args.size() <= 3) {
      p.kind = Pending::Kind::kList;
      if (sub == "shardchannels") return finish(p);  // no sharded channels (SSUBSCRIBE): none
      const std::string pat = args.size() == 3 ? std::string(args[2]) : std::string();
      p.waiting = std::uint32_t(nshards_);
      inflight_ += nshards_;
      for (std::size_t i = 0; i < nshards_; ++i)
        shard(i).apply_with_then(
            [](Shard& s, std::string pattern) {
              std::vector<std::string> out;
              try {
                for (const auto& [ch, counts] : s.channels)
                  if (pattern.empty() || glob(pattern, ch)) out.push_back(ch);
              } catch (...) {
              }
              return out;
            },
            [this, slot, gen, seq](std::vector<std::string> chans) {
              answer(slot, gen, seq, [&](Pending& q) {
                for (auto& ch : chans) q.values.push_back(Value{Value::kString, std::move(ch)});
              });
            },
            pat);
    } else if ((sub == "numsub" || sub == "shardnumsub")) {
      p.kind = Pending::Kind::kPairs;
      for (std::size_t i = 2; i < args.size(); ++i) {
        p.values.push_back(Value{Value::kString, std::string(args[i])});
        p.values.push_back(Value{Value::kString, "0"});
      }
      if (sub == "shardnumsub" || args.size() == 2) return finish(p);
      p.waiting = std::uint32_t(args.size() - 2);
      inflight_ += args.size() - 2;
      for (std::size_t i = 2; i < args.size(); ++i)
        shard(shard_of(args[i], nshards_))
            .apply_with_then(
                [](Shard& s, std::string ch) {
                  std::int64_t n = 0;
                  if (auto it = s.channels.find(ch); it != s.channels.end())
                    for (const auto& [t, k] : it->second) n += k;
                  return Count{n, Count::kOk};
                },
                [this, slot, gen, seq, at = 2 * (i - 2) + 1](Count n) {
                  answer(slot, gen, seq, [&](Pending& q) { q.values[at].data = std::to_string(n.n); });
                },
                std::string(args[i]));
    } else if (sub == "numpat" && args.size() == 2) {
      p.kind = Pending::Kind::kSum;
      p.waiting = 1;
      ++inflight_;
      shard(0).apply_then([](Shard& s) { return Count{std::int64_t(s.patterns.size()), Count::kOk}; },
                          [this, slot, gen, seq](Count n) {
                            answer(slot, gen, seq, [&](Pending& q) { q.sum = n.n; });
                          });
    } else if (sub == "help" && args.size() == 2) {
      static const char* const kHelp[] = {
          "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
          "CHANNELS [<pattern>]",
          "    Return the currently active channels matching a <pattern> (default: '*').",
          "NUMPAT",
          "    Return number of subscriptions to patterns.",
          "NUMSUB [<channel> ...]",
          "    Return the number of subscribers for the specified channels, excluding",
          "    pattern subscriptions(default: no channels).",
          "SHARDCHANNELS [<pattern>]",
          "    Return the currently active shard level channels matching a <pattern> (default: '*').",
          "SHARDNUMSUB [<shardchannel> ...]",
          "    Return the number of subscribers for the specified shard level channel(s)",
          "HELP",
          "    Print this help."};
      resp::array(p.reply, std::size(kHelp));
      for (const char* line : kHelp) resp::simple(p.reply, line);
    } else {
      const bool known = sub == "channels" || sub == "shardchannels" || sub == "numpat" || sub == "help";
      if (known)  // a known subcommand with too many arguments
        resp::error(p.reply, "ERR wrong number of arguments for 'pubsub|" + sub + "' command");
      else
        resp::error(p.reply, "ERR unknown subcommand '" + std::string(args[1].substr(0, 128)) + "'. Try PUBSUB HELP.");
    }
  }
}

// SUBSCRIBE / PSUBSCRIBE: one notice per name, the count after it; the
// names new to this connection are counted on their shards first.
void Loop::subscribe(std::uint32_t slot, Connection& c, Pending& p, std::uint64_t seq, bool pattern,
                     const std::vector<std::string_view>& args) {
  auto& mine = pattern ? c.patterns : c.channels;
  auto& local = pattern ? local_patterns_ : local_channels_;
  std::vector<std::string> added;
  p.push = true;
  for (std::size_t i = 1; i < args.size(); ++i) {
    std::string n(args[i]);
    if (mine.insert(n).second) {
      local[n].emplace_back(slot, c.gen);
      added.push_back(n);
    }
    notice(p.reply, c.resp3, pattern ? "psubscribe" : "subscribe", &n, c.channels.size() + c.patterns.size());
  }
  c.subscribed = true;
  if (keyish(pattern, added)) count_key_subs();
  register_names(slot, c, seq, &p, pattern, std::move(added), +1);
}

void Loop::unsubscribe(std::uint32_t slot, Connection& c, Pending& p, std::uint64_t seq, bool pattern,
                       const std::vector<std::string_view>& args) {
  auto& mine = pattern ? c.patterns : c.channels;
  auto& local = pattern ? local_patterns_ : local_channels_;
  const std::string_view kind = pattern ? "punsubscribe" : "unsubscribe";
  std::vector<std::string> names;
  if (args.size() > 1) {
    for (std::size_t i = 1; i < args.size(); ++i) names.emplace_back(args[i]);
  } else {
    names.assign(mine.begin(), mine.end());
  }
  p.push = true;
  std::vector<std::string> removed;
  for (auto& n : names) {
    if (mine.erase(n)) {
      remove_subscriber(local, n, slot);
      removed.push_back(n);
    }
    notice(p.reply, c.resp3, kind, &n, c.channels.size() + c.patterns.size());
  }
  if (names.empty()) notice(p.reply, c.resp3, kind, nullptr, c.channels.size() + c.patterns.size());
  c.subscribed = !c.channels.empty() || !c.patterns.empty();
  if (keyish(pattern, removed)) count_key_subs();
  register_names(slot, c, seq, &p, pattern, std::move(removed), -1);
}

// A closing connection's subscriptions: gone from this loop at once, and
// from the shards' counts without waiting.
void Loop::unsubscribe_all(std::uint32_t slot, Connection& c) {
  for (int pattern = 0; pattern < 2; ++pattern) {
    auto& mine = pattern ? c.patterns : c.channels;
    auto& local = pattern ? local_patterns_ : local_channels_;
    std::vector<std::string> names(mine.begin(), mine.end());
    for (const auto& n : names) remove_subscriber(local, n, slot);
    mine.clear();
    if (keyish(pattern != 0, names)) count_key_subs();
    // Stopping: the registries go with the process, and another host may
    // have stopped already (its answer would never come).
    if (!g_stop.load(std::memory_order_relaxed)) register_names(slot, c, 0, nullptr, pattern != 0, std::move(names), -1);
  }
  c.subscribed = false;
}

// Counts `names` (+1 or -1 for this thread) on their shards: a channel on
// its home shard, a pattern on every shard. With `p`, request `seq` waits
// for the counts.
void Loop::register_names(std::uint32_t slot, Connection& c, std::uint64_t seq, Pending* p, bool pattern,
                          std::vector<std::string> names, std::int32_t delta) {
  if (names.empty()) return;
  std::vector<std::vector<std::string>> groups(nshards_);
  if (pattern) {
    for (auto& g : groups) g = names;
  } else {
    for (auto& n : names) groups[shard_of(n, nshards_)].push_back(std::move(n));
  }
  std::size_t sends = 0;
  for (const auto& g : groups) sends += !g.empty();
  if (p) p->waiting += std::uint32_t(sends);
  inflight_ += sends;
  const std::uint32_t gen = c.gen, thread = std::uint32_t(gossamer::thread_index());
  for (std::size_t s = 0; s < nshards_; ++s) {
    if (groups[s].empty()) continue;
    if (p)
      shard(s).apply_with_then(registry_update, [this, slot, gen, seq](Count) { answer(slot, gen, seq, [](Pending&) {}); },
                               std::move(groups[s]), thread, delta, pattern);
    else
      shard(s).apply_with_then(registry_update, [this](Count) { --inflight_; }, std::move(groups[s]), thread, delta,
                               pattern);
  }
}

// PUBLISH: the channel's home shard names the threads to deliver to; the
// deliveries leave in request order (dispatch_publishes).
void Loop::publish(std::uint32_t slot, Connection& c, Pending& p, std::uint64_t seq, std::string channel,
                   std::string message) {
  p.kind = Pending::Kind::kSum;
  p.waiting = 1;  // the lookup; dispatch adds one per thread
  const std::uint64_t id = publish_base_ + publishes_.size();
  Publish& pub = publishes_.emplace_back();
  pub.slot = slot;
  pub.gen = c.gen;
  pub.seq = seq;
  pub.channel = channel;
  pub.message = std::move(message);
  lookup_publish(id, std::move(channel));
}

// A keyspace event for other hosts' subscribers (notify.cpp): as PUBLISH,
// with no connection waiting, skipping this host's threads (dispatch_publishes).
void Loop::publish_event(std::string channel, std::string message) {
  const std::uint64_t id = publish_base_ + publishes_.size();
  Publish& pub = publishes_.emplace_back();
  pub.slot = UINT32_MAX;
  pub.remote_only = true;
  pub.channel = channel;
  pub.message = std::move(message);
  lookup_publish(id, std::move(channel));
}

// Publish `id`'s threads, from its channel's home shard.
void Loop::lookup_publish(std::uint64_t id, std::string channel) {
  const std::size_t home = shard_of(channel, nshards_);
  ++inflight_;
  shard(home).apply_with_then(lookup_threads, [this, id](std::vector<std::uint32_t> threads) {
    --inflight_;
    if (id < publish_base_ || id - publish_base_ >= publishes_.size()) return;
    Publish& q = publishes_[id - publish_base_];
    q.threads = std::move(threads);
    q.ready = true;
    dispatch_publishes();
  }, std::move(channel));
}

void Loop::dispatch_publishes() {
  while (!publishes_.empty() && publishes_.front().ready) {
    Publish pub = std::move(publishes_.front());
    publishes_.pop_front();
    ++publish_base_;
    Connection* c = find(pub.slot, pub.gen);
    const bool live = c && pub.seq >= c->base && pub.seq - c->base < c->pending.size();
    if (live) c->pending[pub.seq - c->base].waiting += std::uint32_t(pub.threads.size());
    inflight_ += pub.threads.size();
    for (std::uint32_t t : pub.threads) {
      if (pub.remote_only && t >= first_local_ && t < first_local_ + local_count_) {  // had it from notify.cpp
        if (live) --c->pending[pub.seq - c->base].waiting;
        --inflight_;
        continue;
      }
      const std::uint32_t slot = pub.slot, gen = pub.gen;
      const std::uint64_t seq = pub.seq;
      shard(t).apply_with_then(deliver_closure, [this, slot, gen, seq, live](Count n) {
        if (!live) {
          --inflight_;
          return;
        }
        answer(slot, gen, seq, [&](Pending& q) { q.sum += n.n; });
      }, pub.channel, pub.message);
    }
    ++inflight_;  // the lookup's share of the reply
    answer(pub.slot, pub.gen, pub.seq, [](Pending&) {});
  }
}

// Run by this thread's trustee (deliver_closure), possibly while this
// loop's fiber waits in the middle of a command: the receivers are counted
// now, and the message queued for deliver_messages at the loop's next round.
std::int64_t Loop::on_message(std::string channel, std::string message) {
  Message m;
  if (auto it = local_channels_.find(channel); it != local_channels_.end())
    for (auto [slot, gen] : it->second) m.to.emplace_back(slot, gen, std::string());
  for (const auto& [pat, subs] : local_patterns_)
    if (glob(pat, channel))
      for (auto [slot, gen] : subs) m.to.emplace_back(slot, gen, pat);
  const auto n = std::int64_t(m.to.size());
  if (n) {
    m.channel = std::move(channel);
    m.message = std::move(message);
    messages_.push_back(std::move(m));
  }
  return n;
}

void Loop::deliver_messages() {
  std::vector<Message> batch;
  batch.swap(messages_);
  for (const Message& m : batch) {
    for (const auto& [slot, gen, pat] : m.to) {
      Connection* c = find(slot, gen);
      if (!c || c->fd < 0) continue;
      std::string bytes;
      if (pat.empty()) {
        resp::push(bytes, 3, c->resp3);
        resp::bulk(bytes, "message");
      } else {
        resp::push(bytes, 4, c->resp3);
        resp::bulk(bytes, "pmessage");
        resp::bulk(bytes, pat);
      }
      resp::bulk(bytes, m.channel);
      resp::bulk(bytes, m.message);
      queue_push(slot, *c, std::move(bytes));
    }
  }
}

// A message for one connection: after the replies it is owed (in their
// queue) or straight to its output. A subscriber owed more than
// --pubsub-output-limit (it does not read) is disconnected, as Redis's
// client-output-buffer-limit pubsub.
void Loop::queue_push(std::uint32_t slot, Connection& c, std::string&& bytes) {
  const std::size_t owed = c.out.size() - c.written + c.reply_bytes + bytes.size();
  if (g_config.pubsub_hard_limit && owed > g_config.pubsub_hard_limit)
    return evict(slot, c, owed, "pub/sub messages, over --pubsub-output-limit");
  if (c.pending.empty()) {
    c.out += bytes;
  } else {
    Pending& p = c.pending.emplace_back();
    p.push = true;
    p.counted = bytes.size();
    c.reply_bytes += bytes.size();
    p.reply = std::move(bytes);
  }
  mark_dirty(slot);
}

// Closes a connection owed too much: an abortive close (RST), so that what
// is already in the kernel's send buffer goes too, instead of waiting there
// for a reader that never comes.
void Loop::evict(std::uint32_t slot, Connection& c, std::size_t owed, const char* why) {
  g_stats.client_output_kills.fetch_add(1, std::memory_order_relaxed);
  std::fprintf(stderr, "hydra: client id=%llu closed: owed %zu bytes of %s\n", static_cast<unsigned long long>(c.id),
               owed, why);
  linger abort{1, 0};
  ::setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
  close_connection(slot);
}

namespace {
// A connection owed less is never disconnected for --max-reply-memory.
constexpr std::size_t kMinEvictable = 64u << 10;
}  // namespace

// After a flush: a backlog of kMinEvictable or more asks for a
// bound_replies this round, again each time it has grown by another
// kMinEvictable (not on every flush: bound_replies scans every connection
// of the loop).
void Loop::note_backlog(Connection& c) {
  const std::size_t unsent = c.out.size() - c.written;
  if (unsent < c.checked_owed) {
    c.checked_owed = unsent;
  } else if (unsent >= c.checked_owed + kMinEvictable) {
    c.checked_owed = unsent;
    reply_check_ = true;
  }
}

// --max-reply-memory: this loop's connections' owed replies, published for
// the host; when the host's total is over the bound, this loop disconnects
// its connections owed the most (at least 64 KiB each, not CLIENT NO-EVICT)
// until the total fits. Clients that read their replies owe little and are
// never chosen while slower ones hold more. Run every 1024 rounds, and in
// a round whose flushes grew a backlog (note_backlog).
void Loop::bound_replies() {
  const std::size_t bound = g_max_reply_memory.load(std::memory_order_relaxed);
  if (!bound) return;
  std::size_t mine = 0;
  std::vector<std::pair<std::size_t, std::uint32_t>> big;
  for (std::uint32_t slot = 0; slot < conns_.size(); ++slot) {
    const Connection* c = conns_[slot].get();
    if (!c || c->fd < 0) continue;
    const std::size_t owed = c->out.size() - c->written + c->reply_bytes;
    mine += owed;
    if (owed >= kMinEvictable && !c->no_evict) big.emplace_back(owed, slot);
  }
  g_owed[local_index_].value.store(mine, std::memory_order_relaxed);
  std::size_t total = 0;
  for (std::size_t i = 0; i < local_count_ && i < kMaxThreads; ++i) total += g_owed[i].value.load(std::memory_order_relaxed);
  if (total <= bound) return;
  std::sort(big.begin(), big.end(), std::greater<>());
  for (auto [owed, slot] : big) {
    if (total <= bound) break;
    total -= owed;
    mine -= owed;
    evict(slot, *conns_[slot], owed, "replies, the host over --max-reply-memory");
  }
  g_owed[local_index_].value.store(mine, std::memory_order_relaxed);
}

}  // namespace hydra
