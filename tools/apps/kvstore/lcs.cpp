// LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]: Redis 7.0's
// lcsCommand on the two values, once the loop has both (keyspace.cpp reads
// them inside the command's transaction: atomic across shards).
#include <vector>

#include "server.hpp"

namespace hydra {

void lcs_reply(std::string& out, bool resp3, const std::string& a, const std::string& b,
               const std::vector<std::string_view>& args) {
  long long minmatchlen = 0;
  bool getlen = false, getidx = false, withmatchlen = false;
  for (std::size_t j = 3; j < args.size(); ++j) {
    const std::string opt = resp::lower(args[j]);
    const bool more = j + 1 < args.size();
    if (opt == "idx") getidx = true;
    else if (opt == "len") getlen = true;
    else if (opt == "withmatchlen") withmatchlen = true;
    else if (opt == "minmatchlen" && more) {
      if (!resp::parse_int64(args[++j], minmatchlen)) return resp::error(out, kNotInteger);
      if (minmatchlen < 0) minmatchlen = 0;
    } else {
      return resp::error(out, "ERR syntax error");
    }
  }
  if (getlen && getidx) return resp::error(out, "ERR If you want both the length and indexes, please just use IDX.");
  if (a.size() >= UINT32_MAX - 1 || b.size() >= UINT32_MAX - 1) return resp::error(out, "ERR String too long for LCS");
  const std::uint32_t alen = std::uint32_t(a.size()), blen = std::uint32_t(b.size());
  const unsigned long long cells = (unsigned long long)(alen + 1) * (blen + 1);
  if (cells * sizeof(std::uint32_t) > g_config.limits.max_bulk)
    return resp::error(out, "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
  std::vector<std::uint32_t> lcs(cells);
  auto at = [&](std::uint32_t i, std::uint32_t j) -> std::uint32_t& { return lcs[j + std::size_t(i) * (blen + 1)]; };
  for (std::uint32_t i = 1; i <= alen; ++i)
    for (std::uint32_t j = 1; j <= blen; ++j)
      at(i, j) = a[i - 1] == b[j - 1] ? at(i - 1, j - 1) + 1 : std::max(at(i - 1, j), at(i, j - 1));

  std::uint32_t idx = at(alen, blen);
  const bool compute = getidx || !getlen;
  std::string result(compute ? idx : 0, '\0');
  std::string matches;  // IDX's ranges, counted in `ranges`
  std::size_t ranges = 0;
  std::uint32_t as = alen, ae = 0, bs = 0, be = 0;  // as == alen: no range open
  std::uint32_t i = alen, j = blen;
  while (compute && i > 0 && j > 0) {
    bool emit = false;
    if (a[i - 1] == b[j - 1]) {
      result[idx - 1] = a[i - 1];
      if (as == alen) {
        as = ae = i - 1;
        bs = be = j - 1;
      } else if (as == i && bs == j) {
        --as;
        --bs;
      } else {
        emit = true;
      }
      if (as == 0 || bs == 0) emit = true;
      --idx;
      --i;
      --j;
    } else {
      if (at(i - 1, j) > at(i, j - 1)) --i;
      else --j;
      if (as != alen) emit = true;
    }
    const std::uint32_t len = ae - as + 1;
    if (emit) {
      if (getidx && (minmatchlen == 0 || len >= minmatchlen)) {
        resp::array(matches, 2 + (withmatchlen ? 1 : 0));
        resp::array(matches, 2);
        resp::integer(matches, as);
        resp::integer(matches, ae);
        resp::array(matches, 2);
        resp::integer(matches, bs);
        resp::integer(matches, be);
        if (withmatchlen) resp::integer(matches, len);
        ++ranges;
      }
      as = alen;
    }
  }
  if (getidx) {
    resp::map(out, 2, resp3);
    resp::bulk(out, "matches");
    resp::array(out, ranges);
    out += matches;
    resp::bulk(out, "len");
    resp::integer(out, at(alen, blen));
  } else if (getlen) {
    resp::integer(out, at(alen, blen));
  } else {
    resp::bulk(out, result);
  }
}

}  // namespace hydra
