// Internal: typed access to one YAML mapping that records every problem
// instead of throwing, so the section parsers in loader.cpp read like tables
// and the user sees all errors of a file at once. Not installed; yaml-cpp
// types stop here.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "address.hpp"
#include "gossamer/config.hpp"

namespace gossamer::config::detail {

// Collects errors (and, for tests, the keys that fell back to defaults).
class Diagnostics {
 public:
  explicit Diagnostics(std::string file) : file_(std::move(file)) {}

  // `mark` is yaml-cpp's 0-based position; a null mark becomes 1:1.
  void error(const YAML::Mark& mark, std::string path, std::string message);
  bool has_errors() const noexcept { return !errors_.empty(); }
  std::size_t error_count() const noexcept { return errors_.size(); }
  // Errors sorted by position (stable), i.e. in document order.
  std::vector<Error> take_errors();

  void note_default(std::string path) { defaulted_.push_back(std::move(path)); }
  const std::vector<std::string>& defaulted() const noexcept { return defaulted_; }

 private:
  std::string file_;
  std::vector<Error> errors_;
  std::vector<std::string> defaulted_;
};

std::string join_path(std::string_view parent, std::string_view key);
std::string index_path(std::string_view parent, std::size_t index);

// "'abc'", "string 'abc'", "null", "a mapping", "a sequence": the V of
// "expected T, got V" (see config.hpp).
std::string describe(const YAML::Node& value);
// A scalar's text for a message: its first line, at most 40 characters.
std::string excerpt(std::string_view text);

struct IntRange {
  std::int64_t lo;
  std::int64_t hi;
  std::int64_t multiple_of = 1;
};

class MapReader {
 public:
  // `node` may be undefined (key absent) or null: both read as an empty
  // mapping, so every key takes its default. `mark` locates the mapping for
  // "missing required key" and cross-key checks when the node has none.
  MapReader(Diagnostics& diag, const YAML::Node& node, std::string path,
            const YAML::Mark& mark);
  // Not copyable or movable: child() returns a prvalue (guaranteed elision).
  MapReader(const MapReader&) = delete;
  MapReader& operator=(const MapReader&) = delete;
  // Calls finish() if the parser did not, so no section forgets to report
  // its unknown keys.
  ~MapReader();

  // Each reader leaves `out` untouched (the default) when the key is absent
  // or its value is invalid, and returns true iff it assigned `out`.
  template <class T>
  bool integer(std::string_view key, T& out, IntRange range) {
    std::int64_t v = 0;
    if (!read_integer(key, v, range)) return false;
    out = static_cast<T>(v);
    return true;
  }
  bool boolean(std::string_view key, bool& out);
  bool string(std::string_view key, std::string& out, bool non_empty = false);
  bool string_list(std::string_view key, std::vector<std::string>& out);
  // A sequence of integers, each in `range`, none repeated.
  bool integer_list(std::string_view key, std::vector<std::uint32_t>& out, IntRange range);
  bool address(std::string_view key, SocketAddress& out, AddressUse use);
  template <class E>
  bool choice(std::string_view key, E& out,
              std::initializer_list<std::pair<std::string_view, E>> names) {
    std::vector<std::string_view> texts;
    for (const auto& n : names) texts.push_back(n.first);
    std::size_t i = 0;
    if (!read_choice(key, texts, i)) return false;
    out = (names.begin() + i)->second;
    return true;
  }

  // A nested mapping; absent or null reads as empty.
  MapReader child(std::string_view key);
  // A sequence value; nullopt when absent or not a sequence (reported).
  std::optional<YAML::Node> sequence(std::string_view key);
  // Reports "missing required key" at this mapping when `key` is absent.
  void require(std::string_view key);

  // Whether the mapping was written at all (even empty or null).
  bool present() const noexcept { return present_; }
  bool has(std::string_view key) const;
  // Position of `key`'s value, or of this mapping when the key is absent.
  YAML::Mark value_mark(std::string_view key) const;
  const YAML::Mark& mark() const noexcept { return mark_; }
  const std::string& path() const noexcept { return path_; }
  std::string path_of(std::string_view key) const { return join_path(path_, key); }
  Diagnostics& diag() noexcept { return diag_; }

  // Reports keys that no reader asked for, suggesting the closest known one.
  // Runs once, after every key of the section was read (at the latest from
  // the destructor).
  void finish();

 private:
  struct Entry {
    std::string key;
    YAML::Node key_node;
    YAML::Node value;
    bool used = false;
  };

  // Registers `key` as known and returns its entry, or nullptr when absent
  // (then noting the default if `leaf`).
  Entry* lookup(std::string_view key, bool leaf = true);
  const Entry* find(std::string_view key) const;
  // The value's mark, or the key's when the value is an (implicit) null:
  // yaml-cpp places an empty value at the next token.
  static YAML::Mark mark_of(const Entry& e);
  void type_error(const Entry& e, std::string_view expected);
  bool read_integer(std::string_view key, std::int64_t& out, IntRange range);
  bool read_choice(std::string_view key, const std::vector<std::string_view>& names,
                   std::size_t& index);

  Diagnostics& diag_;
  std::string path_;
  YAML::Mark mark_;
  std::vector<Entry> entries_;
  std::vector<std::string> known_;
  bool present_ = false;
  bool finished_ = false;
};

}  // namespace gossamer::config::detail
