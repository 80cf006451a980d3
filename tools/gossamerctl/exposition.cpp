// Prometheus text exposition format parser; see exposition.hpp.
#include "exposition.hpp"

#include <charconv>
#include <cmath>
#include <limits>

namespace gossamer::ctl::exposition {

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return is_alpha(c) || c == '_' || c == ':'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
bool is_label_start(char c) { return is_alpha(c) || c == '_'; }
bool is_label_char(char c) { return is_label_start(c) || is_digit(c); }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = char(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = char(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// A cursor over one line. Every read checks the bound, so no input can
// make it read outside the line.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  bool done() const { return at_ >= s_.size(); }
  char peek() const { return done() ? '\0' : s_[at_]; }
  void next() { ++at_; }
  void skip_blanks() {
    while (!done() && is_blank(s_[at_])) ++at_;
  }
  // The longest run of characters satisfying `pred`, which must start
  // with one satisfying `first`; empty when it does not.
  template <class First, class Pred>
  std::string_view word(First first, Pred pred) {
    if (done() || !first(s_[at_])) return {};
    const std::size_t start = at_++;
    while (!done() && pred(s_[at_])) ++at_;
    return s_.substr(start, at_ - start);
  }
  // Up to the next blank or the end of the line.
  std::string_view token() {
    const std::size_t start = at_;
    while (!done() && !is_blank(s_[at_])) ++at_;
    return s_.substr(start, at_ - start);
  }
  std::string_view rest() const { return done() ? std::string_view{} : s_.substr(at_); }

 private:
  std::string_view s_;
  std::size_t at_ = 0;
};

// After the opening quote: the value up to the closing quote, unescaped.
std::optional<std::string> quoted(Cursor& c, std::string* why) {
  std::string out;
  for (;;) {
    if (c.done()) {
      *why = "unterminated label value";
      return std::nullopt;
    }
    const char ch = c.peek();
    c.next();
    if (ch == '"') return out;
    if (ch != '\\') {
      out += ch;
      continue;
    }
    if (c.done()) {
      *why = "unterminated label value";
      return std::nullopt;
    }
    const char e = c.peek();
    c.next();
    if (e == 'n') out += '\n';
    else if (e == '\\' || e == '"') out += e;
    else {
      // Prometheus refuses other escapes; a lenient reader keeps them.
      out += '\\';
      out += e;
    }
  }
}

// After '{': labels up to and including '}'.
bool labels(Cursor& c, std::size_t max_labels, std::vector<Label>& out, std::string* why) {
  for (;;) {
    c.skip_blanks();
    if (c.peek() == '}') {
      c.next();
      return true;
    }
    const std::string_view name = c.word(is_label_start, is_label_char);
    if (name.empty()) {
      *why = c.done() ? "unterminated label set" : "bad label name";
      return false;
    }
    c.skip_blanks();
    if (c.peek() != '=') {
      *why = "expected '=' after label " + std::string(name);
      return false;
    }
    c.next();
    c.skip_blanks();
    if (c.peek() != '"') {
      *why = "expected '\"' after " + std::string(name) + "=";
      return false;
    }
    c.next();
    auto value = quoted(c, why);
    if (!value) return false;
    for (const auto& l : out)
      if (l.name == name) {
        *why = "duplicate label " + std::string(name);
        return false;
      }
    if (out.size() >= max_labels) {
      *why = "more than " + std::to_string(max_labels) + " labels";
      return false;
    }
    out.push_back({std::string(name), std::move(*value)});
    c.skip_blanks();
    if (c.peek() == ',') {
      c.next();
      continue;
    }
    if (c.peek() == '}') {
      c.next();
      return true;
    }
    *why = c.done() ? "unterminated label set" : "expected ',' or '}' after a label";
    return false;
  }
}

std::optional<std::int64_t> parse_timestamp(std::string_view t) {
  std::int64_t v = 0;
  const char* first = t.data();
  const char* last = t.data() + t.size();
  if (first != last && *first == '+') ++first;
  if (first == last || *first == '+') return std::nullopt;
  auto [end, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || end != last) return std::nullopt;
  return v;
}

Type parse_type(std::string_view t) {
  if (t == "counter") return Type::counter;
  if (t == "gauge") return Type::gauge;
  if (t == "histogram") return Type::histogram;
  if (t == "summary") return Type::summary;
  return Type::untyped;
}

// "# TYPE name type": records the type. Other comments (HELP included,
// which gossamerctl has no use for) are skipped. Never an error: a comment
// that does not parse is still a comment.
void comment(std::string_view line, Document& doc, const Limits& limits) {
  Cursor c(line);
  c.next();  // '#'
  c.skip_blanks();
  if (c.word(is_alpha, is_alpha) != "TYPE") return;
  c.skip_blanks();
  const std::string_view name = c.word(is_name_start, is_name_char);
  if (name.empty()) return;
  c.skip_blanks();
  const std::string_view type = c.token();
  if (doc.types.size() < limits.max_samples || doc.types.count(std::string(name)))
    doc.types[std::string(name)] = parse_type(type);
}

}  // namespace

std::optional<std::string_view> Sample::label(std::string_view n) const {
  for (const auto& l : labels)
    if (l.name == n) return std::string_view(l.value);
  return std::nullopt;
}

std::optional<double> parse_value(std::string_view t) {
  std::string_view body = t;
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (iequals(body, "inf") || iequals(body, "infinity"))
    return negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  if (iequals(body, "nan")) return std::numeric_limits<double>::quiet_NaN();
  // Digits, '.', exponent only: from_chars alone would also take "nan(x)"
  // or a second sign.
  if (body.empty() || !(is_digit(body[0]) || body[0] == '.')) return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), v, std::chars_format::general);
  // Out of range: Go returns ±Inf (or 0 for underflow) with an error that
  // Prometheus reports; refuse the line as it does.
  if (ec != std::errc() || end != body.data() + body.size()) return std::nullopt;
  return negative ? -v : v;
}

std::optional<Sample> parse_sample(std::string_view line, std::size_t max_labels, std::string* why) {
  Cursor c(line);
  c.skip_blanks();
  Sample s;
  const std::string_view name = c.word(is_name_start, is_name_char);
  if (name.empty()) {
    *why = "bad metric name";
    return std::nullopt;
  }
  s.name = name;
  c.skip_blanks();
  if (c.peek() == '{') {
    c.next();
    if (!labels(c, max_labels, s.labels, why)) return std::nullopt;
    c.skip_blanks();
  }
  const std::string_view value = c.token();
  if (value.empty()) {
    *why = "no value";
    return std::nullopt;
  }
  auto v = parse_value(value);
  if (!v) {
    *why = "bad value '" + std::string(value.substr(0, 32)) + "'";
    return std::nullopt;
  }
  s.value = *v;
  c.skip_blanks();
  if (!c.done()) {
    const std::string_view ts = c.token();
    s.timestamp_ms = parse_timestamp(ts);
    if (!s.timestamp_ms) {
      *why = "bad timestamp '" + std::string(ts.substr(0, 32)) + "'";
      return std::nullopt;
    }
    c.skip_blanks();
    if (!c.done()) {
      *why = "text after the timestamp";
      return std::nullopt;
    }
  }
  return s;
}

Document parse(std::string_view text, const Limits& limits) {
  Document doc;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

    std::size_t first = 0;
    while (first < line.size() && is_blank(line[first])) ++first;
    if (first == line.size()) continue;
    if (line[first] == '#') {
      comment(line.substr(first), doc, limits);
      continue;
    }
    if (doc.samples.size() >= limits.max_samples) {
      doc.truncated = true;
      break;
    }
    std::string why;
    if (auto s = parse_sample(line, limits.max_labels, &why)) {
      doc.samples.push_back(std::move(*s));
      continue;
    }
    ++doc.bad_lines;
    if (doc.errors.size() < limits.max_errors) doc.errors.push_back("line " + std::to_string(line_no) + ": " + why);
  }
  return doc;
}

}  // namespace gossamer::ctl::exposition
