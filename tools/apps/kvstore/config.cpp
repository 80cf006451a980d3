// CONFIG GET / SET / RESETSTAT / REWRITE / HELP, as Redis 7.0 answers them.
//
// Three kinds of parameters:
// - Hydra's own, set on its command line (port, bind, maxclients,
//   proto-max-bulk-len, ...): CONFIG GET shows the running value, CONFIG SET
//   answers Redis's error for an immutable parameter (unless the value is
//   the one it has: nothing to change, OK). maxmemory and
//   maxmemory-policy are settable too (memory.cpp).
// - The encoding thresholds OBJECT ENCODING reports against
//   (hash-max-listpack-entries and -value, set-max-intset-entries, with
//   their old ziplist names): settable, kept in process-wide atomics that
//   the shard closures of this host read (types.hpp, g_encodings).
// - Parameters of Redis's that mean nothing to Hydra but that clients and
//   Redis's test suite set (save, appendonly, list-compress-depth,
//   lua-time-limit, ...): accepted, kept, shown by CONFIG GET, and without
//   effect.
// - notify-keyspace-events (notify.cpp): Redis's flag letters; a SET reaches
//   every host of the rack (Loop::notify_rack) before it answers.
// Other CONFIG SETs change this host's process only: on a rack each host
// keeps its own values.
#include <arpa/inet.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <climits>
#include <map>
#include <mutex>

#include "server.hpp"
#include "types.hpp"

namespace hydra {

Encodings g_encodings;

namespace {

using resp::lower;

enum class Kind : std::uint8_t { kImmutable, kEncoding, kStored, kMemory, kNotify };

// Redis's memtoull: a count of bytes with an optional unit (k, kb, m, mb,
// g, gb; any case).
bool memory_value(std::string_view v, std::size_t& bytes) {
  std::size_t digits = 0;
  while (digits < v.size() && v[digits] >= '0' && v[digits] <= '9') ++digits;
  if (digits == 0 || digits > 18) return false;
  const std::string unit = resp::lower(v.substr(digits));
  std::size_t mul = 1;
  if (unit == "k") mul = 1000;
  else if (unit == "kb") mul = 1024;
  else if (unit == "m") mul = 1000 * 1000;
  else if (unit == "mb") mul = 1024 * 1024;
  else if (unit == "g") mul = 1000L * 1000 * 1000;
  else if (unit == "gb") mul = 1024L * 1024 * 1024;
  else if (!unit.empty()) return false;
  bytes = std::stoull(std::string(v.substr(0, digits))) * mul;
  return true;
}

struct Param {
  const char* name;
  Kind kind;
  const char* initial;                    // kStored: the value it starts with
  std::atomic<long long>* knob = nullptr;  // kEncoding
  bool hidden = false;                     // CONFIG GET shows it only when asked by its exact name
};

const Param kParams[] = {
    {"port", Kind::kImmutable, nullptr},
    {"bind", Kind::kImmutable, nullptr},
    {"databases", Kind::kImmutable, nullptr},
    {"maxclients", Kind::kImmutable, nullptr},
    {"proto-max-bulk-len", Kind::kImmutable, nullptr},
    {"client-query-buffer-limit", Kind::kMemory, nullptr},
    {"requirepass", Kind::kImmutable, nullptr},
    {"daemonize", Kind::kImmutable, nullptr},
    {"maxmemory", Kind::kMemory, nullptr},  // these: memory.cpp (connection_config)
    {"maxmemory-policy", Kind::kMemory, nullptr},
    {"maxmemory-clients", Kind::kMemory, nullptr},
    {"maxmemory-samples", Kind::kImmutable, nullptr},  // eviction.cpp samples 5 keys, Redis's default
    {"replicaof", Kind::kImmutable, nullptr},          // no replication: never a replica
    {"slaveof", Kind::kImmutable, nullptr},
    {"client-output-buffer-limit", Kind::kImmutable, nullptr},
    {"hash-max-listpack-entries", Kind::kEncoding, nullptr, &g_encodings.hash_entries},
    {"hash-max-ziplist-entries", Kind::kEncoding, nullptr, &g_encodings.hash_entries},
    {"hash-max-listpack-value", Kind::kEncoding, nullptr, &g_encodings.hash_value},
    {"hash-max-ziplist-value", Kind::kEncoding, nullptr, &g_encodings.hash_value},
    {"set-max-intset-entries", Kind::kEncoding, nullptr, &g_encodings.set_intset},
    {"save", Kind::kStored, ""},
    {"appendonly", Kind::kStored, "no"},
    {"appendfsync", Kind::kStored, "everysec"},
    {"dbfilename", Kind::kStored, "dump.rdb"},
    {"repl-backlog-size", Kind::kStored, "1048576"},
    {"rdb-key-save-delay", Kind::kStored, "0"},
    {"list-compress-depth", Kind::kStored, "0"},
    {"list-max-listpack-size", Kind::kStored, "-2"},
    {"list-max-ziplist-size", Kind::kStored, "-2"},
    {"zset-max-listpack-entries", Kind::kEncoding, nullptr, &g_encodings.zset_entries},
    {"zset-max-ziplist-entries", Kind::kEncoding, nullptr, &g_encodings.zset_entries},
    {"zset-max-listpack-value", Kind::kEncoding, nullptr, &g_encodings.zset_value},
    {"zset-max-ziplist-value", Kind::kEncoding, nullptr, &g_encodings.zset_value},
    {"lua-time-limit", Kind::kStored, "5000"},
    {"busy-reply-threshold", Kind::kStored, "5000"},
    {"loglevel", Kind::kStored, "notice"},
    {"hz", Kind::kStored, "10"},
    {"latency-tracking", Kind::kStored, "yes"},
    {"lazyfree-lazy-user-del", Kind::kStored, "no"},
    {"min-replicas-to-write", Kind::kStored, "0"},
    {"replica-read-only", Kind::kStored, "yes"},
    {"replica-serve-stale-data", Kind::kStored, "yes"},
    {"shutdown-on-sigint", Kind::kStored, "default"},
    {"shutdown-on-sigterm", Kind::kStored, "default"},
    {"notify-keyspace-events", Kind::kNotify, nullptr},
    {"key-load-delay", Kind::kStored, "0", nullptr, true},  // one of Redis's hidden (debugging) parameters
};

// The kStored values and `dir` (the working directory), behind a lock: any
// thread's loop may run CONFIG.
std::mutex g_mutex;
std::map<std::string, std::string>& stored() {
  static std::map<std::string, std::string> values = [] {
    std::map<std::string, std::string> v;
    for (const Param& p : kParams)
      if (p.kind == Kind::kStored) v[p.name] = p.initial;
    return v;
  }();
  return values;
}

std::string current(const Param& p) {
  const std::string n = p.name;
  switch (p.kind) {
    case Kind::kEncoding: return std::to_string(p.knob->load(std::memory_order_relaxed));
    case Kind::kStored: {
      std::lock_guard lock(g_mutex);
      return stored()[n];
    }
    case Kind::kNotify: return notify_string(g_notify.load(std::memory_order_relaxed));
    case Kind::kImmutable: case Kind::kMemory: break;
  }
  if (std::string v; connection_config(n, v)) return v;
  if (n == "port") return std::to_string(g_config.port);
  if (n == "bind") return g_config.bind;
  if (n == "databases") return "1";
  if (n == "maxclients") return std::to_string(g_config.maxclients);
  if (n == "proto-max-bulk-len") return std::to_string(g_config.limits.max_bulk);
  if (n == "maxmemory-samples") return "5";
  if (n == "replicaof" || n == "slaveof") return "";
  if (n == "requirepass") return g_config.requirepass;  // Redis shows it too
  return "no";                                          // daemonize
}

// Why the port can't be listened on (bind's error, as Redis's anetTcpServer
// words it), or empty when it could.
std::string port_taken(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::string("socket: ") + std::strerror(errno);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(std::uint16_t(port));
  if (::inet_pton(AF_INET, g_config.bind.c_str(), &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_ANY);
  std::string why;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 1) != 0)
    why = std::string("bind: ") + std::strerror(errno);
  ::close(fd);
  return why;
}

std::string working_dir() {
  char buf[4096];
  return ::getcwd(buf, sizeof buf) ? buf : "";
}

void get(Pending& p, const std::vector<std::string_view>& args) {
  std::vector<std::pair<std::string, std::string>> hits;
  auto wanted = [&](const char* name, bool hidden) {  // a hidden parameter: by its exact name only, as Redis
    for (std::size_t i = 2; i < args.size(); ++i)
      if (hidden ? lower(args[i]) == name : ::fnmatch(lower(args[i]).c_str(), name, 0) == 0) return true;
    return false;
  };
  for (const Param& e : kParams)
    if (wanted(e.name, e.hidden)) hits.emplace_back(e.name, current(e));
  if (wanted("dir", false)) hits.emplace_back("dir", working_dir());
  resp::map(p.reply, hits.size(), p.resp3);
  for (const auto& [k, v] : hits) {
    resp::bulk(p.reply, k);
    resp::bulk(p.reply, v);
  }
}

// CONFIG SET name value [name value ...]: all checked before any is set,
// as Redis 7.0 does.
void set(Pending& p, const std::vector<std::string_view>& args) {
  if (args.size() < 4 || args.size() % 2 != 0)
    return resp::error(p.reply, "ERR wrong number of arguments for 'config|set' command");
  std::vector<std::pair<const Param*, std::string>> changes;
  int new_port = -1;
  for (std::size_t i = 2; i + 1 < args.size(); i += 2) {
    const std::string name = lower(args[i]);
    const Param* found = nullptr;
    for (const Param& e : kParams)
      if (name == e.name) found = &e;
    if (name == "dir") {  // the suite saves and restores it; Hydra writes no files, so only its check
      if (::access(std::string(args[i + 1]).c_str(), F_OK) != 0)
        return resp::error(p.reply, "ERR CONFIG SET failed (possibly related to argument 'dir') - No such file or directory");
      continue;
    }
    if (!found) return resp::error(p.reply, "ERR Unknown option or number of arguments for CONFIG SET - '" + name + "'");
    auto failed = [&](const std::string& why) {
      resp::error(p.reply, "ERR CONFIG SET failed (possibly related to argument '" + name + "') - " + why);
    };
    long long n;
    if (name == "port") {  // Redis's checks, then (below) its apply step's
      if (!resp::parse_int64(args[i + 1], n)) return failed("argument couldn't be parsed into an integer");
      if (n < 0 || n > 65535) return failed("argument must be between 0 and 65535 inclusive");
      if (n != g_config.port) new_port = int(n);
    }
    if (found->kind == Kind::kImmutable && current(*found) == args[i + 1]) continue;  // its value already: nothing to do
    if (found->kind == Kind::kImmutable && name != "port")
      return resp::error(p.reply, "ERR CONFIG SET failed (possibly related to argument '" + name + "') - can't set immutable config");
    if (found->kind == Kind::kNotify && notify_flags(args[i + 1]) < 0)
      return resp::error(p.reply, "ERR CONFIG SET failed (possibly related to argument '" + name +
                                      "') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'.");
    std::size_t bytes;
    if (name == "maxmemory" && !memory_value(args[i + 1], bytes))
      return resp::error(p.reply, "ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a memory value");
    if (name == "maxmemory-policy") {
      static const char* const kRedis[] = {"volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
                                           "allkeys-lru", "allkeys-lfu", "allkeys-random", "noeviction"};
      const std::string v = lower(args[i + 1]);
      if (std::find(std::begin(kRedis), std::end(kRedis), v) == std::end(kRedis))
        return resp::error(p.reply, "ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - argument(s) "
                                    "must be one of the following: volatile-lru, volatile-lfu, volatile-random, "
                                    "volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction");
      if (v.find("lfu") != std::string::npos || v == "volatile-ttl")
        return resp::error(p.reply, "ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - hydra "
                                    "has no " + v + " policy (noeviction, allkeys-lru, volatile-lru, allkeys-random, volatile-random)");
    }
    if (name == "client-query-buffer-limit") {
      if (!memory_value(args[i + 1], bytes)) return failed("argument must be a memory value");
      if (bytes < (std::size_t(1) << 20) || bytes > std::size_t(LLONG_MAX))
        return failed("argument must be between 1048576 and 9223372036854775807 inclusive");
    }
    if (name == "maxmemory-clients") {
      const std::string_view val = args[i + 1];
      if (val.size() > 1 && val.back() == '%') {
        if (!resp::parse_int64(val.substr(0, val.size() - 1), n) || n < 0)
          return failed("argument must be a memory or percent value");
        if (n > 100) return failed("percentage argument must be less or equal to 100");
      } else if (!memory_value(val, bytes)) {
        return failed("argument must be a memory or percent value");
      }
    }
    if (found->kind == Kind::kEncoding && (!resp::parse_int64(args[i + 1], n) || n < 0))
      return resp::error(p.reply, "ERR CONFIG SET failed (possibly related to argument '" + name +
                                      "') - argument couldn't be parsed into an integer");
    for (const auto& [prior, earlier] : changes)  // the same parameter twice (or by its old name): Redis's error
      if (prior == found || (found->knob && prior->knob == found->knob))
        return resp::error(p.reply, "ERR CONFIG SET failed (possibly related to argument '" + name + "') - duplicate parameter");
    changes.emplace_back(found, std::string(args[i + 1]));
  }
  // Redis applies a new port by listening on it, and fails (undoing every
  // change) if it cannot; Hydra's loops cannot move their listeners while
  // running, so either way nothing is changed, with Redis's error when the
  // port is taken.
  if (new_port >= 0) {
    const std::string taken = port_taken(new_port);
    return resp::error(p.reply, "ERR CONFIG SET failed (possibly related to argument 'port') - " +
                                    (taken.empty() ? "hydra cannot change its port while it runs (restart it with --port)"
                                                   : "Unable to listen on this port: " + taken));
  }
  for (auto& [param, value] : changes) {
    if (param->kind == Kind::kEncoding) {
      long long v = 0;
      resp::parse_int64(value, v);
      param->knob->store(v, std::memory_order_relaxed);
    } else if (param->kind == Kind::kNotify) {
      g_notify.store(std::uint32_t(notify_flags(value)), std::memory_order_relaxed);
    } else if (param->kind == Kind::kMemory) {
      std::size_t bytes = 0;
      const std::string_view n = param->name;
      if (n == "maxmemory" && memory_value(value, bytes)) set_maxmemory(bytes);
      else if (n == "client-query-buffer-limit" && memory_value(value, bytes)) g_max_query.store(bytes, std::memory_order_relaxed);
      else if (n == "maxmemory-clients" && value.back() == '%') set_max_reply_memory(0, std::stoi(value.substr(0, value.size() - 1)));
      else if (n == "maxmemory-clients" && memory_value(value, bytes)) set_max_reply_memory(bytes, -1);
      else set_policy(lower(value));
    } else {
      std::lock_guard lock(g_mutex);
      stored()[param->name] = value;
    }
  }
  resp::simple(p.reply, "OK");
}

}  // namespace

void config_command(Pending& p, const std::vector<std::string_view>& args) {
  const std::string sub = lower(args[1]);
  if (sub == "get") {
    if (args.size() < 3) return resp::error(p.reply, "ERR wrong number of arguments for 'config|get' command");
    return get(p, args);
  }
  if (sub == "set") return set(p, args);
  if (sub == "resetstat" || sub == "rewrite") {
    if (args.size() != 2) return resp::error(p.reply, "ERR wrong number of arguments for 'config|" + sub + "' command");
    if (sub == "rewrite") return resp::error(p.reply, "ERR The server is running without a config file");
    return resp::simple(p.reply, "OK");  // Hydra's INFO counters are not reset (documented)
  }
  if (sub == "help" && args.size() == 2) {
    help_reply(p.reply, {"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                           "GET <pattern>", "    Return parameters matching the glob-like <pattern> and their values.",
                           "SET <directive> <value>", "    Set the configuration <directive> to <value>.",
                           "RESETSTAT", "    Accepted; Hydra's statistics are not reset.",
                           "HELP", "    Print this help."});
    return;
  }
  resp::error(p.reply, "ERR unknown subcommand '" + std::string(args[1].substr(0, 128)) + "'. Try CONFIG HELP.");
}

}  // namespace hydra
