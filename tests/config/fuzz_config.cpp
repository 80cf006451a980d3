// libFuzzer target for the configuration loader (DESIGN.md §5: fuzzers on
// every parser). Any input must yield a Config or errors: no crash, no
// exception, no sanitizer report, and errors always carry a valid position.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gossamer/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  const auto r = gossamer::config::load_string(yaml, "fuzz.yaml");
  if (r.ok() != r.errors().empty()) std::abort();
  for (const auto& e : r.errors())
    if (e.line < 1 || e.column < 1 || e.message.empty()) std::abort();
  if (r.ok() && r.config().host.index >= r.config().rack.hosts.size()) std::abort();
  return 0;
}
