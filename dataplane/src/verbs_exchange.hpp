// The verbs transport's endpoint exchange between a dataplane and its
// gossamerd (issue 22). The dataplane and gossamerd share no socket (gossamerd
// starts it and reads its metrics file), so, like the metrics and faults
// files, two small files next to the dataplane's socket carry the endpoints:
//
//   <socket>.verbs        written by the dataplane (core 0, whenever a QP is
//                         created or created again): its own QPs, one line
//                         per (peer, connection); read by gossamerd, which
//                         sends each peer its lines as a VerbsEndpoints
//                         message over the authenticated mesh
//                         (controlplane/src/verbs_relay.hpp).
//   <socket>.verbs-peers  written by gossamerd: the peers' QPs as their
//                         gossamerds sent them, one line per (peer,
//                         connection); read by the dataplane (core 0), which
//                         hands each line to the core owning the connection
//                         (VerbsTransport::remote).
//
// Both are replaced whole (written to a temporary name, then renamed), so a
// reader never sees half a file. A line is
//
//   qp HOST BOOT GID LID CONN QPN PSN RKEY RING_ADDR RING_UNITS GENERATION
//
// (decimal, GID as 32 hex digits): in .verbs HOST is the peer the QP
// connects to and BOOT, GID, LID are ours; in .verbs-peers HOST is the
// sender and BOOT, GID, LID are its. Lines that do not parse or are out of
// range are counted and skipped; nothing in a file can make the reader write
// outside a ring the sender registered (the ring's bounds are checked).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "verbs.hpp"
#include "verbs_channel.hpp"

namespace gossamer::dataplane::verbs {

struct ExchangeEntry {
  std::uint32_t host = 0;  // the peer (.verbs) or the sender (.verbs-peers)
  std::uint64_t boot = 0;  // incarnation of the dataplane the QP belongs to
  Gid gid{};
  std::uint16_t lid = 0;
  std::uint32_t conn = 0;
  Endpoint ep;
  bool operator==(const ExchangeEntry&) const = default;
};

inline constexpr const char* kLocalSuffix = ".verbs";
inline constexpr const char* kPeersSuffix = ".verbs-peers";

std::string format_entry(const ExchangeEntry& e);
std::string format_entries(const std::vector<ExchangeEntry>& es);
// "" or what is wrong with `e` in a rack of `hosts` hosts with `conns`
// connections per pair.
std::string check_entry(const ExchangeEntry& e, std::uint32_t hosts, std::uint32_t conns);
// The good lines of `text`; *bad (if not null) counts the others, *first_bad
// (if not null) says what was wrong with the first of them.
std::vector<ExchangeEntry> parse_entries(const std::string& text, std::uint32_t hosts, std::uint32_t conns,
                                         std::uint64_t* bad = nullptr, std::string* first_bad = nullptr);
// Replaces `path` with `text` (mode 0600) through a temporary file and a
// rename. "" or why not.
std::string write_file_atomically(const std::string& path, const std::string& text);
// The whole file, or false (missing or unreadable), at most 1 MiB.
bool read_small_file(const std::string& path, std::string* out);

}  // namespace gossamer::dataplane::verbs
