#include "reader.hpp"

#include <algorithm>
#include <charconv>

#include "suggest.hpp"

namespace gossamer::config::detail {

namespace {

constexpr std::string_view kIntTag = "tag:yaml.org,2002:int";
constexpr std::string_view kBoolTag = "tag:yaml.org,2002:bool";
constexpr std::string_view kStrTag = "tag:yaml.org,2002:str";

// yaml-cpp tags a plain scalar "?" and a quoted or block one "!". Numbers and
// booleans must be plain (or explicitly tagged as such): "80" in quotes is a
// string, and accepting it would hide a schema mistake.
bool plain_or_tagged(const YAML::Node& n, std::string_view tag) {
  return n.IsScalar() && (n.Tag() == "?" || n.Tag() == tag);
}

enum class IntParse { ok, not_a_number, too_large };

// YAML 1.2 core schema integers: [-+]?[0-9]+, 0x[0-9a-fA-F]+, 0o[0-7]+.
IntParse parse_int(std::string_view s, std::int64_t& out) {
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  int base = 10;
  if (s.starts_with("0x")) base = 16;
  if (s.starts_with("0o")) base = 8;
  if (base != 10) s.remove_prefix(2);
  if (s.empty()) return IntParse::not_a_number;
  std::uint64_t magnitude = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), magnitude, base);
  if (end != s.data() + s.size()) return IntParse::not_a_number;
  if (ec == std::errc::result_out_of_range) return IntParse::too_large;
  if (ec != std::errc{}) return IntParse::not_a_number;
  // Every range in the schema fits comfortably in int64; clamp the rest.
  if (magnitude > static_cast<std::uint64_t>(INT64_MAX)) return IntParse::too_large;
  out = negative ? -static_cast<std::int64_t>(magnitude) : static_cast<std::int64_t>(magnitude);
  return IntParse::ok;
}

}  // namespace

void Diagnostics::error(const YAML::Mark& mark, std::string path, std::string message) {
  Error e;
  e.file = file_;
  e.line = mark.is_null() ? 1 : mark.line + 1;
  e.column = mark.is_null() ? 1 : mark.column + 1;
  e.path = std::move(path);
  e.message = std::move(message);
  errors_.push_back(std::move(e));
}

std::vector<Error> Diagnostics::take_errors() {
  // Sections report unknown keys and cross-key checks after their fields;
  // sorting restores document order, which is what a reader of the file
  // expects.
  std::stable_sort(errors_.begin(), errors_.end(), [](const Error& a, const Error& b) {
    return std::pair(a.line, a.column) < std::pair(b.line, b.column);
  });
  return std::move(errors_);
}

std::string join_path(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  std::string out(parent);
  out += '.';
  out += key;
  return out;
}

std::string index_path(std::string_view parent, std::size_t index) {
  return std::string(parent) + "[" + std::to_string(index) + "]";
}

std::string excerpt(std::string_view text) {
  constexpr std::size_t kMax = 40;
  const auto newline = text.find('\n');
  const bool cut = newline != std::string_view::npos || text.size() > kMax;
  std::string out(text.substr(0, std::min(newline, kMax)));
  if (cut) out += "...";
  return out;
}

std::string describe(const YAML::Node& value) {
  if (!value.IsDefined() || value.IsNull()) return "null";
  if (value.IsMap()) return "a mapping";
  if (value.IsSequence()) return "a sequence";
  const std::string quoted = "'" + excerpt(value.Scalar()) + "'";
  if (value.Tag() == "!" || value.Tag() == kStrTag) return "string " + quoted;
  return quoted;
}

MapReader::MapReader(Diagnostics& diag, const YAML::Node& node, std::string path,
                     const YAML::Mark& mark)
    : diag_(diag), path_(std::move(path)), mark_(mark), present_(node.IsDefined()) {
  if (!node.IsDefined() || node.IsNull()) return;
  mark_ = node.Mark();
  if (!node.IsMap()) {
    diag_.error(node.Mark(), path_, "expected a mapping, got " + describe(node));
    return;
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    // By value: yaml-cpp's iterator hands out a temporary pair.
    const YAML::Node key = it->first;
    if (!key.IsScalar()) {
      diag_.error(key.Mark(), path_, "expected a string, got " + describe(key));
      continue;
    }
    // yaml-cpp keeps duplicate keys and indexing returns the first, so a
    // second definition would be silently ignored without this check.
    if (const Entry* first = find(key.Scalar())) {
      diag_.error(key.Mark(), join_path(path_, key.Scalar()),
                  "duplicate key '" + key.Scalar() + "' (first defined at line " +
                      std::to_string(first->key_node.Mark().line + 1) + ")");
      continue;
    }
    entries_.push_back(Entry{key.Scalar(), key, it->second});
  }
}

MapReader::~MapReader() { finish(); }

const MapReader::Entry* MapReader::find(std::string_view key) const {
  for (const auto& e : entries_)
    if (e.key == key) return &e;
  return nullptr;
}

MapReader::Entry* MapReader::lookup(std::string_view key, bool leaf) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end())
    known_.emplace_back(key);
  for (auto& e : entries_) {
    if (e.key == key) {
      e.used = true;
      return &e;
    }
  }
  if (leaf) diag_.note_default(path_of(key));
  return nullptr;
}

YAML::Mark MapReader::mark_of(const Entry& e) {
  return e.value.IsNull() ? e.key_node.Mark() : e.value.Mark();
}

void MapReader::type_error(const Entry& e, std::string_view expected) {
  diag_.error(mark_of(e), path_of(e.key),
              "expected " + std::string(expected) + ", got " + describe(e.value));
}

bool MapReader::read_integer(std::string_view key, std::int64_t& out, IntRange range) {
  Entry* e = lookup(key);
  if (e == nullptr) return false;
  std::int64_t v = 0;
  const auto parsed = plain_or_tagged(e->value, kIntTag)
                          ? parse_int(e->value.Scalar(), v)
                          : IntParse::not_a_number;
  if (parsed == IntParse::not_a_number) {
    type_error(*e, "an integer");
    return false;
  }
  const std::string text = excerpt(e->value.Scalar());
  if (parsed == IntParse::too_large || v < range.lo || v > range.hi) {
    diag_.error(mark_of(*e), path_of(key),
                "value " + text + " out of range [" + std::to_string(range.lo) + ", " +
                    std::to_string(range.hi) + "]");
    return false;
  }
  if (v % range.multiple_of != 0) {
    diag_.error(mark_of(*e), path_of(key),
                "value " + text + " is not a multiple of " + std::to_string(range.multiple_of));
    return false;
  }
  out = v;
  return true;
}

bool MapReader::boolean(std::string_view key, bool& out) {
  Entry* e = lookup(key);
  if (e == nullptr) return false;
  // YAML 1.2 core booleans only: yes/no/on/off are YAML 1.1 and surprise
  // people (the "Norway problem"), so they are type errors here.
  if (plain_or_tagged(e->value, kBoolTag)) {
    const std::string& s = e->value.Scalar();
    const bool is_true = s == "true" || s == "True" || s == "TRUE";
    if (is_true || s == "false" || s == "False" || s == "FALSE") {
      out = is_true;
      return true;
    }
  }
  type_error(*e, "a boolean (true or false)");
  return false;
}

bool MapReader::string(std::string_view key, std::string& out, bool non_empty) {
  Entry* e = lookup(key);
  if (e == nullptr) return false;
  if (!e->value.IsScalar()) {
    type_error(*e, "a string");
    return false;
  }
  if (non_empty && e->value.Scalar().empty()) {
    diag_.error(mark_of(*e), path_of(key), "must not be empty");
    return false;
  }
  out = e->value.Scalar();
  return true;
}

bool MapReader::string_list(std::string_view key, std::vector<std::string>& out) {
  const auto seq = sequence(key);
  if (!seq) return false;
  std::vector<std::string> items;
  bool ok = true;
  for (std::size_t i = 0; i < seq->size(); ++i) {
    const YAML::Node item = (*seq)[i];
    if (item.IsScalar()) {
      items.push_back(item.Scalar());
      continue;
    }
    diag_.error(item.IsNull() ? seq->Mark() : item.Mark(), index_path(path_of(key), i),
                "expected a string, got " + describe(item));
    ok = false;
  }
  if (ok) out = std::move(items);
  return ok;
}

bool MapReader::integer_list(std::string_view key, std::vector<std::uint32_t>& out, IntRange range) {
  const auto seq = sequence(key);
  if (!seq) return false;
  std::vector<std::uint32_t> items;
  bool ok = true;
  for (std::size_t i = 0; i < seq->size(); ++i) {
    const YAML::Node item = (*seq)[i];
    const std::string path = index_path(path_of(key), i);
    std::int64_t v = 0;
    const auto parsed = item.IsScalar() && plain_or_tagged(item, kIntTag) ? parse_int(item.Scalar(), v)
                                                                          : IntParse::not_a_number;
    if (parsed == IntParse::not_a_number) {
      diag_.error(item.IsNull() ? seq->Mark() : item.Mark(), path, "expected an integer, got " + describe(item));
      ok = false;
    } else if (parsed == IntParse::too_large || v < range.lo || v > range.hi) {
      diag_.error(item.Mark(), path,
                  "value " + excerpt(item.Scalar()) + " out of range [" + std::to_string(range.lo) + ", " +
                      std::to_string(range.hi) + "]");
      ok = false;
    } else if (std::find(items.begin(), items.end(), std::uint32_t(v)) != items.end()) {
      diag_.error(item.Mark(), path, "value " + excerpt(item.Scalar()) + " is listed twice");
      ok = false;
    } else {
      items.push_back(std::uint32_t(v));
    }
  }
  if (ok) out = std::move(items);
  return ok;
}

bool MapReader::address(std::string_view key, SocketAddress& out, AddressUse use) {
  std::string text;
  if (!string(key, text)) return false;
  std::string why;
  auto parsed = parse_address(text, use, why);
  if (!parsed) {
    diag_.error(value_mark(key), path_of(key),
                "bad address '" + excerpt(text) + "' (" + why + ")");
    return false;
  }
  out = std::move(*parsed);
  return true;
}

bool MapReader::read_choice(std::string_view key, const std::vector<std::string_view>& names,
                            std::size_t& index) {
  Entry* e = lookup(key);
  if (e == nullptr) return false;
  if (e->value.IsScalar()) {
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (e->value.Scalar() == names[i]) {
        index = i;
        return true;
      }
    }
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + std::string(n);
  diag_.error(mark_of(*e), path_of(key),
              "expected one of " + list + "; got " + describe(e->value));
  return false;
}

MapReader MapReader::child(std::string_view key) {
  const Entry* e = lookup(key, /*leaf=*/false);
  if (e == nullptr) return MapReader(diag_, YAML::Node(YAML::NodeType::Undefined), path_of(key), mark_);
  return MapReader(diag_, e->value, path_of(key), mark_of(*e));
}

std::optional<YAML::Node> MapReader::sequence(std::string_view key) {
  Entry* e = lookup(key);
  if (e == nullptr) return std::nullopt;
  if (!e->value.IsSequence()) {
    type_error(*e, "a sequence");
    return std::nullopt;
  }
  return e->value;
}

void MapReader::require(std::string_view key) {
  if (has(key)) return;
  lookup(key, /*leaf=*/false);  // known, so a typo of it gets a suggestion
  diag_.error(mark_, path_of(key), "missing required key");
}

bool MapReader::has(std::string_view key) const { return find(key) != nullptr; }

YAML::Mark MapReader::value_mark(std::string_view key) const {
  const Entry* e = find(key);
  return e != nullptr ? mark_of(*e) : mark_;
}

void MapReader::finish() {
  if (finished_) return;
  finished_ = true;
  for (const auto& e : entries_) {
    if (e.used) continue;
    std::string message = "unknown key '" + excerpt(e.key) + "'";
    if (auto s = closest_key(e.key, known_)) message += " (did you mean '" + *s + "'?)";
    diag_.error(e.key_node.Mark(), path_of(e.key), message);
  }
}

}  // namespace gossamer::config::detail
