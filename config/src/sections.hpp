// Internal: one reader per YAML section. Each fills its struct from a
// MapReader and reports what is wrong; cross-section rules (host vs rack,
// listener clashes) live in loader.cpp.
#pragma once

#include "gossamer/config.hpp"
#include "ports.hpp"
#include "reader.hpp"

namespace gossamer::config::detail {

// Replaced by host.name in dataplane.socket, so that hosts sharing one
// machine (rack in a box) and one file get separate sockets.
inline constexpr std::string_view kHostPlaceholder = "{host}";

void read_rack(MapReader r, RackConfig& out);
// `ports`: where dataplane.ports' peers were written (resolve_ports).
void read_dataplane(MapReader r, DataplaneConfig& out, PortMarks* ports);
void read_connections(MapReader r, ConnectionsConfig& out, std::size_t other_hosts);
void read_slots(MapReader r, SlotsConfig& out);
void read_controlplane(MapReader r, ControlplaneConfig& out);
// `controlplane_listen`: gossamerd binds both, so they must not clash.
void read_metrics(MapReader r, MetricsConfig& out, const SocketAddress& controlplane_listen);
void read_runtime(MapReader r, RuntimeConfig& out);

// Host names become output prefixes and metric label values: 1 to 63
// letters, digits, '.', '-' or '_'. Reports and returns false otherwise.
bool read_host_name(MapReader& r, std::string_view key, std::string& out);

}  // namespace gossamer::config::detail
