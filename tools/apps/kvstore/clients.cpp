// CLIENT: ID, SETNAME, GETNAME, INFO, LIST, KILL, REPLY, NO-EVICT, SETINFO,
// GETREDIR, UNBLOCK, HELP, as Redis 7.0 (its errors, and CLIENT LIST's
// fields). A client is a connection of this host: LIST and KILL ask every
// thread of the host (a closure its trustee runs, which finds the thread's
// loop), never other hosts (client ids are unique per host).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>

#include "server.hpp"

namespace hydra {

namespace {

using resp::lower;

std::string sock_addr(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (fd < 0 || (peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len)) != 0)
    return "?:0";
  char ip[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

// The bytes of a request as a client sends it (a RESP array): CLIENT LIST
// shows the running command in its own connection's qbuf, as Redis does.
std::size_t request_bytes(const std::vector<std::string_view>& args) {
  std::size_t n = 3 + std::to_string(args.size()).size();
  for (auto a : args) n += 5 + std::to_string(a.size()).size() + a.size();
  return n;
}

// Redis's client types, by name (getClientTypeByName): -1 unknown; 0
// normal, 1 replica, 2 pubsub, 3 master (Hydra has no replicas or masters).
int client_type(const std::string& t) {
  if (t == "normal") return 0;
  if (t == "slave" || t == "replica") return 1;
  if (t == "pubsub") return 2;
  if (t == "master") return 3;
  return -1;
}

bool valid_name(std::string_view n) {
  for (unsigned char ch : n)
    if (ch < '!' || ch > '~') return false;
  return true;
}

// While CLIENT LIST runs: its connection and request size (client_info).
thread_local std::uint32_t tl_list_slot = UINT32_MAX;
thread_local std::size_t tl_list_bytes = 0;

}  // namespace

std::string Loop::client_info(std::uint32_t slot, const Connection& c, std::size_t current_request) const {
  std::string flags;
  if (c.monitor) flags += 'O';  // MONITOR (monitor.cpp)
  if (c.subscribed) flags += 'P';
  if (c.in_multi) flags += 'x';
  if (c.closing) flags += 'c';
  if (c.no_evict) flags += 'e';
  if (flags.empty()) flags = "N";
  std::string events;
  if (c.events & EPOLLIN) events += 'r';
  if (c.events & EPOLLOUT) events += 'w';
  const std::size_t qbuf = c.in.size() - c.consumed + current_request;
  const std::size_t obl = c.out.size() - c.written;
  const std::size_t total = sizeof(Connection) + c.in.capacity() + c.out.capacity() + c.reply_bytes;
  (void)slot;
  std::string s;
  s += "id=" + std::to_string(c.id) + " addr=" + sock_addr(c.fd, true) + " laddr=" + sock_addr(c.fd, false) +
       " fd=" + std::to_string(c.fd) + " name=" + c.name + " age=" + std::to_string((now_ms() - c.created_ms) / 1000) +
       " idle=" + std::to_string(std::max<std::int64_t>(0, now_ms() - c.active_ms) / 1000) + " flags=" + flags +
       " db=0 sub=" + std::to_string(c.channels.size()) + " psub=" + std::to_string(c.patterns.size()) +
       " ssub=0 multi=" + (c.in_multi ? std::to_string(c.queued.size()) : std::string("-1")) +
       " qbuf=" + std::to_string(qbuf) + " qbuf-free=" + std::to_string(c.in.capacity() - c.in.size()) +
       " argv-mem=" + std::to_string(current_request ? current_request / 2 : 0) + " multi-mem=0 rbs=" +
       std::to_string(std::max<std::size_t>(c.out.capacity(), 1024)) + " rbp=" + std::to_string(c.out.capacity()) +
       " obl=" + std::to_string(obl) + " oll=" + std::to_string(c.pending.size() - (current_request && !c.pending.empty() ? 1 : 0)) +
       " omem=" + std::to_string(c.reply_bytes) + " tot-mem=" + std::to_string(total) + " events=" + events +
       " cmd=" + (c.last_cmd_len ? std::string(c.last_cmd()) : std::string("NULL")) + " user=default redir=-1 resp=" +
       (c.resp3 ? "3" : "2");
  return s;
}

// This thread's connections for CLIENT LIST (run by its trustee).
std::vector<std::string> Loop::client_lines(std::int32_t type, const std::vector<std::uint64_t>& ids) {
  std::vector<std::string> out;
  for (std::uint32_t slot = 0; slot < conns_.size(); ++slot) {
    const Connection* c = conns_[slot].get();
    if (!c || c->fd < 0) continue;
    if (type == 0 && c->subscribed) continue;
    if (type == 2 && !c->subscribed) continue;
    if (type == 1 || type == 3) continue;
    if (!ids.empty() && std::find(ids.begin(), ids.end(), c->id) == ids.end()) continue;
    out.push_back(client_info(slot, *c, slot == tl_list_slot ? tl_list_bytes : 0));
  }
  return out;
}

// CLIENT KILL on this thread (run by its trustee): the matching
// connections are closed at the loop's next round (do_kills); the one
// asking, if it matches (SKIPME no), after its reply.
std::int64_t Loop::on_kill(const KillFilter& f) {
  std::int64_t n = 0;
  for (std::uint32_t slot = 0; slot < conns_.size(); ++slot) {
    const Connection* c = conns_[slot].get();
    if (!c || c->fd < 0) continue;
    const bool self = f.thread == gossamer::thread_index() && f.slot == slot && f.gen == c->gen;
    if (self && f.skipme) continue;
    if (f.id && c->id != f.id) continue;
    if (f.type >= 0 && f.type != (c->subscribed ? 2 : 0)) continue;
    if (!f.addr.empty() && sock_addr(c->fd, true) != f.addr) continue;
    if (!f.laddr.empty() && sock_addr(c->fd, false) != f.laddr) continue;
    kills_.emplace_back(slot, c->gen, self);
    ++n;
  }
  return n;
}

void Loop::do_kills() {
  std::vector<std::tuple<std::uint32_t, std::uint32_t, bool>> kills;
  kills.swap(kills_);
  for (auto [slot, gen, self] : kills) {
    Connection* c = find(slot, gen);
    if (!c) continue;
    if (self) {
      c->closing = true;  // after its reply (Redis's CLIENT_CLOSE_AFTER_REPLY)
      mark_dirty(slot);
    } else {
      close_connection(slot);
    }
  }
}

// CLIENT REPLY OFF / SKIP: the replies of the commands from `first` on are
// dropped (pub/sub notices and messages are not), then SKIP's turn passes.
void Loop::silence(Connection& c, std::size_t first) {
  const bool drop = c.reply_off || c.skip_this;
  if (drop)
    for (std::size_t i = first; i < c.pending.size(); ++i)
      if (!c.pending[i].push) c.pending[i].silent = true;
  c.skip_this = c.skip_next;
  c.skip_next = false;
  c.quiet = c.reply_off || c.skip_this;
}

bool Loop::execute_client(std::uint32_t slot, Connection& c, const std::string& name, Pending& p, std::uint64_t seq,
                          const std::vector<std::string_view>& args) {
  if (name == "reset") {  // Redis 6.2's RESET: the connection as new (its id and authentication stay)
    if (args.size() != 1) return resp::error(p.reply, "ERR wrong number of arguments for 'reset' command"), true;
    c.in_multi = c.multi_error = false;
    c.queued.clear();
    unwatch_all(c);
    unmonitor(slot, c);  // out of MONITOR, as Redis
    if (c.subscribed) unsubscribe_all(slot, c);
    c.resp3 = p.resp3 = false;
    c.name.clear();
    c.reply_off = c.skip_next = c.skip_this = c.quiet = false;
    c.no_evict = false;
    resp::simple(p.reply, "RESET");
    return true;
  }
  if (name != "client") return false;
  if (args.size() < 2) {
    resp::error(p.reply, "ERR wrong number of arguments for 'client' command");
    return true;
  }
  const std::string sub = lower(args[1]);
  c.set_last_cmd("client|" + sub);
  const std::size_t n = args.size();
  auto wrong = [&](std::size_t want, bool at_least = false) {
    if (at_least ? n >= want : n == want) return false;
    resp::error(p.reply, "ERR wrong number of arguments for 'client|" + sub + "' command");
    return true;
  };
  auto syntax = [&] { resp::error(p.reply, "ERR syntax error"); };
  const std::uint32_t gen = c.gen;
  if (sub == "id") {
    if (!wrong(2)) resp::integer(p.reply, static_cast<long long>(c.id));
  } else if (sub == "getname") {
    if (wrong(2)) return true;
    if (c.name.empty()) resp::nil(p.reply, c.resp3);
    else resp::bulk(p.reply, c.name);
  } else if (sub == "setname") {
    if (wrong(3)) return true;
    if (!valid_name(args[2]))
      return resp::error(p.reply, "ERR Client names cannot contain spaces, newlines or special characters."), true;
    c.name = std::string(args[2]);
    resp::simple(p.reply, "OK");
  } else if (sub == "setinfo") {  // Redis 7.2's; clients send it at connect (node-redis, redis-py 5)
    if (wrong(4)) return true;
    const std::string attr = lower(args[2]);
    if (attr != "lib-name" && attr != "lib-ver")
      return resp::error(p.reply, "ERR Unrecognized option '" + std::string(args[2].substr(0, 128)) + "'"), true;
    if (!valid_name(args[3]))
      return resp::error(p.reply, "ERR " + attr + " cannot contain spaces, newlines or special characters."), true;
    resp::simple(p.reply, "OK");
  } else if (sub == "info") {
    if (!wrong(2)) resp::verbatim(p.reply, client_info(slot, c, request_bytes(args)) + "\n", c.resp3);
  } else if (sub == "list") {
    if (wrong(2, true)) return true;
    std::int32_t type = -1;
    std::vector<std::uint64_t> ids;
    if (n == 4 && lower(args[2]) == "type") {
      type = client_type(lower(args[3]));
      if (type < 0) return resp::error(p.reply, "ERR Unknown client type '" + std::string(args[3]) + "'"), true;
    } else if (n > 3 && lower(args[2]) == "id") {
      for (std::size_t i = 3; i < n; ++i) {
        long long id;
        if (!resp::parse_int64(args[i], id)) return resp::error(p.reply, "ERR Invalid client ID"), true;
        ids.push_back(std::uint64_t(id));
      }
    } else if (n != 2) {
      return syntax(), true;
    }
    if (ids.empty() && type < 0) ids.clear();
    p.kind = Pending::Kind::kLines;
    p.waiting = local_count_;
    inflight_ += local_count_;
    tl_list_slot = slot;
    tl_list_bytes = request_bytes(args);
    for (std::uint32_t t = first_local_; t < first_local_ + local_count_; ++t)
      shard(t).apply_with_then(
          [](Shard&, std::int32_t ty, std::vector<std::uint64_t> want) {
            Loop* l = Loop::current();
            return l ? l->client_lines(ty, want) : std::vector<std::string>{};
          },
          [this, slot, gen, seq](std::vector<std::string> lines) {
            answer(slot, gen, seq, [&](Pending& q) {
              for (auto& line : lines) q.values.push_back(Value{Value::kString, std::move(line)});
            });
          },
          type, ids);
    tl_list_slot = UINT32_MAX;
  } else if (sub == "kill") {
    if (wrong(3, true)) return true;
    KillFilter f;
    f.thread = std::uint32_t(gossamer::thread_index());
    f.slot = slot;
    f.gen = gen;
    const bool old_style = n == 3;
    if (old_style) {
      f.addr = std::string(args[2]);
      f.skipme = false;  // the old form may kill its own connection
    } else {
      for (std::size_t i = 2; i < n; i += 2) {
        const std::string opt = lower(args[i]);
        if (i + 1 >= n) return syntax(), true;
        const std::string_view v = args[i + 1];
        long long id;
        if (opt == "id") {
          if (!resp::parse_int64(v, id) || id < 1)
            return resp::error(p.reply, "ERR client-id should be greater than 0"), true;
          f.id = std::uint64_t(id);
        } else if (opt == "type") {
          f.type = client_type(lower(v));
          if (f.type < 0) return resp::error(p.reply, "ERR Unknown client type '" + std::string(v) + "'"), true;
          if (f.type == 1 || f.type == 3) f.id = UINT64_MAX;  // none of those here
        } else if (opt == "addr") {
          f.addr = std::string(v);
        } else if (opt == "laddr") {
          f.laddr = std::string(v);
        } else if (opt == "user") {
          if (v != "default") return resp::error(p.reply, "ERR No such user '" + std::string(v) + "'"), true;
        } else if (opt == "skipme") {
          const std::string yn = lower(v);
          if (yn != "yes" && yn != "no") return syntax(), true;
          f.skipme = yn == "yes";
        } else {
          return syntax(), true;
        }
      }
    }
    p.kind = Pending::Kind::kSum;
    p.waiting = local_count_;
    inflight_ += local_count_;
    for (std::uint32_t t = first_local_; t < first_local_ + local_count_; ++t)
      shard(t).apply_with_then(
          [](Shard&, KillFilter filter) {
            Loop* l = Loop::current();
            return Count{l ? l->on_kill(filter) : 0, Count::kOk};
          },
          [this, slot, gen, seq, old_style](Count k) {
            answer(slot, gen, seq, [&](Pending& q) {
              q.sum += k.n;
              if (old_style && q.waiting == 1) {  // the last answer: OK or an error, not a count
                q.kind = Pending::Kind::kDone;
                if (q.sum) resp::simple(q.reply, "OK");
                else resp::error(q.reply, "ERR No such client");
              }
            });
          },
          f);
  } else if (sub == "reply") {
    if (wrong(3)) return true;
    const std::string mode = lower(args[2]);
    if (mode == "on") {
      c.reply_off = c.skip_next = c.skip_this = false;
      resp::simple(p.reply, "OK");
    } else if (mode == "off") {
      c.reply_off = true;
      p.silent = true;
    } else if (mode == "skip") {
      if (!c.reply_off) c.skip_this = true;  // the next command's reply (silence shifts it after that one)
      p.silent = true;
    } else {
      syntax();
    }
    c.quiet = c.reply_off || c.skip_next || c.skip_this;
  } else if (sub == "no-evict") {
    if (wrong(3)) return true;
    const std::string mode = lower(args[2]);
    if (mode != "on" && mode != "off") return syntax(), true;
    c.no_evict = mode == "on";
    resp::simple(p.reply, "OK");
  } else if (sub == "getredir") {
    if (!wrong(2)) resp::integer(p.reply, -1);
  } else if (sub == "unblock") {  // a connection of this host blocked in BLPOP... (blocking.cpp): 1 if it was
    if (n != 3 && n != 4) return wrong(3), true;
    long long id;
    if (!resp::parse_int64(args[2], id)) return resp::error(p.reply, "ERR value is not an integer or out of range"), true;
    if (n == 4 && lower(args[3]) != "timeout" && lower(args[3]) != "error")
      return resp::error(p.reply, "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"), true;
    const bool as_error = n == 4 && lower(args[3]) == "error";
    p.kind = Pending::Kind::kSum;
    p.waiting = local_count_;
    inflight_ += local_count_;
    for (std::uint32_t t = first_local_; t < first_local_ + local_count_; ++t)
      shard(t).apply_with_then(
          [](Shard&, std::uint64_t client, bool error) {
            Loop* l = Loop::current();
            return Count{l ? l->on_unblock(client, error) : 0, Count::kOk};
          },
          [this, slot, gen, seq](Count k) { answer(slot, gen, seq, [&](Pending& q) { q.sum += k.n; }); },
          std::uint64_t(id), as_error);
  } else if (sub == "help" && n == 2) {
    static const char* const kHelp[] = {
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GETNAME", "    Return the name of the current connection.",
        "ID", "    Return the ID of the current connection.",
        "INFO", "    Return information about the current client connection.",
        "KILL <ip:port>", "    Kill connection made from <ip:port>.",
        "KILL <option> <value> [<option> <value> [...]]", "    Kill connections. Options are: ID, TYPE, USER, ADDR, LADDR, SKIPME.",
        "LIST [options ...]", "    Return information about client connections (TYPE, ID filters).",
        "UNBLOCK <clientid> [TIMEOUT|ERROR]", "    Unblock the specified blocked client.",
        "REPLY (ON|OFF|SKIP)", "    Control the replies sent to the current connection.",
        "SETNAME <name>", "    Assign the name <name> to the current connection.",
        "NO-EVICT (ON|OFF)", "    Protect the current client connection from eviction.",
        "HELP", "    Print this help."};
    resp::array(p.reply, std::size(kHelp));
    for (const char* line : kHelp) resp::simple(p.reply, line);
  } else {
    resp::error(p.reply, "ERR unknown subcommand '" + std::string(args[1].substr(0, 128)) + "'. Try CLIENT HELP.");
  }
  return true;
}

}  // namespace hydra
