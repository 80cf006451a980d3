// dataplane.ports (config.hpp PortConfig): several DPDK ports, each with
// the peers reached through it. A config without the key keeps the one
// port `dataplane.port`; a bad port list gets one clear error per problem.
#include <gtest/gtest.h>

#include "test_util.hpp"

namespace gossamer::config::test {
namespace {

// Three hosts; this one is b (index 1).
constexpr std::string_view kRack3 =
    "host: {name: b}\n"
    "rack:\n"
    "  hosts:\n"
    "    - {name: a, control: 10.0.0.1:7700, data: 10.0.0.1:7800}\n"
    "    - {name: b, control: 10.0.0.2:7700, data: 10.0.0.2:7800}\n"
    "    - {name: c, control: 10.0.0.3:7700, data: 10.0.0.3:7800}\n"
    "dataplane:\n";

std::string rack3(std::string_view dataplane) { return std::string(kRack3) + std::string(dataplane); }

TEST(Ports, AbsentMeansTheOnePort) {
  const auto r = load_string(rack3("  port: 3\n"), "t.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.config().dataplane.ports.empty());
  EXPECT_EQ(r.config().dataplane.port, 3);
}

TEST(Ports, EachPeerThroughItsPort) {
  const auto r = load_string(rack3("  ports:\n"
                                   "    - vdev: net_memif0,role=client,socket=/tmp/ab.sock\n"
                                   "      peers: [a]\n"
                                   "    - name: \"0000:3b:00.1\"\n"
                                   "      peers: [c]\n"),
                             "t.yaml");
  ASSERT_TRUE(r.ok()) << error_of(rack3(""));
  const auto& ports = r.config().dataplane.ports;
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_EQ(ports[0].device_name(), "net_memif0");
  EXPECT_EQ(ports[0].peer_index, std::vector<std::uint32_t>{0});
  EXPECT_EQ(ports[1].device_name(), "0000:3b:00.1");
  EXPECT_EQ(ports[1].peer_index, std::vector<std::uint32_t>{2});
  // One port may reach several peers (a NIC port on a switch).
  const auto one = load_string(rack3("  ports: [{vdev: \"net_af_packet0,iface=eth0\", peers: [c, a]}]\n"), "t.yaml");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one.config().dataplane.ports[0].peer_index, (std::vector<std::uint32_t>{2, 0}));
}

TEST(Ports, PeersMustBeOtherHostsOfTheRackEachOnce) {
  EXPECT_EQ(error_of(rack3("  ports:\n"
                           "    - {vdev: net_memif0, peers: [a, d]}\n"
                           "    - {vdev: net_memif1, peers: [c]}\n")),
            "t.yaml:9:37: dataplane.ports[0].peers[1]: no host named 'd' in rack.hosts");
  EXPECT_EQ(error_of(rack3("  ports:\n"
                           "    - {vdev: net_memif0, peers: [a, b]}\n"
                           "    - {vdev: net_memif1, peers: [c]}\n")),
            "t.yaml:9:37: dataplane.ports[0].peers[1]: 'b' is this host, not a peer");
  EXPECT_EQ(error_of(rack3("  ports:\n"
                           "    - {vdev: net_memif0, peers: [a, c]}\n"
                           "    - {vdev: net_memif1, peers: [c]}\n")),
            "t.yaml:10:34: dataplane.ports[1].peers[0]: duplicate peer 'c' (also dataplane.ports[0])");
  EXPECT_EQ(error_of(rack3("  ports:\n"
                           "    - {vdev: net_memif0, peers: [a]}\n")),
            "t.yaml:9:5: dataplane.ports: host 'c' is reached through no port (list it in the peers of one of "
            "dataplane.ports)");
  EXPECT_EQ(error_of(rack3("  ports: [{vdev: net_memif0, peers: []}, {vdev: net_memif1, peers: [a, c]}]\n")),
            "t.yaml:8:37: dataplane.ports[0].peers: expected at least one peer");
}

TEST(Ports, EachPortNamesOneDeviceOnce) {
  EXPECT_EQ(error_of(rack3("  ports:\n"
                           "    - {vdev: net_memif0, name: net_memif0, peers: [a]}\n"
                           "    - {vdev: net_memif1, peers: [c]}\n")),
            "t.yaml:9:32: dataplane.ports[0].name: give vdev or name, not both");
  EXPECT_EQ(error_of(rack3("  ports:\n"
                           "    - {peers: [a]}\n"
                           "    - {vdev: net_memif1, peers: [c]}\n")),
            "t.yaml:9:7: dataplane.ports[0]: missing required key (vdev: a --vdev argument, or name: an ethdev "
            "such as a PCI address)");
  EXPECT_EQ(error_of(rack3("  ports:\n"
                           "    - {vdev: \"net_memif0,socket=/a\", peers: [a]}\n"
                           "    - {vdev: \"net_memif0,socket=/b\", peers: [c]}\n")),
            "t.yaml:10:14: dataplane.ports[1]: duplicate device 'net_memif0' (also dataplane.ports[0])");
  EXPECT_EQ(error_of(rack3("  ports:\n"
                           "    - {vdev: net_memif0}\n"
                           "    - {vdev: net_memif1, peers: [a, c]}\n")),
            "t.yaml:9:7: dataplane.ports[0].peers: missing required key");
  EXPECT_EQ(error_of(rack3("  ports:\n"
                           "    - {vdev: net_memif0, peer: [a]}\n"
                           "    - {vdev: net_memif1, peers: [a, c]}\n")),
            "2 errors:\n  t.yaml:9:7: dataplane.ports[0].peers: missing required key\n"
            "  t.yaml:9:26: dataplane.ports[0].peer: unknown key 'peer' (did you mean 'peers'?)");
}

TEST(Ports, ListAndPortExcludeEachOther) {
  EXPECT_EQ(error_of(rack3("  port: 1\n"
                           "  ports: [{vdev: net_memif0, peers: [a, c]}]\n")),
            "t.yaml:8:9: dataplane.port: dataplane.port and dataplane.ports exclude each other (ports[i] names "
            "each port)");
  EXPECT_EQ(error_of(rack3("  ports: []\n")),
            "t.yaml:8:10: dataplane.ports: expected at least one port (or no ports key: the one port "
            "dataplane.port)");
  EXPECT_EQ(error_of(rack3("  ports: [net_memif0]\n")),
            "t.yaml:8:11: dataplane.ports[0]: expected a mapping, got 'net_memif0'");
}

}  // namespace
}  // namespace gossamer::config::test
