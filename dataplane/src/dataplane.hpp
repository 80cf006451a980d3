// The dataplane process: polling cores that move slots between attached
// applications and the wire (DESIGN.md §3; "Polling cores" in
// dataplane/README.md).
//
// Core 0 is the process's main thread; cores 1..N-1 are threads registered
// with DPDK. Every piece of state has one owner:
//   - connection c of every peer: core c % N (so core 0 owns connection 0,
//     which carries the announces, and is always active);
//   - local thread i of an application (its doorbell ring, its flows): core
//     i % N;
//   - port queue k (rx and tx): core k;
//   - sockets, the attach/detach lifecycle, the peers' applications, the
//     start barrier, the QP scheduler's decision, metrics: core 0.
// What crosses cores goes through rings (ring.hpp): received frames (port
// handles) to their connection's owner, records to a connection owned by
// another core, and control messages (peer restarts, detach drains). The few
// words several cores read are atomics: an application's slot bookkeeping,
// a connection's "usable" mirror, a thread's connection. Counters are
// per core and published to core 0 under a sequence lock.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gossamer/abi/metrics.hpp>
#include <gossamer/config.hpp>

#include "app.hpp"
#include "auth.hpp"
#include "connection.hpp"
#include "cpus.hpp"
#include "file_writer.hpp"
#include "incarnation.hpp"
#include "port.hpp"
#include "port_faults.hpp"
#include "port_multi.hpp"
#include "ring.hpp"
#include "transport.hpp"
#include "verbs_exchange.hpp"
#include "wire.hpp"

namespace gossamer::dataplane {
inline constexpr std::uint16_t kBurst = 32;  // frames per rx or tx burst
// What woke a sleeping core (epoll_event::data of its sleep set).
inline constexpr std::uint64_t kTagKick = 0;     // an application's eventfd
inline constexpr std::uint64_t kTagWake = 1;     // the core's own eventfd: another core posted
inline constexpr std::uint64_t kTagControl = 2;  // core 0: a socket is ready (control.cpp)
inline constexpr std::uint64_t kTagRxWake = 3;   // the port's wake descriptor: a frame arrived (Port::rx_wake_fd)
}

namespace gossamer::dataplane {

// One core's counters (summed over cores for the host): the core rows and
// the host rows counted here of gossamer/abi/counters.hpp, and the drops.
struct Stats {
  std::array<std::uint64_t, std::size_t(wire::Drop::kCount)> drops{};
#define GOSSAMER_STATS_HOST(field, source, ...) GOSSAMER_IF_OWN(source, std::uint64_t field = 0;)
#define GOSSAMER_STATS_CORE(field, ...) std::uint64_t field = 0;
  GOSSAMER_HOST_COUNTERS(GOSSAMER_STATS_HOST)
  GOSSAMER_CORE_COUNTERS(GOSSAMER_STATS_CORE)
#undef GOSSAMER_STATS_HOST
#undef GOSSAMER_STATS_CORE
};
static_assert(sizeof(Stats) % 8 == 0, "published word by word");

// Posted from one core to another (MpscRing of pointers; the receiver
// deletes it).
struct CoreMsg {
  enum class Kind : std::uint8_t {
    kRecord,   // rec + bytes: enqueue on (peer, conn)
    kRecords,  // bytes as Connection::take_pending gave them: enqueue on (peer, 0)
    kRestart,  // peer restarted as `boot`: reset our connections to it
    kDrain,    // app detaches: serve its doorbells you own, then answer kDrained
    kDrained,  // to core 0
    kLinkFailed,  // to core 0: a link to `peer` lost `boot` records in flight; bytes: why
    kVerbsRemote, // from core 0: a peer's QP endpoint for (peer, conn); bytes: a verbs::ExchangeEntry
  };
  Kind kind;
  std::uint32_t peer = 0, conn = 0;
  std::uint64_t boot = 0;  // kRestart: the new incarnation; kRecord(s): Peer::boot_seen when posted
  App* app = nullptr;
  wire::WireRecord rec{};
  std::vector<std::uint8_t> bytes;
};

// A connection's counters as the metrics contract has them (metrics.cpp).
void fill_conn(abi::ConnCounters& out, const Connection& c);

// Opens the ports the dataplane runs on, with `queues` queues each (one per
// polling core): one, or one per entry of dataplane.ports, in its order.
// Returns "" or an error.
using PortOpener = std::function<std::string(std::uint16_t queues, std::vector<std::unique_ptr<Port>>* out)>;
// For each host of the rack, the port (index in dataplane.ports) it is
// reached through: 0 for every peer without dataplane.ports, and
// MultiPort::kNoLink for this host (MultiPort::make's table).
std::vector<std::uint16_t> port_of_peers(const config::Config& cfg);

// The verbs calls for dataplane.transport: verbs (verbs_ibv.cpp's make_ibv,
// or a test's fake); null: this build has none.
using VerbsFactory = std::function<std::unique_ptr<verbs::Verbs>()>;

class UdpTransport;

class Dataplane {
 public:
  explicit Dataplane(const config::Config& cfg);
  ~Dataplane();
  // The start-up steps (start.cpp): incarnation, cpus, port, keys, peers,
  // cores, socket, metrics. Returns "" or an error naming the step.
  std::string start(const PortOpener& open_port);
  // Runs core 0 here and cores 1.. on their own threads until `stop`, each
  // on its CPUs (cpu_plan()).
  void run(const std::atomic<bool>& stop);
  // Where the polling cores run; made from the affinity mask the process
  // had when the Dataplane was constructed (before the port's EAL starts).
  const CpuPlan& cpu_plan() const { return cpu_plan_; }
  // Before start(): where the verbs calls come from (dataplane.transport:
  // verbs; main.cpp: rdma-core, a test: the recording fake).
  void set_verbs(VerbsFactory f) { verbs_factory_ = std::move(f); }
  // Exchanges open with `peer` (Peer::open), as any core last left it:
  // 0 once every request either way has had its response.
  std::int64_t exchanges_open(std::uint32_t peer) const { return peers_[peer].exchanges(); }

 private:
  friend class UdpTransport;  // the UDP transport works on the connections and port of its core
  using AppList = std::vector<App*>;
  struct Core;
  // What a core's transport delivers to (deliver.cpp).
  struct CoreSink final : DeliverySink {
    Dataplane& dp;
    Core& k;
    CoreSink(Dataplane& d, Core& c) : dp(d), k(c) {}
    void deliver(std::uint32_t peer, const wire::RecordView& v) override;  // timed: stage_deliver_cycles
    void peer_restarted(std::uint32_t peer, std::uint64_t boot) override { dp.peer_restarted(k, peer, boot); }
    void link_failed(std::uint32_t peer, std::uint64_t records, const std::string& why) override {
      dp.link_failed(k, peer, records, why);
    }
  };
  // A periodic job of a core's loop (loop.cpp).
  struct Periodic {
    const char* name;
    std::uint64_t period;  // TSC ticks
    std::uint64_t last;
    void (Dataplane::*fn)(Core&);
  };

  struct Core {
    std::uint32_t index = 0;          // also its port queue (rx and tx)
    std::unique_ptr<Transport> transport;  // this core's connections (UdpTransport)
    std::unique_ptr<CoreSink> sink;
    std::unique_ptr<MpscRing> frames; // frame handles steered to this core
    std::unique_ptr<MpscRing> msgs;   // CoreMsg* posted to this core
    std::vector<std::deque<CoreMsg*>> backlog;  // per destination core: its ring was full
    bool backlogged = false;
    int epoll_fd = -1;                // what a sleep waits for
    int wake_fd = -1;                 // eventfd: something was posted to us
    std::atomic<bool> sleeping{false};
    std::atomic<std::uint64_t> seen_gen{0};  // the application list generation in use
    const AppList* apps = nullptr;    // this iteration's application list
    std::vector<Frame> tx_batch;
    std::vector<std::uint8_t> scratch, moved;
    std::vector<std::array<std::uint8_t, 6>> macs;  // per peer, as this core learned it
    std::vector<bool> mac_known;
    std::vector<std::vector<std::uint64_t>> resets_seen;  // [peer][conn], own connections
    Stats stats;
    std::uint64_t last_work = 0;
    std::uint64_t last_traffic = 0;   // ... that moved frames of ours, records or doorbells (loop.cpp)
    bool rx_wakeable = false;         // frames wake its sleep (every port's rx_wake_fd is in epoll_fd)
    bool rx_armed = false;            // ... and it is armed: a frame ends the next sleep (long once the host is quiet)
    std::uint64_t any_stored = 0;     // when it last stored Dataplane::last_work_any_
    std::vector<Periodic> periodic;   // this core's jobs (loop.cpp)
    // Until then (TSC), the jobs wait while an exchange is open: set on
    // waking from a sleep, so that the first request after an idle period
    // and its response pass before the jobs that fell due in the sleep.
    std::uint64_t jobs_wait_until = 0;
    bool jobs_looked = true;          // run_periodic was called since the last wait began
    // Published for core 0 (sequence lock): Stats, then ConnCounters of
    // the connections this core owns.
    std::atomic<std::uint64_t> pub_seq{0};
    Stats pub_stats;
    std::vector<abi::ConnCounters> pub_conns;  // [peer * conns + conn]
    // The QP scheduler's decision as this core applies it to its own
    // connections (flock.cpp): per peer, its active connections to us
    // (UINT32_MAX: none yet), and the phase (Dataplane::activation_epoch_)
    // it applied, which acknowledges that phase to core 0.
    std::vector<std::uint32_t> active_applied;
    std::atomic<std::uint64_t> activation_seen{0};
    std::thread thread;
  };
  struct RemoteApp {
    wire::AttachAnnounce a;
  };
  struct Peer {
    wire::Endpoint ep;
    std::array<std::uint8_t, 6> mac{};
    bool mac_known = false;
    std::vector<std::unique_ptr<Connection>> conns;
    // Written by each connection's owner, read by any core.
    std::unique_ptr<std::atomic<bool>[]> usable;
    // Its MAC once any core learned it from a frame (bit 63: known), for
    // the cores that have not heard from it themselves.
    std::atomic<std::uint64_t> learned_mac{0};
    // The newest incarnation any core saw: records posted between cores
    // carry it, and are dropped if the peer restarted before they landed.
    std::atomic<std::uint64_t> boot_seen{0};
    std::atomic<std::uint64_t> utilization{0};   // summed by owners, taken by core 0
    std::atomic<bool> sent_data{false};          // ... and whether it sent data at all
    // Exchanges with it that are open here (coalescing, Connection::set_batching):
    // pairs of threads with a request slot we sent that is not answered yet,
    // and pairs with a request slot it sent that we have not answered (each
    // pair once, however many of its batches are out:
    // App::client_out, trustee_out). More than the requests still queued:
    // more slots are coming, a short frame may wait for them. The count is
    // open's low 32 bits; the high 32 count the peer's restarts (its
    // epoch): a restart forgets every exchange of its previous life
    // (peer_restarted), and a pair closes only what it opened in the
    // epoch it opened it in (App::client_epoch, trustee_epoch), so that
    // an exchange of the previous life that ends later (an answer our
    // trustee still gives, an application leaving) cannot close one of
    // the new life's. Never below 0.
    std::atomic<std::uint64_t> open{0};
    std::int64_t exchanges() const { return std::uint32_t(open.load(std::memory_order_relaxed)); }
    // QP scheduler: its active connections to us in the current phase
    // (activation_epoch_); written by core 0 only once every core applied
    // the previous phase.
    std::atomic<std::uint32_t> active{UINT32_MAX};
    // Core 0 only:
    std::map<std::uint64_t, RemoteApp> apps;  // by run key
    std::uint32_t intervals_heard = 0;        // scheduler intervals since we first heard from it
    SmoothedUtilization load;                 // its U_i over the last intervals (QP scheduler)
    std::uint64_t handled_boot = 0;           // the incarnation we last re-announced to
  };
  // An application removed from the list, freed once every core moved on.
  struct Retired {
    std::uint64_t gen;
    std::unique_ptr<App> app;
    std::unique_ptr<const AppList> list;
  };

  // ---- start.cpp: start-up steps, in order
  std::string take_incarnation();
  std::string open_port(const PortOpener& open);
  std::string load_keys();
  std::string make_peers();
  std::string make_cores();  // cores.cpp
  // ---- transport: verbs (verbs_wiring.cpp)
  std::string open_verbs();
  std::string make_verbs_transport(Core& k);
  void verbs_publish(std::uint32_t peer, std::uint32_t conn, const verbs::Endpoint& e);
  void job_verbs(Core& k);
  void verbs_remote(Core& k, const CoreMsg& m);
  void publish_verbs_totals(Core& k);
  std::string open_socket();
  void open_metrics();  // metrics.cpp; throws

  // ---- control.cpp (core 0): the unix socket and the applications' lifecycle.
  // Sockets are watched through control_epoll_fd_, itself in core 0's sleep
  // set: a loop iteration reads a socket only when epoll said it is ready.
  bool poll_control(Core& k0);
  void control_event(std::uint64_t tag);
  void accept_apps();
  void attach(int fd);
  std::string check_owner(const RunClaim& claim, std::uint32_t uid, std::uint32_t* owner) const;
  void app_message(App& a);
  // Answers Refused with `why` and closes fd; counted as apps_refused, or as
  // apps_denied when the attacher may not join the run it names.
  void refuse(int fd, const std::string& why, bool denied = false);
  void expire_attaches(std::uint64_t now);
  void drop_app(std::size_t i, bool announce, const char* why);
  void sweep_apps();
  void publish_apps();
  void free_retired(bool all);
  void release(App& a);
  void send_msg(App& a, std::uint32_t type, std::uint32_t host, const std::string& text);
  void detached(App& a);
  // ---- peers.cpp (core 0): the peers' applications, the start barrier
  void check_starts();
  void on_announce(std::uint32_t src, const wire::WireRecord& r, const wire::AttachAnnounce& an);
  void announce(std::uint32_t peer, std::uint8_t kind, const App& a);
  void peer_restarted_control(std::uint32_t peer, std::uint64_t boot);
  // A link to `peer` failed with records in flight (transport.hpp
  // link_failed): core 0 fails every started run that has an instance there.
  void link_failed(Core& k, std::uint32_t peer, std::uint64_t records, const std::string& why);
  App* app_by_key(const Core& k, std::uint64_t key);
  std::uint32_t host_of(std::uint32_t total, std::uint32_t g) const;

  // ---- doorbells.cpp (every core): application rings -> connections
  bool poll_doorbells(Core& k);
  bool drain_doorbells(Core& k, App& a);
  void doorbell(Core& k, App& a, std::uint32_t local_i, std::uint32_t entry);
  bool any_doorbell(const Core& k);
  void enqueue(Core& k, std::uint32_t peer, std::uint32_t conn, const wire::WireRecord& w, const std::uint8_t* payload);

  // ---- deliver.cpp (every core): records the transport received -> slots
  bool owns_conn(const Core& k, std::uint32_t conn) const { return conn % ncores_ == k.index; }
  std::uint32_t conn_owner(std::uint32_t conn) const { return conn % ncores_; }
  void deliver(Core& k, std::uint32_t src_host, const wire::RecordView& v);
  void deliver_request(Core& k, App& a, std::uint32_t src, const wire::RecordView& v);
  void deliver_response(Core& k, App& a, std::uint32_t src, const wire::RecordView& v);
  // A pair's first batch in flight with `host` opens an exchange, its last
  // answered closes it (App::batch_out, batch_back); an application that
  // leaves closes those it still had open (release()). Opening returns
  // the peer's epoch the exchange counts in (Peer::open); closing it in
  // any other does nothing.
  std::uint32_t open_exchange(std::uint32_t host) {
    return std::uint32_t(peers_[host].open.fetch_add(1, std::memory_order_relaxed) >> 32);
  }
  void close_exchange(std::uint32_t host, std::uint32_t epoch);
  void close_exchanges(App& a);
  void peer_restarted(Core& k, std::uint32_t peer, std::uint64_t boot);
  void control_restart(std::uint32_t peer, std::uint64_t boot);

  // ---- cores.cpp: between cores
  void post(Core& from, std::uint32_t to, CoreMsg* m);
  // Records for (m->peer, m->conn) to that connection's core, stamped with
  // the peer's incarnation (handle() drops them if it changed).
  void hand_over(Core& from, CoreMsg* m);
  // Wakes `k` if it sleeps, after something was put in its rings.
  static void wake(Core& k);
  void flush_backlog(Core& from);
  bool poll_msgs(Core& k);
  void handle(Core& k, CoreMsg& m);
  void refresh_apps(Core& k);
  void publish(Core& k);
  // Core k's published counters (sequence lock); false if it kept changing.
  bool read_published(const Core& k, Stats* stats, std::vector<abi::ConnCounters>* conns);
  // Every core's, summed (stats) and merged (connections).
  void collect(Stats* total, std::vector<Stats>* per_core, std::vector<abi::ConnCounters>* conns);

  // ---- loop.cpp: the loop and its periodic jobs
  void place(Core& k);
  void core_loop(Core& k, const std::atomic<bool>& stop);
  void run_periodic(Core& k, std::uint64_t now);
  bool exchange_open() const;  // with any peer (Peer::open)
  void sleep_until_work(Core& k, std::uint64_t now);
  void job_control(Core& k);
  void job_faults(Core& k);
  void job_port(Core& k);
  void job_metrics(Core& k);
  void job_stats(Core& k);

  // ---- metrics.cpp: <socket>.metrics (gossamer/abi/metrics.hpp) and <socket>.stats
  void write_stats();
  void write_metrics();
  void close_metrics();

  // ---- flock.cpp
  // FLOCK's schedulers (issue 7), every connections.scheduler_interval_us:
  // which of each peer's connections to us are active (core 0 decides,
  // every core applies it to its own), which of its connections each local
  // thread uses (each core over its threads and its connections), and
  // moving records off connections that became unusable.
  void schedule(Core& k);
  // Core 0: a new phase of the QP scheduler's decision when every core
  // applied the last one (revocations first, then grants).
  void decide_active();
  // Every core: the current phase on its own connections, then acknowledged.
  void apply_activation(Core& k);
  // Scheduler intervals over which both schedulers weigh load (flock.cpp).
  std::uint32_t load_window() const;
  std::uint32_t route(App& a, std::uint32_t host, std::uint32_t local_i);

  config::Config cfg_;
  std::uint32_t self_;
  std::uint32_t hosts_;
  std::uint32_t conns_per_host_;
  std::uint32_t ncores_;
  CpuPlan cpu_plan_;
  std::string socket_path_;
  wire::Endpoint self_ep_{};
  std::vector<wire::Endpoint> endpoints_;
  std::array<std::uint8_t, 6> mac_{};
  // The opened ports, each behind its fault injector (faults_), as one.
  std::unique_ptr<MultiPort> port_;
  std::vector<FaultPort*> faults_;   // [port]: owned by port_
  FrameAuth auth_;                   // frame keys (dataplane.authenticate)
  RunTokens tokens_;                 // checks gossamerd's run tokens (app.hpp claim_run)
  int icmp_guard_fd_ = -1;
  Incarnation incarnation_;          // holds the state file's lock while we run
  std::uint64_t boot_ = 0;           // our incarnation (incarnation.hpp), from the start-up step
  std::uint64_t tsc_hz_ = 0;
  std::vector<Peer> peers_;
  std::vector<std::unique_ptr<Core>> cores_;
  // Core 0 owns everything below.
  int listen_fd_ = -1;
  int control_epoll_fd_ = -1;        // listening socket, attaching sockets, applications' sockets
  bool control_ready_ = false;       // control_epoll_fd_ may have events
  bool slept_ = false;               // core 0 slept since the last control job
  // When any core last found work (TSC; stored at most once a millisecond
  // per core): the whole host has been quiet for a while before a core
  // sleeps long (loop.cpp), since a core with nothing to do may be waiting
  // for another's periodic job (the QP scheduler's decision on core 0).
  std::atomic<std::uint64_t> last_work_any_{0};
  struct Attaching {
    int fd;
    std::uint64_t deadline;  // TSC: refused if its message has not come by then
  };
  std::vector<Attaching> attaching_;
  // Posted by core 0's rx stage to its control stage, in arrival order:
  // peers' announces (boot 0) and restarts (boot: the new incarnation).
  struct ControlEvent {
    std::uint32_t peer;
    std::uint64_t boot;
    wire::WireRecord rec;
    wire::AttachAnnounce an;
  };
  std::deque<ControlEvent> control_events_;
  std::string faults_text_;
  std::vector<std::unique_ptr<App>> apps_;  // the other cores read the published list
  std::atomic<const AppList*> app_list_{nullptr};
  std::atomic<std::uint64_t> app_gen_{0};
  std::vector<Retired> retired_;
  std::string metrics_path_;
  FileWriter files_;                 // writes <socket>.stats off the polling cores (run() starts it)
  std::uint8_t* metrics_ = nullptr;
  abi::MetricsLayout metrics_layout_{};
  std::uint32_t schedule_rotation_ = 0;
  // The QP scheduler's decision reaches the cores in phases (flock.cpp):
  // core 0 writes each peer's Peer::active, then a new epoch; each core
  // applies it and stores the epoch in Core::activation_seen.
  std::atomic<std::uint64_t> activation_epoch_{0};
  std::vector<std::uint32_t> activation_goal_;  // core 0: the grants still to come, per sender

  // transport: verbs (verbs_wiring.cpp)
  bool verbs_mode_ = false;
  VerbsFactory verbs_factory_;
  std::unique_ptr<verbs::Verbs> verbs_;
  verbs::PortInfo verbs_port_{};
  std::mutex verbs_mu_;                         // the cores publish new QPs; core 0 writes the file
  std::vector<verbs::Endpoint> verbs_local_;    // [peer * conns + conn]; qpn 0: none yet
  bool verbs_dirty_ = false;
  std::string verbs_peers_text_;                // <socket>.verbs-peers as last read
  std::vector<verbs::ExchangeEntry> verbs_applied_;  // [peer * conns + conn]: handed to the owner
};

}  // namespace gossamer::dataplane
