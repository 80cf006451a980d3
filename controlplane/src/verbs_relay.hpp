// gossamerd's part of the verbs endpoint exchange (issue 22;
// dataplane/src/verbs_exchange.hpp has the files): the dataplane's own queue
// pairs (<socket>.verbs) go to each peer's gossamerd as a VerbsEndpoints
// message over the authenticated mesh; what the peers send is kept and
// written for the dataplane (<socket>.verbs-peers). No sockets or timers
// here (daemon: mesh.cpp, verbs_mesh.cpp), so that the unit test drives it.
//
// Bad input is counted and dropped, never fatal: a line of the dataplane's
// file that does not parse, a message that does not decode or fails
// check_verbs_endpoints (not the link's host, for another host, a
// connection out of range, a QPN beyond 24 bits, a ring that wraps...). An
// endpoint older than the one kept (an earlier incarnation of the peer, or
// an earlier generation of its QP) is ignored.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "proto.hpp"
#include "verbs_exchange.hpp"

namespace gossamer::cp {

class VerbsRelay {
 public:
  VerbsRelay(std::uint32_t self, std::uint32_t hosts, std::uint32_t conns);

  // The dataplane's file, read again. The messages to send, one per peer
  // whose queue pairs changed since the last call (all of them the first
  // time).
  std::vector<VerbsEndpoints> local(const std::string& text);
  // What to send peer `h` now (its link just came up), if we have anything.
  bool message_for(std::uint32_t h, VerbsEndpoints* out) const;
  // A VerbsEndpoints body from authenticated peer `sender`: true if it
  // changed what the dataplane should read (write remote_text() then).
  bool on_message(std::uint32_t sender, std::string_view body);
  // The .verbs-peers file.
  std::string remote_text() const;

  std::uint64_t messages_received() const { return received_; }
  std::uint64_t messages_rejected() const { return rejected_; }
  std::uint64_t local_lines_rejected() const { return local_bad_; }
  const std::string& last_rejection() const { return last_why_; }

 private:
  struct PeerQps {
    std::uint64_t boot = 0;
    std::array<std::uint8_t, 16> gid{};
    std::uint32_t lid = 0;
    std::map<std::uint32_t, VerbsQp> qps;  // by connection
  };
  std::uint32_t self_, hosts_, conns_;
  std::map<std::uint32_t, VerbsEndpoints> out_;  // by peer: what we last sent it
  std::map<std::uint32_t, PeerQps> in_;          // by sender
  std::uint64_t received_ = 0, rejected_ = 0, local_bad_ = 0;
  std::string last_why_;
};

}  // namespace gossamer::cp
