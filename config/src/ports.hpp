// Internal: `dataplane.ports` (config.hpp PortConfig). Read with the
// dataplane section; its peers name rack hosts, so they are checked once the
// rack and this host are known (loader.cpp).
#pragma once

#include <string>
#include <vector>

#include "gossamer/config.hpp"
#include "reader.hpp"

namespace gossamer::config::detail {

// Where each port's peers were written, for the errors of resolve_ports.
struct PortMarks {
  std::string path;                          // "dataplane.ports"
  YAML::Mark list;                           // the sequence
  std::vector<std::vector<YAML::Mark>> peer;  // [port][peer]: each name
  bool read = false;                         // the list was read without errors of its own
};

// Reads `dataplane.ports` (absent: none) into `out`.
void read_ports(MapReader& dataplane, std::vector<PortConfig>& out, PortMarks* marks);
// Each port's peers as rack.hosts indices: every name a host of the rack,
// not `self`, in one port only, and every other host in one port.
void resolve_ports(Diagnostics& d, const PortMarks& marks, const std::vector<RackHost>& hosts, std::uint32_t self,
                   std::vector<PortConfig>& ports);

}  // namespace gossamer::config::detail
