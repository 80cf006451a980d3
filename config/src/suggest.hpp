// Internal: "did you mean" suggestions for unknown keys.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gossamer::config::detail {

// Case-insensitive optimal-string-alignment distance (Levenshtein plus
// transposition of neighbours, so "drvier" is one edit from "driver").
std::size_t edit_distance(std::string_view a, std::string_view b);

// The known key `unknown` most likely meant, if any is close enough: within
// 1 + len/4 edits, or one containing the other ("polling_mode" ->
// "polling"). Ties go to the earlier key.
std::optional<std::string> closest_key(std::string_view unknown,
                                       const std::vector<std::string>& known);

}  // namespace gossamer::config::detail
