// RESP for Hydra: an incremental request parser (multibulk and inline
// requests, every length bounded) and the reply encoders.
//
// The parser never trusts the peer: a length is checked against its limit
// before anything is reserved or waited for, and a bulk must end with CRLF
// exactly where its length says (stricter than Redis, which skips two bytes
// whatever they are: a wrong length then becomes an error, not a request
// assembled from the wrong bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hydra::resp {

struct Limits {
  std::size_t max_bulk = 512u << 20;       // proto-max-bulk-len, as Redis
  std::size_t max_multibulk = 1u << 20;    // arguments in one request
  std::size_t max_inline = 64u << 10;      // an inline request or a length line
};

// Parses requests out of a connection's input buffer, resuming where it left
// off when more bytes arrive (no rescanning: a request of a million
// arguments arriving in pieces costs what it would cost whole).
//
// The owner passes the whole unconsumed input each time, starting at the
// first byte of the request being parsed; it may drop consumed bytes (before
// that start) between calls, because the parser's state is relative to it.
class RequestParser {
 public:
  enum class Result { kNeedMore, kRequest, kError };

  explicit RequestParser(const Limits& limits) : limits_(limits) {}

  // On kRequest: args() holds the request (possibly empty for blank inline
  // lines and `*0`, which the caller skips), `used` the bytes it spans; the
  // views stay valid until `input` changes. On kError: error() says why
  // (without the "ERR " prefix); the connection must be closed.
  Result parse(std::string_view input, std::size_t& used);
  const std::vector<std::string_view>& args() const { return args_; }
  const std::string& error() const { return error_; }
  // Bytes of the current request already known to be needed, for
  // reserving buffer room ahead of a large bulk (0 if unknown).
  std::size_t expected() const { return expected_; }

 private:
  Result parse_inline(std::string_view in, std::size_t& used);
  Result parse_multibulk(std::string_view in, std::size_t& used);
  Result fail(std::string why);
  void reset();

  Limits limits_;
  enum class Mode { kStart, kInline, kMultibulk } mode_ = Mode::kStart;
  std::size_t scan_ = 0;            // next unparsed byte, from the request start
  bool have_count_ = false;         // multibulk: the *N line was parsed
  std::size_t args_left_ = 0;       // multibulk: arguments still to come
  long long bulk_len_ = -1;         // multibulk: length of the current bulk, -1 before its header
  std::size_t expected_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>> spans_;  // (offset, length) from the request start
  std::vector<std::string> inline_args_;                     // unquoted inline arguments
  std::vector<std::string_view> args_;
  std::string error_;
};

// ASCII lower case (command names and options are case-insensitive).
std::string lower(std::string_view s);

// Strict decimal integer, as Redis's string2ll: optional '-', no '+', no
// spaces, no leading zeros, fits in int64.
bool parse_int64(std::string_view s, long long& out);

// Reply encoders: append one RESP2 value (RESP3 where the name says) to `out`.
void simple(std::string& out, std::string_view s);   // +s (s must not hold CR or LF)
void error(std::string& out, std::string_view s);    // -s, CR and LF replaced by spaces
void integer(std::string& out, long long v);
void bulk(std::string& out, std::string_view s);
void nil(std::string& out);                          // $-1
void array(std::string& out, std::size_t n);         // *n, then n values

// RESP3 (HELLO 3) where Redis 7 uses it, RESP2 otherwise.
void nil(std::string& out, bool resp3);              // _ or $-1
void map(std::string& out, std::size_t n, bool resp3);  // %n or *2n, then n key, value pairs
void verbatim(std::string& out, std::string_view s, bool resp3);  // =len txt:s, or a bulk
void null_array(std::string& out, bool resp3);       // _ or *-1 (EXEC after a WATCHed key changed)
void set(std::string& out, std::size_t n, bool resp3);  // ~n or *n, then n values (SMEMBERS, SINTER...)
void push(std::string& out, std::size_t n, bool resp3);  // >n or *n, then n values (pub/sub messages)
void dbl(std::string& out, std::string_view text, bool resp3);  // ,text or a bulk (a score: "inf", %.17g)

}  // namespace hydra::resp
