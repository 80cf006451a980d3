// The endpoint exchange files (verbs_exchange.hpp).
#include "verbs_exchange.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace gossamer::dataplane::verbs {

namespace {

bool parse_u64(const std::string& s, std::uint64_t max, std::uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const std::uint64_t d = std::uint64_t(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  if (v > max) return false;
  *out = v;
  return true;
}

bool parse_gid(const std::string& s, Gid* out) {
  if (s.size() != 32) return false;
  for (std::size_t i = 0; i < 16; ++i) {
    unsigned v = 0;
    for (std::size_t j = 0; j < 2; ++j) {
      const char c = s[2 * i + j];
      unsigned d;
      if (c >= '0' && c <= '9') d = unsigned(c - '0');
      else if (c >= 'a' && c <= 'f') d = unsigned(c - 'a' + 10);
      else return false;
      v = v * 16 + d;
    }
    (*out)[i] = std::uint8_t(v);
  }
  return true;
}

}  // namespace

std::string format_entry(const ExchangeEntry& e) {
  char gid[33];
  for (std::size_t i = 0; i < 16; ++i) std::snprintf(gid + 2 * i, 3, "%02x", e.gid[i]);
  char line[256];
  std::snprintf(line, sizeof line, "qp %u %" PRIu64 " %s %u %u %u %u %u %" PRIu64 " %u %u\n", e.host, e.boot, gid,
                unsigned(e.lid), e.conn, e.ep.qpn, e.ep.psn, e.ep.rkey, e.ep.ring_addr, e.ep.ring_units,
                e.ep.generation);
  return line;
}

std::string format_entries(const std::vector<ExchangeEntry>& es) {
  std::string out;
  for (const ExchangeEntry& e : es) out += format_entry(e);
  return out;
}

std::string check_entry(const ExchangeEntry& e, std::uint32_t hosts, std::uint32_t conns) {
  if (e.host >= hosts) return "host " + std::to_string(e.host) + " (the rack has " + std::to_string(hosts) + ")";
  if (e.conn >= conns) return "connection " + std::to_string(e.conn) + " (" + std::to_string(conns) + " per pair)";
  if (e.boot == 0) return "no incarnation";
  if (e.ep.qpn == 0 || e.ep.qpn > 0xffffff) return "QPN " + std::to_string(e.ep.qpn);
  if (e.ep.psn > 0xffffff) return "PSN " + std::to_string(e.ep.psn) + " beyond 24 bits";
  if (e.ep.ring_units == 0 || e.ep.ring_units > 16384) return std::to_string(e.ep.ring_units) + " ring units";
  if (e.ep.ring_addr == 0 || e.ep.ring_addr + std::uint64_t(e.ep.ring_units) * kUnitBytes < e.ep.ring_addr)
    return "ring address " + std::to_string(e.ep.ring_addr);
  return "";
}

std::vector<ExchangeEntry> parse_entries(const std::string& text, std::uint32_t hosts, std::uint32_t conns,
                                         std::uint64_t* bad, std::string* first_bad) {
  std::vector<ExchangeEntry> out;
  std::istringstream in(text);
  std::string line;
  std::size_t n = 0;
  auto refuse = [&](const std::string& why) {
    if (bad) ++*bad;
    if (first_bad && first_bad->empty()) *first_bad = "line " + std::to_string(n) + ": " + why;
  };
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    std::istringstream words(line);
    std::string w[12], extra;
    int got = 0;
    while (got < 12 && words >> w[got]) ++got;
    if (got != 12 || (words >> extra) || w[0] != "qp") {
      refuse("not 'qp' and 11 fields");
      continue;
    }
    ExchangeEntry e;
    std::uint64_t v[11] = {};
    bool ok = parse_gid(w[3], &e.gid);
    const std::uint64_t max[12] = {0, UINT32_MAX, UINT64_MAX, 0, 0xffff, UINT32_MAX, UINT32_MAX, UINT32_MAX,
                                   UINT32_MAX, UINT64_MAX, UINT32_MAX, UINT32_MAX};
    for (int i = 1; i < 12 && ok; ++i)
      if (i != 3) ok = parse_u64(w[i], max[i], &v[i - 1]);
    if (!ok) {
      refuse("a field is not a number in range");
      continue;
    }
    e.host = std::uint32_t(v[0]);
    e.boot = v[1];
    e.lid = std::uint16_t(v[3]);
    e.conn = std::uint32_t(v[4]);
    e.ep.qpn = std::uint32_t(v[5]);
    e.ep.psn = std::uint32_t(v[6]);
    e.ep.rkey = std::uint32_t(v[7]);
    e.ep.ring_addr = v[8];
    e.ep.ring_units = std::uint32_t(v[9]);
    e.ep.generation = std::uint32_t(v[10]);
    if (std::string why = check_entry(e, hosts, conns); !why.empty()) {
      refuse(why);
      continue;
    }
    out.push_back(e);
  }
  return out;
}

std::string write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return tmp + ": " + std::strerror(errno);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = tmp + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return why;
    }
    done += std::size_t(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = path + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return why;
  }
  return "";
}

bool read_small_file(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out->append(buf, std::size_t(n));
    if (out->size() > (1u << 20)) break;
  }
  ::close(fd);
  return out->size() <= (1u << 20);
}

}  // namespace gossamer::dataplane::verbs
