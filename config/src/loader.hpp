// Internal: the loader with a trace of defaulted keys, for tests that check
// that config/examples/defaults.yaml spells out every key.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gossamer/config.hpp"

namespace gossamer::config::detail {

// load_string, also appending to `defaulted` the path of every key that was
// absent and so took its default (e.g. "metrics.enabled").
Result load_string_traced(std::string_view yaml, std::string_view name_for_errors,
                          std::vector<std::string>& defaulted);

}  // namespace gossamer::config::detail
