// The loop side of hashes, lists and sets: the arity checks Redis makes
// before anything else, one request to the key's shard (objects.cpp does the
// rest there), and the reply in the connection's protocol: HGETALL a map
// and SMEMBERS a set under RESP3, flat arrays under RESP2.
#include <utility>

#include "server.hpp"
#include "types.hpp"

namespace hydra {

namespace {

struct Named {
  std::string_view name;
  Op op;
};
constexpr Named kOps[] = {
    {"hset", Op::kHset}, {"hsetnx", Op::kHsetnx}, {"hmset", Op::kHmset}, {"hget", Op::kHget},
    {"hmget", Op::kHmget}, {"hgetall", Op::kHgetall}, {"hdel", Op::kHdel}, {"hincrby", Op::kHincrby},
    {"hexists", Op::kHexists}, {"hlen", Op::kHlen}, {"hkeys", Op::kHkeys}, {"hvals", Op::kHvals},
    {"hscan", Op::kHscan}, {"lpush", Op::kLpush}, {"rpush", Op::kRpush}, {"lpop", Op::kLpop},
    {"rpop", Op::kRpop}, {"lrange", Op::kLrange}, {"llen", Op::kLlen}, {"lindex", Op::kLindex},
    {"lrem", Op::kLrem}, {"lset", Op::kLset}, {"ltrim", Op::kLtrim}, {"sadd", Op::kSadd},
    {"srem", Op::kSrem}, {"smembers", Op::kSmembers}, {"sismember", Op::kSismember}, {"scard", Op::kScard},
    {"sscan", Op::kSscan}, {"getdel", Op::kGetdel}, {"getex", Op::kGetex}, {"getrange", Op::kGetrange},
    {"substr", Op::kGetrange}, {"setrange", Op::kSetrange}, {"append", Op::kAppend}, {"strlen", Op::kStrlen},
    {"incrbyfloat", Op::kIncrbyfloat}, {"setbit", Op::kSetbit}, {"getbit", Op::kGetbit}, {"bitcount", Op::kBitcount},
    {"hstrlen", Op::kHstrlen}, {"hincrbyfloat", Op::kHincrbyfloat}, {"hrandfield", Op::kHrandfield},
    {"linsert", Op::kLinsert}, {"lpos", Op::kLpos}, {"lpushx", Op::kLpushx}, {"rpushx", Op::kRpushx},
    {"spop", Op::kSpop}, {"srandmember", Op::kSrandmember}, {"smismember", Op::kSmismember},
    {"zadd", Op::kZadd}, {"zincrby", Op::kZincrby}, {"zrem", Op::kZrem}, {"zcard", Op::kZcard},
    {"zscore", Op::kZscore}, {"zmscore", Op::kZmscore}, {"zrank", Op::kZrank}, {"zrevrank", Op::kZrevrank},
    {"zcount", Op::kZcount}, {"zlexcount", Op::kZlexcount}, {"zrange", Op::kZrange}, {"zrevrange", Op::kZrevrange},
    {"zrangebyscore", Op::kZrangebyscore}, {"zrevrangebyscore", Op::kZrevrangebyscore},
    {"zrangebylex", Op::kZrangebylex}, {"zrevrangebylex", Op::kZrevrangebylex},
    {"zremrangebyrank", Op::kZremrangebyrank}, {"zremrangebyscore", Op::kZremrangebyscore},
    {"zremrangebylex", Op::kZremrangebylex}, {"zpopmin", Op::kZpopmin}, {"zpopmax", Op::kZpopmax},
    {"zrandmember", Op::kZrandmember}, {"zscan", Op::kZscan},
};

}  // namespace

void encode_reply(std::string& out, const Reply& r, bool resp3) {
  switch (r.kind) {
    case Reply::kInt: return resp::integer(out, r.n);
    case Reply::kBulk: return resp::bulk(out, r.s);
    case Reply::kNil: return resp::nil(out, resp3);
    case Reply::kOk: return resp::simple(out, "OK");
    case Reply::kError: return resp::error(out, r.s);
    case Reply::kNullArray: return resp::null_array(out, resp3);
    case Reply::kMap: resp::map(out, r.items.size() / 2, resp3); break;
    case Reply::kSet: resp::set(out, r.items.size(), resp3); break;
    case Reply::kInts:
      resp::array(out, r.items.size());
      for (const auto& i : r.items) out.append(":").append(i).append("\r\n");
      return;
    case Reply::kPairs:
      if (!resp3) {
        resp::array(out, r.items.size());
        break;
      }
      resp::array(out, r.items.size() / 2);
      for (std::size_t i = 0; i + 1 < r.items.size(); i += 2) {
        resp::array(out, 2);
        resp::bulk(out, r.items[i]);
        resp::bulk(out, r.items[i + 1]);
      }
      return;
    case Reply::kDouble: return resp::dbl(out, r.s, resp3);
    case Reply::kDoubles:
      resp::array(out, r.items.size());
      for (std::size_t i = 0; i < r.items.size(); ++i)
        i < r.nil.size() && r.nil[i] ? resp::nil(out, resp3) : resp::dbl(out, r.items[i], resp3);
      return;
    case Reply::kScored: case Reply::kScoredFlat: case Reply::kKeyScored: {
      const bool nested = resp3 && r.kind == Reply::kScored;
      if (r.kind == Reply::kKeyScored) {
        resp::array(out, 2);
        resp::bulk(out, r.s);
      }
      if (r.kind == Reply::kKeyScored || nested) resp::array(out, r.items.size() / 2);
      else resp::array(out, r.items.size());
      for (std::size_t i = 0; i + 1 < r.items.size(); i += 2) {
        if (r.kind == Reply::kKeyScored || nested) resp::array(out, 2);
        resp::bulk(out, r.items[i]);
        resp::dbl(out, r.items[i + 1], resp3);
      }
      return;
    }
    case Reply::kScan:
      resp::array(out, 2);
      resp::bulk(out, std::to_string(r.n));
      resp::array(out, r.items.size());
      break;
    default: resp::array(out, r.items.size()); break;
  }
  for (std::size_t i = 0; i < r.items.size(); ++i) {
    if (i < r.nil.size() && r.nil[i]) resp::nil(out, resp3);
    else resp::bulk(out, r.items[i]);
  }
}

bool Loop::execute_types(std::uint32_t slot, const std::string& name, Pending& p, std::uint64_t seq, std::uint32_t gen,
                         const std::vector<std::string_view>& args) {
  const Named* found = nullptr;
  for (const auto& n : kOps)
    if (n.name == name) found = &n;
  if (!found) return false;
  const CommandSpec* spec = find_command(name);
  bool ok = spec && arity_ok(*spec, args.size());
  if ((found->op == Op::kHset || found->op == Op::kHmset) && args.size() % 2 != 0) ok = false;
  if ((found->op == Op::kLpop || found->op == Op::kRpop) && args.size() > 3) ok = false;
  if (!ok) return resp::error(p.reply, "ERR wrong number of arguments for '" + name + "' command"), true;
  if (too_large(args)) return resp::error(p.reply, kTooLarge), true;
  p.waiting = 1;
  ++inflight_;
  if (found->op == Op::kLpush || found->op == Op::kRpush) {  // waiters served may move on other shards: wake.cpp
    constexpr std::uint64_t kCredit = std::uint64_t(1) << 62;
    shard(shard_of(args[1], nshards_))
        .apply_with_then([](Shard& s, Op op, std::vector<std::string> a, Origin o) {
                           tl_origin = &o;
                           Tracked t{shard_typed(s, op, std::move(a)), 0};
                           tl_origin = nullptr;
                           t.given = kCredit - o.weight;
                           return t;
                         },
                         [this, slot, gen, seq](Tracked t) {
                           const bool hold = hold_for_credit(slot, gen, seq, t.given);
                           answer(slot, gen, seq, [&t, hold](Pending& q) {
                             encode_reply(q.reply, t.r, q.resp3);
                             if (hold) ++q.waiting;  // until the credit is back (Loop::on_credit)
                           });
                         },
                         found->op, std::vector<std::string>(args.begin() + 1, args.end()),
                         Origin{std::uint32_t(gossamer::thread_index()), slot, gen, seq, kCredit});
    return true;
  }
  shard(shard_of(args[1], nshards_))
      .apply_with_then([](Shard& s, Op op, std::vector<std::string> a) { return shard_typed(s, op, std::move(a)); },
                       [this, slot, gen, seq](Reply r) {
                         answer(slot, gen, seq, [&r](Pending& q) { encode_reply(q.reply, r, q.resp3); });
                       },
                       found->op, std::vector<std::string>(args.begin() + 1, args.end()));
  return true;
}

}  // namespace hydra
