// The dataplane process: one polling loop that moves slots between attached
// applications and the wire.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gossamer/abi/metrics.hpp>
#include <gossamer/config.hpp>

#include "app.hpp"
#include "connection.hpp"
#include "wire.hpp"

struct rte_mbuf;
struct rte_mempool;

namespace gossamer::dataplane {

struct Stats {
  std::array<std::uint64_t, std::size_t(wire::Drop::kCount)> drops{};
  std::uint64_t rx_frames = 0, tx_frames = 0, tx_failed = 0;
  std::uint64_t records_no_app = 0, records_rejected = 0;
  std::uint64_t apps_attached = 0, apps_refused = 0, apps_detached = 0, apps_lost = 0;
  std::uint64_t busy_cycles = 0, idle_cycles = 0;
  std::uint64_t injected_loss = 0, injected_duplicates = 0, injected_reorders = 0;
  std::uint64_t thread_moves = 0;  // thread scheduler reassignments
};

class Dataplane {
 public:
  explicit Dataplane(const config::Config& cfg);
  ~Dataplane();
  // EAL, port, socket. Returns "" or an error.
  std::string start(const char* argv0);
  void run(const std::atomic<bool>& stop);

 private:
  struct RemoteApp {
    wire::AttachAnnounce a;
  };
  struct Peer {
    wire::Endpoint ep;
    std::array<std::uint8_t, 6> mac{};
    bool mac_known = false;
    std::vector<std::unique_ptr<Connection>> conns;
    std::vector<std::uint64_t> resets_seen;
    std::map<std::uint64_t, RemoteApp> apps;  // by run key
    std::uint32_t intervals_heard = 0;        // scheduler intervals since we first heard from it
    std::vector<std::uint8_t> moved;          // scratch for records moving between connections
  };

  // the unix socket
  void open_socket();
  void accept_apps();
  void app_message(App& a);
  void attach(int fd);
  void refuse(int fd, const std::string& why);
  void drop_app(std::size_t i, bool announce, const char* why);
  void send_msg(App& a, std::uint32_t type, std::uint32_t host, const std::string& text);
  void check_starts();

  // applications' memory
  bool poll_doorbells();
  void doorbell(App& a, std::uint32_t local_i, std::uint32_t entry);
  bool any_doorbell();
  App* app_by_key(std::uint64_t key);

  // the wire
  bool poll_rx();
  void deliver(std::uint32_t src_host, const wire::RecordView& v);
  void deliver_request(App& a, std::uint32_t src, const wire::RecordView& v);
  void deliver_response(App& a, std::uint32_t src, const wire::RecordView& v);
  void announce(std::uint32_t peer, std::uint8_t kind, const App& a);
  bool pump_all();
  void transmit(std::uint32_t peer, const std::uint8_t* payload, std::size_t len);
  void flush_tx();
  std::uint32_t host_of(std::uint32_t total, std::uint32_t g) const;

  // Fault injection for kernels without netem (rack in a box): a file next
  // to the socket with a netem-style spec, e.g. "loss 2% reorder 10%
  // duplicate 2%", applied to received frames.
  struct Faults {
    double loss = 0, duplicate = 0, reorder = 0;
    bool any() const { return loss > 0 || duplicate > 0 || reorder > 0; }
  };
  void read_faults();
  void process_frame(const std::uint8_t* data, std::size_t len, std::uint64_t now);
  void write_stats();
  // metrics.cpp: <socket>.metrics (gossamer/abi/metrics.hpp)
  void open_metrics();
  void write_metrics();
  void close_metrics();
  void sleep_until_work(std::uint64_t now);
  // FLOCK's schedulers (issue 7), every connections.scheduler_interval_us:
  // which of each peer's connections to us are active, which of ours each
  // local thread uses, and moving records off connections that became
  // unusable.
  void schedule();
  std::uint32_t route(App& a, std::uint32_t host, std::uint32_t local_i);

  config::Config cfg_;
  std::uint32_t self_;
  std::uint32_t hosts_;
  std::uint32_t conns_per_host_;
  std::string socket_path_;
  wire::Endpoint self_ep_{};
  std::vector<wire::Endpoint> endpoints_;
  std::array<std::uint8_t, 6> mac_{};
  std::uint16_t port_id_ = 0;
  rte_mempool* pool_ = nullptr;
  std::vector<rte_mbuf*> tx_batch_;
  bool port_started_ = false;
  bool eal_ready_ = false;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int icmp_guard_fd_ = -1;
  std::uint32_t boot_ = 0;
  std::uint64_t tsc_hz_ = 0;
  std::vector<Peer> peers_;
  std::vector<std::unique_ptr<App>> apps_;
  std::vector<std::uint8_t> scratch_;
  Stats stats_;
  std::uint64_t last_stats_write_ = 0;
  std::string metrics_path_;
  std::uint8_t* metrics_ = nullptr;
  abi::MetricsLayout metrics_layout_{};
  std::uint64_t last_metrics_write_ = 0;
  std::uint64_t last_work_ = 0;  // tsc of the last loop that found work
  std::uint64_t last_schedule_ = 0;
  std::uint32_t schedule_rotation_ = 0;
  Faults faults_;
  std::string faults_text_;
  std::uint64_t faults_rng_ = 0x9e3779b97f4a7c15ull;
  std::vector<std::uint8_t> held_;   // a frame held back to reorder it
  std::uint64_t held_at_ = 0;
};

}  // namespace gossamer::dataplane
