// Hydra's commands: each becomes a Pending in its connection's reply queue
// and, unless it is answered on the spot, one apply_with_then per shard it
// touches. The callbacks (run later on this thread, or at once when the
// shard is this thread's own) fill the Pending; Loop::flush sends replies in
// request order.
#include <fnmatch.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>

#include "server.hpp"

namespace hydra {

namespace {

using resp::lower;

// The keys (with step 2: key, value pairs) of a multi-key command, grouped
// by shard: one request per shard, keys in request order within it.
struct Split {
  std::vector<std::uint32_t> shard;                   // per group
  std::vector<std::vector<std::string>> items;        // per group: keys (and values)
  std::vector<std::vector<std::uint32_t>> positions;  // per group: each key's position among the keys
  std::vector<std::size_t> bytes;                     // per group: serialized size, about
};

// kTooLarge (server.hpp): --max-shard-request defaults to 1 GiB less 64 KiB
// for the serialization's lengths and counts.

bool too_large(const Split& sp) {
  for (std::size_t b : sp.bytes)
    if (b > g_config.max_shard_request) return true;
  return false;
}

Split split_keys(const std::vector<std::string_view>& args, std::size_t step, std::size_t shards) {
  Split sp;
  std::vector<int> group_of(shards, -1);
  std::uint32_t position = 0;
  for (std::size_t i = 1; i + step - 1 < args.size(); i += step, ++position) {
    std::size_t s = shard_of(args[i], shards);
    if (group_of[s] < 0) {
      group_of[s] = int(sp.shard.size());
      sp.shard.push_back(std::uint32_t(s));
      sp.items.emplace_back();
      sp.positions.emplace_back();
      sp.bytes.push_back(8);
    }
    auto g = std::size_t(group_of[s]);
    for (std::size_t k = 0; k < step; ++k) {
      sp.items[g].emplace_back(args[i + k]);
      sp.bytes[g] += args[i + k].size() + 8;
    }
    sp.positions[g].push_back(position);
  }
  return sp;
}

// The callback for answers that add to a count (and report the first
// error): DEL, EXISTS, DBSIZE, INFO, MSET, FLUSHALL.
auto add_count(Loop* loop, std::uint32_t slot, std::uint32_t gen, std::uint64_t seq) {
  return [loop, slot, gen, seq](Count n) {
    loop->answer(slot, gen, seq, [&](Pending& p) {
      p.sum += n.n;
      p.expiring += n.expiring;
      if (n.err != Count::kOk && p.error.empty()) p.error = count_error(n.err);
    });
  };
}

}  // namespace

void Loop::execute(std::uint32_t slot, Connection& c, const std::vector<std::string_view>& args) {
  const std::string name = lower(args[0]);
  // A command whose order against other connections' a client can see
  // waits for those that reached the host before it, and tells when it
  // ran, whichever way it returns (order.cpp).
  struct Ordered {
    Loop* loop;
    std::uint32_t slot, gen;
    bool on = false;
    ~Ordered() {
      if (on) loop->order_after(slot, gen);
    }
  } ordered{this, slot, c.gen};
  if (c.order_id || order_kind(c, name, args)) [[unlikely]] {
    if (!order_gate(slot, c, name, args)) return;
    ordered.on = true;
  }
  auto& counter = g_commands[local_index_].value;
  counter.store(++commands_, std::memory_order_relaxed);

  // Anything but GET and SET sends what batch.cpp gathered first: its own
  // requests reach the shards after the commands before it.
  if (!batch_used_.empty() && name != "get" && name != "set") send_batches();
  const int cmd = command_index(name);
  CommandCounts& counts = g_command_counts[local_index_];
  if (!c.authed && name != "auth" && name != "hello" && name != "quit") {  // --requirepass
    c.multi_error = c.in_multi;  // refused as Redis's rejectCommand: it fails a MULTI
    resp::error(c.pending.emplace_back().reply, "NOAUTH Authentication required.");
    return count_command(counts.rejected, cmd);
  }
  if (c.subscribed && !c.resp3 && pubsub_refused(c, name, args)) return count_command(counts.rejected, cmd);  // RESP2 in subscribed mode
  if (g_oom.load(std::memory_order_relaxed) && oom_refused(c, name)) return count_command(counts.rejected, cmd);  // --maxmemory (memory.cpp)
  count_command(counts.calls, cmd);
  c.set_last_cmd(name);
  if ((c.in_multi || !fences_.empty() || transaction_name(name)) && transaction_command(slot, c, name, args)) return;
  if (g_monitors.load(std::memory_order_relaxed)) [[unlikely]] feed_monitors(c, args);  // MONITOR (monitor.cpp)
  const std::uint64_t seq = c.base + c.pending.size();
  const std::uint32_t gen = c.gen;
  Pending& p = c.pending.emplace_back();
  p.resp3 = c.resp3;
  auto arity = [&](bool ok) {
    if (!ok) resp::error(p.reply, "ERR wrong number of arguments for '" + name + "' command");
    return ok;
  };
  // Sends one request per group of `sp` (or to every shard), the Pending
  // waiting for all of them. `waiting` is set first: an answer from this
  // thread's own shard arrives before apply_with_then returns.
  auto each_group = [&](Split& sp, Pending::Kind kind, auto fn) {
    if (too_large(sp)) return resp::error(p.reply, kTooLarge);
    p.kind = kind;
    p.waiting = std::uint32_t(sp.shard.size());
    inflight_ += sp.shard.size();
    for (std::size_t g = 0; g < sp.shard.size(); ++g) shard(sp.shard[g]).apply_with_then(fn, add_count(this, slot, gen, seq), std::move(sp.items[g]));
  };
  auto every_shard = [&](Pending::Kind kind, auto fn) {
    p.kind = kind;
    p.waiting = std::uint32_t(nshards_);
    inflight_ += nshards_;
    for (std::size_t i = 0; i < nshards_; ++i) shard(i).apply_then(fn, add_count(this, slot, gen, seq));
  };

  if (execute_string(slot, name, p, seq, gen, args)) return;
  if (name == "hello") {
    hello(p, c, args);
  } else if (name == "auth") {
    auth(p, c, args);
  } else if (name == "del" || name == "unlink") {
    if (!arity(args.size() >= 2)) return;
    Split sp = split_keys(args, 1, nshards_);
    each_group(sp, Pending::Kind::kSum, [](Shard& s, std::vector<std::string> k) { return shard_del(s, std::move(k)); });
  } else if (name == "exists") {
    if (!arity(args.size() >= 2)) return;
    Split sp = split_keys(args, 1, nshards_);
    each_group(sp, Pending::Kind::kSum, [](Shard& s, std::vector<std::string> k) {
      if (notifying()) [[unlikely]] return shard_exists_read(s, std::move(k));  // keymiss (notify.cpp)
      return shard_exists(s, std::move(k));
    });
  } else if (name == "touch") {  // the keys that exist, their access clocks set
    if (!arity(args.size() >= 2)) return;
    Split sp = split_keys(args, 1, nshards_);
    each_group(sp, Pending::Kind::kSum, [](Shard& s, std::vector<std::string> k) { return shard_touch(s, std::move(k)); });
  } else if (name == "mset") {
    if (!arity(args.size() >= 3 && args.size() % 2 == 1)) return;
    Split sp = split_keys(args, 2, nshards_);
    each_group(sp, Pending::Kind::kOk, [](Shard& s, std::vector<std::string> kv) { return shard_mset(s, std::move(kv)); });
  } else if (name == "mget") {
    if (!arity(args.size() >= 2)) return;
    Split sp = split_keys(args, 1, nshards_);
    if (too_large(sp)) return resp::error(p.reply, kTooLarge);
    p.kind = Pending::Kind::kMget;
    p.values.resize(args.size() - 1);
    p.positions = std::move(sp.positions);
    p.waiting = std::uint32_t(sp.shard.size());
    inflight_ += sp.shard.size();
    for (std::uint32_t g = 0; g < sp.shard.size(); ++g) {
      shard(sp.shard[g])
          .apply_with_then([](Shard& s, std::vector<std::string> k) { return shard_mget(s, std::move(k)); },
                           [this, slot, gen, seq, g](std::vector<Value> vs) {
                             answer(slot, gen, seq, [&](Pending& q) {
                               const auto& pos = q.positions[g];
                               if (vs.size() != pos.size() || (!vs.empty() && vs[0].kind == Value::kError)) {  // the shard failed
                                 if (q.error.empty()) q.error = vs.empty() ? "ERR out of memory" : vs[0].data;
                                 return;
                               }
                               for (std::size_t i = 0; i < vs.size(); ++i) q.values[pos[i]] = std::move(vs[i]);
                             });
                           },
                           std::move(sp.items[g]));
    }
  } else if (name == "dbsize") {
    if (!arity(args.size() == 1)) return;
    every_shard(Pending::Kind::kSum, [](Shard& s) { return shard_size(s); });
  } else if (name == "flushall" || name == "flushdb") {
    if (!arity(args.size() <= 2)) return;
    if (args.size() == 2 && lower(args[1]) != "sync" && lower(args[1]) != "async") {
      resp::error(p.reply, "ERR syntax error");
      return;
    }
    every_shard(Pending::Kind::kOk, [](Shard& s) { return shard_flush(s); });
  } else if (name == "info") {
    p.info_sections = args.size() == 1 ? info_sections("default") : 0;
    for (std::size_t i = 1; i < args.size(); ++i) p.info_sections |= info_sections(lower(args[i]));
    every_shard(Pending::Kind::kInfo, [](Shard& s) { return shard_size(s); });  // keys for # Keyspace
  } else if (name == "ping") {
    if (!arity(args.size() <= 2)) return;
    if (c.subscribed && !c.resp3) {  // subscribed (RESP2): an array, as Redis
      resp::array(p.reply, 2);
      resp::bulk(p.reply, "pong");
      resp::bulk(p.reply, args.size() == 2 ? args[1] : std::string_view());
    } else if (args.size() == 1) {
      resp::simple(p.reply, "PONG");
    } else {
      resp::bulk(p.reply, args[1]);
    }
  } else if (name == "echo") {
    if (arity(args.size() == 2)) resp::bulk(p.reply, args[1]);
  } else if (name == "quit") {
    resp::simple(p.reply, "OK");
    c.closing = true;  // after this reply; later requests are not read
  } else if (name == "select") {
    if (!arity(args.size() == 2)) return;
    long long db;
    if (!resp::parse_int64(args[1], db)) resp::error(p.reply, "ERR value is not an integer or out of range");
    else if (db != 0) resp::error(p.reply, "ERR DB index is out of range");
    else resp::simple(p.reply, "OK");
  } else if (name == "config") {
    if (!arity(args.size() >= 2)) return;
    config_command(p, args);                  // config.cpp
    notify_rack(slot, gen, seq, p, args);     // notify-keyspace-events: to the other hosts (notify.cpp)
  } else if (name == "monitor") {
    if (arity(args.size() == 1)) monitor(slot, c, p);  // monitor.cpp
  } else if (name == "time") {  // seconds and microseconds of this host's clock, as bulk strings
    if (!arity(args.size() == 1)) return;
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    resp::array(p.reply, 2);
    resp::bulk(p.reply, std::to_string(us / 1'000'000));
    resp::bulk(p.reply, std::to_string(us % 1'000'000));
  } else if (name == "command") {
    command_command(p, args);  // command_info.cpp
  } else if (name == "debug") {
    if (arity(args.size() >= 2)) debug_command(slot, p, seq, gen, args);  // debug.cpp
  } else if (name == "function") {
    // Hydra has no scripting, so no function library: FUNCTION FLUSH has
    // nothing to remove and FUNCTION LIST nothing to list (clients and
    // Redis's test suite call both as housekeeping).
    if (!arity(args.size() >= 2)) return;
    const std::string sub = lower(args[1]);
    if (sub == "flush" && args.size() <= 3) {
      if (args.size() == 3 && lower(args[2]) != "sync" && lower(args[2]) != "async")
        resp::error(p.reply, "ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
      else
        resp::simple(p.reply, "OK");
    } else if (sub == "list") {
      resp::array(p.reply, 0);
    } else {
      resp::error(p.reply, "ERR unknown subcommand '" + std::string(args[1].substr(0, 128)) + "'. Try FUNCTION HELP.");
    }
  } else if (name == "shutdown") {
    resp::error(p.reply, "ERR SHUTDOWN is refused by hydra: stop it with SIGTERM or SIGINT (Ctrl-C on gossamerctl run)");
  } else if (!execute_keyspace(slot, name, p, seq, gen, args) && !execute_types(slot, name, p, seq, gen, args) &&
             !execute_keys(slot, name, p, seq, gen, args) && !execute_pubsub(slot, c, name, p, seq, args) &&
             !execute_client(slot, c, name, p, seq, args) && !execute_blocking(slot, c, name, p, seq, args) &&
             !execute_zset_multi(slot, name, p, seq, gen, args) && !execute_sort(slot, name, p, seq, gen, args) &&
             !execute_dump(slot, name, p, seq, gen, args)) {
    resp::error(p.reply, unknown_command(args));
  }
}

std::string unknown_command(const std::vector<std::string_view>& args) {
  std::string shown;
  for (std::size_t i = 1; i < args.size() && shown.size() < 128; ++i)
    shown += "'" + std::string(args[i].substr(0, 128 - shown.size())) + "' ";
  return "ERR unknown command '" + std::string(args[0].substr(0, 128)) + "', with args beginning with: " + shown;
}

void Loop::finish(Pending& p) const {
  if (p.kind != Pending::Kind::kDone && !p.error.empty()) {
    resp::error(p.reply, p.error);
    return;
  }
  switch (p.kind) {
    case Pending::Kind::kDone:
      break;
    case Pending::Kind::kSum:
      resp::integer(p.reply, p.sum);
      break;
    case Pending::Kind::kOk:
      resp::simple(p.reply, "OK");
      break;
    case Pending::Kind::kMget:
      resp::array(p.reply, p.values.size());
      for (const Value& v : p.values) {
        if (v.kind == Value::kString) resp::bulk(p.reply, v.data);
        else resp::nil(p.reply, p.resp3);
      }
      std::vector<Value>().swap(p.values);
      break;
    case Pending::Kind::kKeys:
      resp::array(p.reply, p.values.size());
      for (const Value& v : p.values) resp::bulk(p.reply, v.data);
      std::vector<Value>().swap(p.values);
      break;
    case Pending::Kind::kRandom:
      if (p.values.empty()) resp::nil(p.reply, p.resp3);
      else resp::bulk(p.reply, p.values[0].data);
      std::vector<Value>().swap(p.values);
      break;
    case Pending::Kind::kStatuses:
      resp::array(p.reply, p.values.size());
      for (const Value& v : p.values) resp::simple(p.reply, v.data);
      std::vector<Value>().swap(p.values);
      break;
    case Pending::Kind::kInfo:
      resp::verbatim(p.reply, info_text(p.info_sections, p.sum, p.expiring), p.resp3);
      break;
    case Pending::Kind::kLines: {
      std::string text;
      for (const Value& v : p.values) text.append(v.data).append("\n");
      resp::verbatim(p.reply, text, p.resp3);
      std::vector<Value>().swap(p.values);
      break;
    }
    case Pending::Kind::kList:
      resp::array(p.reply, p.values.size());
      for (const Value& v : p.values) resp::bulk(p.reply, v.data);
      std::vector<Value>().swap(p.values);
      break;
    case Pending::Kind::kPairs:
      resp::array(p.reply, p.values.size());
      for (std::size_t i = 0; i + 1 < p.values.size(); i += 2) {
        resp::bulk(p.reply, p.values[i].data);
        long long n = 0;
        resp::parse_int64(p.values[i + 1].data, n);
        resp::integer(p.reply, n);
      }
      std::vector<Value>().swap(p.values);
      break;
  }
}

namespace {

// --requirepass's check for user `default` (the only user): in time that
// does not depend on where the password differs. Without a password the
// default user takes any (Redis's `nopass`).
bool password_ok(std::string_view user, std::string_view pass) {
  if (user != "default") return false;
  const std::string& want = g_config.requirepass;
  if (want.empty()) return true;
  unsigned diff = pass.size() != want.size();
  for (std::size_t i = 0; i < want.size(); ++i) diff |= unsigned(char(want[i] ^ (i < pass.size() ? pass[i] : 0)));
  return diff == 0;
}

constexpr const char* kWrongPass = "WRONGPASS invalid username-password pair or user is disabled.";

}  // namespace

// AUTH [user] password, as Redis 7.0 with only the default user.
void Loop::auth(Pending& p, Connection& c, const std::vector<std::string_view>& args) const {
  if (args.size() < 2) return resp::error(p.reply, "ERR wrong number of arguments for 'auth' command");
  if (args.size() > 3) return resp::error(p.reply, "ERR syntax error");
  if (args.size() == 2 && g_config.requirepass.empty())
    return resp::error(p.reply, "ERR AUTH <password> called without any password configured for the default user. "
                                "Are you sure your configuration is correct?");
  if (!password_ok(args.size() == 3 ? args[1] : "default", args.back())) return resp::error(p.reply, kWrongPass);
  c.authed = true;
  resp::simple(p.reply, "OK");
}

// HELLO [protover [AUTH user pass] [SETNAME name]]: switches the
// connection's protocol and answers Redis 7.0's map (an array of pairs in
// RESP2). AUTH authenticates as AUTH does; without it, a connection not yet
// authenticated (--requirepass) is refused.
void Loop::hello(Pending& p, Connection& c, const std::vector<std::string_view>& args) const {
  bool resp3 = c.resp3;
  if (args.size() >= 2) {
    long long ver;
    if (!resp::parse_int64(args[1], ver)) return resp::error(p.reply, "ERR Protocol version is not an integer or out of range");
    if (ver < 2 || ver > 3) return resp::error(p.reply, "NOPROTO unsupported protocol version");
    resp3 = ver == 3;
  }
  std::string_view user, pass, setname;
  bool with_auth = false, with_name = false;
  for (std::size_t i = 2; i < args.size(); ++i) {
    const std::string opt = lower(args[i]);
    const std::size_t left = args.size() - i - 1;
    if (opt == "auth" && left >= 2) {
      user = args[i + 1];
      pass = args[i + 2];
      with_auth = true;
      i += 2;
    } else if (opt == "setname" && left >= 1) {
      setname = args[++i];
      with_name = true;
    } else {
      return resp::error(p.reply, "ERR Syntax error in HELLO option '" + std::string(args[i]) + "'");
    }
  }
  if (with_name && std::any_of(setname.begin(), setname.end(), [](char ch) { return ch < '!' || ch > '~'; }))
    return resp::error(p.reply, "ERR Client names cannot contain spaces, newlines or special characters.");
  if (with_auth && !password_ok(user, pass)) return resp::error(p.reply, kWrongPass);
  if (with_auth) c.authed = true;
  if (!c.authed)
    return resp::error(p.reply, "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
                                "HELLO AUTH <user> <pass> option can be used to authenticate the client and "
                                "select the RESP protocol version at the same time");
  if (with_name) c.name = std::string(setname);
  c.resp3 = p.resp3 = resp3;
  resp::map(p.reply, 7, resp3);
  resp::bulk(p.reply, "server");
  resp::bulk(p.reply, "redis");
  resp::bulk(p.reply, "version");
  resp::bulk(p.reply, kRedisVersion);
  resp::bulk(p.reply, "proto");
  resp::integer(p.reply, resp3 ? 3 : 2);
  resp::bulk(p.reply, "id");
  resp::integer(p.reply, static_cast<long long>(c.id));
  resp::bulk(p.reply, "mode");
  resp::bulk(p.reply, "standalone");
  resp::bulk(p.reply, "role");
  resp::bulk(p.reply, "master");
  resp::bulk(p.reply, "modules");
  resp::array(p.reply, 0);
}

// INFO's arguments as a set of sections (a small field of Pending, not a
// string: the reply queue's entries stay small). Redis 7.0's names; "all"
// and "everything" add commandstats to the default ones.
namespace {
constexpr std::string_view kSections[] = {"server", "clients", "memory", "persistence", "stats",
                                          "replication", "cpu", "keyspace", "commandstats"};
constexpr std::uint16_t kDefaultSections = 0xff;
}  // namespace

std::uint16_t Loop::info_sections(std::string_view section) {
  if (section == "default") return kDefaultSections;
  if (section == "all" || section == "everything") return 0x1ff;
  for (std::size_t i = 0; i < std::size(kSections); ++i)
    if (section == kSections[i]) return std::uint16_t(1u << i);
  return 0;  // an unknown section: empty, as Redis
}

std::string Loop::info_text(std::uint16_t sections, std::int64_t keys, std::int64_t expiring) const {
  auto want = [&](std::string_view s) { return (info_sections(s) & sections) != 0; };
  std::string out;
  auto line = [&](std::string_view k, const std::string& v) {
    out.append(k).append(":").append(v).append("\r\n");
  };
  auto header = [&](const char* h) {
    if (!out.empty()) out += "\r\n";
    out.append("# ").append(h).append("\r\n");
  };
  if (want("server")) {
    utsname u{};
    ::uname(&u);
    header("Server");
    line("redis_version", kRedisVersion);  // the Redis whose replies Hydra follows
    line("hydra_version", "0.1.0");
    line("redis_mode", "standalone");
    line("os", std::string(u.sysname) + " " + u.release + " " + u.machine);
    line("arch_bits", "64");
    line("multiplexing_api", "epoll");
    line("process_id", std::to_string(::getpid()));
    line("tcp_port", std::to_string(g_config.port));
    line("uptime_in_seconds",
         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - g_started).count()));
    line("gossamer_host", std::to_string(gossamer::host_index()));
    line("gossamer_hosts", std::to_string(gossamer::host_count()));
    line("gossamer_threads", std::to_string(gossamer::thread_count()));
    line("gossamer_shards", std::to_string(nshards_));
  }
  if (want("clients")) {  // this host's
    header("Clients");
    line("connected_clients", std::to_string(g_stats.connected_clients.load(std::memory_order_relaxed)));
    line("maxclients", std::to_string(g_config.maxclients));
    line("blocked_clients", std::to_string(g_stats.blocked_clients.load(std::memory_order_relaxed)));
  }
  if (want("memory")) {  // this host's process
    const struct mallinfo2 m = ::mallinfo2();
    const std::size_t used = m.uordblks + m.hblkhd;
    long pages = 0, rss_pages = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld %ld", &pages, &rss_pages) != 2) rss_pages = 0;
      std::fclose(f);
    }
    char human[32];
    std::snprintf(human, sizeof human, "%.2fM", double(used) / (1024.0 * 1024.0));
    header("Memory");
    line("used_memory", std::to_string(used));
    line("used_memory_human", human);
    line("used_memory_rss", std::to_string(std::size_t(rss_pages) * std::size_t(::sysconf(_SC_PAGESIZE))));
    line("maxmemory", std::to_string(g_maxmemory.load(std::memory_order_relaxed)));
    line("maxmemory_policy", policy_name());
    line("mem_allocator", "libc");
  }
  if (want("persistence")) {  // Hydra persists nothing
    header("Persistence");
    line("loading", "0");
    line("rdb_bgsave_in_progress", "0");
    line("aof_enabled", "0");
  }
  if (want("stats")) {  // this host's
    std::uint64_t commands = 0;
    for (std::size_t i = 0; i < local_count_ && i < kMaxThreads; ++i) commands += g_commands[i].value.load(std::memory_order_relaxed);
    header("Stats");
    line("total_connections_received", std::to_string(g_stats.connections_received.load(std::memory_order_relaxed)));
    line("total_commands_processed", std::to_string(commands));
    line("rejected_connections", std::to_string(g_stats.rejected_connections.load(std::memory_order_relaxed)));
    line("evicted_keys", std::to_string(g_evicted.load(std::memory_order_relaxed)));
    line("hydra_protocol_errors", std::to_string(g_stats.protocol_errors.load(std::memory_order_relaxed)));
    line("hydra_arrival_order_holds", std::to_string(g_order_holds.load(std::memory_order_relaxed)));
    line("hydra_arrival_order_timeouts", std::to_string(g_order_timeouts.load(std::memory_order_relaxed)));
  }
  if (want("replication")) {  // no replication: every host a master without replicas
    header("Replication");
    line("role", "master");
    line("connected_slaves", "0");
    line("master_repl_offset", "0");
  }
  if (want("cpu")) {  // this host's process
    auto seconds = [](const timeval& t) {
      char b[32];
      std::snprintf(b, sizeof b, "%ld.%06ld", long(t.tv_sec), long(t.tv_usec));
      return std::string(b);
    };
    rusage self{}, children{};
    ::getrusage(RUSAGE_SELF, &self);
    ::getrusage(RUSAGE_CHILDREN, &children);
    header("CPU");
    line("used_cpu_sys", seconds(self.ru_stime));
    line("used_cpu_user", seconds(self.ru_utime));
    line("used_cpu_sys_children", seconds(children.ru_stime));
    line("used_cpu_user_children", seconds(children.ru_utime));
    line("hydra_fold_cpus", std::to_string(fold_cpus()));  // 0: not folding (fold.cpp)
    line("hydra_fold_changes", std::to_string(fold_changes()));
  }
  if (want("commandstats")) {  // this host's; Hydra does not time commands or count their failures
    header("Commandstats");
    const auto table = all_commands();
    for (std::size_t i = 0; i < table.size(); ++i) {
      std::uint64_t calls = 0, rejected = 0;
      for (std::size_t t = 0; t < local_count_ && t < kMaxThreads; ++t) {
        calls += g_command_counts[t].calls[i].load(std::memory_order_relaxed);
        rejected += g_command_counts[t].rejected[i].load(std::memory_order_relaxed);
      }
      if (calls + rejected == 0) continue;
      line(std::string("cmdstat_").append(table[i].name), "calls=" + std::to_string(calls) + ",usec=0,usec_per_call=0.00,rejected_calls=" +
                                                         std::to_string(rejected) + ",failed_calls=0");
    }
  }
  if (want("keyspace")) {  // the whole rack's
    header("Keyspace");
    if (keys > 0) line("db0", "keys=" + std::to_string(keys) + ",expires=" + std::to_string(expiring) + ",avg_ttl=0");
  }
  return out;
}

}  // namespace hydra
