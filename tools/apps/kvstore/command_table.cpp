// Hydra's command table: each command's arity and key positions, as Redis's
// (what MULTI checks before queuing, and the shards a command touches), and
// which commands Loop::transaction_command handles.
#include <unordered_map>

#include "server.hpp"

namespace hydra {

namespace {

constexpr CommandSpec kCommands[] = {
    // name, arity, first key, last key, step, every shard
    {"get", 2, 1, 1, 1, false}, {"set", -3, 1, 1, 1, false}, {"setex", 4, 1, 1, 1, false},
    {"psetex", 4, 1, 1, 1, false}, {"incr", 2, 1, 1, 1, false}, {"decr", 2, 1, 1, 1, false},
    {"incrby", 3, 1, 1, 1, false}, {"decrby", 3, 1, 1, 1, false}, {"expire", -3, 1, 1, 1, false},
    {"pexpire", -3, 1, 1, 1, false}, {"expireat", -3, 1, 1, 1, false}, {"pexpireat", -3, 1, 1, 1, false},
    {"ttl", 2, 1, 1, 1, false}, {"pttl", 2, 1, 1, 1, false}, {"expiretime", 2, 1, 1, 1, false},
    {"pexpiretime", 2, 1, 1, 1, false}, {"persist", 2, 1, 1, 1, false}, {"type", 2, 1, 1, 1, false},
    {"del", -2, 1, -1, 1, false}, {"unlink", -2, 1, -1, 1, false}, {"exists", -2, 1, -1, 1, false},
    {"mset", -3, 1, -1, 2, false}, {"msetnx", -3, 1, -1, 2, false}, {"mget", -2, 1, -1, 1, false},
    {"rename", 3, 1, 2, 1, false}, {"renamenx", 3, 1, 2, 1, false}, {"copy", -3, 1, 2, 1, false},
    {"watch", -2, 1, -1, 1, false}, {"unwatch", 1, 0, 0, 0, false}, {"multi", 1, 0, 0, 0, false},
    {"exec", 1, 0, 0, 0, false}, {"discard", 1, 0, 0, 0, false}, {"hello", -1, 0, 0, 0, false},
    {"dbsize", 1, 0, 0, 0, true}, {"flushall", -1, 0, 0, 0, true}, {"flushdb", -1, 0, 0, 0, true},
    {"info", -1, 0, 0, 0, true}, {"ping", -1, 0, 0, 0, false}, {"echo", 2, 0, 0, 0, false},
    {"quit", -1, 0, 0, 0, false}, {"select", 2, 0, 0, 0, false}, {"config", -2, 0, 0, 0, false},
    {"monitor", 1, 0, 0, 0, false},
    {"shutdown", -1, 0, 0, 0, false}, {"auth", -2, 0, 0, 0, false}, {"function", -2, 0, 0, 0, false},
    {"time", 1, 0, 0, 0, false}, {"setnx", 3, 1, 1, 1, false}, {"debug", -2, 0, 0, 0, false},
    // hashes, lists, sets (types.cpp)
    {"hset", -4, 1, 1, 1, false}, {"hmset", -4, 1, 1, 1, false}, {"hsetnx", 4, 1, 1, 1, false},
    {"hget", 3, 1, 1, 1, false}, {"hmget", -3, 1, 1, 1, false}, {"hgetall", 2, 1, 1, 1, false},
    {"hdel", -3, 1, 1, 1, false}, {"hincrby", 4, 1, 1, 1, false}, {"hexists", 3, 1, 1, 1, false},
    {"hlen", 2, 1, 1, 1, false}, {"hkeys", 2, 1, 1, 1, false}, {"hvals", 2, 1, 1, 1, false},
    {"hscan", -3, 1, 1, 1, false}, {"lpush", -3, 1, 1, 1, false}, {"rpush", -3, 1, 1, 1, false},
    {"lpop", -2, 1, 1, 1, false}, {"rpop", -2, 1, 1, 1, false}, {"lrange", 4, 1, 1, 1, false},
    {"llen", 2, 1, 1, 1, false}, {"lindex", 3, 1, 1, 1, false}, {"lrem", 4, 1, 1, 1, false},
    {"lset", 4, 1, 1, 1, false}, {"ltrim", 4, 1, 1, 1, false}, {"sadd", -3, 1, 1, 1, false},
    {"srem", -3, 1, 1, 1, false}, {"smembers", 2, 1, 1, 1, false}, {"sismember", 3, 1, 1, 1, false},
    {"scard", 2, 1, 1, 1, false}, {"sscan", -3, 1, 1, 1, false}, {"sinter", -2, 1, -1, 1, false},
    {"sunion", -2, 1, -1, 1, false}, {"sdiff", -2, 1, -1, 1, false}, {"sinterstore", -3, 1, -1, 1, false},
    {"sunionstore", -3, 1, -1, 1, false}, {"sdiffstore", -3, 1, -1, 1, false},
    // the key space as a whole (keys.cpp); OBJECT's key is its second argument
    {"keys", 2, 0, 0, 0, true}, {"scan", -2, 0, 0, 0, false}, {"randomkey", 1, 0, 0, 0, true},
    {"object", -2, 2, 2, 1, false}, {"touch", -2, 1, -1, 1, false},
    // strops.cpp: strings, and the newer hash, list and set commands
    {"getdel", 2, 1, 1, 1, false}, {"getex", -2, 1, 1, 1, false}, {"getset", 3, 1, 1, 1, false},
    {"getrange", 4, 1, 1, 1, false}, {"substr", 4, 1, 1, 1, false}, {"setrange", 4, 1, 1, 1, false},
    {"append", 3, 1, 1, 1, false}, {"strlen", 2, 1, 1, 1, false}, {"incrbyfloat", 3, 1, 1, 1, false},
    {"setbit", 4, 1, 1, 1, false}, {"getbit", 3, 1, 1, 1, false}, {"bitcount", -2, 1, 1, 1, false},
    {"hstrlen", 3, 1, 1, 1, false}, {"hincrbyfloat", 4, 1, 1, 1, false}, {"hrandfield", -2, 1, 1, 1, false},
    {"linsert", 5, 1, 1, 1, false}, {"lpos", -3, 1, 1, 1, false}, {"lpushx", -3, 1, 1, 1, false},
    {"rpushx", -3, 1, 1, 1, false}, {"spop", -2, 1, 1, 1, false}, {"srandmember", -2, 1, 1, 1, false},
    {"smismember", -3, 1, 1, 1, false}, {"memory", -2, 2, 2, 1, false},
    {"lcs", -3, 1, 2, 1, false}, {"lmove", 5, 1, 2, 1, false}, {"rpoplpush", 3, 1, 2, 1, false},
    {"smove", 4, 1, 2, 1, false}, {"command", -1, 0, 0, 0, false},
    // blocking list commands (blocking.cpp); BLMPOP's and LMPOP's keys follow numkeys (Loop::shards_of)
    {"blpop", -3, 1, -2, 1, false}, {"brpop", -3, 1, -2, 1, false}, {"blmove", 6, 1, 2, 1, false},
    {"brpoplpush", 4, 1, 2, 1, false}, {"blmpop", -5, 0, 0, 0, false}, {"lmpop", -4, 0, 0, 0, false},
    {"bzpopmin", -3, 1, -2, 1, false}, {"bzpopmax", -3, 1, -2, 1, false}, {"bzmpop", -5, 0, 0, 0, false},
    // sorted sets: one key (zset.cpp), several (zset_multi.cpp; the ones with numkeys: Loop::shards_of)
    {"zadd", -4, 1, 1, 1, false}, {"zincrby", 4, 1, 1, 1, false}, {"zrem", -3, 1, 1, 1, false},
    {"zcard", 2, 1, 1, 1, false}, {"zscore", 3, 1, 1, 1, false}, {"zmscore", -3, 1, 1, 1, false},
    {"zrank", 3, 1, 1, 1, false}, {"zrevrank", 3, 1, 1, 1, false}, {"zcount", 4, 1, 1, 1, false},
    {"zlexcount", 4, 1, 1, 1, false}, {"zrange", -4, 1, 1, 1, false}, {"zrevrange", -4, 1, 1, 1, false},
    {"zrangebyscore", -4, 1, 1, 1, false}, {"zrevrangebyscore", -4, 1, 1, 1, false},
    {"zrangebylex", -4, 1, 1, 1, false}, {"zrevrangebylex", -4, 1, 1, 1, false},
    {"zremrangebyrank", 4, 1, 1, 1, false}, {"zremrangebyscore", 4, 1, 1, 1, false},
    {"zremrangebylex", 4, 1, 1, 1, false}, {"zpopmin", -2, 1, 1, 1, false}, {"zpopmax", -2, 1, 1, 1, false},
    {"zrandmember", -2, 1, 1, 1, false}, {"zscan", -3, 1, 1, 1, false}, {"zrangestore", -5, 1, 2, 1, false},
    {"zunionstore", -4, 1, 1, 1, false}, {"zinterstore", -4, 1, 1, 1, false}, {"zdiffstore", -4, 1, 1, 1, false},
    {"zunion", -3, 0, 0, 0, false}, {"zinter", -3, 0, 0, 0, false}, {"zdiff", -3, 0, 0, 0, false},
    {"zintercard", -3, 0, 0, 0, false}, {"zmpop", -4, 0, 0, 0, false}, {"sintercard", -3, 0, 0, 0, false},
    // SORT (sort.cpp): BY/GET patterns may read any key (Loop::shards_of)
    {"sort", -2, 1, 1, 1, false}, {"sort_ro", -2, 1, 1, 1, false},
    // pub/sub (pubsub.cpp), CLIENT (clients.cpp)
    {"subscribe", -2, 0, 0, 0, false}, {"unsubscribe", -1, 0, 0, 0, false}, {"psubscribe", -2, 0, 0, 0, false},
    {"punsubscribe", -1, 0, 0, 0, false}, {"publish", 3, 0, 0, 0, false}, {"pubsub", -2, 0, 0, 0, false},
    {"client", -2, 0, 0, 0, false}, {"reset", 1, 0, 0, 0, false},
    // DUMP, RESTORE (dump.cpp)
    {"dump", 2, 1, 1, 1, false}, {"restore", -4, 1, 1, 1, false},
};

}  // namespace

bool arity_ok(const CommandSpec& spec, std::size_t n) {
  return spec.arity >= 0 ? n == std::size_t(spec.arity) : n >= std::size_t(-spec.arity);
}

bool blocking_name(const std::string& n) {
  return n == "blpop" || n == "brpop" || n == "blmove" || n == "brpoplpush" || n == "blmpop" || n == "lmpop" ||
         n == "bzpopmin" || n == "bzpopmax" || n == "bzmpop";
}

bool always_transaction(const std::string& n) {
  return n == "msetnx" || n == "rename" || n == "renamenx" || n == "copy" || n == "sinter" || n == "sunion" ||
         n == "sdiff" || n == "sinterstore" || n == "sunionstore" || n == "sdiffstore" || n == "lcs" ||
         n == "lmove" || n == "rpoplpush" || n == "smove" || zset_multi_name(n) || n == "sort" || n == "sort_ro";
}

bool zset_multi_name(std::string_view n) {
  return n == "zunionstore" || n == "zinterstore" || n == "zdiffstore" || n == "zunion" || n == "zinter" ||
         n == "zdiff" || n == "zintercard" || n == "zmpop" || n == "zrangestore" || n == "sintercard";
}

std::span<const CommandSpec> all_commands() { return kCommands; }

static_assert(std::size(kCommands) <= kMaxCommands);
static_assert(kCommands[0].name == std::string_view("get") && kCommands[1].name == std::string_view("set"));

int command_index_lookup(std::string_view name) {
  static const std::unordered_map<std::string_view, int> index = [] {
    std::unordered_map<std::string_view, int> m;
    for (std::size_t i = 0; i < std::size(kCommands); ++i) m.emplace(kCommands[i].name, int(i));
    return m;
  }();
  const auto it = index.find(name);
  return it == index.end() ? -1 : it->second;
}

const CommandSpec* find_command(std::string_view name) {
  for (const auto& c : kCommands)
    if (c.name == name) return &c;
  return nullptr;
}

// The names transaction_command handles: a switch on the length and the
// first letter before any comparison, so that GET and SET cost a few
// instructions (Loop::execute).
bool transaction_name(const std::string& name) {
  const std::string_view n(name);
  if (n.size() > 4 && n[0] == 'z') return zset_multi_name(n);
  switch (n.size()) {
    case 3: return (n[0] == 'd' && n == "del") || (n[0] == 'l' && n == "lcs");
    case 4:
      switch (n[0]) {
        case 'e': return n == "exec";
        case 'm': return n == "mset" || n == "mget";
        case 'c': return n == "copy";
        case 's': return n == "sort";
        default: return false;
      }
    case 5: return (n[0] == 'm' && n == "multi") || (n[0] == 'w' && n == "watch") || (n[0] == 's' && n == "sdiff") ||
                   (n[0] == 'l' && n == "lmove") || (n[0] == 's' && n == "smove");
    case 6:
      switch (n[0]) {
        case 'u': return n == "unlink";
        case 'e': return n == "exists";
        case 'm': return n == "msetnx";
        case 'r': return n == "rename";
        case 's': return n == "sinter" || n == "sunion";
        default: return false;
      }
    case 7: return n == "discard" || n == "unwatch" || n == "sort_ro";
    case 8: return n == "renamenx";
    case 9: return n == "rpoplpush";
    case 10: return n == "sdiffstore" || n == "sintercard";
    case 11: return n == "sinterstore" || n == "sunionstore";
    default: return false;
  }
}

}  // namespace hydra
