// Entry points: documents and files in, Config or errors out. Section parsing
// is in sections.cpp; the typed field reader in reader.cpp.
#include "loader.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <ostream>

#include <yaml-cpp/yaml.h>

#include "documents.hpp"
#include "reader.hpp"
#include "sections.hpp"

namespace gossamer::config {

namespace detail {
namespace {

constexpr std::uint16_t kDefaultDataPort = 7800;

// What the `host` section said, kept until the rack is known.
struct HostKeys {
  bool has_index = false;
  std::int64_t index = 0;
  bool has_name = false;  // present and a valid name
};

// `host` names an entry of rack.hosts by index, by name, or both (then they
// must agree); a one-host rack needs neither.
void resolve_host(MapReader& host, const HostKeys& keys, Config& cfg) {
  const auto& hosts = cfg.rack.hosts;
  if (hosts.empty()) return;  // rack errors were reported already
  const auto count = static_cast<std::int64_t>(hosts.size());
  Diagnostics& d = host.diag();
  std::int64_t index = 0;
  if (keys.has_index) {
    if (keys.index < 0 || keys.index >= count) {
      d.error(host.value_mark("index"), host.path_of("index"),
              "value " + std::to_string(keys.index) + " out of range [0, " +
                  std::to_string(count - 1) + "]");
      return;
    }
    index = keys.index;
    const auto& entry = hosts[static_cast<std::size_t>(index)];
    if (keys.has_name && entry.name != cfg.host.name) {
      d.error(host.value_mark("name"), host.path_of("name"),
              "'" + cfg.host.name + "' does not match rack.hosts[" + std::to_string(index) +
                  "].name '" + entry.name + "'");
      return;
    }
  } else if (keys.has_name) {
    const auto it = std::find_if(hosts.begin(), hosts.end(),
                                 [&](const RackHost& h) { return h.name == cfg.host.name; });
    if (it == hosts.end()) {
      d.error(host.value_mark("name"), host.path_of("name"),
              "no host named '" + cfg.host.name + "' in rack.hosts");
      return;
    }
    index = it - hosts.begin();
  } else if (host.has("name")) {
    return;  // an invalid name, reported already
  } else if (count > 1) {
    d.error(host.mark(), host.path(),
            "missing required key (the rack has " + std::to_string(count) +
                " hosts; set host.name or host.index)");
    return;
  }
  cfg.host.index = static_cast<std::uint32_t>(index);
  cfg.host.name = hosts[static_cast<std::size_t>(index)].name;
}

void read_config(Diagnostics& d, const YAML::Node& root, Config& cfg) {
  MapReader r(d, root, "", root.Mark());

  MapReader host = r.child("host");
  HostKeys keys;
  keys.has_index = host.integer("index", keys.index, {INT64_MIN, INT64_MAX});
  keys.has_name = read_host_name(host, "name", cfg.host.name);

  const bool has_rack = r.has("rack");
  const std::size_t before_rack = d.error_count();
  read_rack(r.child("rack"), cfg.rack);
  const bool rack_ok = d.error_count() == before_rack;
  PortMarks port_marks;
  read_dataplane(r.child("dataplane"), cfg.dataplane, &port_marks);
  read_connections(r.child("connections"), cfg.connections, cfg.rack.hosts.empty() ? 0 : cfg.rack.hosts.size() - 1);
  read_slots(r.child("slots"), cfg.slots);
  read_controlplane(r.child("controlplane"), cfg.controlplane);
  read_metrics(r.child("metrics"), cfg.metrics, cfg.controlplane.listen);
  read_runtime(r.child("runtime"), cfg.runtime);

  if (!has_rack) {
    // A standalone host: reachable on loopback only, at the control port it
    // listens on.
    RackHost self;
    self.name = keys.has_name ? cfg.host.name : "localhost";
    self.control = SocketAddress{"127.0.0.1", cfg.controlplane.listen.port, false};
    self.data = SocketAddress{"127.0.0.1", kDefaultDataPort, false};
    cfg.rack.hosts.push_back(std::move(self));
  }
  const std::size_t before_host = d.error_count();
  resolve_host(host, keys, cfg);
  // Peers are rack hosts other than this one: checked once both are known.
  const bool host_ok = d.error_count() == before_host && (keys.has_name || !host.has("name"));
  if (rack_ok && host_ok) resolve_ports(d, port_marks, cfg.rack.hosts, cfg.host.index, cfg.dataplane.ports);

  auto& socket = cfg.dataplane.socket;
  for (auto at = socket.find(kHostPlaceholder); at != std::string::npos;
       at = socket.find(kHostPlaceholder, at + cfg.host.name.size()))
    socket.replace(at, kHostPlaceholder.size(), cfg.host.name);
}

}  // namespace

Result load_string_traced(std::string_view yaml, std::string_view name_for_errors,
                          std::vector<std::string>& defaulted) {
  Diagnostics d{std::string(name_for_errors)};
  const auto root = parse_document(std::string(yaml), d);
  if (!root) return Result(d.take_errors());
  Config cfg;
  read_config(d, *root, cfg);
  defaulted.insert(defaulted.end(), d.defaulted().begin(), d.defaulted().end());
  if (d.has_errors()) return Result(d.take_errors());
  return Result(std::move(cfg));
}

}  // namespace detail

Result load_string(std::string_view yaml, std::string_view name_for_errors) {
  std::vector<std::string> unused;
  return detail::load_string_traced(yaml, name_for_errors, unused);
}

Result load_file(const std::string& path) {
  // stdio rather than ifstream: it reports why (errno), including EISDIR.
  const auto fail = [&](int err) {
    return Result(std::vector<Error>{
        Error{path, 0, 0, "", std::string("cannot read file: ") + std::strerror(err)}});
  };
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return fail(errno);
  std::string text;
  char buf[65536];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) text.append(buf, n);
  if (std::ferror(f.get())) return fail(errno);
  return load_string(text, path);
}

std::string Error::to_string() const {
  if (line == 0) return file + ": " + message;
  std::string out = file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": ";
  if (!path.empty()) out += path + ": ";
  return out + message;
}

const std::vector<Error>& Result::errors() const& noexcept {
  static const std::vector<Error> none;
  const auto* e = std::get_if<std::vector<Error>>(&value_);
  return e != nullptr ? *e : none;
}

std::vector<Error> Result::errors() && {
  auto* e = std::get_if<std::vector<Error>>(&value_);
  return e != nullptr ? std::move(*e) : std::vector<Error>{};
}

std::string SocketAddress::to_string() const {
  const std::string host = ipv6 ? "[" + ip + "]" : ip;
  return host + ":" + std::to_string(port);
}

std::string_view to_string(Polling p) noexcept {
  return p == Polling::busy ? "busy" : "adaptive";
}

std::string_view to_string(Transport t) noexcept {
  return t == Transport::verbs ? "verbs" : "udp";
}

void write_errors(const Result& r, std::ostream& out) {
  for (const Error& e : r.errors()) out << e.to_string() << '\n';
}

}  // namespace gossamer::config
