// The rack secret (controlplane.psk_file): read by gossamerd for its mesh
// handshake and by the dataplane for its frame keys (config.hpp). Finding 13
// of issue 18: a weak secret could be guessed offline from one recorded
// handshake, so one that cannot hold 128 bits is refused here.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "gossamer/config.hpp"

namespace gossamer::config {

double secret_bits(const std::string& secret) {
  if (std::set<char>(secret.begin(), secret.end()).size() < 8) return 0;
  bool hex_lower = true, hex_upper = true, base64 = true, printable = true, spaces = false;
  std::size_t padding = 0;
  for (std::size_t i = 0; i < secret.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(secret[i]);
    const bool digit = c >= '0' && c <= '9';
    hex_lower &= digit || (c >= 'a' && c <= 'f');
    hex_upper &= digit || (c >= 'A' && c <= 'F');
    const bool alnum = digit || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (c == '=' && secret.find_first_not_of('=', i) == std::string::npos) {
      ++padding;  // trailing base64 padding carries nothing
    } else {
      base64 &= alnum || c == '+' || c == '/' || c == '-' || c == '_';
    }
    printable &= c >= 0x20 && c < 0x7f;
    spaces |= c == ' ';
  }
  const double n = double(secret.size());
  if (hex_lower || hex_upper) return 4 * n;
  if (base64) return 6 * (n - double(padding));
  if (printable && spaces) return 2 * n;
  if (printable) return std::log2(95.0) * n;
  return 8 * n;
}

bool load_rack_secret(const std::string& path, std::string* key, std::string* error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = "cannot open the pre-shared key file " + path + ": " + std::strerror(errno) +
             " (controlplane.psk_file; create it with e.g. 'head -c 32 /dev/urandom | base64 > " + path +
             "; chmod 600 " + path + "')";
    return false;
  }
  struct stat st {};
  ::fstat(fd, &st);
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    *error = "the pre-shared key file " + path + " is accessible by group or others (mode " + mode +
             "); chmod 600 " + path;
    ::close(fd);
    return false;
  }
  std::string k;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0 && k.size() < 65536;) k.append(buf, std::size_t(n));
  ::close(fd);
  while (!k.empty() && (k.back() == '\n' || k.back() == '\r' || k.back() == ' ' || k.back() == '\t'))
    k.pop_back();
  if (const double bits = secret_bits(k); bits < kMinSecretBits) {
    char held[32];
    std::snprintf(held, sizeof held, "%.0f", std::floor(bits));
    *error = "the pre-shared key in " + path + " (" + std::to_string(k.size()) + " bytes) holds at most " + held +
             " bits of key material, fewer than " + std::to_string(int(kMinSecretBits)) +
             " (a short, repetitive or chosen text can be guessed offline); make a random one with "
             "'head -c 32 /dev/urandom | base64 > " + path + "; chmod 600 " + path +
             "' on one host, copy it to every host, and restart gossamerd";
    return false;
  }
  *key = std::move(k);
  return true;
}

}  // namespace gossamer::config
