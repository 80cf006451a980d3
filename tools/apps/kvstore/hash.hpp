// A hash's fields and values (Shard::objs), in Redis 7.0's two encodings.
// A small hash is a `listpack`: a flat vector of field, value pairs in
// insertion order, searched linearly (one allocation, no buckets, and the
// order HGETALL, HKEYS, HVALS, HSCAN and HRANDFIELD answer in, as Redis's
// listpack). Setting an existing field keeps its place; deleting one closes
// the gap. Once it holds more than hash-max-listpack-entries fields, or a
// field or value longer than hash-max-listpack-value bytes is set, it
// becomes a `hashtable` (an unordered_map, Redis's dict) and stays one, as
// in Redis (t_hash.c: hashTypeTryConversion, hashTypeSet).
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hydra {

class Hash {
 public:
  using Pair = std::pair<std::string, std::string>;
  using Table = std::unordered_map<std::string, std::string>;
  // hash-max-listpack-entries and -value (types.hpp: hash_limits()).
  struct Limits {
    std::size_t entries;
    std::size_t value;
  };
  // An element as the iterators show it: e.first the field, e.second its
  // value (`const auto& [f, v] : hash` binds them).
  struct Ref {
    const std::string& first;
    const std::string& second;
  };
  // Walks the pairs in insertion order (listpack) or the table's order.
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Ref;
    using difference_type = std::ptrdiff_t;
    using reference = Ref;
    using pointer = void;
    const_iterator() = default;
    Ref operator*() const { return table_ ? Ref{t_->first, t_->second} : Ref{p_->first, p_->second}; }
    const_iterator& operator++() {
      if (table_) ++t_;
      else ++p_;
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator old = *this;
      ++*this;
      return old;
    }
    bool operator==(const const_iterator& o) const { return table_ ? t_ == o.t_ : p_ == o.p_; }

   private:
    friend class Hash;
    const Pair* p_ = nullptr;
    Table::const_iterator t_{};
    bool table_ = false;
  };

  Hash() = default;
  Hash(Hash&&) noexcept = default;
  Hash& operator=(Hash&&) noexcept = default;
  Hash(const Hash& o) : pairs_(o.pairs_), table_(o.table_ ? std::make_unique<Table>(*o.table_) : nullptr) {}
  Hash& operator=(const Hash& o) {
    if (this != &o) *this = Hash(o);
    return *this;
  }

  bool listpack() const noexcept { return !table_; }
  std::size_t size() const noexcept { return table_ ? table_->size() : pairs_.size(); }
  bool empty() const noexcept { return size() == 0; }
  // The table of a `hashtable` hash (DEBUG HTSTATS-KEY), else null.
  const Table* table() const noexcept { return table_.get(); }
  // The pairs of a `listpack` hash, in order (empty for a `hashtable`).
  const std::vector<Pair>& pairs() const noexcept { return pairs_; }

  const_iterator begin() const noexcept {
    const_iterator it;
    it.table_ = bool(table_);
    if (table_) it.t_ = table_->cbegin();
    else it.p_ = pairs_.data();
    return it;
  }
  const_iterator end() const noexcept {
    const_iterator it;
    it.table_ = bool(table_);
    if (table_) it.t_ = table_->cend();
    else it.p_ = pairs_.data() + pairs_.size();
    return it;
  }

  // The value of `field`, null if there is none. The pointer is valid
  // until the next change to the hash.
  const std::string* find(const std::string& field) const {
    if (table_) {
      auto it = table_->find(field);
      return it == table_->end() ? nullptr : &it->second;
    }
    for (const Pair& p : pairs_)
      if (p.first == field) return &p.second;
    return nullptr;
  }
  std::string* find(const std::string& field) { return const_cast<std::string*>(std::as_const(*this).find(field)); }

  // HSET's field: a new field goes last (true), an existing one keeps its
  // place (false). A field or value over `l.value` bytes, or a field over
  // `l.entries`, makes the hash a hashtable first / after.
  bool set(std::string field, std::string value, Limits l) {
    if (!table_ && (field.size() > l.value || value.size() > l.value)) convert();
    if (table_) return table_->insert_or_assign(std::move(field), std::move(value)).second;
    if (std::string* v = find(field)) {
      *v = std::move(value);
      return false;
    }
    if (pairs_.size() == pairs_.capacity()) grow(1);
    pairs_.emplace_back(std::move(field), std::move(value));
    if (pairs_.size() > l.entries) convert();
    return true;
  }

  // Room for `n` more fields of a listpack (HSET's new fields, at most):
  // one allocation for a multi-field HSET instead of the doublings.
  void reserve_more(std::size_t n, Limits l) {
    if (!table_ && pairs_.size() + n <= l.entries && pairs_.capacity() < pairs_.size() + n) pairs_.reserve(pairs_.size() + n);
  }

  // HDEL's field: true if it was there.
  bool erase(const std::string& field) {
    if (table_) return table_->erase(field) != 0;
    for (auto it = pairs_.begin(); it != pairs_.end(); ++it) {
      if (it->first != field) continue;
      pairs_.erase(it);
      return true;
    }
    return false;
  }

  // A field known not to be in the hash yet (a copy's, or a DUMP
  // payload's, whose fields rdb.cpp found distinct): last, unsearched.
  // Call fit() once they are all in.
  void append(std::string field, std::string value) {
    if (table_) table_->insert_or_assign(std::move(field), std::move(value));
    else {
      if (pairs_.size() == pairs_.capacity()) grow(1);
      pairs_.emplace_back(std::move(field), std::move(value));
    }
  }

  // A hash whose contents would make Redis's RDB loader convert it (more
  // than l.entries fields, or a field or value over l.value): becomes a
  // hashtable. For a hash built from a DUMP payload or another shard's copy.
  void fit(Limits l) {
    if (table_) return;
    bool big = pairs_.size() > l.entries;
    for (auto it = pairs_.begin(); !big && it != pairs_.end(); ++it) big = it->first.size() > l.value || it->second.size() > l.value;
    if (big) convert();
  }

  // Listpack to hashtable (never back, as in Redis).
  void convert() {
    if (table_) return;
    auto t = std::make_unique<Table>();
    t->reserve(pairs_.size());
    for (Pair& p : pairs_) t->insert_or_assign(std::move(p.first), std::move(p.second));
    table_ = std::move(t);
    std::vector<Pair>().swap(pairs_);
  }

 private:
  // A full listpack's next size: exact while small (a small hash wastes no
  // slot: 64 bytes each), then a quarter more (not std::vector's double),
  // so an insert moves the pairs at most every fourth time.
  void grow(std::size_t n) {
    const std::size_t size = pairs_.size();
    pairs_.reserve(size + std::max(n, size < 16 ? std::size_t(1) : size / 4));
  }

  std::vector<Pair> pairs_;      // the listpack: used while table_ is null
  std::unique_ptr<Table> table_;  // the hashtable
};

}  // namespace hydra
