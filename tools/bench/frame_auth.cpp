// frame-auth: what signing and verifying a frame costs (dataplane/src/
// auth.hpp), on both paths: libsodium's AES-GCM (AES-NI, PCLMULQDQ) and the
// portable one (OpenSSL's EVP, taken by CPUs libsodium has no AES-GCM for,
// e.g. every aarch64 host with Debian 12's libsodium). Frames alternate
// between `--keys` keys, as a core's do between its peers. Prints, per
// path and size, ns per sign and per verify (wall clock: indicative on a
// shared machine); under `valgrind --tool=callgrind` the instruction
// counts per call are the repeatable figure (--frames small).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "auth.hpp"

namespace gd = gossamer::dataplane;

int main(int argc, char** argv) {
  CLI::App app{"frame-auth: ns per frame signed and verified, accelerated and portable paths"};
  std::size_t frames = 200000, keys = 3;
  std::vector<std::size_t> sizes{64, 1472, 4096, 8972};
  std::string only = "both";
  app.add_option("--frames", frames, "frames per path and size")->check(CLI::PositiveNumber);
  app.add_option("--keys", keys, "keys the frames alternate between (a core's peers)")->check(CLI::Range(1, 1024));
  app.add_option("--sizes", sizes, "frame bytes covered by the tag")->delimiter(',');
  app.add_option("--only", only, "accelerated, portable or both")->check(CLI::IsMember({"accelerated", "portable", "both"}));
  CLI11_PARSE(app, argc, argv);

  gd::FrameAuth auth;
  if (std::string e = auth.set_secret("0123456789abcdef0123456789abcdef"); !e.empty()) {
    std::fprintf(stderr, "frame-auth: %s\n", e.c_str());
    return 1;
  }
  std::vector<gd::FrameKey> ks;
  for (std::size_t i = 0; i < keys; ++i) ks.push_back(auth.key(0, std::uint32_t(i + 1), 1000 + i));
  std::printf("frame-auth: %zu frames per case, %zu keys; this CPU: %s\n", frames, keys,
              gd::FrameAuth::accelerated() ? "accelerated (libsodium)" : "portable only");
  using Clock = std::chrono::steady_clock;
  int bad = 0;
  std::uint64_t count = 0;  // the nonce's count: never twice under one key
  for (const bool portable : {false, true}) {
    if ((portable && only == "accelerated") || (!portable && only == "portable")) continue;
    gd::FrameAuth::force_portable(portable);
    if (!portable && !gd::FrameAuth::accelerated()) continue;
    for (const std::size_t size : sizes) {
      std::vector<std::uint8_t> data(size, 0x5a), trailers(frames * gd::kTagBytes);
      auto t0 = Clock::now();
      for (std::size_t i = 0; i < frames; ++i)
        if (!gd::FrameAuth::sign(ks[i % keys], 0, count++, data.data(), size, &trailers[i * gd::kTagBytes])) ++bad;
      auto t1 = Clock::now();
      for (std::size_t i = 0; i < frames; ++i)
        if (!gd::FrameAuth::verify(ks[i % keys], data.data(), size, &trailers[i * gd::kTagBytes])) ++bad;
      auto t2 = Clock::now();
      auto ns = [&](Clock::duration d) { return double(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()) / double(frames); };
      std::printf("%-11s %5zu B: sign %8.0f ns, verify %8.0f ns\n", portable ? "portable" : "accelerated", size,
                  ns(t1 - t0), ns(t2 - t1));
    }
  }
  gd::FrameAuth::force_portable(false);
  if (bad) std::fprintf(stderr, "frame-auth: %d frames failed to sign or verify\n", bad);
  return bad ? 1 : 0;
}
