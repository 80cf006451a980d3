// Internal: turning YAML text into the one document the loader reads.
#pragma once

#include <optional>
#include <string>

#include <yaml-cpp/yaml.h>

#include "reader.hpp"

namespace gossamer::config::detail {

// The first document of `text` (a null node for an empty stream). Reports
// YAML syntax errors and a second, non-empty document to `diag`; returns
// nullopt after a syntax error.
std::optional<YAML::Node> parse_document(const std::string& text, Diagnostics& diag);

}  // namespace gossamer::config::detail
