// Gossamer configuration: one YAML schema for every process of a host
// (gossamerd, gossamer-dataplane, applications, gossamerctl).
//
// The loader turns a YAML document into the plain structs below; nothing of
// yaml-cpp leaks out of it. Each struct is one subsystem's section, its field
// names are the YAML keys, and its member initialisers are the defaults, so a
// default-constructed `Config` (plus the one-host rack the loader derives when
// `rack` is omitted) is exactly what an empty file means.
// config/examples/defaults.yaml documents every key; config/README.md the rest.
//
// Errors. The loader reports every problem it finds, not just the first. Each
// `Error` prints as
//
//     FILE:LINE:COLUMN: key.path: message
//
// with LINE and COLUMN 1-based. The position is that of the offending key
// (unknown or duplicate key), of the offending value (wrong type, out of range,
// invalid enum, bad address, ...), or of the enclosing mapping when a required
// key is missing. `key.path` names the key from the root, with sequence
// indices: `dataplane.polling`, `rack.hosts[1].data`. Errors that concern the
// whole document (YAML syntax, a root that is not a mapping) have an empty
// path and print as `FILE:LINE:COLUMN: message`; an unreadable file has no
// position and prints as `FILE: message`.
//
// Message wording is fixed (tests and scripts may match it):
//
//   unknown key         unknown key 'K'   [ (did you mean 'S'?)]
//   duplicate key       duplicate key 'K' (first defined at line L)
//   wrong type          expected T, got V
//                         T: an integer | a boolean (true or false) | a string
//                            | a mapping | a sequence
//                         V: 'text' (a plain scalar) | string 'text' (quoted,
//                            block or !!str) | null | a mapping | a sequence
//   out of range        value N out of range [LO, HI]
//   not a multiple      value N is not a multiple of M
//   invalid enum        expected one of A, B; got V
//   missing key         missing required key
//   empty string        must not be empty
//   empty list          expected at least one host
//   not a mapping       expected a mapping, got V (a section or a rack.hosts entry)
//   duplicate name      duplicate host name 'N' (also rack.hosts[I])
//   bad address         bad address 'X' (expected IP:PORT, e.g. 10.0.0.1:7700)
//                       bad address 'X' (port must be in [1, 65535])   ([0, ...] for listen)
//                       bad address 'X' (the dataplane needs an IPv4 address)
//   shared address      address 'X' is also used by rack.hosts[I].FIELD
//                       address 'X' is also used by controlplane.listen   (metrics.listen)
//   bad MAC             bad MAC address 'X' (expected six hex bytes like 02:00:00:00:00:01)
//   bad host name       bad host name 'N' (1 to 63 letters, digits, '.', '-' or '_')
//   host not in rack    no host named 'N' in rack.hosts
//   host mismatch       'N' does not match rack.hosts[I].name 'M'
//   host unset          missing required key (the rack has N hosts; set host.name or host.index)
//   ordering            value N must be greater than KEY (M)
//   too small           value N must be at least 2 * KEY (M)
//   renamed key         'driver' was renamed: transport: udp | verbs (udp is what driver dpdk or auto was)
//   socket path         path is N bytes, a unix socket path holds at most 107
//                         (N counts each {host} as 63 bytes, the longest name)
//   port peers          no host named 'N' in rack.hosts | 'N' is this host, not a peer
//                       | duplicate peer 'N' (also dataplane.ports[I])
//                       | host 'N' is reached through no port (list it in the peers of one of dataplane.ports)
//   port device         give vdev or name, not both | duplicate device 'D' (also dataplane.ports[I])
//                       | dataplane.port and dataplane.ports exclude each other (ports[i] names each port)
//   YAML syntax         YAML syntax error: <yaml-cpp's message>
//   several documents   expected one YAML document, found another
//   unreadable file     cannot read file: <strerror>
#pragma once

#include <array>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace gossamer::config {

// How a polling loop waits when it finds no work (DESIGN.md §4 "Polling on a
// small machine"): `busy` spins forever (benchmarks on dedicated cores);
// `adaptive` spins, then pauses, then sleeps or blocks on an eventfd.
enum class Polling { busy, adaptive };

// Which transport the dataplane carries records on (dataplane/README.md):
// `udp`, its own reliable connections in UDP frames through DPDK; `verbs`,
// RDMA reliable-connected queue pairs (rdma-core). The same on every host.
enum class Transport { udp, verbs };

std::string_view to_string(Polling p) noexcept;
std::string_view to_string(Transport t) noexcept;

// An IP literal and a port; no host names, so that a file validates the same
// way on every machine and startup never waits on DNS.
struct SocketAddress {
  std::string ip;          // canonical text form (inet_ntop)
  std::uint16_t port = 0;
  bool ipv6 = false;

  std::string to_string() const;  // "10.0.0.1:7700", "[::1]:7700"
  bool operator==(const SocketAddress&) const = default;
};

using MacAddress = std::array<std::uint8_t, 6>;

// `host`: which entry of rack.hosts this process is. After loading, both
// fields are set and agree with rack.hosts[index].
struct HostConfig {
  std::string name;
  std::uint32_t index = 0;
  bool operator==(const HostConfig&) const = default;
};

// One entry of `rack.hosts`. `name`, `control` and `data` are required.
struct RackHost {
  std::string name;
  SocketAddress control;           // gossamerd's TCP address, as peers dial it
  SocketAddress data;              // dataplane UDP/IPv4 address
  std::optional<MacAddress> mac;   // dataplane MAC; unset = resolve (ARP)
  bool operator==(const RackHost&) const = default;
};

// `rack`: static membership (DESIGN.md §4 "Control plane"). Never empty after
// loading: an omitted `rack` becomes one host named host.name (or "localhost")
// with control 127.0.0.1:<controlplane.listen port> and data 127.0.0.1:7800.
struct RackConfig {
  std::vector<RackHost> hosts;
  bool operator==(const RackConfig&) const = default;
};

// `dataplane.verbs`: the verbs transport's device and queue pairs
// (dataplane/README.md "Verbs").
struct VerbsConfig {
  std::string device;             // ibverbs device name; "" = the first one
  std::uint8_t port = 1;          // device port number (1-based, as in ibverbs)
  std::uint32_t gid_index = 0;    // GID table index (RoCE v2 is often 1 or 3)
  std::uint32_t ring_kib = 256;   // receive ring per connection and direction (and as much send staging)
  std::uint32_t signal_interval = 16;  // one signaled send WR every n (selective signaling)
  std::uint32_t max_send_wr = 256;     // send queue depth; at least 2 * signal_interval
  std::uint32_t post_batch = 32;       // WRs per ibv_post_send (one doorbell)
  std::uint32_t path_mtu = 1024;       // 256, 512, 1024, 2048 or 4096
  std::uint32_t timeout = 14;          // local ACK timeout, 4.096 us * 2^timeout (14: 67 ms)
  std::uint32_t retry_count = 7;       // transport retries before a QP fails
  std::uint32_t rnr_retry = 7;         // receiver-not-ready retries (7: without limit)
  bool operator==(const VerbsConfig&) const = default;
};

// One entry of `dataplane.ports`: a DPDK port and the peers reached through
// it (dataplane/README.md "Several ports"). Exactly one of `vdev` and `name`.
struct PortConfig {
  std::string vdev;                  // a virtual device: the EAL gets --vdev=VDEV; its name is before the first ','
  std::string name;                  // or an ethdev the EAL probes anyway (a PCI address allowed in eal_args)
  std::vector<std::string> peers;    // rack.hosts names, not this host's
  std::vector<std::uint32_t> peer_index;  // the same as rack.hosts indices (set by the loader)
  // The ethdev name DPDK gives the port: `name`, or `vdev` up to its first ','.
  std::string device_name() const { return name.empty() ? vdev.substr(0, vdev.find(',')) : name; }
  bool operator==(const PortConfig&) const = default;
};

// `dataplane`: the per-host gossamer-dataplane process.
struct DataplaneConfig {
  Transport transport = Transport::udp;
  // Extra DPDK EAL arguments. The default runs without hugepages and without
  // shared runtime files, so several dataplanes (rack in a box) can share a
  // small machine; production hosts should drop --no-huge and -m.
  std::vector<std::string> eal_args = {"--no-huge", "-m", "256", "--no-shconf"};
  std::uint16_t port = 0;         // DPDK port id
  // Several DPDK ports, one per peer link (a memif mesh, a dual-port NIC):
  // every peer is reached through exactly one; each polling core owns a
  // queue pair on each. Empty: the one port `port`, for every peer.
  std::vector<PortConfig> ports;
  VerbsConfig verbs;
  std::uint32_t cores = 1;        // polling cores
  // The data network's MTU (IPv4 packet bytes of a frame). Frames are cut
  // to it; larger ones received are counted and dropped. The same on every
  // host; the port must carry it (checked at start-up).
  std::uint32_t mtu = 1500;
  // The CPU each polling core runs on (core i on cpus[i]); one per core.
  // Empty: every core may run on any CPU of the process's affinity mask
  // (DPDK's default pins them all to the mask's first CPU).
  std::vector<std::uint32_t> cpus;
  Polling polling = Polling::adaptive;
  // polling: adaptive: for this long after its last traffic (frames of
  // ours, records, doorbells) a polling core that finds no work yields the
  // CPU (sched_yield) instead of sleeping; 0 = sleep at once after the
  // spin. What suits depends on the load (dataplane/POLLING.md: why 50).
  std::uint32_t yield_us = 2000;
  // Every frame carries a MAC under keys derived from the rack secret
  // (controlplane.psk_file). false only on a fabric nobody else can send
  // on; it must be the same on every host.
  bool authenticate = true;
  // Application instances attached at once; more are refused. Each maps its
  // segment (~100 MB for 64 threads) into the dataplane. The same bound
  // holds for each peer's announced instances.
  std::uint32_t max_applications = 64;
  // Unix socket applications attach to. "{host}" in it is replaced by
  // host.name (rack in a box: hosts share a file system and a rack file).
  std::string socket = "/run/gossamer/dataplane.sock";
  std::string socket_group;       // group allowed to attach; "" = root only
  // Where the dataplane keeps its last incarnation, so that the next one is
  // larger whatever the clock does (dataplane/README.md "Incarnations");
  // "{host}" as in `socket`. `<file>.lock` next to it keeps a second
  // dataplane of the same host from starting.
  std::string incarnation_file = "/var/lib/gossamer/dataplane-{host}.incarnation";
  bool operator==(const DataplaneConfig&) const = default;
};

// `connections`: connection sharing between host pairs (FLOCK, DESIGN.md §4).
struct ConnectionsConfig {
  std::uint32_t per_remote_host = 2;
  std::uint32_t max_active_qps = 256;
  std::uint32_t credits = 32;                // messages in flight per connection
  std::uint32_t scheduler_interval_us = 1000;
  bool thread_scheduler = true;              // false: each thread keeps a fixed connection
  bool coalescing = true;                    // false: one slot per frame (for comparisons)
  // Coalescing under load (dataplane/README.md "Coalescing"): records that
  // do not fill a frame wait up to tx_hold_us while a frame is in flight;
  // an in-order frame's ack waits up to ack_delay_us for a data frame.
  std::uint32_t tx_hold_us = 50;
  std::uint32_t ack_delay_us = 50;
  bool operator==(const ConnectionsConfig&) const = default;
};

// `slots`: sizes of one request/response slot; multiples of a cache line.
struct SlotsConfig {
  std::uint32_t primary_bytes = 128;
  std::uint32_t overflow_bytes = 16384;
  bool operator==(const SlotsConfig&) const = default;
};

// `controlplane`: the per-host gossamerd.
struct ControlplaneConfig {
  SocketAddress listen{"0.0.0.0", 7700, false};
  // Request and response bodies larger than this cross hosts over TCP
  // (instances started by gossamerctl run; controlplane/README.md). 262144:
  // measured, see config/README.md ("The large-request threshold").
  std::uint32_t large_request_threshold_bytes = 262144;
  std::string psk_file = "/etc/gossamer/psk";          // rack pre-shared key
  std::uint32_t heartbeat_interval_ms = 200;
  std::uint32_t heartbeat_timeout_ms = 1000;           // > heartbeat_interval_ms
  // Unix socket gossamerctl talks to ("{host}" as in dataplane.socket).
  std::string socket = "/run/gossamer/gossamerd.sock";
  std::string socket_group;       // group allowed to use gossamerctl; "" = root only
  bool operator==(const ControlplaneConfig&) const = default;
};

// `metrics`: gossamerd's Prometheus exporter.
struct MetricsConfig {
  SocketAddress listen{"0.0.0.0", 9464, false};
  bool enabled = true;
  bool operator==(const MetricsConfig&) const = default;
};

// `runtime`: what applications linking libgossamer use.
struct RuntimeConfig {
  Polling polling = Polling::adaptive;
  std::uint32_t stack_size_kib = 64;   // per fiber
  // Backpressure bound (gossamer::Options::max_outstanding): requests a
  // thread may have awaiting responses before a sending fiber waits; 0 = no
  // bound. Unset: the program's own Options value (default 1024). Set, it
  // replaces that value in every gossamer::run under GOSSAMER_CONFIG.
  std::optional<std::uint32_t> max_outstanding;
  // polling: adaptive: how long an idle worker thread yields the CPU after
  // its spin before it sleeps (gossamer::Options::yield_us). Unset: the
  // program's own value (default 2000); set, it replaces it as
  // max_outstanding does.
  std::optional<std::uint32_t> yield_us;
  bool operator==(const RuntimeConfig&) const = default;
};

struct Config {
  HostConfig host;
  RackConfig rack;
  DataplaneConfig dataplane;
  ConnectionsConfig connections;
  SlotsConfig slots;
  ControlplaneConfig controlplane;
  MetricsConfig metrics;
  RuntimeConfig runtime;
  bool operator==(const Config&) const = default;

  // This host's rack entry (rack.hosts[host.index]); valid on loaded configs.
  const RackHost& self() const { return rack.hosts.at(host.index); }
  // dataplane.socket with "{host}" replaced by this host's name.
  std::string dataplane_socket() const { return expand_host(dataplane.socket); }
  // controlplane.socket, expanded the same way.
  std::string controlplane_socket() const { return expand_host(controlplane.socket); }
  // dataplane.incarnation_file, expanded the same way.
  std::string incarnation_file() const { return expand_host(dataplane.incarnation_file); }
  std::string expand_host(std::string path) const {
    for (std::size_t at; (at = path.find("{host}")) != std::string::npos;) path.replace(at, 6, self().name);
    return path;
  }
};

struct Error {
  std::string file;
  int line = 0;      // 1-based; 0 = no position (e.g. unreadable file)
  int column = 0;    // 1-based
  std::string path;  // "rack.hosts[1].data"; "" for document-level errors
  std::string message;

  // "FILE:LINE:COLUMN: key.path: message" (see the top of this header for
  // the forms without a path or a position).
  std::string to_string() const;
  bool operator==(const Error&) const = default;
};

// Either a valid Config or at least one Error, in document order.
class Result {
 public:
  explicit Result(Config c) : value_(std::move(c)) {}
  explicit Result(std::vector<Error> e) : value_(std::move(e)) {}

  bool ok() const noexcept { return std::holds_alternative<Config>(value_); }
  explicit operator bool() const noexcept { return ok(); }

  // Precondition: ok(). Throws std::bad_variant_access otherwise.
  const Config& config() const& { return std::get<Config>(value_); }
  // On a temporary Result, by value: a reference would dangle in
  // `for (auto& h : load_file(f).config().rack.hosts)`.
  Config config() && { return std::get<Config>(std::move(value_)); }

  // Empty when ok(). By value on a temporary, as config().
  const std::vector<Error>& errors() const& noexcept;
  std::vector<Error> errors() &&;

 private:
  std::variant<Config, std::vector<Error>> value_;
};

Result load_file(const std::string& path);
Result load_string(std::string_view yaml, std::string_view name_for_errors);

// Reads the rack secret (controlplane.psk_file): the file must exist, not be
// readable or writable by group or others, and hold at least 128 bits of key
// material by secret_bits() (trailing whitespace is dropped). gossamerd
// derives its handshake key from it, the dataplane its frame keys. On
// failure returns false and says why in *error.
bool load_rack_secret(const std::string& path, std::string* key, std::string* error);

// At most how many bits of key material `secret` can hold, judged by how it
// is written: 4 a character for hex digits, 6 for base64 (padding not
// counted), 6.5 for other printable text without spaces, 2 for text with
// spaces (words: a passphrase), 8 a byte for anything else; and 0 when it
// has fewer than 8 different characters. An upper bound: a secret that
// passes can still be guessable if a person chose it (SECURITY.md).
double secret_bits(const std::string& secret);
inline constexpr double kMinSecretBits = 128;

// Writes each error of `r` on its own line, as FILE:LINE:COLUMN: key.path:
// message (nothing when r.ok()). What every binary prints for a bad file.
void write_errors(const Result& r, std::ostream& out);

}  // namespace gossamer::config
