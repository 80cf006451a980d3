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
//   - NIC queue k (rx and tx): core k;
//   - sockets, the attach/detach lifecycle, the peers' applications, the
//     start barrier, the QP scheduler's decision, metrics: core 0.
// What crosses cores goes through rte_rings: received frames (mbuf
// pointers) to their connection's owner, records to a connection owned by
// another core, and control messages (peer restarts, detach drains). The few
// words several cores read are atomics: an application's slot bookkeeping,
// a connection's "usable" mirror, a thread's connection. Counters are
// per core and published to core 0 under a sequence lock.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gossamer/abi/metrics.hpp>
#include <gossamer/config.hpp>

#include "app.hpp"
#include "connection.hpp"
#include "wire.hpp"

struct rte_mbuf;
struct rte_mempool;
struct rte_ring;

namespace gossamer::dataplane {
inline constexpr std::uint16_t kBurst = 32;  // frames per rx or tx burst
}

namespace gossamer::dataplane {

struct Stats {
  std::array<std::uint64_t, std::size_t(wire::Drop::kCount)> drops{};
  std::uint64_t rx_frames = 0, tx_frames = 0, tx_failed = 0;
  std::uint64_t records_no_app = 0, records_rejected = 0;
  std::uint64_t apps_attached = 0, apps_refused = 0, apps_detached = 0, apps_lost = 0;
  std::uint64_t busy_cycles = 0, idle_cycles = 0;
  std::uint64_t injected_loss = 0, injected_duplicates = 0, injected_reorders = 0;
  std::uint64_t thread_moves = 0;  // thread scheduler reassignments
  // Per core (summed for the host):
  std::uint64_t frames_processed = 0;  // frames of connections this core owns
  std::uint64_t doorbells = 0;         // doorbell entries served
  std::uint64_t steered = 0;           // frames from this core's queue handed to their owner
  std::uint64_t steer_dropped = 0;     // ... dropped: the owner's ring was full
  std::uint64_t handoffs = 0;          // records handed to another core's connection
};
static_assert(sizeof(Stats) % 8 == 0, "published word by word");

// Posted from one core to another (rte_ring of pointers; the receiver
// deletes it).
struct CoreMsg {
  enum class Kind : std::uint8_t {
    kRecord,   // rec + bytes: enqueue on (peer, conn)
    kRecords,  // bytes as Connection::take_pending gave them: enqueue on (peer, 0)
    kRestart,  // peer restarted as `boot`: reset our connections to it
    kDrain,    // app detaches: serve its doorbells you own, then answer kDrained
    kDrained,  // to core 0
  };
  Kind kind;
  std::uint32_t peer = 0, conn = 0;
  std::uint32_t boot = 0;  // kRestart: the new incarnation; kRecord(s): Peer::boot_seen when posted
  App* app = nullptr;
  wire::WireRecord rec{};
  std::vector<std::uint8_t> bytes;
};

// A connection's counters as the metrics contract has them (metrics.cpp).
void fill_conn(abi::ConnCounters& out, const Connection& c);

class Dataplane {
 public:
  explicit Dataplane(const config::Config& cfg);
  ~Dataplane();
  // EAL, port, socket. Returns "" or an error.
  std::string start(const char* argv0);
  // Runs core 0 here and cores 1.. on their own threads until `stop`.
  void run(const std::atomic<bool>& stop);

 private:
  // Fault injection for kernels without netem (rack in a box): a file next
  // to the socket with a netem-style spec, e.g. "loss 2% reorder 10%
  // duplicate 2%", applied to received frames (by the core whose queue
  // received them).
  struct Faults {
    double loss = 0, duplicate = 0, reorder = 0;
    bool any() const { return loss > 0 || duplicate > 0 || reorder > 0; }
  };
  using AppList = std::vector<App*>;

  struct Core {
    std::uint32_t index = 0;          // also its NIC queue (rx and tx)
    rte_ring* frames = nullptr;       // mbufs steered to this core
    rte_ring* msgs = nullptr;         // CoreMsg* posted to this core
    std::vector<std::deque<CoreMsg*>> backlog;  // per destination core: its ring was full
    bool backlogged = false;
    int epoll_fd = -1;                // what a sleep waits for
    int wake_fd = -1;                 // eventfd: something was posted to us
    std::atomic<bool> sleeping{false};
    std::atomic<std::uint64_t> seen_gen{0};  // the application list generation in use
    const AppList* apps = nullptr;    // this iteration's application list
    std::vector<rte_mbuf*> tx_batch;
    std::vector<std::uint8_t> scratch, moved;
    std::vector<std::array<std::uint8_t, 6>> macs;  // per peer, as this core learned it
    std::vector<bool> mac_known;
    std::vector<std::vector<std::uint64_t>> resets_seen;  // [peer][conn], own connections
    Stats stats;
    Faults faults;
    std::string faults_text;
    std::uint64_t rng = 0x9e3779b97f4a7c15ull;
    rte_mbuf* held = nullptr;         // a frame held back to reorder it
    std::uint64_t held_at = 0;
    std::uint64_t last_work = 0, last_schedule = 0, last_publish = 0, last_faults = 0;
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
    std::atomic<std::uint32_t> boot_seen{0};
    std::atomic<std::uint64_t> utilization{0};   // summed by owners, taken by core 0
    std::atomic<bool> sent_data{false};          // ... and whether it sent data at all
    // QP scheduler: its active connections to us in the current phase
    // (activation_epoch_); written by core 0 only once every core applied
    // the previous phase.
    std::atomic<std::uint32_t> active{UINT32_MAX};
    // Core 0 only:
    std::map<std::uint64_t, RemoteApp> apps;  // by run key
    std::uint32_t intervals_heard = 0;        // scheduler intervals since we first heard from it
    SmoothedUtilization load;                 // its U_i over the last intervals (QP scheduler)
    std::uint32_t handled_boot = 0;           // the incarnation we last re-announced to
  };
  // An application removed from the list, freed once every core moved on.
  struct Retired {
    std::uint64_t gen;
    std::unique_ptr<App> app;
    std::unique_ptr<const AppList> list;
  };

  // ---- core 0: the unix socket and the applications' lifecycle
  void open_socket();
  void accept_apps();
  void app_message(App& a);
  void attach(int fd);
  void refuse(int fd, const std::string& why);
  void drop_app(std::size_t i, bool announce, const char* why);
  void sweep_apps();
  void publish_apps();
  void free_retired(bool all);
  void release(App& a);
  void send_msg(App& a, std::uint32_t type, std::uint32_t host, const std::string& text);
  void check_starts();
  void detached(App& a);
  void peer_restarted_control(std::uint32_t peer, std::uint32_t boot);

  // ---- every core: applications' memory
  bool poll_doorbells(Core& k);
  bool drain_doorbells(Core& k, App& a);
  void doorbell(Core& k, App& a, std::uint32_t local_i, std::uint32_t entry);
  bool any_doorbell(const Core& k);
  App* app_by_key(const Core& k, std::uint64_t key);

  // ---- every core: the wire
  bool owns_conn(const Core& k, std::uint32_t conn) const { return conn % ncores_ == k.index; }
  std::uint32_t conn_owner(std::uint32_t conn) const { return conn % ncores_; }
  bool poll_rx(Core& k);
  void dispatch(Core& k, rte_mbuf* m, std::uint64_t now);
  bool poll_steered(Core& k);
  void process_frame(Core& k, const std::uint8_t* data, std::size_t len, std::uint64_t now);
  void peer_restarted(Core& k, std::uint32_t peer, std::uint32_t boot);
  void deliver(Core& k, std::uint32_t src_host, const wire::RecordView& v);
  void deliver_request(Core& k, App& a, std::uint32_t src, const wire::RecordView& v);
  void deliver_response(Core& k, App& a, std::uint32_t src, const wire::RecordView& v);
  void announce(std::uint32_t peer, std::uint8_t kind, const App& a);
  void enqueue(Core& k, std::uint32_t peer, std::uint32_t conn, const wire::WireRecord& w, const std::uint8_t* payload);
  bool pump(Core& k);
  void transmit(Core& k, std::uint32_t peer, const std::uint8_t* payload, std::size_t len);
  void flush_tx(Core& k);
  std::uint32_t host_of(std::uint32_t total, std::uint32_t g) const;

  // ---- cores.cpp: between cores
  std::string make_cores();
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
  void core_loop(Core& k, const std::atomic<bool>& stop);

  void read_faults(Core& k);
  void write_stats();
  // metrics.cpp: <socket>.metrics (gossamer/abi/metrics.hpp)
  void open_metrics();
  void write_metrics();
  void close_metrics();
  void sleep_until_work(Core& k, std::uint64_t now);
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
  std::string socket_path_;
  wire::Endpoint self_ep_{};
  std::vector<wire::Endpoint> endpoints_;
  std::array<std::uint8_t, 6> mac_{};
  std::uint16_t port_id_ = 0;
  rte_mempool* pool_ = nullptr;
  bool port_started_ = false;
  bool eal_ready_ = false;
  int listen_fd_ = -1;
  int icmp_guard_fd_ = -1;
  std::uint32_t boot_ = 0;
  std::uint64_t tsc_hz_ = 0;
  std::vector<Peer> peers_;
  std::vector<std::unique_ptr<Core>> cores_;
  // Core 0 owns apps_; the other cores read the published list.
  std::vector<std::unique_ptr<App>> apps_;
  std::atomic<const AppList*> app_list_{nullptr};
  std::atomic<std::uint64_t> app_gen_{0};
  std::vector<Retired> retired_;
  std::uint64_t last_stats_write_ = 0;
  std::string metrics_path_;
  std::uint8_t* metrics_ = nullptr;
  abi::MetricsLayout metrics_layout_{};
  std::uint64_t last_metrics_write_ = 0;
  std::uint32_t schedule_rotation_ = 0;
  // The QP scheduler's decision reaches the cores in phases (flock.cpp):
  // core 0 writes each peer's Peer::active, then a new epoch; each core
  // applies it and stores the epoch in Core::activation_seen.
  std::atomic<std::uint64_t> activation_epoch_{0};
  std::vector<std::uint32_t> activation_goal_;  // core 0: the grants still to come, per sender
};

}  // namespace gossamer::dataplane
