#include "ports.hpp"

#include <algorithm>

namespace gossamer::config::detail {

void read_ports(MapReader& r, std::vector<PortConfig>& out, PortMarks* marks) {
  marks->path = r.path_of("ports");
  marks->list = r.value_mark("ports");
  const auto seq = r.sequence("ports");
  if (!seq) return;
  if (seq->size() == 0) {
    r.diag().error(seq->Mark(), marks->path, "expected at least one port (or no ports key: the one port dataplane.port)");
    return;
  }
  if (r.has("port"))
    r.diag().error(r.value_mark("port"), r.path_of("port"),
                   "dataplane.port and dataplane.ports exclude each other (ports[i] names each port)");
  const std::size_t errors_before = r.diag().error_count();
  std::vector<YAML::Mark> device_marks;
  for (std::size_t i = 0; i < seq->size(); ++i) {
    const YAML::Node item = (*seq)[i];
    const std::string path = index_path(marks->path, i);
    out.emplace_back();
    marks->peer.emplace_back();
    device_marks.push_back(item.IsNull() ? seq->Mark() : item.Mark());
    if (!item.IsMap()) {
      r.diag().error(item.IsNull() ? seq->Mark() : item.Mark(), path, "expected a mapping, got " + describe(item));
      continue;
    }
    MapReader p(r.diag(), item, path, item.Mark());
    PortConfig& port = out.back();
    p.require("peers");
    const bool vdev = p.string("vdev", port.vdev, /*non_empty=*/true);
    const bool name = p.string("name", port.name, /*non_empty=*/true);
    if (vdev && name)
      r.diag().error(p.value_mark("name"), p.path_of("name"), "give vdev or name, not both");
    else if (!p.has("vdev") && !p.has("name"))
      r.diag().error(item.Mark(), path,
                     "missing required key (vdev: a --vdev argument, or name: an ethdev such as a PCI address)");
    if (vdev || name) device_marks.back() = p.value_mark(vdev ? "vdev" : "name");
    if (p.string_list("peers", port.peers)) {
      if (port.peers.empty())
        r.diag().error(p.value_mark("peers"), p.path_of("peers"), "expected at least one peer");
      const YAML::Node peers = item["peers"];
      for (std::size_t j = 0; j < port.peers.size(); ++j) marks->peer.back().push_back(peers[j].Mark());
    }
    p.finish();
  }
  // Two entries for one device would open it twice.
  for (std::size_t i = 0; i < out.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (!out[i].device_name().empty() && out[i].device_name() == out[j].device_name())
        r.diag().error(device_marks[i], index_path(marks->path, i),
                       "duplicate device '" + out[i].device_name() + "' (also " + index_path(marks->path, j) + ")");
  marks->read = r.diag().error_count() == errors_before;
}

void resolve_ports(Diagnostics& d, const PortMarks& marks, const std::vector<RackHost>& hosts, std::uint32_t self,
                   std::vector<PortConfig>& ports) {
  if (ports.empty() || !marks.read || self >= hosts.size()) return;
  std::vector<int> port_of(hosts.size(), -1);
  for (std::size_t i = 0; i < ports.size(); ++i) {
    PortConfig& p = ports[i];
    p.peer_index.clear();
    for (std::size_t j = 0; j < p.peers.size(); ++j) {
      const std::string path = index_path(index_path(marks.path, i) + ".peers", j);
      const YAML::Mark& at = marks.peer[i][j];
      const auto it = std::find_if(hosts.begin(), hosts.end(), [&](const RackHost& h) { return h.name == p.peers[j]; });
      if (it == hosts.end()) {
        d.error(at, path, "no host named '" + excerpt(p.peers[j]) + "' in rack.hosts");
        continue;
      }
      const auto h = std::uint32_t(it - hosts.begin());
      if (h == self) {
        d.error(at, path, "'" + p.peers[j] + "' is this host, not a peer");
        continue;
      }
      if (port_of[h] >= 0) {
        d.error(at, path, "duplicate peer '" + p.peers[j] + "' (also " + index_path(marks.path, std::size_t(port_of[h])) + ")");
        continue;
      }
      port_of[h] = int(i);
      p.peer_index.push_back(h);
    }
  }
  for (std::uint32_t h = 0; h < hosts.size(); ++h)
    if (h != self && port_of[h] < 0)
      d.error(marks.list, marks.path,
              "host '" + hosts[h].name + "' is reached through no port (list it in the peers of one of " + marks.path + ")");
}

}  // namespace gossamer::config::detail
