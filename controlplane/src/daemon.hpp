// gossamerd: one per host. Supervises the host's dataplane, keeps an
// authenticated full mesh of TCP connections with the other hosts' daemons
// (heartbeats say who is up), and launches rack applications on every host
// for gossamerctl, with fate sharing. Single-threaded on one io_context.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>  // before asio: Boost 1.74's awaitable.hpp uses std::exchange
#include <vector>

#include <boost/asio.hpp>
#include <gossamer/config.hpp>
#include <prometheus/exposer.h>

#include "handshake.hpp"
#include "link.hpp"
#include "metrics.hpp"
#include "proto.hpp"
#include "rack_keys.hpp"
#include "run_as.hpp"
#include "verbs_relay.hpp"

namespace gossamer::cp {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

struct DaemonOptions {
  std::string config_path;     // absolute; handed to the dataplane and to instances
  std::string dataplane_path;  // "" = do not supervise a dataplane
};

// Exit status of an instance that stopped because another host's instance
// left the rack (runtime/src/rack.cpp): not a cause, a consequence.
inline constexpr int kExitPeerLost = 75;

// A bulk connection for a run's instance: the socket and the instances'
// session keys (GOSSAMER_BULK).
struct BulkSocket {
  int fd = -1;
  abi::SessionKeys keys;
};

class Daemon {
 public:
  // `secret`: the rack secret (controlplane.psk_file's content).
  Daemon(asio::io_context& io, config::Config cfg, DaemonOptions opt, std::string secret);
  // Binds the sockets and starts everything; false (with a message on
  // stderr) when it cannot.
  bool start();
  // SIGTERM: stops instances and the dataplane, removes the socket, then
  // stops the io_context.
  void shutdown(const char* why);

 private:
  struct Peer {
    std::shared_ptr<TcpLink> link;  // authenticated
    bool up = false;
    Clock::time_point last_heard{};
    // absent_ when last_heard was set: what this daemon's own absence since
    // then is (heartbeat_tick), granted to the peer as grace.
    Clock::duration absent_at_heard{};
    Heartbeat last;
    std::unique_ptr<asio::steady_timer> redial;
    bool dialing = false;
  };
  struct Run;  // internal.hpp

  // Runs fn once, `delay` from now, on the loop.
  void after(Clock::duration delay, std::function<void()> fn);

  // ---- mesh (mesh.cpp)
  void accept_peer();
  void dial(std::uint32_t h);
  void schedule_redial(std::uint32_t h);
  void peer_authenticated(std::uint32_t h, std::shared_ptr<TcpLink> link);
  // What a link between daemons does with a message its framing refuses:
  // log it with `who`, count it (the link closes itself).
  void log_refusals(TcpLink& link, const std::string& who);
  // Turns on the message tags on a link whose handshake `hs` just ended.
  void authenticate(TcpLink& link, const Handshake& hs);
  void peer_down(std::uint32_t h, const std::string& why);
  void on_peer_message(std::uint32_t h, Type t, std::string_view body);
  void heartbeat_tick();
  std::uint64_t rack_id() const;
  std::string host_name(std::uint32_t h) const;

  // ---- bulk connections (bulk.cpp: one per run and pair of hosts, for the instances)
  void init_bulk(const std::shared_ptr<Run>& r);
  void run_checked(const std::shared_ptr<Run>& r);
  void maybe_ready(const std::shared_ptr<Run>& r);
  // "" when r holds every bulk connection, else which one is missing and why.
  std::string bulk_missing(const Run& r, const std::string& within) const;
  void bulk_store(const std::shared_ptr<Run>& r, std::uint32_t h, BulkSocket b);
  void bulk_dial(const std::string& id, std::uint32_t h);
  void bulk_dial_done(const std::string& id, std::uint32_t h, BulkSocket b, const std::string& why);
  void bulk_accepted(std::uint32_t h, const std::string& id, const std::shared_ptr<TcpLink>& link,
                     const abi::SessionKeys& instance_keys);
  void bulk_taken(std::uint32_t h, const std::string& id, BulkSocket b);

  // ---- gossamerctl (ctl.cpp)
  void accept_ctl();
  // `who`: SO_PEERCRED of the gossamerctl connection (run_as.hpp).
  void on_ctl_message(const std::shared_ptr<UnixLink>& link, const Requester& who, Type t, std::string_view body);
  StatusReply status() const;

  // ---- runs, origin side (runs.cpp)
  void ctl_run(const std::shared_ptr<UnixLink>& link, CtlRun req, const Requester& who);
  void on_prepared(const Prepared& p);
  void on_output(const Output& o);
  void on_exited(const Exited& e);
  void fail_run(Run& r, std::uint32_t host, int rank, int status, const std::string& cause);
  void maybe_finish(const std::string& id);
  void stop_everywhere(Run& r, const std::string& reason);

  void abort_before_start(const std::shared_ptr<Run>& r, int status, const std::string& message);
  void hash_async(const std::string& path, std::function<void(std::string sum, std::string error)> done);
  void hash_step(std::shared_ptr<FileHasher> h, std::shared_ptr<std::function<void(std::string, std::string)>> done);

  // ---- runs, every host (runs.cpp)
  // The checks that need no hashing: "" or why this host cannot run it.
  std::string precheck(const Prepare& p) const;
  void prepare_async(const Prepare& p, std::function<void(Prepared, std::string sha256)> done);
  void start_instance(Run& r);
  void read_stream(std::shared_ptr<Run> r, int which);
  void stop_instance(Run& r, const std::string& reason);
  void kill_group(Run& r);
  void instance_finished(Run& r);
  void send_to_origin(Run& r, Type t, const std::string& body);
  void send_to_host(std::uint32_t h, Type t, const std::string& body);
  std::uint32_t local_instances() const;
  void forget_run(const std::string& id);
  void forget_run(std::map<std::string, std::shared_ptr<Run>>::iterator it);

  // ---- the verbs transport's endpoints (verbs_mesh.cpp; verbs_relay.hpp)
  void verbs_start();
  void verbs_tick();
  void verbs_link_up(std::uint32_t h);
  void on_verbs_endpoints(std::uint32_t h, std::string_view body);

  // ---- children (children.cpp)
  void watch_children();
  void reap();
  void start_dataplane();

  // metrics (daemon_metrics.cpp, issue 6): what the exporter reports besides the dataplane's file
  bool start_metrics();
  void publish_view();

  asio::io_context& io_;
  config::Config cfg_;
  DaemonOptions opt_;
  std::string key_;  // the secret until start(), then the handshake key (proto.hpp)
  dataplane::RunTokens tokens_;  // the instances' GOSSAMER_RUN_TOKEN (dataplane/src/rack_keys.hpp)
  std::uint32_t self_;
  std::uint32_t hosts_;

  asio::ip::tcp::acceptor tcp_acceptor_;
  asio::local::stream_protocol::acceptor ctl_acceptor_;
  std::string ctl_path_;
  asio::signal_set sigchld_;
  asio::steady_timer heartbeat_timer_;
  std::vector<Peer> peers_;
  std::uint64_t heartbeat_seq_ = 0;
  // When the next heartbeat tick is due, and the sum of the ticks' lateness
  // (those more than an interval late): time this daemon did not run
  // (stopped, descheduled, its loop held up), which no peer is blamed for.
  Clock::time_point heartbeat_due_{};
  Clock::duration absent_{};
  std::size_t log_lines_dropped_ = 0;  // by the logger's queue (main.cpp), as last reported

  std::map<std::string, std::shared_ptr<Run>> runs_;
  // Authenticated bulk connections for runs not known here yet, oldest
  // first; at most kMaxPendingBulk per peer host, each for kPrepareTimeout.
  struct PendingBulk {
    std::uint64_t serial;
    std::uint32_t host;
    std::string run;
    BulkSocket socket;
  };
  std::deque<PendingBulk> pending_bulk_;
  std::uint64_t pending_serial_ = 0;
  // The last runs that ended here (forget_run), for late bulk connections.
  std::set<std::string> ended_;
  std::deque<std::string> ended_order_;

  pid_t dataplane_pid_ = 0;
  DataplaneState dataplane_state_ = DataplaneState::kNone;
  std::uint32_t dataplane_restarts_ = 0;
  Clock::time_point dataplane_started_{};
  std::chrono::milliseconds dataplane_backoff_{200};
  asio::steady_timer dataplane_timer_;

  std::unique_ptr<VerbsRelay> verbs_;  // null unless dataplane.transport is verbs
  std::unique_ptr<asio::steady_timer> verbs_timer_;
  std::string verbs_local_text_;       // the dataplane's .verbs file as last read

  std::shared_ptr<Exporter> exporter_;
  std::unique_ptr<prometheus::Exposer> exposer_;

  bool shutting_down_ = false;
  asio::steady_timer shutdown_timer_;
  std::uint64_t protocol_errors_ = 0;
};

}  // namespace gossamer::cp
