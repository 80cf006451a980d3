// How `gossamerctl top` prints numbers (top_cmd.cpp): short, with "-" for
// what is not known (no rate yet, a ratio over nothing).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

namespace gossamer::ctl::numbers {

inline std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// About 6 characters: 0, 9.99, 999.9, 99999, 999.9k, 999.9M, 999.9G, 1e+15
inline std::string compact(double v) {
  if (!std::isfinite(v)) return "-";
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a < 10) return format("%.2f", v);
  if (a < 1000) return format("%.1f", v);
  if (a < 1e5) return format("%.0f", v);
  if (a < 1e6) return format("%.1fk", v / 1e3);
  if (a < 1e9) return format("%.1fM", v / 1e6);
  if (a < 1e12) return format("%.1fG", v / 1e9);
  return format("%.0e", v);  // nonsense from the network stays short
}

// Gauges that count things: integers as such.
inline std::string count(double v) {
  return std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e5 ? format("%.0f", v) : compact(v);
}

inline std::string with_unit(const std::string& v, const char* unit) { return v == "-" ? v : v + unit; }

inline std::string per_second(std::optional<double> d, double seconds) {
  return d && seconds > 0 ? compact(*d / seconds) : "-";
}

inline std::string percent(std::optional<double> part, std::optional<double> a, std::optional<double> b) {
  if (!part || !a || !b || !(*a + *b > 0)) return "-";
  const double p = 100 * *part / (*a + *b);
  return std::isfinite(p) ? format("%.1f", std::clamp(p, 0.0, 100.0)) : "-";
}

inline std::string ratio(std::optional<double> num, std::optional<double> den) {
  return num && den && *den > 0 ? compact(*num / *den) : "-";
}

// Seconds per slot as nanoseconds, e.g. "310ns".
inline std::string ns_per(std::optional<double> seconds, std::optional<double> slots) {
  return with_unit(seconds ? ratio(*seconds * 1e9, slots) : "-", "ns");
}

}  // namespace gossamer::ctl::numbers
