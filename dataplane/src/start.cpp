// Start-up and shut-down of the dataplane (dataplane.hpp): an ordered list
// of named steps (Caladan's init table), each with a clear error when it
// fails.
#include "dataplane.hpp"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "clock.hpp"

namespace gossamer::dataplane {

namespace {

std::uint32_t parse_ip(const std::string& s) {
  in_addr a{};
  ::inet_pton(AF_INET, s.c_str(), &a);
  return a.s_addr;
}

}  // namespace

Dataplane::Dataplane(const config::Config& cfg)
    : cfg_(cfg),
      self_(cfg.host.index),
      hosts_(std::uint32_t(cfg.rack.hosts.size())),
      conns_per_host_(std::max<std::uint32_t>(1, std::min<std::uint32_t>(cfg.connections.per_remote_host, 255))),
      ncores_(std::max<std::uint32_t>(1, cfg.dataplane.cores)),
      cpu_plan_(cfg.dataplane.cpus, cfg.dataplane.eal_args) {
  socket_path_ = cfg.dataplane_socket();
  for (const auto& h : cfg.rack.hosts) endpoints_.push_back({parse_ip(h.data.ip), h.data.port});
  self_ep_ = endpoints_[self_];
}

Dataplane::~Dataplane() {
  // run() has joined the other cores: nothing reads the list any more.
  while (!apps_.empty()) drop_app(apps_.size() - 1, false, "dataplane shutting down");
  free_retired(true);
  delete app_list_.load();
  close_metrics();
  for (const Attaching& p : attaching_) ::close(p.fd);
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(socket_path_.c_str());
  }
  if (control_epoll_fd_ >= 0) ::close(control_epoll_fd_);
  for (auto& k : cores_) {
    if (k->epoll_fd >= 0) ::close(k->epoll_fd);
    if (k->wake_fd >= 0) ::close(k->wake_fd);
    for (auto& q : k->backlog)
      for (CoreMsg* m : q) delete m;
    void* p;
    if (k->msgs)
      while (k->msgs->pop_burst(&p, 1)) delete static_cast<CoreMsg*>(p);
    if (k->frames)
      while (k->frames->pop_burst(&p, 1)) port_->release(port_->frame(p));
    for (const Frame& f : k->tx_batch) port_->release(f);
  }
  if (icmp_guard_fd_ >= 0) ::close(icmp_guard_fd_);
  // The transports before the verbs calls their queue pairs were made with
  // (verbs_ is declared after cores_, so it would go first).
  for (auto& k : cores_) k->transport.reset();
}

std::string Dataplane::start(const PortOpener& open) {
  struct Step {
    const char* name;
    std::function<std::string()> run;
  };
  const Step steps[] = {
      {"incarnation", [&] { return take_incarnation(); }},
      {"cpus", [&] { return cpu_plan_.check(); }},
      {"verbs", [&] { return open_verbs(); }},
      {"port", [&] { return open_port(open); }},
      {"keys", [&] { return load_keys(); }},
      {"peers", [&] { return make_peers(); }},
      {"cores", [&] { return make_cores(); }},
      {"socket", [&] { return open_socket(); }},
      {"metrics", [&] { return open_metrics(), std::string(); }},
  };
  for (const Step& s : steps) {
    std::string err;
    try {
      err = s.run();
    } catch (const std::exception& e) {
      err = e.what();
    }
    if (!err.empty()) return std::string("start-up step '") + s.name + "': " + err;
  }
  spdlog::info("host {} ({}) ready: {} MAC {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}, {} peers x {} "
               "connections, credits {}, {} polling core{} ({}), socket {}, incarnation {}",
               self_, cfg_.self().name, port_->describe(), mac_[0], mac_[1], mac_[2], mac_[3], mac_[4], mac_[5],
               hosts_ - 1, conns_per_host_, cfg_.connections.credits, ncores_, ncores_ == 1 ? "" : "s",
               cfg_.dataplane.polling == config::Polling::busy
                   ? std::string("polling busy")
                   : "polling adaptive, yield_us " + std::to_string(cfg_.dataplane.yield_us),
               socket_path_, boot_);
  return "";
}

// Our incarnation, larger than every earlier one of this host
// (incarnation.hpp: the state file, the clock going backwards, a second
// dataplane of the host). First, so that a second dataplane stops before it
// touches the port.
std::string Dataplane::take_incarnation() {
  const std::string path = cfg_.incarnation_file();
  if (std::string err = incarnation_.next(path, Incarnation::realtime_ns()); !err.empty())
    return err + " (dataplane.incarnation_file)";
  boot_ = incarnation_.value();
  return "";
}

// The rack secret every frame key (auth.hpp) and run token (rack_keys.hpp)
// derives from. Without frame authentication the secret is still read when
// it can be, for the run tokens; without it, runs that gossamerd started
// cannot attach here (claim_run says why).
std::string Dataplane::load_keys() {
  std::string secret, err;
  const bool loaded = config::load_rack_secret(cfg_.controlplane.psk_file, &secret, &err);
  if (loaded) {
    if (std::string e = tokens_.set_secret(secret); !e.empty()) return e;
  }
  if (!cfg_.dataplane.authenticate) {
    spdlog::warn("dataplane.authenticate is false: frames are not authenticated; anyone who can send on the "
                 "data network can inject requests");
    if (!loaded) spdlog::warn("{}: runs started by gossamerd cannot attach (their tokens cannot be checked)", err);
    return "";
  }
  if (!loaded)
    return err + " (frames are authenticated with keys derived from it; dataplane.authenticate: false turns "
                 "that off on a fabric nobody else can send on)";
  return auth_.set_secret(secret);
}

std::vector<std::uint16_t> port_of_peers(const config::Config& cfg) {
  std::vector<std::uint16_t> link_of(cfg.rack.hosts.size(), 0);
  for (std::size_t i = 0; i < cfg.dataplane.ports.size(); ++i)
    for (std::uint32_t h : cfg.dataplane.ports[i].peer_index)
      if (h < link_of.size()) link_of[h] = std::uint16_t(i);
  if (cfg.host.index < link_of.size()) link_of[cfg.host.index] = MultiPort::kNoLink;
  return link_of;
}

// The ports, each behind its fault injector (`<socket>.faults`, read by
// core 0), as one port that sends each frame on its peer's
// (dataplane.ports; port_multi.hpp).
std::string Dataplane::open_port(const PortOpener& open) {
  std::vector<std::unique_ptr<Port>> links;
  if (std::string err = open(std::uint16_t(ncores_), &links); !err.empty()) return err;
  const auto& cfg_ports = cfg_.dataplane.ports;
  const std::size_t want = verbs_mode_ || cfg_ports.empty() ? 1 : cfg_ports.size();
  if (links.size() != want)
    return "opened " + std::to_string(links.size()) + " ports for " + std::to_string(want) + " (dataplane.ports)";
  for (std::size_t i = 0; i < links.size(); ++i)
    if (links[i]->queues() < ncores_)
      return "port " + std::to_string(i) + " has " + std::to_string(links[i]->queues()) +
             " queues; dataplane.cores is " + std::to_string(ncores_);
  tsc_hz_ = links[0]->tsc_hz() ? links[0]->tsc_hz() : measure_tsc_hz();
  std::vector<std::uint16_t> link_of = port_of_peers(cfg_);
  if (verbs_mode_)
    for (std::uint16_t& l : link_of) l = l == MultiPort::kNoLink ? l : 0;
  for (auto& l : links) {
    auto f = std::make_unique<FaultPort>(std::move(l), tsc_hz_ / 1000);  // a reordered frame waits up to 1 ms
    faults_.push_back(f.get());
    l = std::move(f);
  }
  if (std::string err = MultiPort::make(std::move(links), std::move(link_of), &port_); !err.empty()) return err;
  mac_ = port_->mac();
  if (cfg_.self().mac && std::memcmp(cfg_.self().mac->data(), mac_.data(), 6) != 0)
    spdlog::warn("the port's MAC differs from rack.hosts[{}].mac; peers will not reach us", self_);
  return "";
}

std::string Dataplane::make_peers() {
  peers_ = std::vector<Peer>(hosts_);
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    Peer& p = peers_[h];
    p.ep = endpoints_[h];
    if (cfg_.rack.hosts[h].mac) {
      std::memcpy(p.mac.data(), cfg_.rack.hosts[h].mac->data(), 6);
      p.mac_known = true;
    } else {
      p.mac.fill(0xff);  // broadcast until we hear from it
    }
    if (h == self_) continue;
    for (std::uint32_t c = 0; c < conns_per_host_; ++c) {
      p.conns.push_back(std::make_unique<Connection>(std::uint16_t(self_), std::uint16_t(h), std::uint8_t(c),
                                                     cfg_.connections.credits, boot_, tsc_hz_));
      p.conns.back()->set_coalescing(cfg_.connections.coalescing);
      p.conns.back()->set_mtu(cfg_.dataplane.mtu);
      p.conns.back()->set_batching(tsc_hz_ / 1'000'000 * cfg_.connections.tx_hold_us,
                                   tsc_hz_ / 1'000'000 * cfg_.connections.ack_delay_us);
    }
    p.usable = std::make_unique<std::atomic<bool>[]>(conns_per_host_);
    for (std::uint32_t c = 0; c < conns_per_host_; ++c) p.usable[c].store(p.conns[c]->usable());
  }
  // A kernel socket on our UDP port keeps the namespace's kernel from
  // answering our peers' frames with ICMP port-unreachable. Best effort.
  icmp_guard_fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(self_ep_.port);
  sa.sin_addr.s_addr = self_ep_.ip;
  if (icmp_guard_fd_ >= 0 && ::bind(icmp_guard_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(icmp_guard_fd_);
    icmp_guard_fd_ = -1;
  }
  return "";
}

}  // namespace gossamer::dataplane
