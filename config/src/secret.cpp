// The rack secret (controlplane.psk_file): read by gossamerd for its mesh
// handshake and by the dataplane for its frame keys (config.hpp).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "gossamer/config.hpp"

namespace gossamer::config {

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
  if (k.size() < 16) {
    *error = "the pre-shared key in " + path + " is " + std::to_string(k.size()) +
             " bytes; it must be at least 16";
    return false;
  }
  *key = std::move(k);
  return true;
}

}  // namespace gossamer::config
