// hydra: a key-value store speaking RESP2 (redis-cli, redis-benchmark and
// Redis clients work unchanged), its key space sharded over every trustee of
// a Gossamer rack. See README.md.
//
// Every host runs this same command line (gossamerctl run, or by hand with
// the same GOSSAMER_RUN_ID). main() parses it into g_config on each host;
// run()'s main fiber, on host 0 only, entrusts one Shard to every thread of
// the rack and starts one I/O loop per thread (spawn_on works across hosts),
// then waits for them. The loops run until SIGINT/SIGTERM (or --seconds).
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "server.hpp"

namespace hydra {

Config g_config;
std::atomic<bool> g_stop{false};
std::atomic<int> g_exit_code{0};
HostStats g_stats;
std::array<ThreadCounter, kMaxThreads> g_commands;
std::array<ThreadCounter, kMaxThreads> g_owed;
std::array<CommandCounts, kMaxThreads> g_command_counts;
const std::chrono::steady_clock::time_point g_started = std::chrono::steady_clock::now();

void request_stop() noexcept { g_stop.store(true, std::memory_order_relaxed); }

namespace {

static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler stores to g_stop");
void on_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

// run()'s main fiber (host 0).
int serve() {
  const std::size_t n = gossamer::thread_count();
  if (n > kMaxThreads) {
    std::fprintf(stderr, "hydra: %zu threads; at most %zu (one shard per thread)\n", n, kMaxThreads);
    return 2;
  }
  std::vector<gossamer::Trust<Shard>> shards;  // owned here until every loop has stopped
  ShardTable table;
  for (std::size_t i = 0; i < n; ++i) {
    shards.push_back(gossamer::trustee(i).entrust(Shard{}));
    table.refs[i] = shards.back().ref();
  }
  table.count = std::uint32_t(n);
  std::vector<gossamer::FiberHandle> loops;
  for (std::size_t i = 0; i < n; ++i)
    loops.push_back(gossamer::spawn_on(i, [table] { std::make_unique<Loop>(table)->run(); }));
  for (auto& l : loops) l.join();
  return g_exit_code.load();
}

}  // namespace
}  // namespace hydra

int main(int argc, char** argv) {
  using hydra::g_config;
  CLI::App app{"hydra: a key-value store speaking RESP2, sharded over every trustee of a Gossamer rack.\n"
               "Runs until SIGINT or SIGTERM; on a rack, start it with `gossamerctl run -- hydra ...`."};
  std::size_t threads = std::max(1u, std::thread::hardware_concurrency());
  std::string polling = "adaptive";
  app.add_option("--threads", threads, "runtime threads in the whole rack, one shard each (GOSSAMER_THREADS overrides)")
      ->check(CLI::Range(std::size_t(1), hydra::kMaxThreads));
  app.add_option("--port", g_config.port, "TCP port every host listens on")->check(CLI::Range(1, 65535));
  app.add_option("--bind", g_config.bind, "IPv4 address every host listens on (default: loopback only)");
  std::string pass_file;
  app.add_option("--requirepass", g_config.requirepass, "password clients must give (AUTH, HELLO AUTH); see --requirepass-file");
  app.add_option("--requirepass-file", pass_file, "read the password from this file's first line (not visible in ps)")
      ->check(CLI::ExistingFile);
  app.add_option("--polling", polling, "busy | adaptive (adaptive: idle threads nap, see README)")
      ->check(CLI::IsMember({"busy", "adaptive"}));
  app.add_option("--idle-nap-ms", g_config.idle_nap_ms, "adaptive: how long an idle thread naps in epoll_wait (0: never)")
      ->check(CLI::Range(0, 100));
  app.add_flag("--idle-kicks", g_config.idle_kicks,
               "adaptive, one host: an idle thread naps at once and the thread that gives it work wakes it "
               "(for a machine whose cores other work needs; slower on an otherwise idle one, see README)");
  app.add_flag("--fold,!--no-fold", g_config.fold,
               "adaptive, one host: while other processes want the cores (clients on this machine), run the "
               "threads on fewer CPUs and give the rest back (default on, see README)");
  app.add_option("--seconds", g_config.seconds, "stop after this many seconds (0: until SIGINT or SIGTERM)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--maxclients", g_config.maxclients, "connections per host")->check(CLI::Range(std::size_t(1), std::size_t(1000000)));
  app.add_option("--max-pending", g_config.max_pending, "requests in flight per connection (pipelining depth)")
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 20));
  app.add_option("--max-bulk", g_config.limits.max_bulk, "largest bulk string accepted, bytes (proto-max-bulk-len)")
      ->check(CLI::Range(std::size_t(1), std::size_t(512) << 20));
  app.add_option("--max-output", g_config.max_output,
                 "reply bytes per connection, unsent or waiting in order, before it stops reading")
      ->check(CLI::Range(std::size_t(1) << 16, std::size_t(4) << 30));
  app.add_option("--pubsub-output-limit", g_config.pubsub_hard_limit,
                 "unsent pub/sub messages owed to one subscriber, bytes, before it is disconnected (0: no limit)")
      ->check(CLI::Range(std::size_t(0), std::size_t(4) << 30));
  std::string policy = "noeviction";
  app.add_option("--maxmemory", g_config.maxmemory,
                 "heap bytes of this host's process above which writes are refused with -OOM (noeviction) or keys "
                 "are evicted (0: no bound)");
  app.add_option("--maxmemory-policy", policy, "noeviction, allkeys-lru, volatile-lru, allkeys-random or volatile-random")
      ->check(CLI::IsMember({"noeviction", "allkeys-lru", "volatile-lru", "allkeys-random", "volatile-random"}));
  app.add_option("--max-reply-memory", g_config.max_reply_memory,
                 "reply bytes owed to all of this host's connections before those owed the most are disconnected (0: no bound)")
      ->check(CLI::Range(std::size_t(0), std::size_t(1) << 40));
  app.add_option("--max-query-buffer", g_config.max_query, "unparsed request bytes buffered per connection")
      ->check(CLI::Range(std::size_t(1) << 16, std::size_t(4) << 30));
  app.add_option("--max-shard-request", g_config.max_shard_request,
                 "bytes of keys and values one command sends to one shard; more is refused")
      ->check(CLI::Range(std::size_t(1) << 12, g_config.max_shard_request));
  CLI11_PARSE(app, argc, argv);
  hydra::set_policy(policy);
  hydra::set_maxmemory(g_config.maxmemory);
  hydra::g_max_query.store(g_config.max_query);
  hydra::set_max_reply_memory(g_config.max_reply_memory, -1);
  if (!pass_file.empty()) {
    std::ifstream in(pass_file);
    std::getline(in, g_config.requirepass);
    if (!in || g_config.requirepass.empty()) {
      std::fprintf(stderr, "hydra: --requirepass-file %s: no password on its first line\n", pass_file.c_str());
      return 2;
    }
  }
  if (g_config.bind == "127.0.0.1")
    std::printf("hydra: accepting clients on loopback only (the default): --bind 0.0.0.0, or an address of this "
                "host, accepts them from elsewhere (on a rack: --bind 0.0.0.0), with --requirepass to protect it\n");
  else if (g_config.requirepass.empty())
    std::fprintf(stderr, "hydra: warning: --bind %s without --requirepass: anyone who reaches port %u can read and "
                 "write every key\n", g_config.bind.c_str(), unsigned(g_config.port));
  g_config.busy_polling = polling == "busy";
  // Every client is a descriptor: raise the soft limit as far as allowed,
  // and take no more clients than it leaves room for (as Redis does).
  if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    const rlim_t want = rlim_t(g_config.maxclients) + 256;
    if (rl.rlim_cur < want) {
      rl.rlim_cur = std::min(want, rl.rlim_max);
      ::setrlimit(RLIMIT_NOFILE, &rl);
      ::getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < want) {
      const std::size_t room = rl.rlim_cur > 256 ? std::size_t(rl.rlim_cur) - 256 : 1;
      std::fprintf(stderr, "hydra: descriptor limit %llu: --maxclients lowered from %zu to %zu\n",
                   static_cast<unsigned long long>(rl.rlim_cur), g_config.maxclients, room);
      g_config.maxclients = room;
    }
  }

  // SIGINT/SIGTERM (Ctrl-C; gossamerd stopping a run) ask the loops to stop;
  // a second one kills at once (SA_RESETHAND). SA_RESTART: the runtime's own
  // system calls are not interrupted by them.
  struct sigaction sa {};
  sa.sa_handler = hydra::on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_RESETHAND;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  gossamer::Options o;
  o.threads = threads;
  o.polling = g_config.busy_polling ? gossamer::Polling::busy : gossamer::Polling::adaptive;
  o.stack_size = 256 * 1024;  // cereal streams and a loop's locals, with room to spare
  int rc = gossamer::run(o, [] { return hydra::serve(); });
  if (rc == 0) rc = hydra::g_exit_code.load();
  std::printf("hydra: stopped (exit %d)\n", rc);
  return rc;
}
