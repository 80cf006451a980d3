// RESP2 request parsing and reply encoding (see resp.hpp).
#include "resp.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>

namespace hydra::resp {

bool parse_int64(std::string_view s, long long& out) {
  if (s.empty() || s.size() > 20) return false;
  if (s == "0") {
    out = 0;
    return true;
  }
  std::size_t i = 0;
  bool neg = s[0] == '-';
  if (neg) ++i;
  // A leading zero, a lone '-' or '-0' are not integers (string2ll).
  if (i >= s.size() || s[i] < '1' || s[i] > '9') return false;
  unsigned long long v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    unsigned d = unsigned(s[i] - '0');
    if (v > (std::numeric_limits<unsigned long long>::max() - d) / 10) return false;
    v = v * 10 + d;
  }
  constexpr unsigned long long kMax = std::numeric_limits<long long>::max();
  if (neg) {
    if (v > kMax + 1) return false;
    out = v == kMax + 1 ? std::numeric_limits<long long>::min() : -static_cast<long long>(v);
  } else {
    if (v > kMax) return false;
    out = static_cast<long long>(v);
  }
  return true;
}

void RequestParser::reset() {
  mode_ = Mode::kStart;
  scan_ = 0;
  args_left_ = 0;
  bulk_len_ = -1;
  expected_ = 0;
  have_count_ = false;
  spans_.clear();
}

RequestParser::Result RequestParser::fail(std::string why) {
  error_ = "Protocol error: " + std::move(why);
  reset();
  return Result::kError;
}

RequestParser::Result RequestParser::parse(std::string_view input, std::size_t& used) {
  if (mode_ == Mode::kStart) {
    if (input.empty()) return Result::kNeedMore;
    mode_ = input[0] == '*' ? Mode::kMultibulk : Mode::kInline;
    scan_ = 0;
  }
  return mode_ == Mode::kMultibulk ? parse_multibulk(input, used) : parse_inline(input, used);
}

namespace {
// The byte as it may appear inside an error message.
std::string show_byte(char c) {
  if (std::isprint(static_cast<unsigned char>(c))) return std::string(1, c);
  char b[8];
  std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned char>(c));
  return b;
}

// A length line: its digits end at a CRLF within `max` bytes of `from`.
// Returns the position of the CR, npos when more input is needed, or
// npos - 1 when the line is too long or the CR is not followed by LF.
constexpr std::size_t kNeedMore = std::string_view::npos;
constexpr std::size_t kBadLine = std::string_view::npos - 1;
std::size_t find_line_end(std::string_view in, std::size_t from, std::size_t max) {
  std::size_t cr = in.find('\r', from);
  if (cr == std::string_view::npos) return in.size() - from > max ? kBadLine : kNeedMore;
  if (cr - from > max) return kBadLine;
  if (cr + 1 >= in.size()) return kNeedMore;
  return in[cr + 1] == '\n' ? cr : kBadLine;
}

// The common length line, at once: 1 to 18 digits without a leading zero
// (or a lone 0), then CRLF, within `max`. Sets n and the CR's position;
// false for anything else, which find_line_end and parse_int64 then judge
// (the same result, the error too). Two calls per argument otherwise, a
// third of the parser's instructions (README, Performance).
bool length_line(std::string_view in, std::size_t from, std::size_t max, long long& n, std::size_t& cr) {
  std::size_t i = from;
  const std::size_t end = std::min(in.size(), from + 18);
  if (i >= end || in[i] < '0' || in[i] > '9') return false;
  long long v = in[i] - '0';
  for (++i; i < end && in[i] >= '0' && in[i] <= '9'; ++i) v = v * 10 + (in[i] - '0');
  if (i + 1 >= in.size() || in[i] != '\r' || in[i + 1] != '\n' || i - from > max) return false;
  if (in[from] == '0' && i - from > 1) return false;  // a leading zero: not an integer
  n = v;
  cr = i;
  return true;
}
}  // namespace

RequestParser::Result RequestParser::parse_multibulk(std::string_view in, std::size_t& used) {
  if (!have_count_) {
    long long n;
    std::size_t cr;
    if (!length_line(in, 1, limits_.max_inline, n, cr)) {
      cr = find_line_end(in, 1, limits_.max_inline);
      if (cr == kNeedMore) return Result::kNeedMore;
      if (cr == kBadLine) return fail("too big or unterminated multibulk count string");
      if (!parse_int64(in.substr(1, cr - 1), n)) return fail("invalid multibulk length");
    }
    if (n > static_cast<long long>(limits_.max_multibulk)) return fail("invalid multibulk length");
    scan_ = cr + 2;
    if (n <= 0) {  // `*0` and `*-1` are empty requests, skipped as Redis does
      used = scan_;
      args_.clear();
      reset();
      return Result::kRequest;
    }
    have_count_ = true;
    args_left_ = static_cast<std::size_t>(n);
    spans_.reserve(std::min<std::size_t>(args_left_, 1024));
  }
  while (args_left_ > 0) {
    if (bulk_len_ < 0) {
      if (scan_ >= in.size()) return Result::kNeedMore;
      if (in[scan_] != '$') return fail("expected '$', got '" + show_byte(in[scan_]) + "'");
      long long n;
      std::size_t cr;
      if (!length_line(in, scan_ + 1, limits_.max_inline, n, cr)) {
        cr = find_line_end(in, scan_ + 1, limits_.max_inline);
        if (cr == kNeedMore) return Result::kNeedMore;
        if (cr == kBadLine) return fail("too big or unterminated bulk count string");
        if (!parse_int64(in.substr(scan_ + 1, cr - scan_ - 1), n) || n < 0) return fail("invalid bulk length");
      }
      if (static_cast<unsigned long long>(n) > limits_.max_bulk) return fail("invalid bulk length");
      bulk_len_ = n;
      scan_ = cr + 2;
      expected_ = scan_ + static_cast<std::size_t>(n) + 2;
    }
    std::size_t len = static_cast<std::size_t>(bulk_len_);
    if (in.size() - scan_ < len + 2) return Result::kNeedMore;
    if (in[scan_ + len] != '\r' || in[scan_ + len + 1] != '\n')
      return fail("bulk of length " + std::to_string(len) + " not followed by CRLF");
    spans_.emplace_back(scan_, len);
    scan_ += len + 2;
    bulk_len_ = -1;
    --args_left_;
  }
  args_.clear();
  for (auto [off, len] : spans_) args_.push_back(in.substr(off, len));
  used = scan_;
  reset();
  return Result::kRequest;
}

RequestParser::Result RequestParser::parse_inline(std::string_view in, std::size_t& used) {
  // Resume the search for LF where the last one stopped: bytes only append.
  std::size_t lf = in.find('\n', scan_);
  if (lf == std::string_view::npos) {
    scan_ = in.size();
    if (in.size() > limits_.max_inline) return fail("too big inline request");
    return Result::kNeedMore;
  }
  if (lf > limits_.max_inline) return fail("too big inline request");
  std::string_view line = in.substr(0, lf);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

  // Split as redis-cli and Redis's sdssplitargs do: blanks separate
  // arguments; "..." takes \n \r \t \b \a \" \\ \xHH escapes; '...' takes \'.
  // A closing quote must be followed by a blank or the end of the line.
  inline_args_.clear();
  std::size_t i = 0, n = line.size();
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f' || c == '\0'; };
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  while (true) {
    while (i < n && blank(line[i])) ++i;
    if (i >= n) break;
    std::string cur;
    bool in_dq = false, in_sq = false, done = false;
    while (!done) {
      if (in_dq) {
        if (i >= n) return fail("unbalanced quotes in request");
        char c = line[i];
        if (c == '\\' && i + 3 < n && line[i + 1] == 'x' && hex(line[i + 2]) >= 0 && hex(line[i + 3]) >= 0) {
          cur += static_cast<char>(hex(line[i + 2]) * 16 + hex(line[i + 3]));
          i += 4;
        } else if (c == '\\' && i + 1 < n) {
          char e = line[i + 1];
          cur += e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e == 'b' ? '\b' : e == 'a' ? '\a' : e;
          i += 2;
        } else if (c == '"') {
          if (i + 1 < n && !blank(line[i + 1])) return fail("unbalanced quotes in request");
          ++i;
          done = true;
        } else {
          cur += c;
          ++i;
        }
      } else if (in_sq) {
        if (i >= n) return fail("unbalanced quotes in request");
        char c = line[i];
        if (c == '\\' && i + 1 < n && line[i + 1] == '\'') {
          cur += '\'';
          i += 2;
        } else if (c == '\'') {
          if (i + 1 < n && !blank(line[i + 1])) return fail("unbalanced quotes in request");
          ++i;
          done = true;
        } else {
          cur += c;
          ++i;
        }
      } else if (i >= n || blank(line[i])) {
        done = true;
      } else if (line[i] == '"') {
        in_dq = true;
        ++i;
      } else if (line[i] == '\'') {
        in_sq = true;
        ++i;
      } else {
        cur += line[i++];
      }
    }
    inline_args_.push_back(std::move(cur));
  }
  args_.clear();
  for (const auto& a : inline_args_) args_.push_back(a);
  used = lf + 1;
  reset();
  return Result::kRequest;
}

void simple(std::string& out, std::string_view s) {
  out += '+';
  out += s;
  out += "\r\n";
}

void error(std::string& out, std::string_view s) {
  out += '-';
  std::size_t at = out.size();
  out += s;
  for (std::size_t i = at; i < out.size(); ++i)
    if (out[i] == '\r' || out[i] == '\n') out[i] = ' ';
  out += "\r\n";
}

void integer(std::string& out, long long v) {
  out += ':';
  out += std::to_string(v);
  out += "\r\n";
}

void bulk(std::string& out, std::string_view s) {
  out += '$';
  out += std::to_string(s.size());
  out += "\r\n";
  out += s;
  out += "\r\n";
}

void nil(std::string& out) { out += "$-1\r\n"; }

void array(std::string& out, std::size_t n) {
  out += '*';
  out += std::to_string(n);
  out += "\r\n";
}

void nil(std::string& out, bool resp3) { out += resp3 ? "_\r\n" : "$-1\r\n"; }

void map(std::string& out, std::size_t n, bool resp3) {
  out += resp3 ? '%' : '*';
  out += std::to_string(resp3 ? n : 2 * n);
  out += "\r\n";
}

void verbatim(std::string& out, std::string_view s, bool resp3) {
  if (!resp3) return bulk(out, s);
  out += '=';
  out += std::to_string(s.size() + 4);
  out += "\r\ntxt:";
  out += s;
  out += "\r\n";
}

// ASCII only, as std::tolower in the C locale (Hydra never sets another),
// without a libc call per character: every command's name goes through
// here (106 Ir per GET/SET before; README, Performance).
std::string lower(std::string_view s) {
  std::string r(s);
  for (char& ch : r)
    if (ch >= 'A' && ch <= 'Z') ch = char(ch - 'A' + 'a');
  return r;
}

void null_array(std::string& out, bool resp3) { out += resp3 ? "_\r\n" : "*-1\r\n"; }

void set(std::string& out, std::size_t n, bool resp3) {
  out += resp3 ? '~' : '*';
  out += std::to_string(n);
  out += "\r\n";
}

void push(std::string& out, std::size_t n, bool resp3) {
  out += resp3 ? '>' : '*';
  out += std::to_string(n);
  out += "\r\n";
}

void dbl(std::string& out, std::string_view text, bool resp3) {
  if (!resp3) return bulk(out, text);
  out += ',';
  out += text;
  out += "\r\n";
}

}  // namespace hydra::resp
