// Omitted keys take their defaults; present keys override only themselves.
#include <gtest/gtest.h>

#include "gossamer/config.hpp"

namespace gossamer::config {
namespace {

Config load_ok(std::string_view yaml) {
  auto r = load_string(yaml, "t.yaml");
  for (const auto& e : r.errors()) ADD_FAILURE() << e.to_string();
  return r.ok() ? std::move(r).config() : Config{};
}

TEST(Defaults, EmptyFileIsOneLocalHostWithDocumentedDefaults) {
  const Config c = load_ok("");
  ASSERT_EQ(c.rack.hosts.size(), 1u);
  EXPECT_EQ(c.host.name, "localhost");
  EXPECT_EQ(c.host.index, 0u);
  EXPECT_EQ(c.self().control.to_string(), "127.0.0.1:7700");
  EXPECT_EQ(c.self().data.to_string(), "127.0.0.1:7800");
  EXPECT_EQ(c.self().mac, std::nullopt);

  EXPECT_EQ(c.dataplane.transport, Transport::udp);
  EXPECT_EQ(c.dataplane.eal_args,
            (std::vector<std::string>{"--no-huge", "-m", "256", "--no-shconf"}));
  EXPECT_EQ(c.dataplane.port, 0u);
  EXPECT_EQ(c.dataplane.verbs.device, "");
  EXPECT_EQ(c.dataplane.verbs.port, 1u);
  EXPECT_EQ(c.dataplane.verbs.gid_index, 0u);
  EXPECT_EQ(c.dataplane.verbs.ring_kib, 256u);
  EXPECT_EQ(c.dataplane.verbs.signal_interval, 16u);
  EXPECT_EQ(c.dataplane.verbs.max_send_wr, 256u);
  EXPECT_EQ(c.dataplane.verbs.post_batch, 32u);
  EXPECT_EQ(c.dataplane.verbs.path_mtu, 1024u);
  EXPECT_EQ(c.dataplane.verbs.timeout, 14u);
  EXPECT_EQ(c.dataplane.verbs.retry_count, 7u);
  EXPECT_EQ(c.dataplane.verbs.rnr_retry, 7u);
  EXPECT_EQ(c.dataplane.cores, 1u);
  EXPECT_EQ(c.dataplane.polling, Polling::adaptive);
  EXPECT_EQ(c.dataplane.yield_us, 2000u);
  EXPECT_TRUE(c.dataplane.authenticate);
  EXPECT_EQ(c.dataplane.max_applications, 64u);
  EXPECT_EQ(c.dataplane.socket, "/run/gossamer/dataplane.sock");
  EXPECT_EQ(c.dataplane.socket_group, "");
  EXPECT_EQ(c.dataplane.incarnation_file, "/var/lib/gossamer/dataplane-{host}.incarnation");
  EXPECT_EQ(c.incarnation_file(), "/var/lib/gossamer/dataplane-localhost.incarnation");

  EXPECT_EQ(c.connections.per_remote_host, 2u);
  EXPECT_EQ(c.connections.max_active_qps, 256u);
  EXPECT_EQ(c.connections.credits, 32u);
  EXPECT_EQ(c.connections.scheduler_interval_us, 1000u);
  EXPECT_TRUE(c.connections.thread_scheduler);
  EXPECT_TRUE(c.connections.coalescing);
  EXPECT_EQ(c.connections.tx_hold_us, 50u);
  EXPECT_EQ(c.connections.ack_delay_us, 50u);

  EXPECT_EQ(c.slots.primary_bytes, 128u);
  EXPECT_EQ(c.slots.overflow_bytes, 16384u);

  EXPECT_EQ(c.controlplane.listen.to_string(), "0.0.0.0:7700");
  EXPECT_EQ(c.controlplane.large_request_threshold_bytes, 262144u);
  EXPECT_EQ(c.controlplane.psk_file, "/etc/gossamer/psk");
  EXPECT_EQ(c.controlplane.heartbeat_interval_ms, 200u);
  EXPECT_EQ(c.controlplane.heartbeat_timeout_ms, 1000u);

  EXPECT_EQ(c.metrics.listen.to_string(), "0.0.0.0:9464");
  EXPECT_TRUE(c.metrics.enabled);

  EXPECT_EQ(c.runtime.polling, Polling::adaptive);
  EXPECT_EQ(c.runtime.stack_size_kib, 64u);
  EXPECT_EQ(c.runtime.max_outstanding, std::nullopt);  // the program's Options value
  EXPECT_EQ(c.runtime.yield_us, std::nullopt);         // likewise
}

TEST(Defaults, CommentsOnlyAndNullSectionsMeanDefaults) {
  EXPECT_EQ(load_ok("# nothing\n"), load_ok(""));
  EXPECT_EQ(load_ok("metrics:\nruntime: ~\n"), load_ok(""));
}

TEST(Defaults, PresentKeysOverrideOnlyThemselves) {
  const Config c = load_ok(
      "dataplane:\n"
      "  cores: 4\n"
      "  verbs: {gid_index: 3}\n"
      "  yield_us: 0\n"
      "runtime: {polling: busy, max_outstanding: 0, yield_us: 250}\n");
  Config expected = load_ok("");
  expected.dataplane.cores = 4;
  expected.dataplane.verbs.gid_index = 3;
  expected.dataplane.yield_us = 0;  // sleep right after the spin
  expected.runtime.polling = Polling::busy;
  expected.runtime.max_outstanding = 0;  // set: no bound
  expected.runtime.yield_us = 250;
  EXPECT_EQ(c, expected);
}

TEST(Defaults, StandaloneHostTakesItsNameAndControlPortFromTheFile) {
  const Config c = load_ok(
      "host: {name: dev}\n"
      "controlplane: {listen: '[::]:7710'}\n");
  ASSERT_EQ(c.rack.hosts.size(), 1u);
  EXPECT_EQ(c.host.name, "dev");
  EXPECT_EQ(c.self().name, "dev");
  EXPECT_EQ(c.self().control.to_string(), "127.0.0.1:7710");
  EXPECT_TRUE(c.controlplane.listen.ipv6);
}

TEST(Defaults, HostIsFoundByNameOrIndex) {
  const std::string rack =
      "rack:\n"
      "  hosts:\n"
      "    - {name: a, control: 10.0.0.1:7700, data: 10.0.0.1:7800}\n"
      "    - {name: b, control: 10.0.0.2:7700, data: 10.0.0.2:7800, mac: '02:00:00:00:00:02'}\n";
  const Config by_name = load_ok("host: {name: b}\n" + rack);
  EXPECT_EQ(by_name.host.index, 1u);
  const Config by_index = load_ok("host: {index: 1}\n" + rack);
  EXPECT_EQ(by_index.host.name, "b");
  EXPECT_EQ(by_index.self().mac, (MacAddress{2, 0, 0, 0, 0, 2}));
  EXPECT_EQ(load_ok("host: {name: b, index: 1}\n" + rack), by_name);
}

TEST(Defaults, HostPlaceholderInSocketIsReplaced) {
  const Config c = load_ok(
      "host: {name: n1}\n"
      "dataplane: {socket: '/run/gossamer/{host}/dp.sock'}\n");
  EXPECT_EQ(c.dataplane.socket, "/run/gossamer/n1/dp.sock");
}

TEST(Defaults, IntegersMayBeHexOrTagged) {
  const Config c = load_ok(
      "slots: {primary_bytes: 0x100, overflow_bytes: !!int 0o200}\n"
      "metrics: {enabled: False}\n");
  EXPECT_EQ(c.slots.primary_bytes, 256u);
  EXPECT_EQ(c.slots.overflow_bytes, 128u);
  EXPECT_FALSE(c.metrics.enabled);
}

TEST(Result, ErrorsIsEmptyWhenOk) {
  const auto r = load_string("", "t.yaml");
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_TRUE(r.errors().empty());
}

TEST(Enums, PrintAsTheirYamlSpelling) {
  EXPECT_EQ(to_string(Polling::busy), "busy");
  EXPECT_EQ(to_string(Polling::adaptive), "adaptive");
  EXPECT_EQ(to_string(Transport::udp), "udp");
  EXPECT_EQ(to_string(Transport::verbs), "verbs");
}

}  // namespace
}  // namespace gossamer::config
