#include "proto.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace gossamer::cp {

std::string frame(Type t, const std::string& body) {
  std::string out(kHeaderBytes, '\0');
  const auto n = std::uint32_t(body.size());
  for (int i = 0; i < 4; ++i) out[std::size_t(i)] = char(n >> (8 * i));
  out[4] = char(std::uint16_t(t));
  out[5] = char(std::uint16_t(t) >> 8);
  out += body;
  return out;
}

bool parse_header(const std::uint8_t* h, std::uint32_t* length, Type* type) {
  *length = std::uint32_t(h[0]) | std::uint32_t(h[1]) << 8 | std::uint32_t(h[2]) << 16 | std::uint32_t(h[3]) << 24;
  *type = Type(std::uint16_t(h[4] | h[5] << 8));
  return h[6] == 0 && h[7] == 0;
}

const char* to_string(DataplaneState s) {
  switch (s) {
    case DataplaneState::kNone: return "not supervised";
    case DataplaneState::kRunning: return "running";
    case DataplaneState::kRestarting: return "restarting";
    case DataplaneState::kStopped: return "stopped";
  }
  return "unknown";
}

Nonce random_nonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), int(n.size())) != 1) {
    // OpenSSL's generator failing is not something to work around.
    std::fprintf(stderr, "gossamerd: RAND_bytes failed\n");
    std::abort();
  }
  return n;
}

namespace {

Mac hmac(const std::string& key, const std::string& msg) {
  Mac mac{};
  unsigned len = 0;
  HMAC(EVP_sha256(), key.data(), int(key.size()), reinterpret_cast<const unsigned char*>(msg.data()), msg.size(),
       mac.data(), &len);
  return mac;
}

// The fields both handshakes MAC, after their own label.
void transcript(Writer& w, Role role, const Nonce& dialer_nonce, const Nonce& acceptor_nonce,
                std::uint32_t dialer_host, std::uint32_t acceptor_host, std::uint64_t rack) {
  w(std::uint8_t(role));
  w(dialer_nonce);
  w(acceptor_nonce);
  w(dialer_host);
  w(acceptor_host);
  w(rack);
}

}  // namespace

Mac handshake_mac(const std::string& key, Role role, const Nonce& dialer_nonce, const Nonce& acceptor_nonce,
                  std::uint32_t dialer_host, std::uint32_t acceptor_host, std::uint64_t rack) {
  Writer w;
  w(std::string("gossamer-cp-1"));
  transcript(w, role, dialer_nonce, acceptor_nonce, dialer_host, acceptor_host, rack);
  return hmac(key, w.take());
}

Mac bulk_mac(const std::string& key, Role role, const Nonce& dialer_nonce, const Nonce& acceptor_nonce,
             std::uint32_t dialer_host, std::uint32_t acceptor_host, std::uint64_t rack, const std::string& run) {
  Writer w;
  w(std::string("gossamer-cp-bulk-1"));
  transcript(w, role, dialer_nonce, acceptor_nonce, dialer_host, acceptor_host, rack);
  w(run);
  return hmac(key, w.take());
}

bool valid_run_id(std::string_view run) {
  if (run.empty() || run.size() > kMaxRunId) return false;
  for (char c : run)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '_'))
      return false;
  return true;
}

bool mac_equal(const Mac& a, const Mac& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

std::string handshake_key(const std::string& secret, std::uint64_t rack) {
  Writer w;
  w(std::string("gossamer-cp-psk-1"));
  w(rack);
  const std::string salt = w.take();
  std::string key(32, '\0');
  // maxmem: 128 * r * N bytes and a little; OpenSSL's default (32 MiB) is just short.
  if (EVP_PBE_scrypt(secret.data(), secret.size(), reinterpret_cast<const unsigned char*>(salt.data()),
                     salt.size(), kScryptN, kScryptR, kScryptP, 64u << 20,
                     reinterpret_cast<unsigned char*>(key.data()), key.size()) != 1)
    return "";
  return key;
}

std::array<std::uint8_t, 32> session_key(const std::string& key, char use, char kind, char sender,
                                         const Nonce& dialer_nonce, const Nonce& acceptor_nonce,
                                         std::uint32_t dialer_host, std::uint32_t acceptor_host, std::uint64_t rack,
                                         const std::string& run) {
  Writer w;
  w(std::string("gossamer-cp-session-1"));
  w(std::uint8_t(use));
  w(std::uint8_t(kind));
  w(std::uint8_t(sender));
  w(dialer_nonce);
  w(acceptor_nonce);
  w(dialer_host);
  w(acceptor_host);
  w(rack);
  w(run);
  return hmac(key, w.take());
}


FileHasher::~FileHasher() {
  if (fd_ >= 0) ::close(fd_);
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
}

bool FileHasher::open(const std::string& path, std::string* error) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) {
    *error = std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    *error = "not a regular file";
    return false;
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  ctx_ = EVP_MD_CTX_new();
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
  return true;
}

bool FileHasher::step(std::size_t bytes, std::string* error) {
  auto* ctx = static_cast<EVP_MD_CTX*>(ctx_);
  char buf[1 << 16];
  std::size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = std::strerror(errno);
      return true;
    }
    if (n == 0) {
      unsigned char md[32];
      unsigned len = 0;
      EVP_DigestFinal_ex(ctx, md, &len);
      static const char* hex = "0123456789abcdef";
      for (unsigned i = 0; i < len; ++i) hex_ += hex[md[i] >> 4], hex_ += hex[md[i] & 15];
      return true;
    }
    EVP_DigestUpdate(ctx, buf, std::size_t(n));
    done += std::size_t(n);
  }
  return false;
}

std::string check_verbs_endpoints(const VerbsEndpoints& m, std::uint32_t sender, std::uint32_t self,
                                  std::uint32_t hosts, std::uint32_t conns) {
  if (m.from != sender) return "from host " + std::to_string(m.from) + " on host " + std::to_string(sender) + "'s link";
  if (m.to != self) return "for host " + std::to_string(m.to) + ", not this one";
  if (m.from >= hosts || m.from == self) return "from host " + std::to_string(m.from);
  if (m.boot == 0) return "no incarnation";
  if (m.lid > 0xffff) return "LID " + std::to_string(m.lid) + " beyond 16 bits";
  if (m.qps.empty() || m.qps.size() > conns) return std::to_string(m.qps.size()) + " queue pairs";
  std::vector<bool> seen(conns, false);
  for (const VerbsQp& q : m.qps) {
    const std::string c = "connection " + std::to_string(q.conn);
    if (q.conn >= conns) return c + " out of range (" + std::to_string(conns) + " per host pair)";
    if (seen[q.conn]) return c + " twice";
    seen[q.conn] = true;
    if (q.qpn == 0 || q.qpn > 0xffffff) return c + ": QPN " + std::to_string(q.qpn);
    if (q.psn > 0xffffff) return c + ": PSN " + std::to_string(q.psn) + " beyond 24 bits";
    if (q.ring_units == 0 || q.ring_units > 16384) return c + ": " + std::to_string(q.ring_units) + " ring units";
    if (q.ring_addr == 0 || q.ring_addr + std::uint64_t(q.ring_units) * 64 < q.ring_addr)
      return c + ": ring address " + std::to_string(q.ring_addr);
  }
  return "";
}

}  // namespace gossamer::cp
