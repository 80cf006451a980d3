// Every file under config/examples must load: they are the schema's
// documentation and what users copy.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "gossamer/config.hpp"
#include "loader.hpp"

namespace gossamer::config {
namespace {

namespace fs = std::filesystem;

const fs::path kExamples = GOSSAMER_CONFIG_EXAMPLES_DIR;

std::vector<fs::path> example_files() {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(kExamples))
    if (entry.is_regular_file() && entry.path().extension() == ".yaml")
      out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Examples, AllLoadWithoutErrors) {
  const auto files = example_files();
  ASSERT_GE(files.size(), 3u) << "too few examples found in " << kExamples;
  for (const auto& f : files) {
    const auto r = load_file(f.string());
    std::string errors;
    for (const auto& e : r.errors()) errors += e.to_string() + "\n";
    EXPECT_TRUE(r.ok()) << errors;
  }
}

// defaults.yaml documents the schema: it must mention every key (only the
// optional MAC, dataplane.ports, whose absence means "the one port
// dataplane.port", and runtime.max_outstanding and runtime.yield_us, whose
// absence means "the program's own value", are left commented out), and
// with every value at its default.
TEST(Examples, DefaultsYamlSpellsOutEveryKeyWithItsDefault) {
  std::vector<std::string> defaulted;
  const auto r = detail::load_string_traced(read(kExamples / "defaults.yaml"), "defaults.yaml",
                                            defaulted);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(defaulted,
            (std::vector<std::string>{"rack.hosts[0].mac", "dataplane.ports", "runtime.max_outstanding",
                                      "runtime.yield_us"}));
  const auto empty = load_string("", "empty.yaml");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(r.config(), empty.config());
}

// The rack3 files are one shared rack file for three hosts: they must differ
// in `host` only.
TEST(Examples, Rack3FilesDifferOnlyInHost) {
  const auto rack0 = load_file((kExamples / "rack3.yaml").string());
  ASSERT_TRUE(rack0.ok());
  ASSERT_EQ(rack0.config().rack.hosts.size(), 3u);
  for (std::uint32_t i = 0; i < 3; ++i) {
    const auto file = i == 0 ? "rack3.yaml" : "rack3-host" + std::to_string(i) + ".yaml";
    const auto r = load_file((kExamples / file).string());
    ASSERT_TRUE(r.ok()) << file;
    Config c = r.config();
    EXPECT_EQ(c.host.index, i);
    EXPECT_EQ(c.host.name, "host" + std::to_string(i));
    EXPECT_EQ(c.self().control.to_string(), "198.18.0." + std::to_string(i + 1) + ":7700");
    EXPECT_EQ(c.self().data.to_string(), "198.18.0." + std::to_string(i + 1) + ":7800");
    EXPECT_EQ(c.dataplane.socket, "/run/gossamer/host" + std::to_string(i) + "/dataplane.sock");
    c.host = rack0.config().host;
    c.dataplane.socket = rack0.config().dataplane.socket;
    EXPECT_EQ(c, rack0.config()) << file;
  }
}

}  // namespace
}  // namespace gossamer::config
