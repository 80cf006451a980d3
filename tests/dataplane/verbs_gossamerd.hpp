// What gossamerd does for two dataplanes with transport: verbs
// (controlplane/src/verbs_mesh.cpp), on a thread of a test: each host's
// <socket>.verbs through its VerbsRelay, as a VerbsEndpoints body, into the
// other host's relay, which writes that host's <socket>.verbs-peers. The
// mesh's TCP and tags are left out; the codec, the checks and the files are
// gossamerd's own.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "verbs_exchange.hpp"
#include "verbs_relay.hpp"

namespace gossamer::dataplane::testing {

class GossamerdRelay {
 public:
  GossamerdRelay(std::string sock0, std::string sock1, std::uint32_t conns)
      : socks_{std::move(sock0), std::move(sock1)} {
    relays_[0] = std::make_unique<cp::VerbsRelay>(0, 2, conns);
    relays_[1] = std::make_unique<cp::VerbsRelay>(1, 2, conns);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        relay();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  ~GossamerdRelay() { stop(); }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  std::uint64_t relayed() const { return relayed_.load(); }
  std::uint64_t errors() const { return errors_.load(); }

 private:
  void relay() {
    for (int h = 0; h < 2; ++h) {
      std::string text;
      if (!dataplane::verbs::read_small_file(socks_[h] + dataplane::verbs::kLocalSuffix, &text) || text == last_[h])
        continue;
      last_[h] = text;
      for (const cp::VerbsEndpoints& m : relays_[h]->local(text)) {
        ++relayed_;
        if (m.to != std::uint32_t(1 - h)) ++errors_;
        if (!relays_[1 - h]->on_message(std::uint32_t(h), cp::encode(m))) continue;
        if (!dataplane::verbs::write_file_atomically(socks_[1 - h] + dataplane::verbs::kPeersSuffix,
                                                     relays_[1 - h]->remote_text())
                 .empty())
          ++errors_;
      }
      errors_ += relays_[h]->local_lines_rejected() + relays_[1 - h]->messages_rejected() - counted_[h];
      counted_[h] = relays_[h]->local_lines_rejected() + relays_[1 - h]->messages_rejected();
    }
  }

  std::string socks_[2], last_[2];
  std::unique_ptr<cp::VerbsRelay> relays_[2];
  std::uint64_t counted_[2] = {0, 0};
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> relayed_{0}, errors_{0};
};

}  // namespace gossamer::dataplane::testing
