// A parser for the Prometheus text exposition format 0.0.4, as gossamerd
// serves it (prometheus-cpp) and as `gossamerctl top` reads it.
//
// The text comes from the network, so the parser assumes nothing about it:
// any byte sequence is accepted, a malformed line is skipped and counted
// (the first few are described), and the output is bounded by `Limits`.
// It has no other dependency than the standard library and keeps no state,
// so it can be fuzzed on its own (parse() on arbitrary bytes).
//
// Grammar (https://prometheus.io/docs/instrumenting/exposition_formats/):
//   line      = blank | comment | sample, separated by '\n' ('\r\n' accepted)
//   comment   = '#' ... ; "# HELP name text" and "# TYPE name type" are read
//   sample    = name [ '{' [ label { ',' label } [ ',' ] ] '}' ] value [ timestamp ]
//   name      = [a-zA-Z_:][a-zA-Z0-9_:]*
//   label     = [a-zA-Z_][a-zA-Z0-9_]* '=' '"' escaped '"'    (\\ \" \n)
//   value     = a float as Go's ParseFloat reads it, NaN, +Inf, -Inf included
//   timestamp = an int64, milliseconds since the epoch
// Spaces and tabs may separate tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gossamer::ctl::exposition {

struct Label {
  std::string name;
  std::string value;  // unescaped
  bool operator==(const Label&) const = default;
};

struct Sample {
  std::string name;
  std::vector<Label> labels;  // as written (no two with the same name)
  double value = 0;
  std::optional<std::int64_t> timestamp_ms;

  // The value of label `name`, or nullopt.
  std::optional<std::string_view> label(std::string_view name) const;
};

enum class Type { untyped, counter, gauge, histogram, summary };

struct Limits {
  std::size_t max_samples = 200'000;  // beyond: the rest is ignored (truncated)
  std::size_t max_labels = 64;        // per sample; more: the line is malformed
  std::size_t max_errors = 8;         // error descriptions kept
};

struct Document {
  std::vector<Sample> samples;        // in text order
  std::map<std::string, Type> types;  // from "# TYPE" lines (bounded like samples)
  std::size_t bad_lines = 0;          // malformed lines skipped
  std::vector<std::string> errors;    // the first few: "line N: why"
  bool truncated = false;             // max_samples reached
};

Document parse(std::string_view text, const Limits& limits = {});

// One sample line (no '\n'); nullopt and `why` set when malformed.
std::optional<Sample> parse_sample(std::string_view line, std::size_t max_labels, std::string* why);

// A sample value: decimal or exponent notation with an optional sign, and
// NaN, Inf, +Inf, -Inf (case-insensitive, also "infinity"), as Go reads them.
std::optional<double> parse_value(std::string_view token);

}  // namespace gossamer::ctl::exposition
