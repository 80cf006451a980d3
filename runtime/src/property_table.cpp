#include "property_table.hpp"

#include <algorithm>

namespace gossamer::detail {

PropertyEntry* PropertyTable::entry(std::uint32_t index) {
  if (index >= size_) return nullptr;
  return &chunks_[index >> kChunkBits][index & (kChunk - 1)];
}

PropertyEntry* PropertyTable::live_entry(PropertyHandle h) {
  PropertyEntry* e = entry(h.index());
  if (!e || !e->obj || e->gen != h.generation()) return nullptr;
  return e;
}

PropertyHandle PropertyTable::add(void* obj, void (*destroy)(void*), std::uint64_t type,
                                  std::uint64_t first_id) {
  std::uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    if ((size_ & (kChunk - 1)) == 0) chunks_.emplace_back(new PropertyEntry[kChunk]);
    index = size_++;
  }
  PropertyEntry& e = *entry(index);
  e.obj = obj;
  e.destroy = destroy;
  e.type = type;
  e.pins = 0;
  e.dying = false;
  e.ids.assign(1, first_id);
  ++live_;
  return PropertyHandle::make(index, e.gen);
}

bool PropertyTable::toggle(PropertyHandle h, std::uint64_t id) {
  PropertyEntry* e = live_entry(h);
  if (!e || e->dying) return false;
  auto it = std::find(e->ids.begin(), e->ids.end(), id);
  if (it != e->ids.end()) {
    *it = e->ids.back();
    e->ids.pop_back();
  } else {
    e->ids.push_back(id);
  }
  if (e->ids.empty()) {
    if (e->pins) e->dying = true;
    else destroy(*e, h.index());
  }
  return true;
}

void PropertyTable::pin(PropertyHandle h) {
  if (PropertyEntry* e = live_entry(h)) ++e->pins;
}

void PropertyTable::unpin(PropertyHandle h) {
  PropertyEntry* e = live_entry(h);
  if (!e || e->pins == 0) return;
  if (--e->pins == 0 && e->dying) destroy(*e, h.index());
}

void PropertyTable::destroy(PropertyEntry& e, std::uint32_t index) {
  void* obj = e.obj;
  auto* fn = e.destroy;
  // Invalidate first: the destructor may drop Trusts, which may come back here.
  e.obj = nullptr;
  e.ids.clear();
  e.ids.shrink_to_fit();
  if (++e.gen == 0) e.gen = 1;
  free_.push_back(index);
  --live_;
  ++destroyed_;
  DelegatedScope scope;
  fn(obj);
}

void PropertyTable::destroy_all() {
  for (std::uint32_t i = 0; i < size_; ++i) {
    PropertyEntry& e = *entry(i);
    if (e.obj) destroy(e, i);
  }
}

}  // namespace gossamer::detail
