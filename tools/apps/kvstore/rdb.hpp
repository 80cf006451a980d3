// DUMP/RESTORE payloads: Redis's RDB encoding of one value, followed by
// the 2-byte RDB version and the CRC-64/Jones of everything before it
// (Redis 7.0's createDumpPayload / verifyDumpPayload / rdbLoadObject).
// Plain C++ with no server state, so that a fuzzer links it alone
// (tests/fuzz/fuzz_rdb.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hydra::rdb {

// Redis 7.0's RDB_VERSION: DUMP writes it, RESTORE refuses a newer one.
constexpr std::uint16_t kVersion = 10;

// The value of one key. `type` numbers as hydra::Dump::Type (types.hpp).
struct Object {
  enum Type : std::uint8_t { kString = 1, kHash, kList, kSet, kZset };
  std::uint8_t type = 0;
  std::string value;               // kString
  std::vector<std::string> items;  // kHash: field, value...; kList: in order; kSet, kZset: members
  std::vector<double> scores;      // kZset: scores[i] is items[i]'s
};

// Redis's crc64 (reflected CRC-64/Jones: polynomial 0xad93d23594c935a9,
// init 0, no final xor), continuing from `crc`.
std::uint64_t crc64(std::uint64_t crc, const void* data, std::size_t n) noexcept;

// The DUMP payload of `o`. Strings as Redis saves them (integer encodings
// for short integers; never LZF-compressed); hashes, lists, sets and
// sorted sets as the plain RDB types Redis 7.0 loads (RDB_TYPE_HASH, _LIST,
// _SET, _ZSET_2 with binary scores), not its listpack/intset/quicklist
// forms. Throws std::bad_alloc only.
std::string encode(const Object& o);

// Checks and decodes a RESTORE payload. "" on success, with `o` filled;
// else Redis 7.0's error text: "ERR DUMP payload version or checksum are
// wrong" (shorter than 10 bytes, a version above kVersion, a CRC that
// differs) or "ERR Bad data format" (anything that does not decode: an
// unknown or unsupported type, a length past the end, a corrupt listpack,
// intset, ziplist or LZF block, an empty collection, a duplicate member,
// a NaN score). Every length is checked against the bytes left before
// anything is reserved; never throws but std::bad_alloc.
// `budget`: the most memory the decoded value may take (its bytes plus 32
// per element), as a payload of N bytes may expand to far more (LZF, and
// a 1-byte element becomes a std::string); past it, kTooLarge.
// `check_crc` false skips the CRC (the fuzzer reaches the decoder so).
constexpr const char* kTooLarge = "ERR DUMP payload expands past --max-shard-request";
std::string decode(std::string_view payload, Object& o, std::size_t budget, bool check_crc = true);

}  // namespace hydra::rdb
