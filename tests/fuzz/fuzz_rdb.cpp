// libFuzzer target for Hydra's RESTORE payload decoder
// (tools/apps/kvstore/rdb.cpp): the payload comes from any client. Any
// bytes must decode without a crash, and within the memory budget:
//   - the input as it is (CRC checked: nearly always refused), and again
//     with the CRC check off (every decoder path is reached);
//   - an error is one of the three texts RESTORE may answer, and leaves
//     the object empty;
//   - a decoded value is well formed (a known type; pairs for a hash; a
//     score per member, none NaN; no collection empty) and re-encodes to
//     a payload that decodes to the same value (Hydra's DUMP of what it
//     restored restores again).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "rdb.hpp"

namespace {

namespace rdb = hydra::rdb;

void require(bool ok) {
  if (!ok) std::abort();
}

constexpr std::size_t kBudget = 64 << 20;

void check(std::string_view in, bool crc) {
  rdb::Object o;
  const std::string err = rdb::decode(in, o, kBudget, crc);
  if (!err.empty()) {
    require(err == "ERR Bad data format" || err == "ERR DUMP payload version or checksum are wrong" ||
            err == rdb::kTooLarge);
    require(o.type == 0 && o.items.empty() && o.value.empty());
    return;
  }
  require(o.type >= rdb::Object::kString && o.type <= rdb::Object::kZset);
  if (o.type == rdb::Object::kString) require(o.items.empty());
  else require(!o.items.empty());
  if (o.type == rdb::Object::kHash) require(o.items.size() % 2 == 0);
  if (o.type == rdb::Object::kZset) {
    require(o.scores.size() == o.items.size());
    for (double d : o.scores) require(!std::isnan(d));
  } else {
    require(o.scores.empty());
  }
  const std::string again = rdb::encode(o);
  rdb::Object o2;
  require(rdb::decode(again, o2, kBudget * 2, true).empty());
  require(o2.type == o.type && o2.value == o.value && o2.items == o.items);
  require(o2.scores.size() == o.scores.size());
  for (std::size_t i = 0; i < o.scores.size(); ++i)
    require(std::memcmp(&o.scores[i], &o2.scores[i], sizeof(double)) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  check(in, true);
  check(in, false);
  return 0;
}
