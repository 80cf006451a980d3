#include "suggest.hpp"

#include <algorithm>
#include <cctype>

namespace gossamer::config::detail {

namespace {

char lower(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

std::string lowered(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), lower);
  return out;
}

}  // namespace

std::size_t edit_distance(std::string_view a_in, std::string_view b_in) {
  const std::string a = lowered(a_in);
  const std::string b = lowered(b_in);
  // Full table: keys are short, and transpositions need two rows back.
  std::vector<std::vector<std::size_t>> d(a.size() + 1,
                                          std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::optional<std::string> closest_key(std::string_view unknown,
                                       const std::vector<std::string>& known) {
  const std::string u = lowered(unknown);
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (const auto& k : known) {
    const std::size_t d = edit_distance(u, k);
    const std::string lk = lowered(k);
    const auto& shorter = lk.size() < u.size() ? lk : u;
    const auto& longer = lk.size() < u.size() ? u : lk;
    const bool contains = shorter.size() >= 3 && longer.find(shorter) != std::string::npos;
    if (d > 1 + k.size() / 4 && !contains) continue;
    if (!best || d < best_distance) {
      best = k;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace gossamer::config::detail
