// Each error class of config.hpp: the exact text of Error::to_string(), so
// message, key path, line and column (1-based) are all pinned down.
#include <gtest/gtest.h>

#include "test_util.hpp"

namespace gossamer::config::test {
namespace {

// Two valid hosts, for tests about rack.hosts and host.
constexpr std::string_view kRack =
    "rack:\n"
    "  hosts:\n"
    "    - {name: a, control: 10.0.0.1:7700, data: 10.0.0.1:7800}\n"
    "    - {name: b, control: 10.0.0.2:7700, data: 10.0.0.2:7800}\n";

std::string with_rack(std::string_view host) { return std::string(host) + std::string(kRack); }

TEST(Errors, UnknownKeySuggestsTheClosestKnownKey) {
  EXPECT_EQ(error_of("dataplane:\n"
                     "  polling_mode: busy\n"),
            "t.yaml:2:3: dataplane.polling_mode: unknown key 'polling_mode' (did you mean 'polling'?)");
  EXPECT_EQ(error_of("metric:\n"
                     "  enabled: true\n"),
            "t.yaml:1:1: metric: unknown key 'metric' (did you mean 'metrics'?)");
  EXPECT_EQ(error_of("dataplane:\n"
                     "  verbs: {device: mlx5_0, gid_idx: 3}\n"),
            "t.yaml:2:27: dataplane.verbs.gid_idx: unknown key 'gid_idx' (did you mean 'gid_index'?)");
}

TEST(Errors, UnknownKeyWithoutCloseMatchHasNoSuggestion) {
  EXPECT_EQ(error_of("connections:\n"
                     "  frobnicate: 1\n"),
            "t.yaml:2:3: connections.frobnicate: unknown key 'frobnicate'");
}

TEST(Errors, DuplicateKey) {
  EXPECT_EQ(error_of("runtime:\n"
                     "  polling: busy\n"
                     "  polling: adaptive\n"),
            "t.yaml:3:3: runtime.polling: duplicate key 'polling' (first defined at line 2)");
}

TEST(Errors, WrongType) {
  EXPECT_EQ(error_of("connections:\n"
                     "  credits: abc\n"),
            "t.yaml:2:12: connections.credits: expected an integer, got 'abc'");
  EXPECT_EQ(error_of("slots:\n"
                     "  primary_bytes: \"128\"\n"),
            "t.yaml:2:18: slots.primary_bytes: expected an integer, got string '128'");
  EXPECT_EQ(error_of("metrics:\n"
                     "  enabled: yes\n"),
            "t.yaml:2:12: metrics.enabled: expected a boolean (true or false), got 'yes'");
  EXPECT_EQ(error_of("dataplane:\n"
                     "  socket: [a, b]\n"),
            "t.yaml:2:11: dataplane.socket: expected a string, got a sequence");
  EXPECT_EQ(error_of("dataplane:\n"
                     "  eal_args: --no-huge\n"),
            "t.yaml:2:13: dataplane.eal_args: expected a sequence, got '--no-huge'");
  EXPECT_EQ(error_of("dataplane:\n"
                     "  eal_args: [-m, {a: 1}]\n"),
            "t.yaml:2:18: dataplane.eal_args[1]: expected a string, got a mapping");
  EXPECT_EQ(error_of("metrics: 5\n"), "t.yaml:1:10: metrics: expected a mapping, got '5'");
}

TEST(Errors, EmptyValueIsNullAndPointsAtItsKey) {
  // yaml-cpp places an empty value at the next token; the key is where the
  // user has to look.
  EXPECT_EQ(error_of("runtime:\n"
                     "  stack_size_kib:\n"
                     "metrics: {}\n"),
            "t.yaml:2:3: runtime.stack_size_kib: expected an integer, got null");
}

TEST(Errors, OutOfRange) {
  EXPECT_EQ(error_of("dataplane:\n"
                     "  cores: 0\n"),
            "t.yaml:2:10: dataplane.cores: value 0 out of range [1, 8]");
  EXPECT_EQ(error_of("connections: {scheduler_interval_us: 99999999999999999999999}\n"),
            "t.yaml:1:38: connections.scheduler_interval_us: value 99999999999999999999999 "
            "out of range [10, 10000000]");
  EXPECT_EQ(error_of("dataplane:\n"
                     "  verbs:\n"
                     "    port: -1\n"),
            "t.yaml:3:11: dataplane.verbs.port: value -1 out of range [1, 255]");
}

TEST(Errors, Cpus) {
  EXPECT_EQ(error_of("dataplane:\n"
                     "  cores: 2\n"
                     "  cpus: [3]\n"),
            "t.yaml:3:9: dataplane.cpus: 1 CPUs for 2 polling cores (dataplane.cores): give one CPU per core");
  EXPECT_EQ(error_of("dataplane: {cores: 2, cpus: [1, 1]}\n"),
            "t.yaml:1:33: dataplane.cpus[1]: value 1 is listed twice");
  EXPECT_EQ(error_of("dataplane: {cpus: [x]}\n"), "t.yaml:1:20: dataplane.cpus[0]: expected an integer, got 'x'");
  EXPECT_EQ(error_of("dataplane: {cpus: [-1]}\n"), "t.yaml:1:20: dataplane.cpus[0]: value -1 out of range [0, 4095]");
  EXPECT_EQ(error_of("dataplane: {cpus: 3}\n"), "t.yaml:1:19: dataplane.cpus: expected a sequence, got '3'");
  const auto ok = load_string("dataplane: {cores: 2, cpus: [1, 0]}\n", "t.yaml");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok.config().dataplane.cpus, (std::vector<std::uint32_t>{1, 0}));
}

TEST(Errors, MaxOutstandingIsABoundedInteger) {
  EXPECT_EQ(error_of("runtime:\n"
                     "  max_outstanding: -1\n"),
            "t.yaml:2:20: runtime.max_outstanding: value -1 out of range [0, 16777216]");
  EXPECT_EQ(error_of("runtime: {polling: busy, max_outstanding: '512'}\n"),
            "t.yaml:1:43: runtime.max_outstanding: expected an integer, got string '512'");
}

TEST(Errors, YieldUsIsMicrosecondsUpToASecond) {
  EXPECT_EQ(error_of("dataplane:\n"
                     "  yield_us: -1\n"),
            "t.yaml:2:13: dataplane.yield_us: value -1 out of range [0, 1000000]");
  EXPECT_EQ(error_of("dataplane: {yield_us: 1000001}\n"),
            "t.yaml:1:23: dataplane.yield_us: value 1000001 out of range [0, 1000000]");
  EXPECT_EQ(error_of("dataplane: {yield_us: 2ms}\n"),
            "t.yaml:1:23: dataplane.yield_us: expected an integer, got '2ms'");
  EXPECT_EQ(error_of("runtime: {yield_us: 1.5}\n"),
            "t.yaml:1:21: runtime.yield_us: expected an integer, got '1.5'");
  EXPECT_EQ(error_of("runtime:\n"
                     "  yield_us: 5000000\n"),
            "t.yaml:2:13: runtime.yield_us: value 5000000 out of range [0, 1000000]");
  EXPECT_EQ(error_of("dataplane: {yeld_us: 10}\n"),
            "t.yaml:1:13: dataplane.yeld_us: unknown key 'yeld_us' (did you mean 'yield_us'?)");
}

TEST(Errors, NotAMultiple) {
  EXPECT_EQ(error_of("slots:\n"
                     "  overflow_bytes: 100\n"),
            "t.yaml:2:19: slots.overflow_bytes: value 100 is not a multiple of 64");
}

TEST(Errors, InvalidEnum) {
  EXPECT_EQ(error_of("runtime:\n"
                     "  polling: spin\n"),
            "t.yaml:2:12: runtime.polling: expected one of busy, adaptive; got 'spin'");
  EXPECT_EQ(error_of("dataplane: {transport: {x: 1}}\n"),
            "t.yaml:1:24: dataplane.transport: expected one of udp, verbs; got a mapping");
  EXPECT_EQ(error_of("dataplane: {transport: rdma}\n"),
            "t.yaml:1:24: dataplane.transport: expected one of udp, verbs; got 'rdma'");
}

// dataplane.driver became dataplane.transport (issue 22): an old file says
// so instead of "unknown key".
TEST(Errors, TheOldDriverKeyNamesItsSuccessor) {
  EXPECT_EQ(errors_of("dataplane:\n"
                      "  driver: dpdk\n"),
            std::vector<std::string>{"t.yaml:2:11: dataplane.driver: 'driver' was renamed: transport: udp | verbs "
                                     "(udp is what driver dpdk or auto was)"});
}

TEST(Errors, VerbsSettings) {
  EXPECT_EQ(error_of("dataplane:\n"
                     "  verbs:\n"
                     "    signal_interval: 64\n"
                     "    max_send_wr: 100\n"),
            "t.yaml:4:18: dataplane.verbs.max_send_wr: value 100 must be at least 2 * signal_interval (64)");
  EXPECT_EQ(error_of("dataplane:\n"
                     "  verbs: {signal_interval: 200}\n"),
            "t.yaml:2:28: dataplane.verbs.signal_interval: value 256 must be at least 2 * signal_interval (200)");
  EXPECT_EQ(error_of("dataplane:\n"
                     "  verbs: {path_mtu: 1500}\n"),
            "t.yaml:2:21: dataplane.verbs.path_mtu: expected one of 256, 512, 1024, 2048, 4096; got 1500");
  EXPECT_EQ(error_of("dataplane:\n"
                     "  verbs: {ring_kib: 32}\n"),
            "t.yaml:2:21: dataplane.verbs.ring_kib: value 32 out of range [128, 1024]");
  EXPECT_EQ(error_of("dataplane:\n"
                     "  verbs: {retry_count: 8}\n"),
            "t.yaml:2:24: dataplane.verbs.retry_count: value 8 out of range [0, 7]");
  EXPECT_EQ(errors_of("dataplane:\n"
                      "  transport: verbs\n"
                      "  verbs: {device: mlx5_0, port: 1, gid_index: 3, signal_interval: 32, max_send_wr: 64, "
                      "path_mtu: 4096, timeout: 18}\n"),
            std::vector<std::string>{});
}

TEST(Errors, MissingRequiredKeyPointsAtTheMapping) {
  EXPECT_EQ(error_of("rack:\n"
                     "  hosts:\n"
                     "    - name: a\n"
                     "      control: 10.0.0.1:7700\n"),
            "t.yaml:3:7: rack.hosts[0].data: missing required key");
  EXPECT_EQ(error_of("rack: {}\n"), "t.yaml:1:7: rack.hosts: missing required key");
}

TEST(Errors, EmptyValues) {
  EXPECT_EQ(error_of("rack:\n"
                     "  hosts: []\n"),
            "t.yaml:2:10: rack.hosts: expected at least one host");
  EXPECT_EQ(error_of("controlplane:\n"
                     "  psk_file: ''\n"),
            "t.yaml:2:13: controlplane.psk_file: must not be empty");
}

TEST(Errors, DuplicateHostName) {
  EXPECT_EQ(error_of("rack:\n"
                     "  hosts:\n"
                     "    - {name: a, control: 10.0.0.1:7700, data: 10.0.0.1:7800}\n"
                     "    - {name: a, control: 10.0.0.2:7700, data: 10.0.0.2:7800}\n"
                     "host: {index: 0}\n"),
            "t.yaml:4:14: rack.hosts[1].name: duplicate host name 'a' (also rack.hosts[0])");
}

TEST(Errors, SharedAddress) {
  EXPECT_EQ(error_of("host: {index: 0}\n"
                     "rack:\n"
                     "  hosts:\n"
                     "    - {name: a, control: 10.0.0.1:7700, data: 10.0.0.1:7800}\n"
                     "    - {name: b, control: 10.0.0.2:7700, data: 10.0.0.1:7800}\n"),
            "t.yaml:5:47: rack.hosts[1].data: address '10.0.0.1:7800' is also used by "
            "rack.hosts[0].data");
  EXPECT_EQ(error_of("metrics:\n"
                     "  listen: 127.0.0.1:7700\n"),
            "t.yaml:2:11: metrics.listen: address '127.0.0.1:7700' is also used by "
            "controlplane.listen");
}

TEST(Errors, BadAddress) {
  EXPECT_EQ(error_of("controlplane:\n"
                     "  listen: 0.0.0.0\n"),
            "t.yaml:2:11: controlplane.listen: bad address '0.0.0.0' "
            "(expected IP:PORT, e.g. 10.0.0.1:7700)");
  EXPECT_EQ(error_of("controlplane:\n"
                     "  listen: localhost:7700\n"),
            "t.yaml:2:11: controlplane.listen: bad address 'localhost:7700' "
            "(expected IP:PORT, e.g. 10.0.0.1:7700)");
  EXPECT_EQ(error_of("metrics:\n"
                     "  listen: 0.0.0.0:70000\n"),
            "t.yaml:2:11: metrics.listen: bad address '0.0.0.0:70000' (port must be in [0, 65535])");
  EXPECT_EQ(error_of("rack:\n"
                     "  hosts:\n"
                     "    - name: a\n"
                     "      control: 10.0.0.1:0\n"
                     "      data: '[fd00::1]:7800'\n"),
            "2 errors:\n"
            "  t.yaml:4:16: rack.hosts[0].control: bad address '10.0.0.1:0' "
            "(port must be in [1, 65535])\n"
            "  t.yaml:5:13: rack.hosts[0].data: bad address '[fd00::1]:7800' "
            "(the dataplane needs an IPv4 address)");
}

TEST(Errors, BadMacAndHostName) {
  EXPECT_EQ(error_of("rack:\n"
                     "  hosts:\n"
                     "    - name: a\n"
                     "      control: 10.0.0.1:7700\n"
                     "      data: 10.0.0.1:7800\n"
                     "      mac: 02:00:00:00:00\n"),
            "t.yaml:6:12: rack.hosts[0].mac: bad MAC address '02:00:00:00:00' "
            "(expected six hex bytes like 02:00:00:00:00:01)");
  EXPECT_EQ(error_of("host:\n"
                     "  name: my host\n"),
            "t.yaml:2:9: host.name: bad host name 'my host' (1 to 63 letters, digits, '.', '-' or '_')");
}

TEST(Errors, HostMustNameARackEntry) {
  EXPECT_EQ(error_of(with_rack("host: {index: 2}\n")),
            "t.yaml:1:15: host.index: value 2 out of range [0, 1]");
  EXPECT_EQ(error_of(with_rack("host: {name: c}\n")),
            "t.yaml:1:14: host.name: no host named 'c' in rack.hosts");
  EXPECT_EQ(error_of(with_rack("host: {name: a, index: 1}\n")),
            "t.yaml:1:14: host.name: 'a' does not match rack.hosts[1].name 'b'");
  EXPECT_EQ(error_of(with_rack("")),
            "t.yaml:1:1: host: missing required key (the rack has 2 hosts; set host.name or "
            "host.index)");
  EXPECT_EQ(error_of("host: {index: 1}\n"),
            "t.yaml:1:15: host.index: value 1 out of range [0, 0]");
}

TEST(Errors, MaxActiveQpsLeavesEveryOtherHostOne) {
  const std::string three = "host: {index: 0}\n" + std::string(kRack) +
                            "    - {name: c, control: 10.0.0.3:7700, data: 10.0.0.3:7800}\n";
  EXPECT_EQ(error_of(three + "connections: {max_active_qps: 1}\n"),
            "t.yaml:7:31: connections.max_active_qps: value 1 is less than the 2 other hosts of the rack "
            "(each keeps one connection active)");
  EXPECT_TRUE(load_string(three + "connections: {max_active_qps: 2}\n", "t.yaml"));
}

TEST(Errors, HeartbeatTimeoutMustExceedInterval) {
  EXPECT_EQ(error_of("controlplane:\n"
                     "  heartbeat_interval_ms: 500\n"
                     "  heartbeat_timeout_ms: 500\n"),
            "t.yaml:3:25: controlplane.heartbeat_timeout_ms: value 500 must be greater than "
            "heartbeat_interval_ms (500)");
  // Against a default timeout, the position is the section's.
  EXPECT_EQ(error_of("controlplane:\n"
                     "  heartbeat_interval_ms: 2000\n"),
            "t.yaml:2:3: controlplane.heartbeat_timeout_ms: value 1000 must be greater than "
            "heartbeat_interval_ms (2000)");
  // An invalid interval is one error, not also an ordering error.
  EXPECT_EQ(error_of("controlplane:\n"
                     "  heartbeat_interval_ms: 0\n"
                     "  heartbeat_timeout_ms: 0\n"),
            "2 errors:\n"
            "  t.yaml:2:26: controlplane.heartbeat_interval_ms: value 0 out of range [1, 60000]\n"
            "  t.yaml:3:25: controlplane.heartbeat_timeout_ms: value 0 out of range [1, 600000]");
}

TEST(Errors, SocketPathTooLong) {
  EXPECT_EQ(error_of("dataplane:\n"
                     "  socket: /" + std::string(92, 'd') + "/dataplane.sock\n"),
            "t.yaml:2:11: dataplane.socket: path is 108 bytes, a unix socket path holds at most 107");
  // {host} counts as the longest host name (63 bytes).
  EXPECT_EQ(error_of("dataplane:\n"
                     "  socket: /run/gossamer/{host}/" + std::string(25, 'x') + ".sock\n"),
            "t.yaml:2:11: dataplane.socket: path is 108 bytes, a unix socket path holds at most 107");
  EXPECT_EQ(errors_of("dataplane:\n"
                      "  socket: /run/gossamer/{host}/" + std::string(24, 'x') + ".sock\n"),
            std::vector<std::string>{});
}

TEST(Errors, YamlSyntax) {
  EXPECT_EQ(error_of("dataplane:\n"
                     "  cores: [1,\n"),
            "t.yaml:3:1: YAML syntax error: end of sequence flow not found");
  EXPECT_EQ(error_of("runtime:\n"
                     "\tpolling: busy\n"),
            "t.yaml:2:9: YAML syntax error: illegal map value");
  // yaml-cpp 0.7's LoadAll loops forever on these (found by fuzzing).
  EXPECT_EQ(error_of(", x\n"), "t.yaml:1:1: YAML syntax error: unexpected ','");
  EXPECT_EQ(error_of("{metrics: {}}\n"
                     ", x\n"),
            "t.yaml:2:1: YAML syntax error: unexpected ','");
}

TEST(Errors, DocumentLevel) {
  EXPECT_EQ(error_of("- a\n"
                     "- b\n"),
            "t.yaml:1:1: expected a mapping, got a sequence");
  EXPECT_EQ(error_of("metrics: {enabled: true}\n"
                     "---\n"
                     "runtime: {}\n"),
            "t.yaml:3:1: expected one YAML document, found another");
  // A trailing document marker is harmless.
  EXPECT_EQ(errors_of("metrics: {enabled: true}\n---\n"), std::vector<std::string>{});
}

TEST(Errors, UnreadableFileHasNoPosition) {
  const auto r = load_file("/nonexistent/gossamer.yaml");
  ASSERT_EQ(r.errors().size(), 1u);
  EXPECT_EQ(r.errors()[0].to_string(),
            "/nonexistent/gossamer.yaml: cannot read file: No such file or directory");
  const auto dir = load_file("/");
  ASSERT_EQ(dir.errors().size(), 1u);
  EXPECT_EQ(dir.errors()[0].to_string(), "/: cannot read file: Is a directory");
}

TEST(Errors, AllErrorsAreReportedAtOnceInDocumentOrder) {
  EXPECT_EQ(errors_of("runtime:\n"
                      "  polling: spin\n"
                      "  stack_size: 64\n"
                      "dataplane:\n"
                      "  cores: 100\n"
                      "  verbs: {port: x}\n"
                      "slots:\n"
                      "  primary_bytes: 65\n"
                      "rack:\n"
                      "  hosts:\n"
                      "    - name: a\n"
                      "      data: 10.0.0.1\n"),
            (std::vector<std::string>{
                "t.yaml:2:12: runtime.polling: expected one of busy, adaptive; got 'spin'",
                "t.yaml:3:3: runtime.stack_size: unknown key 'stack_size' "
                "(did you mean 'stack_size_kib'?)",
                "t.yaml:5:10: dataplane.cores: value 100 out of range [1, 8]",
                "t.yaml:6:17: dataplane.verbs.port: expected an integer, got 'x'",
                "t.yaml:8:18: slots.primary_bytes: value 65 is not a multiple of 64",
                "t.yaml:11:7: rack.hosts[0].control: missing required key",
                "t.yaml:12:13: rack.hosts[0].data: bad address '10.0.0.1' "
                "(expected IP:PORT, e.g. 10.0.0.1:7700)",
            }));
}

TEST(Errors, ErrorFieldsAreSeparate) {
  const auto r = load_string("dataplane:\n  cores: 0\n", "x/y.yaml");
  ASSERT_EQ(r.errors().size(), 1u);
  const Error& e = r.errors()[0];
  EXPECT_EQ(e.file, "x/y.yaml");
  EXPECT_EQ(e.line, 2);
  EXPECT_EQ(e.column, 10);
  EXPECT_EQ(e.path, "dataplane.cores");
  EXPECT_EQ(e.message, "value 0 out of range [1, 8]");
}

}  // namespace
}  // namespace gossamer::config::test
