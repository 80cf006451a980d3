// libFuzzer target for gossamerctl top's parser of the Prometheus text
// format (tools/gossamerctl/exposition.cpp): the text comes from the
// network. Any bytes must parse without a crash or an unbounded result,
// and what is accepted must be well formed:
//   - at most max_samples samples (truncated set when more), at most
//     max_errors error texts, bad_lines >= the errors kept;
//   - every sample's name matches [a-zA-Z_:][a-zA-Z0-9_:]*, its labels'
//     names [a-zA-Z_][a-zA-Z0-9_]*, no two labels with one name, at most
//     max_labels of them;
//   - a sample line printed back from what was parsed parses to the same
//     sample (escapes round-trip).
#include <cmath>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "exposition.hpp"

namespace {

namespace ex = gossamer::ctl::exposition;

void require(bool ok) {
  if (!ok) std::abort();
}

bool name_ok(const std::string& s, bool colon) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string escape(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ex::Limits lim;
  lim.max_samples = 64;
  lim.max_labels = 8;
  lim.max_errors = 4;
  ex::Document d = ex::parse(std::string_view(reinterpret_cast<const char*>(data), size), lim);
  require(d.samples.size() <= lim.max_samples);
  require(d.errors.size() <= lim.max_errors && d.bad_lines >= d.errors.size());
  for (const ex::Sample& s : d.samples) {
    require(name_ok(s.name, true));
    require(s.labels.size() <= lim.max_labels);
    for (std::size_t i = 0; i < s.labels.size(); ++i) {
      require(name_ok(s.labels[i].name, false));
      for (std::size_t j = 0; j < i; ++j) require(s.labels[i].name != s.labels[j].name);
    }
    std::string line = s.name + "{";
    for (const auto& l : s.labels) line += l.name + "=\"" + escape(l.value) + "\",";
    line += "} ";
    char num[64];
    std::snprintf(num, sizeof num, "%.17g", s.value);
    line += num;
    std::string why;
    auto again = ex::parse_sample(line, lim.max_labels, &why);
    require(again.has_value());
    require(again->name == s.name && again->labels == s.labels);
    require(again->value == s.value || (std::isnan(again->value) && std::isnan(s.value)));
  }
  return 0;
}
