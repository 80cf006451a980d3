// Frame keys and tags (auth.hpp).
#include "auth.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <openssl/evp.h>

#include "rack_keys.hpp"

namespace gossamer::dataplane {

static_assert(crypto_aead_aes256gcm_KEYBYTES == sizeof(FrameKey::bytes));
static_assert(crypto_aead_aes256gcm_NPUBBYTES == 12 && kNonceBytes < 12);
static_assert(crypto_aead_aes256gcm_ABYTES == kMacBytes);

namespace {
// Whether this CPU has libsodium's AES-GCM (AES-NI, PCLMULQDQ), detected
// once; and whether a test forced the portable path.
bool hardware_gcm() {
  static const bool yes = sodium_init() >= 0 && crypto_aead_aes256gcm_is_available();
  return yes;
}
std::atomic<bool> g_force_portable{false};

bool use_sodium() { return hardware_gcm() && !g_force_portable.load(std::memory_order_relaxed); }

// OpenSSL's AES-256-GCM over `len` bytes of associated data: the tag, or
// (with `check`) whether `check` is the tag. One context per thread.
bool portable_gmac(const std::uint8_t key[32], const std::uint8_t* nonce, const std::uint8_t* data, std::size_t len,
                   std::uint8_t* tag_out, const std::uint8_t* check) {
  struct Ctx {
    EVP_CIPHER_CTX* c = nullptr;
    ~Ctx() { EVP_CIPHER_CTX_free(c); }
  };
  thread_local Ctx ctx;
  if (!ctx.c) ctx.c = EVP_CIPHER_CTX_new();  // again next time if it failed
  EVP_CIPHER_CTX* c = ctx.c;
  int outl = 0;
  std::uint8_t tag[kMacBytes];
  if (!c || EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), nullptr, key, nonce) != 1) return false;
  for (std::size_t off = 0; off < len;) {  // EVP takes int lengths
    const int n = int(std::min<std::size_t>(len - off, 1 << 30));
    if (EVP_EncryptUpdate(c, nullptr, &outl, data + off, n) != 1) return false;
    off += std::size_t(n);
  }
  if (EVP_EncryptFinal_ex(c, tag, &outl) != 1 || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, kMacBytes, tag) != 1)
    return false;
  if (check) return CRYPTO_memcmp(tag, check, kMacBytes) == 0;
  std::memcpy(tag_out, tag, kMacBytes);
  return true;
}

// GCM's 96-bit nonce from the trailer's 8 bytes.
void gcm_nonce(const std::uint8_t* wire, std::uint8_t out[crypto_aead_aes256gcm_NPUBBYTES]) {
  std::memcpy(out, wire, kNonceBytes);
  std::memset(out + kNonceBytes, 0, crypto_aead_aes256gcm_NPUBBYTES - kNonceBytes);
}
}  // namespace

bool FrameAuth::accelerated() { return use_sodium(); }

void FrameAuth::force_portable(bool yes) { g_force_portable.store(yes, std::memory_order_relaxed); }

std::string FrameAuth::set_secret(const std::string& secret) {
  SecretKey master{};
  if (std::string err = derive_secret_key(secret, "gossamer frame keys v1", &master); !err.empty()) return err;
  static_assert(sizeof master_ == sizeof master);
  std::memcpy(master_, master.data(), sizeof master_);
  sodium_memzero(master.data(), master.size());
  return "";
}

FrameKey FrameAuth::key(std::uint32_t src, std::uint32_t dst, std::uint64_t boot) const {
  std::uint8_t in[16];
  std::memcpy(in, &src, 4);
  std::memcpy(in + 4, &dst, 4);
  std::memcpy(in + 8, &boot, 8);
  FrameKey out;
  crypto_generichash(out.bytes, sizeof out.bytes, in, sizeof in, master_, sizeof master_);
  // Both forms, so that a key serves either path (force_portable).
  if (hardware_gcm()) crypto_aead_aes256gcm_beforenm(&out.gcm, out.bytes);
  else std::memset(&out.gcm, 0, sizeof out.gcm);
  return out;
}

bool FrameAuth::sign(const FrameKey& k, std::uint32_t core, std::uint64_t count, const std::uint8_t* data,
                     std::size_t len, std::uint8_t* trailer) {
  if (core >= 256 || count >> 56) [[unlikely]]
    return false;  // a nonce that could collide with another core's or wrap
  const std::uint64_t n = std::uint64_t(core) << 56 | count;
  for (std::size_t i = 0; i < kNonceBytes; ++i) trailer[i] = std::uint8_t(n >> (8 * i));
  std::uint8_t nonce[crypto_aead_aes256gcm_NPUBBYTES];
  gcm_nonce(trailer, nonce);
  std::uint8_t* tag = trailer + kMacOffset;
  if (use_sodium()) [[likely]] {
    unsigned long long maclen = 0;
    std::uint8_t none[1];  // nothing is encrypted (0 bytes); libsodium wants a pointer
    return crypto_aead_aes256gcm_encrypt_detached_afternm(none, tag, &maclen, none, 0, data, len, nullptr, nonce,
                                                          &k.gcm) == 0;
  }
  return portable_gmac(k.bytes, nonce, data, len, tag, nullptr);
}

bool FrameAuth::verify(const FrameKey& k, const std::uint8_t* data, std::size_t len, const std::uint8_t* trailer) {
  const std::uint8_t* tag = trailer + kMacOffset;
  std::uint8_t nonce[crypto_aead_aes256gcm_NPUBBYTES];
  gcm_nonce(trailer, nonce);
  if (use_sodium()) [[likely]] {
    std::uint8_t none[1];  // as in sign
    return crypto_aead_aes256gcm_decrypt_detached_afternm(none, nullptr, none, 0, tag, data, len, nonce, &k.gcm) ==
           0;
  }
  return portable_gmac(k.bytes, nonce, data, len, nullptr, tag);
}

}  // namespace gossamer::dataplane
