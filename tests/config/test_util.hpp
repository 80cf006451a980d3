// Helpers shared by the config tests.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gossamer/config.hpp"

namespace gossamer::config::test {

// Every error of loading `yaml` (named "t.yaml"), as to_string() lines.
inline std::vector<std::string> errors_of(std::string_view yaml) {
  std::vector<std::string> out;
  for (const auto& e : load_string(yaml, "t.yaml").errors()) out.push_back(e.to_string());
  return out;
}

// The one error of loading `yaml`, or a description of what came instead.
inline std::string error_of(std::string_view yaml) {
  const auto all = errors_of(yaml);
  if (all.size() == 1) return all[0];
  std::string out = std::to_string(all.size()) + " errors:";
  for (const auto& e : all) out += "\n  " + e;
  return out;
}

}  // namespace gossamer::config::test
