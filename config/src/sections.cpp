#include "sections.hpp"

#include <algorithm>
#include <cctype>

namespace gossamer::config::detail {

namespace {

constexpr std::int64_t kMaxU16 = 65535;
constexpr std::int64_t kKiB = 1024;
// sockaddr_un::sun_path is 108 bytes including the terminating NUL.
constexpr std::size_t kMaxSocketPath = 107;
constexpr std::size_t kMaxHostName = 63;

std::size_t socket_path_bytes(std::string_view path, std::size_t host_name_bytes) {
  std::size_t bytes = path.size();
  for (auto at = path.find(kHostPlaceholder); at != std::string_view::npos;
       at = path.find(kHostPlaceholder, at + kHostPlaceholder.size()))
    bytes = bytes - kHostPlaceholder.size() + host_name_bytes;
  return bytes;
}

// `socket` and `socket_group` of a section: a unix socket path, checked with
// {host} at its longest, so that a shared rack file that is valid for one
// host is valid for all of them.
void read_socket(MapReader& r, std::string& socket, std::string& group) {
  if (r.string("socket", socket, /*non_empty=*/true)) {
    const std::size_t bytes = socket_path_bytes(socket, kMaxHostName);
    if (bytes > kMaxSocketPath)
      r.diag().error(r.value_mark("socket"), r.path_of("socket"),
                     "path is " + std::to_string(bytes) + " bytes, a unix socket path holds at most " +
                         std::to_string(kMaxSocketPath));
  }
  r.string("socket_group", group);
}

bool read_polling(MapReader& r, Polling& out) {
  return r.choice("polling", out, {{"busy", Polling::busy}, {"adaptive", Polling::adaptive}});
}

bool valid_host_name(std::string_view s) {
  return !s.empty() && s.size() <= kMaxHostName && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
  });
}

// What read_rack_host parsed successfully, with positions, for the
// uniqueness checks across hosts.
struct HostFields {
  bool name = false;
  bool control = false;
  bool data = false;
  YAML::Mark name_mark, control_mark, data_mark;
};

HostFields read_rack_host(MapReader r, RackHost& out) {
  HostFields f;
  r.require("name");
  r.require("control");
  r.require("data");
  f.name = read_host_name(r, "name", out.name);
  f.control = r.address("control", out.control, AddressUse::peer);
  f.data = r.address("data", out.data, AddressUse::dataplane);
  f.name_mark = r.value_mark("name");
  f.control_mark = r.value_mark("control");
  f.data_mark = r.value_mark("data");
  std::string mac;
  if (r.string("mac", mac)) {
    out.mac = parse_mac(mac);
    if (!out.mac)
      r.diag().error(r.value_mark("mac"), r.path_of("mac"),
                     "bad MAC address '" + excerpt(mac) +
                         "' (expected six hex bytes like 02:00:00:00:00:01)");
  }
  return f;
}

// Two listeners of gossamerd on one TCP port cannot both bind (port 0 picks
// a free port, so it never clashes).
bool clash(const SocketAddress& a, const SocketAddress& b) {
  const auto wildcard = [](const SocketAddress& s) { return s.ip == "0.0.0.0" || s.ip == "::"; };
  return a.port != 0 && a.port == b.port && (a.ip == b.ip || wildcard(a) || wildcard(b));
}

void read_verbs(MapReader v, VerbsConfig& out) {
  v.string("device", out.device);
  v.integer("port", out.port, {1, 255});
  v.integer("gid_index", out.gid_index, {0, 255});
  // The ring is addressed in 64-byte units by 14 bits of the immediate
  // (dataplane/src/verbs_ring.hpp): 1 MiB at most. A message is at most a
  // quarter of the ring, and a whole slot (16.5 KiB) must fit one: 128 KiB.
  v.integer("ring_kib", out.ring_kib, {128, 1024});
  const bool interval_ok = v.integer("signal_interval", out.signal_interval, {1, 1024}) || !v.has("signal_interval");
  const bool depth_ok = v.integer("max_send_wr", out.max_send_wr, {2, 32768}) || !v.has("max_send_wr");
  // A full send queue must hold a signaled WR, or no completion frees it.
  if (interval_ok && depth_ok && out.max_send_wr < 2 * out.signal_interval)
    v.diag().error(v.value_mark(v.has("max_send_wr") ? "max_send_wr" : "signal_interval"),
                   v.path_of(v.has("max_send_wr") ? "max_send_wr" : "signal_interval"),
                   "value " + std::to_string(out.max_send_wr) + " must be at least 2 * signal_interval (" +
                       std::to_string(out.signal_interval) + ")");
  v.integer("post_batch", out.post_batch, {1, 64});
  if (v.integer("path_mtu", out.path_mtu, {256, 4096}) && (out.path_mtu & (out.path_mtu - 1)) != 0) {
    v.diag().error(v.value_mark("path_mtu"), v.path_of("path_mtu"),
                   "expected one of 256, 512, 1024, 2048, 4096; got " + std::to_string(out.path_mtu));
    out.path_mtu = 1024;
  }
  v.integer("timeout", out.timeout, {0, 31});
  v.integer("retry_count", out.retry_count, {0, 7});
  v.integer("rnr_retry", out.rnr_retry, {0, 7});
}

}  // namespace

bool read_host_name(MapReader& r, std::string_view key, std::string& out) {
  std::string name;
  if (!r.string(key, name)) return false;
  if (!valid_host_name(name)) {
    r.diag().error(r.value_mark(key), r.path_of(key),
                   "bad host name '" + excerpt(name) +
                       "' (1 to 63 letters, digits, '.', '-' or '_')");
    return false;
  }
  out = std::move(name);
  return true;
}

void read_rack(MapReader r, RackConfig& out) {
  if (!r.present()) return;  // the loader derives a one-host rack
  r.require("hosts");
  const auto seq = r.sequence("hosts");
  if (!seq) return;
  const std::string hosts_path = r.path_of("hosts");
  if (seq->size() == 0) {
    r.diag().error(seq->Mark(), hosts_path, "expected at least one host");
    return;
  }
  std::vector<HostFields> fields;
  for (std::size_t i = 0; i < seq->size(); ++i) {
    const YAML::Node item = (*seq)[i];
    const std::string path = index_path(hosts_path, i);
    out.hosts.emplace_back();
    if (!item.IsMap()) {
      r.diag().error(item.IsNull() ? seq->Mark() : item.Mark(), path,
                     "expected a mapping, got " + describe(item));
      fields.emplace_back();
      continue;
    }
    fields.push_back(read_rack_host(MapReader(r.diag(), item, path, seq->Mark()),
                                    out.hosts.back()));
  }

  // Names identify hosts (host.name, output prefixes); two hosts on one
  // control or data address would receive each other's traffic.
  for (std::size_t i = 0; i < out.hosts.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      const RackHost& a = out.hosts[i];
      const RackHost& b = out.hosts[j];
      const std::string other = index_path(hosts_path, j);
      if (fields[i].name && fields[j].name && a.name == b.name)
        r.diag().error(fields[i].name_mark, index_path(hosts_path, i) + ".name",
                       "duplicate host name '" + a.name + "' (also " + other + ")");
      if (fields[i].control && fields[j].control && a.control == b.control)
        r.diag().error(fields[i].control_mark, index_path(hosts_path, i) + ".control",
                       "address '" + a.control.to_string() + "' is also used by " + other +
                           ".control");
      if (fields[i].data && fields[j].data && a.data == b.data)
        r.diag().error(fields[i].data_mark, index_path(hosts_path, i) + ".data",
                       "address '" + a.data.to_string() + "' is also used by " + other +
                           ".data");
    }
  }
}

void read_dataplane(MapReader r, DataplaneConfig& out, PortMarks* ports) {
  r.choice("transport", out.transport, {{"udp", Transport::udp}, {"verbs", Transport::verbs}});
  if (r.has("driver")) {
    std::string old;
    r.string("driver", old);
    r.diag().error(r.value_mark("driver"), r.path_of("driver"),
                   "'driver' was renamed: transport: udp | verbs (udp is what driver dpdk or auto was)");
  }
  r.string_list("eal_args", out.eal_args);
  r.integer("port", out.port, {0, kMaxU16});
  read_ports(r, out.ports, ports);
  read_verbs(r.child("verbs"), out.verbs);
  // 576: IPv4's minimum; 9216: the usual jumbo limit (wire::kMaxMtu).
  r.integer("mtu", out.mtu, {576, 9216});
  const bool cores_ok = r.integer("cores", out.cores, {1, 8}) || !r.has("cores");
  if (r.integer_list("cpus", out.cpus, {0, 4095}) && cores_ok && !out.cpus.empty() &&
      out.cpus.size() != out.cores)
    r.diag().error(r.value_mark("cpus"), r.path_of("cpus"),
                   std::to_string(out.cpus.size()) + " CPUs for " + std::to_string(out.cores) +
                       " polling cores (dataplane.cores): give one CPU per core");
  read_polling(r, out.polling);
  // Up to a second: longer would keep an idle core yielding for no gain.
  r.integer("yield_us", out.yield_us, {0, 1'000'000});
  r.boolean("authenticate", out.authenticate);
  r.integer("max_applications", out.max_applications, {1, 4096});
  read_socket(r, out.socket, out.socket_group);
  r.string("incarnation_file", out.incarnation_file, /*non_empty=*/true);
}

void read_connections(MapReader r, ConnectionsConfig& out, std::size_t other_hosts) {
  r.integer("per_remote_host", out.per_remote_host, {1, 64});
  if (r.integer("max_active_qps", out.max_active_qps, {1, 65536}) && out.max_active_qps < other_hosts) {
    // Every other host keeps its connection 0 active (it carries the attach
    // announcements): the limit must leave room for that.
    r.diag().error(r.value_mark("max_active_qps"), r.path_of("max_active_qps"),
                   "value " + std::to_string(out.max_active_qps) + " is less than the " +
                       std::to_string(other_hosts) + " other hosts of the rack (each keeps one connection active)");
  }
  r.integer("credits", out.credits, {1, 1024});
  r.integer("scheduler_interval_us", out.scheduler_interval_us, {10, 10'000'000});
  r.boolean("thread_scheduler", out.thread_scheduler);
  r.boolean("coalescing", out.coalescing);
  r.integer("tx_hold_us", out.tx_hold_us, {0, 10'000});
  r.integer("ack_delay_us", out.ack_delay_us, {0, 10'000});
}

void read_slots(MapReader r, SlotsConfig& out) {
  // Multiples of 64 so that slots never share a cache line.
  r.integer("primary_bytes", out.primary_bytes, {64, 4096, 64});
  r.integer("overflow_bytes", out.overflow_bytes, {0, 65536, 64});
}

void read_controlplane(MapReader r, ControlplaneConfig& out) {
  r.address("listen", out.listen, AddressUse::listen);
  r.integer("large_request_threshold_bytes", out.large_request_threshold_bytes,
            {1, kKiB * kKiB * kKiB});
  r.string("psk_file", out.psk_file, /*non_empty=*/true);
  // Compare only values that are valid (or defaulted): a rejected value left
  // the default in place, and comparing with it would invent a second error.
  const bool interval_ok = r.integer("heartbeat_interval_ms", out.heartbeat_interval_ms,
                                     {1, 60'000}) || !r.has("heartbeat_interval_ms");
  const bool timeout_ok = r.integer("heartbeat_timeout_ms", out.heartbeat_timeout_ms,
                                    {1, 600'000}) || !r.has("heartbeat_timeout_ms");
  if (interval_ok && timeout_ok && out.heartbeat_timeout_ms <= out.heartbeat_interval_ms) {
    r.diag().error(r.value_mark("heartbeat_timeout_ms"), r.path_of("heartbeat_timeout_ms"),
                   "value " + std::to_string(out.heartbeat_timeout_ms) +
                       " must be greater than heartbeat_interval_ms (" +
                       std::to_string(out.heartbeat_interval_ms) + ")");
  }
  read_socket(r, out.socket, out.socket_group);
}

void read_metrics(MapReader r, MetricsConfig& out, const SocketAddress& controlplane_listen) {
  const bool listen_ok = r.address("listen", out.listen, AddressUse::listen);
  r.boolean("enabled", out.enabled);
  if (listen_ok && out.enabled && clash(out.listen, controlplane_listen)) {
    r.diag().error(r.value_mark("listen"), r.path_of("listen"),
                   "address '" + out.listen.to_string() + "' is also used by controlplane.listen");
  }
}

void read_runtime(MapReader r, RuntimeConfig& out) {
  read_polling(r, out.polling);
  r.integer("stack_size_kib", out.stack_size_kib, {16, 8192});
  std::uint32_t bound = 0;
  if (r.integer("max_outstanding", bound, {0, 1 << 24})) out.max_outstanding = bound;
  std::uint32_t yield = 0;
  if (r.integer("yield_us", yield, {0, 1'000'000})) out.yield_us = yield;
}

}  // namespace gossamer::config::detail
