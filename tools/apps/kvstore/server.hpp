// Hydra's server side: the configuration every host parses from its own
// command line, the stop flag, and the per-thread I/O loop that owns this
// thread's client connections.
#pragma once

#include <sys/epoll.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <initializer_list>
#include <memory>
#include <span>
#include <tuple>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <gossamer/gossamer.hpp>

#include "command_spec.hpp"
#include "fold.hpp"
#include "idle.hpp"
#include "order.hpp"
#include "resp.hpp"
#include "shard.hpp"
#include "stats.hpp"  // kMaxThreads, HostStats, the memory.cpp settings, per-thread counters

namespace hydra {

struct Reply;  // types.hpp
struct Dump;   // types.hpp

// Filled from the command line in main() before gossamer::run, on every host
// (each host runs the same command line), then read-only.
struct Config {
  std::uint16_t port = 6379;
  std::string bind = "127.0.0.1";   // loopback unless told (--bind)
  std::string requirepass;          // empty: no password (AUTH, HELLO AUTH)
  bool busy_polling = false;
  int idle_nap_ms = 1;              // 0: never nap (see Loop::idle)
  bool idle_kicks = false;          // nap at once and kick (idle.cpp); off: spin, yield, nap when quiet
  bool fold = true;                 // one host: fewer CPUs while other processes want the cores (fold.cpp)
  double seconds = 0;               // stop after this long; 0: until SIGINT/SIGTERM
  std::size_t maxclients = 10000;   // per host
  std::size_t max_pending = 1024;   // requests in flight per connection
  std::size_t max_output = 64u << 20;   // unsent reply bytes before a connection stops reading
  std::size_t max_query = 1u << 30;     // buffered request bytes per connection (client-query-buffer-limit)
  // client-output-buffer-limit pubsub: a subscriber owed more than this
  // (messages it does not read) is disconnected (pubsub.cpp). 0: no limit.
  std::size_t pubsub_hard_limit = 32u << 20;
  // Replies owed to all the connections of this host (unsent, or complete
  // and waiting for earlier ones): above this, the connections owed the
  // most are disconnected (Loop::bound_replies), as Redis's
  // maxmemory-clients. 0: no bound.
  std::size_t max_reply_memory = std::size_t(512) << 20;
  std::size_t maxmemory = 0;        // heap bytes of this host before writes are refused (memory.cpp); 0: none
  // Keys and values of one command for one shard (a request to another
  // host carries at most 1 GiB, serialization included).
  std::size_t max_shard_request = (std::size_t(1) << 30) - (std::size_t(1) << 16);
  resp::Limits limits;
};
extern Config g_config;

// A request to another host carries at most 1 GiB (the runtime answers a
// larger one with an error, which an apply_then callback cannot receive):
// keys and values for one shard beyond --max-shard-request are refused
// before anything is sent. This checks a single-key command's arguments
// (commands.cpp checks the multi-key ones per shard).
constexpr const char* kTooLarge = "ERR request too large: more keys and values for one shard than --max-shard-request";
inline bool too_large(const std::vector<std::string_view>& args) {
  std::size_t b = 0;
  for (std::size_t i = 1; i < args.size(); ++i) b += args[i].size() + 8;
  return b > g_config.max_shard_request;
}

constexpr const char* kNotInteger = "ERR value is not an integer or out of range";

// The error text of a Count's error code (shard.hpp), Redis 7.0's.
inline const char* count_error(std::int32_t err) {
  switch (err) {
    case Count::kNotInteger: return kNotInteger;
    case Count::kOverflow: return "ERR increment or decrement would overflow";
    case Count::kWrongType: return kWrongType;
    case Count::kNoSuchKey: return "ERR no such key";
    case Count::kNotFloat: return "ERR value is not a valid float";
    default: return "ERR out of memory";
  }
}

// Process-wide (one process per host). Set by SIGINT/SIGTERM, by --seconds,
// by a fatal listen error, or by another host telling this one to stop.
extern std::atomic<bool> g_stop;
extern std::atomic<int> g_exit_code;
void request_stop() noexcept;

constexpr const char* kRedisVersion = "7.0.0";  // the Redis whose replies Hydra follows (INFO, HELLO)


// Every shard of the rack, by thread. Captured by value in the spawn_on
// closure that starts each loop, hence a fixed array.
struct ShardTable {
  std::array<gossamer::TrustRef<Shard>, kMaxThreads> refs{};
  std::uint32_t count = 0;
};

// A reply position in a connection's queue, filled when its command
// completes. Commands spanning shards gather their parts here.
// Kept small: the reply queue is a deque, which allocates a block per
// 512 bytes of entries (152 bytes now: 3 per block; 184 would fit 2).
struct Pending {
  // What the reply is made of once every part has answered: kDone: the
  // part wrote `reply` itself; kSum: an integer; kOk: +OK; kMget: `values`;
  // kInfo: the INFO text with `sum` keys.
  // kKeys: `values` in any order (KEYS); kRandom: `values` empty or the
  // key chosen (RANDOMKEY, keys.cpp).
  // kStatuses: `values` as simple strings in order (DEBUG DIGEST-VALUE).
  // kLines: `values` joined, each line ending in \n, as one verbatim
  // string (CLIENT LIST); kList: `values` as an array of bulk strings
  // (PUBSUB CHANNELS); kPairs: `values` as name, integer pairs (PUBSUB NUMSUB).
  enum class Kind : std::uint8_t { kDone, kSum, kOk, kMget, kInfo, kKeys, kRandom, kStatuses, kLines, kList, kPairs };
  Kind kind = Kind::kDone;
  bool resp3 = false;              // the connection's protocol when the command came
  bool push = false;               // a pub/sub message or (un)subscribe notice: CLIENT REPLY OFF keeps it
  bool silent = false;             // CLIENT REPLY OFF / SKIP: dropped instead of sent
  std::uint32_t waiting = 0;       // shard answers still to come
  std::int64_t sum = 0;            // kSum, kInfo (keys)
  std::string reply;               // the encoded reply once waiting == 0
  std::size_t counted = 0;         // of reply's bytes, those in Connection::reply_bytes
  std::string error;               // the first part that failed, if any
  std::vector<Value> values;       // kMget: in key order
  std::vector<std::vector<std::uint32_t>> positions;  // kMget: key positions per shard request
  std::uint16_t info_sections = 0;  // kInfo: which sections (commands.cpp, info_sections)
  std::int64_t expiring = 0;       // kInfo: keys with a TTL
};

struct Connection {
  int fd = -1;
  std::uint32_t gen = 0;
  std::uint64_t id = 0;            // HELLO's client id: unique on this host
  bool resp3 = false;              // HELLO 3 switched it
  bool authed = g_config.requirepass.empty();  // AUTH (or HELLO AUTH) passed, or no password is set
  // Input: bytes read, of which [0, consumed) are done with.
  std::string in;
  std::size_t consumed = 0;
  resp::RequestParser parser{g_config.limits};
  // Replies in request order: pending.front() is request number `base`.
  std::deque<Pending> pending;
  std::uint64_t base = 0;
  std::string out;
  std::size_t written = 0;
  std::size_t checked_owed = 0;  // unsent bytes when the last flush asked for a reply-bound check
  // Bytes of shard answers already in `pending` replies (not yet in `out`):
  // counted against max_output with the unsent output, so a client that
  // pipelines GETs of large values and never reads cannot grow us without
  // bound.
  std::size_t reply_bytes = 0;
  std::uint32_t events = 0;        // what epoll watches now
  // Its commands in batches (batch.cpp) whose answers are owed: replies
  // wait for them, so that a pipeline spread over shards goes out in one
  // send, not one per shard (Loop::holding).
  std::uint32_t batched = 0;
  bool eof = false;                // the peer will send nothing more
  bool closing = false;            // QUIT or a protocol error: close once flushed
  bool dirty = false;              // in the loop's dirty list
  bool dead = false;               // closed while its transaction ran: kept until that ends
  // MULTI / EXEC / WATCH (transactions.cpp).
  bool in_multi = false;           // MULTI seen: commands are queued
  bool multi_error = false;        // a command was refused while queuing: EXEC answers EXECABORT
  bool in_exec = false;            // its transaction holds its shards: its commands pass the fences
  std::uint64_t txn = 0;           // its transaction under way (no more input meanwhile), 0: none
  std::uint64_t txn_end = 0;       // the request number of the marker that ends it
  std::uint64_t txn_resume = 0;    // EXEC goes on when this request (of several steps) completes
  std::vector<std::vector<std::string>> queued;  // MULTI's commands
  struct Watched {
    std::string key;
    std::uint64_t version;
  };
  std::vector<Watched> watches;    // WATCH's keys and the versions it saw
  std::vector<std::string> held;   // a command waiting for a fence to lift, or EXEC for earlier replies
  std::uint64_t blocked = 0;       // its BLPOP... under way (blocking.cpp): nothing more executes meanwhile
  // Pub/sub (pubsub.cpp): its channels and patterns; `subscribed` while
  // either is not empty (RESP2 then refuses most commands).
  bool subscribed = false;
  std::unordered_set<std::string> channels, patterns;
  // CLIENT (clients.cpp).
  bool quiet = false;              // CLIENT REPLY OFF or SKIP in force: process_input silences replies
  bool reply_off = false, skip_next = false, skip_this = false;
  bool no_evict = false;           // CLIENT NO-EVICT (shown in CLIENT LIST's flags)
  bool monitor = false;            // MONITOR: gets every command of this host (monitor.cpp)
  std::string name;                // CLIENT SETNAME, HELLO SETNAME
  // CLIENT LIST's cmd=: the last command's name. Up to 16 bytes it is
  // copied as 16 fixed bytes (a std::string's own buffer holds 16, so this
  // reads no further): a few instructions per command, not a string assign.
  char last_cmd16[16] = {};
  std::uint8_t last_cmd_len = 0;
  std::string last_cmd_long;
  void set_last_cmd(const std::string& n) noexcept {
    last_cmd_len = std::uint8_t(std::min<std::size_t>(n.size(), 255));
    if (n.size() <= 16) std::memcpy(last_cmd16, n.data(), 16);
    else last_cmd_long.assign(n, 0, 255);
  }
  std::string_view last_cmd() const noexcept {
    return last_cmd_len <= 16 ? std::string_view(last_cmd16, last_cmd_len) : std::string_view(last_cmd_long);
  }
  std::int64_t created_ms = 0;     // CLIENT LIST's age=
  std::int64_t active_ms = 0;      // idle=: the round of its last command (Loop::now_ms_)
  std::int64_t rx_stamp = 0;       // the kernel's receive time of the last bytes read (order.cpp)
  std::uint64_t order_id = 0;      // its command's OrderEntry::n while that waits or is held (order.cpp)
};

// CLIENT KILL's filters (clients.cpp), sent to every thread of the host.
struct KillFilter {
  std::string addr, laddr;
  std::int32_t type = -1;          // -1: any; 0 normal, 1 pubsub
  std::uint64_t id = 0;            // 0: any
  bool skipme = true;
  std::uint32_t thread = 0, slot = 0, gen = 0;  // the connection asking
  template <class Ar>
  void serialize(Ar& ar) {
    ar(addr, laddr, type, id, skipme, thread, slot, gen);
  }
};

class Loop {
 public:
  explicit Loop(const ShardTable& shards);
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // Serves until g_stop, then closes everything and waits for the answers
  // still owed to it (their callbacks point at this loop).
  void run();

  // A socket accepted by this host's listening thread, handed to this one.
  static void hand_in(int fd);

  // From apply_then callbacks (this thread): one shard answer for request
  // `seq` of connection `slot`/`gen`; `fill` updates its Pending.
  template <class Fill>
  void answer(std::uint32_t slot, std::uint32_t gen, std::uint64_t seq, Fill&& fill);

 private:
  // io_loop.cpp: sockets and the loop
  bool start_listening();
  bool poll_once(int timeout_ms);
  void sweep(std::chrono::steady_clock::time_point now);
  // order.cpp: arrival order across the host's loops
  // Most commands leave at the first tests, inline: one thread, inside EXEC,
  // or neither a blocking name nor a blocked client on the host.
  bool order_kind(const Connection& c, const std::string& name, const std::vector<std::string_view>& args) const {
    if (local_count_ == 1 || c.in_exec || name.empty()) return false;
    if (name[0] != 'b' && g_stats.blocked_clients.load(std::memory_order_relaxed) == 0 &&
        g_order_blocking.load(std::memory_order_relaxed) == 0)
      return false;
    return order_kind_named(c, name, args);
  }
  bool order_kind_named(const Connection& c, const std::string& name, const std::vector<std::string_view>& args) const;
  bool order_gate(std::uint32_t slot, Connection& c, const std::string& name, const std::vector<std::string_view>& args);
  void order_after(std::uint32_t slot, std::uint32_t gen);
  bool order_ready(const OrderEntry& e);
  bool order_done(const OrderEntry& e);
  void order_begin(bool nap), order_woke(bool nap), order_publish(), publish_oldest();
  std::size_t order_rounds();  // the held connections it marked to retry
  // idle.cpp: rounds with nothing to do, naps, and kicks between loops
  void setup_wake(), drain_wake(), kick_sleepers(), busy(), withdraw(), sample_contention();
  bool idle(std::uint64_t& idle_rounds);
  // fold.cpp: fewer CPUs while other processes want the cores
  void setup_fold(), fold_sample(), fold_round();
  std::uint64_t trustee_activity();
  bool trustee_quiet();
  void accept_all(), adopt(int fd);
  Connection* find(std::uint32_t slot, std::uint32_t gen);
  void mark_dirty(std::uint32_t slot);
  void close_connection(std::uint32_t slot, bool force = false);
  bool can_execute(const Connection& c) const;
  static bool holding(const Connection& c);
  bool reading_allowed(const Connection& c) const;
  void on_event(std::uint32_t slot, std::uint32_t ev);
  bool read_input(std::uint32_t slot, Connection& c);
  void process_input(std::uint32_t slot, Connection& c);
  // prefetch.cpp: prefetches the own shard's map for the keys of the
  // requests ahead in c.in; returns where the requests it looked at end.
  std::size_t prefetch_keys(const Connection& c);
  void find_own_shard();
  void protocol_error(Connection& c, const std::string& why);
  void flush(std::uint32_t slot, Connection& c), update_events(std::uint32_t slot, Connection& c);
  void drain_dirty(), stop_everything(), propagate_stop();

  // commands.cpp
  void execute(std::uint32_t slot, Connection& c, const std::vector<std::string_view>& args);
  void finish(Pending& p) const;
  static std::uint16_t info_sections(std::string_view section);
  std::string info_text(std::uint16_t sections, std::int64_t keys, std::int64_t expiring) const;
  void hello(Pending& p, Connection& c, const std::vector<std::string_view>& args) const;
  void auth(Pending& p, Connection& c, const std::vector<std::string_view>& args) const;
  // pubsub.cpp
 public:
  std::int64_t on_message(std::string channel, std::string message);  // a PUBLISH reaching this thread
  std::int64_t on_kill(const KillFilter& f);  // CLIENT KILL reaching this thread (clients.cpp)
  std::vector<std::string> client_lines(std::int32_t type, const std::vector<std::uint64_t>& ids);  // CLIENT LIST

 private:
  bool execute_pubsub(std::uint32_t slot, Connection& c, const std::string& name, Pending& p, std::uint64_t seq,
                      const std::vector<std::string_view>& args);
  void pubsub_command(std::uint32_t slot, Connection& c, Pending& p, std::uint64_t seq,
                      const std::vector<std::string_view>& args);
  bool pubsub_refused(Connection& c, const std::string& name, const std::vector<std::string_view>& args);
  void subscribe(std::uint32_t slot, Connection& c, Pending& p, std::uint64_t seq, bool pattern,
                 const std::vector<std::string_view>& args);
  void unsubscribe(std::uint32_t slot, Connection& c, Pending& p, std::uint64_t seq, bool pattern, const std::vector<std::string_view>& args);
  void unsubscribe_all(std::uint32_t slot, Connection& c);
  void register_names(std::uint32_t slot, Connection& c, std::uint64_t seq, Pending* p, bool pattern,
                      std::vector<std::string> names, std::int32_t delta);
  void publish(std::uint32_t slot, Connection& c, Pending& p, std::uint64_t seq, std::string channel, std::string message);
  void dispatch_publishes();
  void publish_event(std::string channel, std::string message);  // a keyspace event for other hosts
  void lookup_publish(std::uint64_t id, std::string channel);
  void deliver_messages();
  void queue_push(std::uint32_t slot, Connection& c, std::string&& bytes);
  // notify.cpp: CONFIG SET notify-keyspace-events on every host; this
  // loop's mailbox (events, MONITOR lines) and events for other hosts.
  void notify_rack(std::uint32_t slot, std::uint32_t gen, std::uint64_t seq, Pending& p,
                   const std::vector<std::string_view>& args);
  void take_mail();
  void count_key_subs();
  // monitor.cpp: MONITOR, and a command for this host's monitors.
  void monitor(std::uint32_t slot, Connection& c, Pending& p);
  void unmonitor(std::uint32_t slot, Connection& c);
  void feed_monitors(const Connection& c, const std::vector<std::string_view>& args) const;
  void feed_exec(const Connection& c, const std::vector<std::string>& exec) const;  // transactions.cpp: EXEC, after its commands
  // clients.cpp
  bool execute_client(std::uint32_t slot, Connection& c, const std::string& name, Pending& p, std::uint64_t seq,
                      const std::vector<std::string_view>& args);
  std::string client_info(std::uint32_t slot, const Connection& c, std::size_t current_request) const;
  void silence(Connection& c, std::size_t first);
  void bound_replies();
  void note_backlog(Connection& c);
  // memory.cpp
  void check_memory(std::chrono::steady_clock::time_point now);
  bool oom_refused(Connection& c, const std::string& name);
  void evict(std::uint32_t slot, Connection& c, std::size_t owed, const char* why);
  void do_kills();

  // blocking.cpp
 public:
  void on_served(Served sv);  // elements a shard popped for one of this loop's blocked connections
  std::int64_t on_unblock(std::uint64_t client, bool error);  // CLIENT UNBLOCK reaching this thread: 1 if blocked here
  void on_credit(const Origin& o);  // wake.cpp: a push's credit back; its reply goes once all is back
 private:
  struct Blocked {
    enum Kind : std::uint8_t { kPop, kMpop, kMove } kind = kPop;
    std::uint32_t slot = 0, gen = 0;
    std::uint64_t seq = 0;
    std::uint8_t where = 0, to = 0;  // 0 head (LEFT), 1 tail
    std::int64_t count = -1;
    std::string dst;                 // BLMOVE's destination
    std::vector<std::pair<std::uint32_t, std::vector<std::string>>> groups;  // keys by shard
    std::chrono::steady_clock::time_point deadline{};
    bool forever = false, nonblocking = false;
    bool registered = false;         // some shard may have it in its queues
    bool counted = false;            // blocked: in INFO's blocked_clients, and the timeout runs
    bool done = false;               // served: BLMOVE's push under way
    std::uint32_t registering = 0;   // shards yet to answer its registration (several shards)
    BlockMarks marks;                // its keys, while it lives (order.hpp)
    std::shared_ptr<std::atomic<std::uint8_t>> claim;  // wake.cpp: set by whoever serves or ends it first
  };
  bool execute_blocking(std::uint32_t slot, Connection& c, const std::string& name, Pending& p, std::uint64_t seq,
                        const std::vector<std::string_view>& args);
  void try_pop(std::uint64_t id, std::size_t group);
  void now_blocked(Blocked& b);
  template <class Fill>
  void finish_blocked(std::uint64_t id, Fill&& fill);
  void dispatch_served(), handle_served(), block_timeouts();
  void drop_blocked(Connection& c);
  void dispatch_returns();  // wake.cpp: tl_returns to the pushes' loops
  bool hold_for_credit(std::uint32_t slot, std::uint32_t gen, std::uint64_t seq, std::uint64_t given);  // true: it waits
  std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint64_t>, std::pair<std::int64_t, bool>> credits_;  // owed, held
  std::unordered_map<std::uint64_t, Blocked> blocked_;
  std::uint64_t next_block_ = 0;
  std::vector<Served> served_;
  std::vector<std::pair<std::uint64_t, bool>> unblocks_;  // CLIENT UNBLOCK: blocked command, as an error

  // transactions.cpp
 public:
  static Loop* current();  // this thread's loop (from closures run by this thread's trustee), or null
  void on_fence(std::uint64_t id, std::uint32_t coordinator, std::vector<std::uint32_t> shards);
  void on_unfence(std::uint64_t id);
  void on_ack(std::uint64_t id);
  void on_granted(std::uint64_t id, std::uint32_t shard_index);

 private:
  // Commands that MULTI queues, that wait for a fence, or that need every
  // shard they touch at once: true if handled (and `p` must not be made).
  bool transaction_command(std::uint32_t slot, Connection& c, const std::string& name,
                           const std::vector<std::string_view>& args);
  bool fenced(const std::string& name, const std::vector<std::string_view>& args) const;
  std::vector<std::uint32_t> shards_of(const std::string& name, const std::vector<std::string_view>& args) const;
  void begin_txn(std::uint32_t slot, Connection& c, std::vector<std::uint32_t> shards, bool exec,
                 std::vector<std::string> command);
  void advance_txns();
  void claim_next(std::uint64_t id);
  void release(std::uint32_t shard_index, std::uint64_t txn, std::function<void()> then = {});
  void run_txn(std::uint64_t id);
  void run_queue(std::uint64_t id);
  void end_txn(std::uint64_t id);
  void retry_held(std::uint32_t slot, Connection& c);
  void fence_rounds();
  void unwatch_all(Connection& c);
  void watch(std::uint32_t slot, Connection& c, Pending& p, std::uint64_t seq, const std::vector<std::string_view>& args);
  // keyspace.cpp: MSETNX, RENAME, RENAMENX, COPY, TYPE (run inside a transaction's shards)
  bool execute_keyspace(std::uint32_t slot, const std::string& name, Pending& p, std::uint64_t seq, std::uint32_t gen,
                        const std::vector<std::string_view>& args);
  // keys.cpp: KEYS, SCAN, RANDOMKEY, OBJECT
  bool execute_keys(std::uint32_t slot, const std::string& name, Pending& p, std::uint64_t seq, std::uint32_t gen,
                    const std::vector<std::string_view>& args);
  static void gather(Pending& q, Reply& r);
  void scan_step(std::uint32_t slot, std::uint32_t gen, std::uint64_t seq, std::uint32_t index, std::int64_t from,
                 std::int64_t count, std::string pattern, std::string type, std::vector<std::string> found);
  // debug.cpp
  void debug_command(std::uint32_t slot, Pending& p, std::uint64_t seq, std::uint32_t gen,
                     const std::vector<std::string_view>& args);
  // zset_multi.cpp: ZUNIONSTORE, ZINTERSTORE, ZDIFFSTORE, ZUNION, ZINTER, ZDIFF, ZINTERCARD, ZMPOP,
  // ZRANGESTORE; sort.cpp: SORT, SORT_RO (run inside a transaction's shards)
  bool execute_zset_multi(std::uint32_t slot, const std::string& name, Pending& p, std::uint64_t seq, std::uint32_t gen,
                          const std::vector<std::string_view>& args);
  // Every key's value (shard_dump), in the order of `keys`, read from their
  // shards (one request per shard), then `done` (zset_multi.cpp).
  void dump_keys(const std::vector<std::string>& keys, std::function<void(std::vector<Dump>)> done);
  bool execute_sort(std::uint32_t slot, const std::string& name, Pending& p, std::uint64_t seq, std::uint32_t gen,
                    const std::vector<std::string_view>& args);
  // dump.cpp: DUMP, RESTORE
  bool execute_dump(std::uint32_t slot, const std::string& name, Pending& p, std::uint64_t seq, std::uint32_t gen,
                    const std::vector<std::string_view>& args);
  // types.cpp: hashes, lists, sets (single-key commands)
  bool execute_types(std::uint32_t slot, const std::string& name, Pending& p, std::uint64_t seq, std::uint32_t gen,
                     const std::vector<std::string_view>& args);
  // strings.cpp: GET, SET, INCR..., the expiry commands; false: not one of them
  bool execute_string(std::uint32_t slot, const std::string& name, Pending& p, std::uint64_t seq, std::uint32_t gen,
                      const std::vector<std::string_view>& args);

  // batch.cpp: GETs and plain SETs for other threads' shards, one request
  // per shard per round. batch() false: send it the ordinary way.
  bool batch(std::uint32_t slot, std::uint32_t gen, std::uint64_t seq, std::size_t shard_index, bool set,
             const std::vector<std::string_view>& args);
  void send_batches();
  void send_batch(std::size_t shard_index);
  struct BatchTarget { std::uint32_t slot, gen; std::uint64_t seq; };
  struct Batch {
    std::string ops;                   // packed operations (batch.cpp)
    std::vector<BatchTarget> targets;  // whose replies, in order
  };
  std::vector<Batch> batches_;         // per shard (sized at the first batch)
  std::vector<std::uint32_t> batch_used_;  // shards with a batch to send

  gossamer::TrustRef<Shard> shard(std::size_t i) const { return shards_.refs[i]; }
  // One request whose answer goes to `k`: a step of a command of several
  // (keyspace.cpp). The steps run inside the command's transaction.
  template <class F, class K, class... A>
  void ask(std::size_t i, F f, K k, A&&... args) {
    ++inflight_;
    shard(i).apply_with_then(f, [this, k = std::move(k)](auto r) mutable {
      --inflight_;
      k(std::move(r));
    }, std::forward<A>(args)...);
  }
  // Completes request `seq` (its Pending waiting for 1) from such a step.
  template <class Fill>
  void settle(std::uint32_t slot, std::uint32_t gen, std::uint64_t seq, Fill&& fill) {
    ++inflight_;
    answer(slot, gen, seq, std::forward<Fill>(fill));
    Connection* c = find(slot, gen);
    if (c && c->txn && c->txn_resume == seq) {  // EXEC waited for this one (Loop::run_queue)
      c->txn_resume = UINT64_MAX;
      advance_.push_back(c->txn);
    }
  }

  ShardTable shards_;
  std::size_t nshards_;
  int epoll_ = -1;
  int listen_fd_ = -1;
  std::chrono::steady_clock::time_point listen_paused_until_{};  // out of descriptors: not accepting
  bool leader_ = false;                      // this host's first thread: it listens
  std::uint32_t first_local_ = 0, local_count_ = 1, next_target_ = 0;
  std::size_t local_index_ = 0;              // this thread among its host's
  std::size_t own_shard_ = gossamer::thread_index();  // this thread's shard: applied at once, never batched
  Shard* own_ = nullptr;                     // that shard, for prefetch_keys only (find_own_shard)
  std::uint64_t commands_ = 0;               // published to g_commands for INFO
  std::vector<std::unique_ptr<Connection>> conns_;  // by slot; null = free
  std::vector<std::uint32_t> gens_;
  std::vector<std::uint32_t> free_slots_;
  std::vector<std::uint32_t> dirty_;
  std::vector<epoll_event> events_;
  std::uint64_t inflight_ = 0;               // shard requests whose callbacks are owed
  std::chrono::steady_clock::time_point next_sweep_{};  // active expiry (Loop::sweep)
  std::uint64_t sweeps_ = 0;                 // not activity (Loop::trustee_quiet)
  // Transactions this loop coordinates, and the fences it keeps (transactions.cpp).
  struct Txn {
    std::uint32_t slot = 0, gen = 0;
    std::vector<std::uint32_t> shards;  // ascending: claimed in this order (no deadlock)
    std::size_t claimed = 0;            // shards[0, claimed) are this transaction's
    std::uint32_t acks_owed = 0;        // loops yet to confirm the fence
    enum Phase : std::uint8_t { kClaiming, kFencing, kRunning, kExecuting } phase = kClaiming;
    bool exec = false;                  // EXEC (the connection's queue), else `command`
    bool checked = false, aborted = false;  // EXEC's WATCHed keys: checked, some changed
    std::vector<std::string> command;
    std::vector<std::vector<std::string>> queue;  // kExecuting: EXEC's commands, queue[next] the next
    std::size_t next = 0;
  };
  std::unordered_map<std::uint64_t, Txn> txns_;
  std::vector<std::uint64_t> advance_;  // transactions with a step to take this round
  std::uint64_t next_txn_ = 0;
  struct Fence {
    std::uint64_t id = 0;
    std::uint32_t coordinator = 0;
    std::vector<std::uint32_t> shards;
    std::uint32_t markers_owed = 0;     // this loop's earlier requests to `shards` not yet served
    bool started = false;
  };
  std::vector<Fence> fences_;
  std::array<std::uint16_t, kMaxThreads> fenced_{};  // per shard: fences naming it
  std::vector<std::uint32_t> held_;     // connections with a held command
  bool fence_work_ = false;             // fences_ to start, held_ to retry
  // Pub/sub (pubsub.cpp): this loop's subscribers by channel and pattern,
  // PUBLISHes in request order, messages to hand to local subscribers.
  using Subscribers = std::vector<std::pair<std::uint32_t, std::uint32_t>>;  // (slot, gen)
  std::unordered_map<std::string, Subscribers> local_channels_, local_patterns_;
  Subscribers monitors_;  // this loop's MONITOR connections (monitor.cpp)
  struct Publish {
    std::uint32_t slot = 0, gen = 0;
    std::uint64_t seq = 0;
    std::string channel, message;
    std::vector<std::uint32_t> threads;  // with subscribers (the channel's home shard said)
    bool ready = false;
    bool remote_only = false;            // a keyspace event: this host's subscribers have it (notify.cpp)
  };
  std::deque<Publish> publishes_;
  std::uint64_t publish_base_ = 0;     // id of publishes_.front()
  struct Message {
    std::string channel, message;
    std::vector<std::tuple<std::uint32_t, std::uint32_t, std::string>> to;  // slot, gen, pattern ("" for the channel)
  };
  std::vector<Message> messages_;
  std::vector<std::tuple<std::uint32_t, std::uint32_t, bool>> kills_;  // CLIENT KILL: slot, gen, is the killer
  std::chrono::steady_clock::time_point next_memory_check_{};  // memory.cpp
  std::chrono::steady_clock::time_point next_evict_{};         // memory.cpp: this loop's shard evicts without writes
  std::int64_t now_ms_ = 0;            // wall clock, refreshed each round that had socket events
  IdleState idle_;                     // idle.cpp
  FoldState fold_;                     // fold.cpp
  ArrivalOrder order_;                 // order.cpp
  // A connection was left owing >= 64 KiB after a flush: check
  // --max-reply-memory this round, not at the next 1024-round tick.
  bool reply_check_ = false;
};

template <class Fill>
void Loop::answer(std::uint32_t slot, std::uint32_t gen, std::uint64_t seq, Fill&& fill) {
  --inflight_;
  Connection* c = find(slot, gen);
  if (!c || seq < c->base || seq - c->base >= c->pending.size()) return;  // closed meanwhile
  Pending& p = c->pending[seq - c->base];
  const std::size_t before = p.reply.size();
  fill(p);
  if (--p.waiting == 0) finish(p);
  const std::size_t added = p.reply.size() - before;
  p.counted += added;
  c->reply_bytes += added;
  mark_dirty(slot);
}

}  // namespace hydra
