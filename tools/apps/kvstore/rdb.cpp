// DUMP/RESTORE payloads (rdb.hpp). The formats, from Redis 7.0's rdb.c,
// listpack.c, ziplist.c, intset.c and lzf_d.c:
//
//   payload   := type-byte object version(u16 LE) crc64(u64 LE, of all before it)
//   length    := 00xxxxxx | 01xxxxxx yyyyyyyy | 0x80 u32 BE | 0x81 u64 BE
//   string    := length bytes | 0xC0 i8 | 0xC1 i16 LE | 0xC2 i32 LE
//              | 0xC3 clen:length len:length lzf-block(clen bytes, len when expanded)
//   type 0 string; 1 list, 2 set, 4 hash: length, then strings (pairs for
//   a hash); 3/5 sorted set: length, then member and score (3: a length
//   byte and the score as text, 253 NaN, 254 inf, 255 -inf; 5: a binary
//   double LE); 11 intset, 16 hash listpack, 17 zset listpack, 10 list
//   ziplist, 12/13 zset/hash ziplist: one string holding the blob; 14/18
//   quicklist: length nodes, each (18 only) a container length (1 plain
//   element, 2 listpack) then a string (the element, a listpack, or 14: a
//   ziplist).
#include "rdb.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

namespace hydra::rdb {

namespace {

constexpr std::array<std::uint64_t, 256> make_table() {
  std::array<std::uint64_t, 256> t{};
  for (std::uint64_t i = 0; i < 256; ++i) {
    std::uint64_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? 0x95ac9329ac4bc9b5ull : 0);  // 0xad93d23594c935a9 reflected
    t[i] = c;
  }
  return t;
}
constexpr auto kCrcTable = make_table();

enum : std::uint8_t {
  kTypeString = 0, kTypeList = 1, kTypeSet = 2, kTypeZset = 3, kTypeHash = 4, kTypeZset2 = 5,
  kTypeListZiplist = 10, kTypeSetIntset = 11, kTypeZsetZiplist = 12, kTypeHashZiplist = 13,
  kTypeListQuicklist = 14, kTypeHashListpack = 16, kTypeZsetListpack = 17, kTypeListQuicklist2 = 18,
};

constexpr const char* kBadFormat = "ERR Bad data format";
constexpr const char* kBadPayload = "ERR DUMP payload version or checksum are wrong";

// ---- encoding ------------------------------------------------------------------------

void put_len(std::string& out, std::uint64_t n) {
  if (n < 64) {
    out += char(n);
  } else if (n < 16384) {
    out += char(0x40 | (n >> 8));
    out += char(n & 0xff);
  } else if (n <= 0xffffffffull) {
    out += char(0x80);
    for (int s = 24; s >= 0; s -= 8) out += char((n >> s) & 0xff);
  } else {
    out += char(0x81);
    for (int s = 56; s >= 0; s -= 8) out += char((n >> s) & 0xff);
  }
}

// Redis's string2ll followed by the check that ll2string gives the same
// text back: a canonical decimal integer.
bool canonical_int(std::string_view s, long long& v) {
  if (s.empty() || s.size() > 20) return false;
  std::size_t i = 0;
  const bool neg = s[0] == '-';
  if (neg) ++i;
  if (i == s.size() || s[i] < '0' || s[i] > '9') return false;
  if (s[i] == '0' && (s.size() != 1)) return false;  // "0" only: no leading zero, no "-0"
  unsigned long long u = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    const unsigned d = unsigned(s[i] - '0');
    if (u > (~0ull - d) / 10) return false;
    u = u * 10 + d;
  }
  if (neg) {
    if (u > (1ull << 63)) return false;
    v = u == (1ull << 63) ? (-9223372036854775807ll - 1) : -(long long)u;
  } else {
    if (u > 9223372036854775807ull) return false;
    v = (long long)u;
  }
  return true;
}

// Redis's rdbSaveRawString without compression: short canonical integers
// in 1, 2 or 4 bytes, everything else as length and bytes.
void put_string(std::string& out, std::string_view s) {
  long long v;
  if (s.size() <= 11 && canonical_int(s, v)) {
    if (v >= -128 && v <= 127) {
      out += char(0xC0);
      out += char(v & 0xff);
      return;
    }
    if (v >= -32768 && v <= 32767) {
      out += char(0xC1);
      out += char(v & 0xff);
      out += char((v >> 8) & 0xff);
      return;
    }
    if (v >= -2147483648ll && v <= 2147483647ll) {
      out += char(0xC2);
      for (int k = 0; k < 4; ++k) out += char((v >> (8 * k)) & 0xff);
      return;
    }
  }
  put_len(out, s.size());
  out.append(s);
}

// ---- decoding ------------------------------------------------------------------------

std::int64_t le_signed(const unsigned char* p, int n) {
  std::uint64_t u = 0;
  for (int k = n - 1; k >= 0; --k) u = (u << 8) | p[k];
  if (n < 8 && (u >> (8 * n - 1)) & 1) u |= ~0ull << (8 * n);  // sign extension
  return std::int64_t(u);
}
std::uint64_t le_unsigned(const unsigned char* p, int n) {
  std::uint64_t u = 0;
  for (int k = n - 1; k >= 0; --k) u = (u << 8) | p[k];
  return u;
}

// lzf_decompress: exactly `out.size()` bytes from `in`, or false.
bool lzf(std::string_view in, std::string& out) {
  const auto* ip = reinterpret_cast<const unsigned char*>(in.data());
  const auto* end = ip + in.size();
  std::size_t op = 0;
  const std::size_t cap = out.size();
  while (ip < end) {
    unsigned ctrl = *ip++;
    if (ctrl < 32) {  // a literal run of ctrl + 1 bytes
      const std::size_t n = ctrl + 1;
      if (op + n > cap || std::size_t(end - ip) < n) return false;
      std::memcpy(&out[op], ip, n);
      op += n;
      ip += n;
    } else {  // a back reference
      std::size_t n = ctrl >> 5;
      if (ip >= end) return false;
      if (n == 7) {
        n += *ip++;
        if (ip >= end) return false;
      }
      const std::size_t back = ((ctrl & 0x1f) << 8) + *ip++ + 1;
      n += 2;
      if (back > op || op + n > cap) return false;
      for (std::size_t k = 0; k < n; ++k, ++op) out[op] = out[op - back];
    }
  }
  return op == cap;
}

struct Reader {
  const unsigned char* p;
  const unsigned char* end;
  std::size_t budget;     // bytes the decoded value may still take
  bool ok = true;
  bool over = false;      // the budget ran out

  // Charges one element of n bytes.
  bool charge(std::uint64_t n) {
    if (n + 32 > budget) return over = true, ok = false;
    budget -= std::size_t(n) + 32;
    return true;
  }

  std::size_t left() const { return std::size_t(end - p); }
  bool take(std::size_t n, const unsigned char*& at) {
    if (!ok || left() < n) return ok = false;
    at = p;
    p += n;
    return true;
  }
  // A count: any length form, no encoded value.
  bool len(std::uint64_t& n) {
    bool encoded = false;
    if (len_or_enc(n, encoded) && !encoded) return true;
    return ok = false;
  }
  bool len_or_enc(std::uint64_t& n, bool& encoded) {
    const unsigned char* b;
    if (!take(1, b)) return false;
    encoded = false;
    switch (b[0] >> 6) {
      case 0: n = b[0] & 0x3f; return true;
      case 1: {
        const unsigned char* c;
        if (!take(1, c)) return false;
        n = (std::uint64_t(b[0] & 0x3f) << 8) | c[0];
        return true;
      }
      case 3: encoded = true; n = b[0] & 0x3f; return true;
      default: break;
    }
    const int w = b[0] == 0x80 ? 4 : b[0] == 0x81 ? 8 : 0;
    const unsigned char* c;
    if (w == 0 || !take(std::size_t(w), c)) return ok = false;
    n = 0;
    for (int k = 0; k < w; ++k) n = (n << 8) | c[k];
    return true;
  }
  bool string(std::string& s) {
    std::uint64_t n;
    bool encoded;
    if (!len_or_enc(n, encoded)) return false;
    const unsigned char* c;
    if (!encoded) {
      if (n > left() || !charge(n) || !take(std::size_t(n), c)) return ok = false;
      s.assign(reinterpret_cast<const char*>(c), std::size_t(n));
      return true;
    }
    if (n <= 2) {  // 8, 16, 32-bit integer
      const int w = 1 << n;
      if (!charge(12) || !take(std::size_t(w), c)) return false;
      s = std::to_string(le_signed(c, w));
      return true;
    }
    if (n != 3) return ok = false;
    std::uint64_t clen, ulen;
    if (!len(clen) || !len(ulen) || clen > left()) return ok = false;
    // LZF expands at most 264 bytes per 3 input bytes (a long back
    // reference): a longer claim is corrupt, and is refused before the
    // buffer is allocated.
    if (ulen == 0 || ulen > clen * 88 + 32) return ok = false;
    if (!charge(ulen)) return false;
    if (!take(std::size_t(clen), c)) return false;
    s.assign(std::size_t(ulen), '\0');
    if (!lzf(std::string_view(reinterpret_cast<const char*>(c), std::size_t(clen)), s)) return ok = false;
    return true;
  }
};

// The elements of a listpack blob, appended to `out`.
bool listpack(std::string_view blob, std::vector<std::string>& out, Reader& r) {
  const auto* p = reinterpret_cast<const unsigned char*>(blob.data());
  const std::size_t size = blob.size();
  if (size < 7 || le_unsigned(p, 4) != size || p[size - 1] != 0xFF) return false;
  const std::uint64_t count = le_unsigned(p + 4, 2);
  std::size_t i = 6, seen = 0;
  while (i < size - 1) {
    const unsigned char b = p[i];
    std::size_t head = 1, body = 0;
    bool is_int = true;
    std::int64_t v = 0;
    const std::size_t avail = size - 1 - i;
    auto need = [&](std::size_t n) { return n <= avail; };
    if ((b & 0x80) == 0) {
      v = b & 0x7f;
    } else if ((b & 0xC0) == 0x80) {
      is_int = false;
      body = b & 0x3f;
    } else if ((b & 0xE0) == 0xC0) {
      if (!need(2)) return false;
      head = 2;
      v = (std::int64_t(b & 0x1f) << 8) | p[i + 1];
      if (v >= 4096) v -= 8192;  // 13-bit two's complement
    } else if ((b & 0xF0) == 0xE0) {
      if (!need(2)) return false;
      head = 2;
      is_int = false;
      body = (std::size_t(b & 0x0f) << 8) | p[i + 1];
    } else if (b == 0xF0) {
      if (!need(5)) return false;
      head = 5;
      is_int = false;
      body = std::size_t(le_unsigned(p + i + 1, 4));
    } else if (b >= 0xF1 && b <= 0xF4) {
      const int w = b == 0xF1 ? 2 : b == 0xF2 ? 3 : b == 0xF3 ? 4 : 8;
      if (!need(1 + std::size_t(w))) return false;
      head = 1 + std::size_t(w);
      v = le_signed(p + i + 1, w);
    } else {
      return false;  // 0xF5..0xFF here: no entry starts so
    }
    if (body > avail - head) return false;
    const std::size_t l = head + body;
    const std::size_t bl = l <= 127 ? 1 : l < 16383 ? 2 : l < 2097151 ? 3 : l < 268435455 ? 4 : 5;
    if (bl > avail - l) return false;
    // The back length: as lpEncodeBacklen writes l, checked byte by byte.
    const unsigned char* q = p + i + l;
    for (std::size_t k = 0; k < bl; ++k) {
      const std::uint64_t part = (l >> (7 * (bl - 1 - k))) & 127;
      if (q[k] != (k == 0 ? part : (part | 128))) return false;
    }
    if (!r.charge(is_int ? 20 : body)) return false;
    if (is_int) out.push_back(std::to_string(v));
    else out.emplace_back(reinterpret_cast<const char*>(p + i + head), body);
    i += l + bl;
    ++seen;
  }
  return i == size - 1 && (count == 65535 || count == seen);
}

// The elements of a ziplist blob (Redis before 7.0), appended to `out`.
bool ziplist(std::string_view blob, std::vector<std::string>& out, Reader& r) {
  const auto* p = reinterpret_cast<const unsigned char*>(blob.data());
  const std::size_t size = blob.size();
  if (size < 11 || le_unsigned(p, 4) != size || p[size - 1] != 0xFF) return false;
  const std::uint64_t count = le_unsigned(p + 8, 2);
  std::size_t i = 10, seen = 0, prev = 0;
  while (i < size - 1) {
    std::size_t avail = size - 1 - i;
    // prevlen: the previous entry's size, 1 byte or 0xFE and 4 bytes
    std::size_t pl;
    if (p[i] < 254) {
      if (p[i] != prev) return false;
      pl = 1;
    } else if (p[i] == 254 && avail >= 5) {
      if (le_unsigned(p + i + 1, 4) != prev) return false;
      pl = 5;
    } else {
      return false;
    }
    if (avail <= pl) return false;
    const std::size_t e = i + pl;
    avail -= pl;
    const unsigned char b = p[e];
    std::size_t head = 1, body = 0;
    bool is_int = true;
    std::int64_t v = 0;
    switch (b >> 6) {
      case 0: is_int = false; body = b & 0x3f; break;
      case 1:
        if (avail < 2) return false;
        is_int = false, head = 2, body = (std::size_t(b & 0x3f) << 8) | p[e + 1];
        break;
      case 2:
        if (b != 0x80 || avail < 5) return false;
        is_int = false, head = 5;
        body = (std::size_t(p[e + 1]) << 24) | (std::size_t(p[e + 2]) << 16) | (std::size_t(p[e + 3]) << 8) | p[e + 4];
        break;
      default: {
        const int w = b == 0xC0 ? 2 : b == 0xD0 ? 4 : b == 0xE0 ? 8 : b == 0xF0 ? 3 : b == 0xFE ? 1 : 0;
        if (w != 0) {
          if (avail < 1 + std::size_t(w)) return false;
          head = 1 + std::size_t(w);
          v = le_signed(p + e + 1, w);
        } else if (b >= 0xF1 && b <= 0xFD) {
          v = (b & 0x0f) - 1;
        } else {
          return false;
        }
      }
    }
    if (body > avail - head) return false;
    if (!r.charge(is_int ? 20 : body)) return false;
    if (is_int) out.push_back(std::to_string(v));
    else out.emplace_back(reinterpret_cast<const char*>(p + e + head), body);
    prev = pl + head + body;
    i += prev;
    ++seen;
  }
  return i == size - 1 && (count == 65535 || count == seen);
}

// An intset blob: encoding (2, 4, 8) and count, u32 LE each, then the
// values ascending, LE.
bool intset(std::string_view blob, std::vector<std::string>& out, Reader& r) {
  const auto* p = reinterpret_cast<const unsigned char*>(blob.data());
  if (blob.size() < 8) return false;
  const std::uint64_t enc = le_unsigned(p, 4), n = le_unsigned(p + 4, 4);
  if ((enc != 2 && enc != 4 && enc != 8) || n == 0 || (blob.size() - 8) / enc < n || 8 + n * enc != blob.size())
    return false;
  std::int64_t last = 0;
  for (std::uint64_t k = 0; k < n; ++k) {
    const std::int64_t v = le_signed(p + 8 + k * enc, int(enc));
    if (k > 0 && v <= last) return false;  // ascending, no duplicate
    last = v;
    if (!r.charge(20)) return false;
    out.push_back(std::to_string(v));
  }
  return true;
}

// A score as text (RDB_TYPE_ZSET, listpacks): Redis's strtod, whole string.
bool parse_score(const std::string& s, double& d) {
  if (s.empty() || s.size() > 127 || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  d = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && !std::isnan(d);
}

bool no_duplicates(const std::vector<std::string>& items, std::size_t step) {
  std::unordered_set<std::string_view> seen;
  seen.reserve(items.size() / step);
  for (std::size_t i = 0; i < items.size(); i += step)
    if (!seen.insert(items[i]).second) return false;
  return true;
}

// Member, score pairs of a listpack or ziplist into o.items / o.scores.
bool scored_pairs(std::vector<std::string>& flat, Object& o) {
  if (flat.size() % 2 != 0) return false;
  for (std::size_t i = 0; i < flat.size(); i += 2) {
    double d;
    if (!parse_score(flat[i + 1], d)) return false;
    o.items.push_back(std::move(flat[i]));
    o.scores.push_back(d);
  }
  return true;
}

bool decode_object(Reader& r, std::uint8_t type, Object& o) {
  std::uint64_t n = 0;
  std::string s;
  switch (type) {
    case kTypeString:
      o.type = Object::kString;
      return r.string(o.value);
    case kTypeList:
    case kTypeSet:
    case kTypeHash: {
      if (!r.len(n) || n == 0) return false;
      const std::uint64_t elems = type == kTypeHash ? n * 2 : n;
      if (n > r.left() || elems > r.left()) return false;  // each element takes a byte at least
      o.type = type == kTypeList ? Object::kList : type == kTypeSet ? Object::kSet : Object::kHash;
      o.items.reserve(std::size_t(elems));
      for (std::uint64_t k = 0; k < elems; ++k) {
        if (!r.string(s)) return false;
        o.items.push_back(std::move(s));
      }
      return type == kTypeList || no_duplicates(o.items, type == kTypeHash ? 2 : 1);
    }
    case kTypeZset:
    case kTypeZset2: {
      if (!r.len(n) || n == 0 || n > r.left()) return false;
      o.type = Object::kZset;
      for (std::uint64_t k = 0; k < n; ++k) {
        if (!r.string(s)) return false;
        double d;
        const unsigned char* c;
        if (type == kTypeZset2) {
          if (!r.take(8, c)) return false;
          const std::uint64_t bits = le_unsigned(c, 8);
          std::memcpy(&d, &bits, 8);
        } else {
          if (!r.take(1, c)) return false;
          if (c[0] == 253) return false;  // NaN
          if (c[0] >= 254) {
            d = c[0] == 254 ? INFINITY : -INFINITY;
          } else {
            const unsigned char* t;
            if (!r.take(c[0], t)) return false;
            char buf[256];
            std::memcpy(buf, t, c[0]);
            buf[c[0]] = '\0';
            if (std::sscanf(buf, "%lg", &d) != 1) return false;
          }
        }
        if (std::isnan(d)) return false;
        // The score travels on as text (up to 24 characters and a length)
        // with the member: charged like a short string.
        if (!r.charge(0)) return false;
        o.items.push_back(std::move(s));
        o.scores.push_back(d);
      }
      return no_duplicates(o.items, 1);
    }
    case kTypeSetIntset:
      if (!r.string(s) || !intset(s, o.items, r)) return false;
      o.type = Object::kSet;
      return true;
    case kTypeHashListpack:
    case kTypeHashZiplist:
      if (!r.string(s) || !(type == kTypeHashListpack ? listpack(s, o.items, r) : ziplist(s, o.items, r))) return false;
      o.type = Object::kHash;
      return !o.items.empty() && o.items.size() % 2 == 0 && no_duplicates(o.items, 2);
    case kTypeZsetListpack:
    case kTypeZsetZiplist: {
      std::vector<std::string> flat;
      if (!r.string(s) || !(type == kTypeZsetListpack ? listpack(s, flat, r) : ziplist(s, flat, r))) return false;
      o.type = Object::kZset;
      return !flat.empty() && scored_pairs(flat, o) && no_duplicates(o.items, 1);
    }
    case kTypeListZiplist:
      if (!r.string(s) || !ziplist(s, o.items, r)) return false;
      o.type = Object::kList;
      return !o.items.empty();
    case kTypeListQuicklist:
    case kTypeListQuicklist2: {
      if (!r.len(n) || n == 0 || n > r.left()) return false;
      o.type = Object::kList;
      for (std::uint64_t k = 0; k < n; ++k) {
        std::uint64_t container = 2;  // packed
        if (type == kTypeListQuicklist2 && (!r.len(container) || (container != 1 && container != 2))) return false;
        if (!r.string(s) || s.empty()) return false;
        if (container == 1) o.items.push_back(std::move(s));
        else if (!(type == kTypeListQuicklist2 ? listpack(s, o.items, r) : ziplist(s, o.items, r))) return false;
      }
      return !o.items.empty();
    }
    default:
      return false;  // streams, modules, zipmaps, unknown types
  }
}

}  // namespace

std::uint64_t crc64(std::uint64_t crc, const void* data, std::size_t n) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) crc = kCrcTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

std::string encode(const Object& o) {
  std::string out;
  switch (o.type) {
    case Object::kString:
      out += char(kTypeString);
      put_string(out, o.value);
      break;
    case Object::kHash:
    case Object::kList:
    case Object::kSet:
      out += char(o.type == Object::kHash ? kTypeHash : o.type == Object::kList ? kTypeList : kTypeSet);
      put_len(out, o.type == Object::kHash ? o.items.size() / 2 : o.items.size());
      for (const auto& s : o.items) put_string(out, s);
      break;
    case Object::kZset:
      out += char(kTypeZset2);
      put_len(out, o.items.size());
      for (std::size_t i = 0; i < o.items.size(); ++i) {
        put_string(out, o.items[i]);
        std::uint64_t bits;
        const double d = i < o.scores.size() ? o.scores[i] : 0.0;
        std::memcpy(&bits, &d, 8);
        for (int k = 0; k < 8; ++k) out += char((bits >> (8 * k)) & 0xff);
      }
      break;
    default:
      break;
  }
  out += char(kVersion & 0xff);
  out += char(kVersion >> 8);
  const std::uint64_t crc = crc64(0, out.data(), out.size());
  for (int k = 0; k < 8; ++k) out += char((crc >> (8 * k)) & 0xff);
  return out;
}

std::string decode(std::string_view payload, Object& o, std::size_t budget, bool check_crc) {
  o = Object{};
  if (payload.size() < 10) return kBadPayload;
  const auto* p = reinterpret_cast<const unsigned char*>(payload.data());
  const std::size_t body = payload.size() - 10;
  if (le_unsigned(p + body, 2) > kVersion) return kBadPayload;
  if (check_crc && crc64(0, p, body + 2) != le_unsigned(p + body + 2, 8)) return kBadPayload;
  // As Redis, the object is read from the whole payload: a truncated one
  // may read into the footer (then fails or not as the bytes happen to be).
  Reader r{p, p + payload.size(), budget};
  const unsigned char* t;
  if (!r.take(1, t) || !decode_object(r, t[0], o)) {
    o = Object{};
    return r.over ? kTooLarge : kBadFormat;
  }
  return {};
}

}  // namespace hydra::rdb
