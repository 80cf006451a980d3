// Can the verbs transport run here (verbs.hpp check_verbs)?
#include <sys/utsname.h>

#include <filesystem>
#include <fstream>

#include "verbs.hpp"

namespace gossamer::dataplane::verbs {

namespace {

// Whether this kernel could make a software RDMA device: the module is
// loaded or installed, or built in (/proc/modules and modules.builtin).
std::string soft_rdma() {
  utsname u{};
  ::uname(&u);
  const std::string mods = std::string("/lib/modules/") + u.release;
  std::string found;
  for (const char* m : {"rdma_rxe", "siw"}) {
    std::error_code ec;
    bool have = std::filesystem::exists(std::string("/sys/module/") + m, ec);
    for (const char* dir : {"/kernel/drivers/infiniband/sw/rxe", "/kernel/drivers/infiniband/sw/siw"})
      for (const char* ext : {".ko", ".ko.xz", ".ko.zst", ".ko.gz"})
        have = have || std::filesystem::exists(mods + dir + "/" + m + ext, ec);
    std::ifstream builtin(mods + "/modules.builtin");
    for (std::string line; !have && std::getline(builtin, line);)
      have = line.find(std::string("/") + m + ".ko") != std::string::npos;
    if (have) found += (found.empty() ? "" : ", ") + std::string(m);
  }
  return found;
}

}  // namespace

std::string check_verbs(Verbs* v, const std::string& device, std::uint8_t port, std::uint32_t gid_index, bool* ok) {
  *ok = false;
  if (!v) return "verbs: cannot run: this build has no libibverbs (meson option -Dverbs)";
  const std::vector<std::string> devs = v->list_devices();
  if (devs.empty()) {
    const std::string soft = soft_rdma();
    return "verbs: cannot run: no RDMA device (libibverbs lists none; /sys/class/infiniband is " +
           std::string(std::filesystem::exists("/sys/class/infiniband") ? "empty" : "absent") + "). " +
           (soft.empty() ? "This kernel has neither rdma_rxe nor siw, so Soft-RoCE cannot make one either"
                         : "This kernel has " + soft +
                               ": `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev IFACE` makes one "
                               "(dataplane/README.md \"Verbs\")");
  }
  std::string names;
  for (const auto& d : devs) names += (names.empty() ? "" : ", ") + d;
  PortInfo pi;
  if (std::string e = v->open(device, port, gid_index, &pi); !e.empty())
    return "verbs: cannot run: " + e + " (devices: " + names + ")";
  if (std::string e = v->alloc_pd(); !e.empty()) return "verbs: cannot run: " + pi.device + ": " + e;
  char gid[48];
  std::snprintf(gid, sizeof gid, "%02x%02x:%02x%02x:...:%02x%02x:%02x%02x", pi.gid[0], pi.gid[1], pi.gid[2],
                pi.gid[3], pi.gid[12], pi.gid[13], pi.gid[14], pi.gid[15]);
  if (!pi.link_up)
    return "verbs: cannot run: " + pi.device + " port " + std::to_string(port) + " is not active (link down)";
  *ok = true;
  return "verbs: can run on " + pi.device + " port " + std::to_string(port) + " (GID " + std::to_string(gid_index) +
         " " + gid + ", active MTU " + std::to_string(pi.active_mtu) + ", " + std::to_string(pi.max_qp_wr) +
         " WRs per queue at most; devices: " + names + ")";
}

}  // namespace gossamer::dataplane::verbs
