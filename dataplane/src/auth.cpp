// Frame keys and tags (auth.hpp).
#include "auth.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <unordered_map>

#include <gossamer/abi/attach.hpp>
#include <openssl/crypto.h>
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

// The portable path's OpenSSL contexts, per thread, one per key in use. A
// context keyed once (AES key schedule, GHASH tables) then only takes each
// frame's nonce. Found by FrameKey::id (public values, so which entry a
// frame uses says nothing about the key) and checked against the key
// itself, so two keys under one id cost a key set-up, never a wrong tag.
// A core uses 2 x (hosts - 1) keys (udp_transport.cpp), and a few more
// across restarts; past kMaxEntries the least recently used one goes
// (a scan, on a miss only: a miss costs a key set-up anyway). Frames that
// claim new incarnations of a peer add keys too, so a flood of forgeries
// can make frames set up their keys again: at worst the cost of keying
// every frame, which is what this path did before the cache.
class PortableContexts {
 public:
  // AES-256-GCM from OpenSSL's default provider, fetched once (again
  // later if that failed): with the legacy EVP_aes_256_gcm(), every init
  // that names the cipher fetches it from the provider again.
  static EVP_CIPHER* cipher() {
    static std::atomic<EVP_CIPHER*> fetched{nullptr};
    if (EVP_CIPHER* c = fetched.load(std::memory_order_acquire)) return c;
    EVP_CIPHER* c = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
    EVP_CIPHER* none = nullptr;
    if (c && !fetched.compare_exchange_strong(none, c, std::memory_order_acq_rel)) {
      EVP_CIPHER_free(c);  // another thread's is there
      return none;
    }
    return c;
  }
  ~PortableContexts() {
    for (auto& [id, e] : e_) {
      EVP_CIPHER_CTX_free(e.c);
      OPENSSL_cleanse(e.key, sizeof e.key);
    }
  }
  // The context for `k`, keyed; nullptr if OpenSSL could not make one.
  EVP_CIPHER_CTX* get(const FrameKey& k) {
    ++clock_;
    auto it = e_.find(k.id);
    if (it != e_.end() && it->second.keyed && CRYPTO_memcmp(it->second.key, k.bytes, sizeof it->second.key) == 0) {
      it->second.used = clock_;
      return it->second.c;
    }
    if (it == e_.end()) {
      EVP_CIPHER_CTX* reuse = nullptr;
      if (e_.size() >= kMaxEntries) {  // the least recently used entry's context serves the new key
        auto lru = e_.begin();
        for (auto j = e_.begin(); j != e_.end(); ++j)
          if (j->second.used < lru->second.used) lru = j;
        reuse = lru->second.c;
        OPENSSL_cleanse(lru->second.key, sizeof lru->second.key);
        e_.erase(lru);
      }
      it = e_.emplace(k.id, Entry{}).first;
      it->second.c = reuse;
    }
    Entry& e = it->second;
    e.keyed = false;
    if (!e.c && !(e.c = EVP_CIPHER_CTX_new())) return nullptr;  // again next time
    EVP_CIPHER* gcm = cipher();
    if (!gcm || EVP_EncryptInit_ex(e.c, gcm, nullptr, k.bytes, nullptr) != 1) return nullptr;
    std::memcpy(e.key, k.bytes, sizeof e.key);
    e.used = clock_;
    e.keyed = true;
    return e.c;
  }

 private:
  // A core's keys on the largest rack (2 x 63 peers), twice over for restarts.
  static constexpr std::size_t kMaxEntries = 4 * abi::kMaxRackHosts;
  struct Entry {
    std::uint64_t used = 0;
    std::uint8_t key[32] = {};
    EVP_CIPHER_CTX* c = nullptr;
    bool keyed = false;
  };
  std::unordered_map<std::uint64_t, Entry> e_;
  std::uint64_t clock_ = 0;
};

// OpenSSL's AES-256-GCM over `len` bytes of associated data: the tag, or
// (with `check`) whether `check` is the tag.
bool portable_gmac(const FrameKey& k, const std::uint8_t* nonce, const std::uint8_t* data, std::size_t len,
                   std::uint8_t* tag_out, const std::uint8_t* check) {
  thread_local PortableContexts contexts;
  EVP_CIPHER_CTX* c = contexts.get(k);
  int outl = 0;
  std::uint8_t tag[kMacBytes];
  // No cipher and no key: the context keeps its key; the nonce restarts GCM.
  if (!c || EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, nonce) != 1) return false;
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
  // Public values, mixed (splitmix64's finalizer) so that ids spread.
  std::uint64_t id = (std::uint64_t(src) << 32 | dst) ^ (boot * 0x9e3779b97f4a7c15ull);
  id = (id ^ (id >> 30)) * 0xbf58476d1ce4e5b9ull;
  id = (id ^ (id >> 27)) * 0x94d049bb133111ebull;
  out.id = id ^ (id >> 31);
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
  return portable_gmac(k, nonce, data, len, tag, nullptr);
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
  return portable_gmac(k, nonce, data, len, nullptr, tag);
}

}  // namespace gossamer::dataplane
