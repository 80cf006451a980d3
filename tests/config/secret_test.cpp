// The rack secret's checks (config/src/secret.cpp): issue 18 finding 13, a
// secret weak enough to guess offline from one recorded handshake is refused
// with a message that names the file and says how to make a good one; what
// tools/rack-in-a-box and the tests generate passes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "gossamer/config.hpp"

namespace gossamer::config {
namespace {

std::string random_bytes(std::size_t n) {
  std::random_device rd;
  std::string s(n, '\0');
  for (char& c : s) c = char(rd());
  return s;
}

std::string hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : bytes) s += d[c >> 4], s += d[c & 15];
  return s;
}

std::string base64(const std::string& bytes) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string s;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = unsigned((unsigned char)bytes[i]) << 16 | unsigned((unsigned char)bytes[i + 1]) << 8 |
                       (unsigned char)bytes[i + 2];
    s += a[v >> 18], s += a[(v >> 12) & 63], s += a[(v >> 6) & 63], s += a[v & 63];
  }
  if (bytes.size() - i == 1) {
    const unsigned v = unsigned((unsigned char)bytes[i]) << 16;
    s += a[v >> 18], s += a[(v >> 12) & 63], s += "==";
  } else if (bytes.size() - i == 2) {
    const unsigned v = unsigned((unsigned char)bytes[i]) << 16 | unsigned((unsigned char)bytes[i + 1]) << 8;
    s += a[v >> 18], s += a[(v >> 12) & 63], s += a[(v >> 6) & 63], s += '=';
  }
  return s;
}

TEST(Secret, WhatTheToolsGeneratePasses) {
  for (int i = 0; i < 50; ++i) {
    // tools/rack-in-a-box and the docs: head -c 32 /dev/urandom | base64
    EXPECT_GE(secret_bits(base64(random_bytes(32))), kMinSecretBits);
    // tests/controlplane: os.urandom(24).hex()
    EXPECT_GE(secret_bits(hex(random_bytes(24))), kMinSecretBits);
    // The shortest that pass: 16 random bytes, as hex, base64 or raw.
    EXPECT_GE(secret_bits(hex(random_bytes(16))), kMinSecretBits);
    EXPECT_GE(secret_bits(base64(random_bytes(16))), kMinSecretBits);
    std::string raw = random_bytes(16);
    if (std::set<char>(raw.begin(), raw.end()).size() >= 8 &&
        raw.find_first_not_of(" !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`"
                              "abcdefghijklmnopqrstuvwxyz{|}~") != std::string::npos) {
      EXPECT_GE(secret_bits(raw), kMinSecretBits);
    }
  }
}

TEST(Secret, WeakSecretsDoNot) {
  EXPECT_LT(secret_bits(hex(random_bytes(15))), kMinSecretBits);      // 120 bits of hex
  EXPECT_LT(secret_bits(base64(random_bytes(15))), kMinSecretBits);   // 20 base64 digits
  EXPECT_LT(secret_bits("0123456789abcdef"), kMinSecretBits);         // 16 bytes, 64 bits
  EXPECT_LT(secret_bits("Tr0ub4dor&3"), kMinSecretBits);
  EXPECT_LT(secret_bits("a rack secret of at least sixteen bytes"), kMinSecretBits);
  EXPECT_LT(secret_bits(std::string(64, 'a')), kMinSecretBits);      // long, one character
  EXPECT_LT(secret_bits("abababababababababababababababababababab"), kMinSecretBits);
  EXPECT_LT(secret_bits("P@ssw0rd!2024#x"), kMinSecretBits);
}

class SecretFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gossamer-secret-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/psk";
  }
  void TearDown() override {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  void write(const std::string& content) {
    std::ofstream(path_) << content;
    ::chmod(path_.c_str(), 0600);
  }
  std::string dir_, path_;
};

TEST_F(SecretFile, AWeakSecretIsRefusedNamingTheFileAndTheFix) {
  write("a rack secret of at least sixteen bytes\n");
  std::string key, error;
  EXPECT_FALSE(load_rack_secret(path_, &key, &error));
  EXPECT_TRUE(key.empty());
  EXPECT_NE(error.find(path_), std::string::npos) << error;
  EXPECT_NE(error.find("bits of key material, fewer than 128"), std::string::npos) << error;
  EXPECT_NE(error.find("head -c 32 /dev/urandom | base64 > " + path_), std::string::npos) << error;
  write("0123456789abcdef\n");  // the old minimum, 16 bytes
  EXPECT_FALSE(load_rack_secret(path_, &key, &error));
}

TEST_F(SecretFile, AGoodSecretIsReadWithoutTrailingWhitespace) {
  const std::string k = base64(random_bytes(32));
  write(k + "\n");
  std::string key, error;
  ASSERT_TRUE(load_rack_secret(path_, &key, &error)) << error;
  EXPECT_EQ(key, k);
}

}  // namespace
}  // namespace gossamer::config
