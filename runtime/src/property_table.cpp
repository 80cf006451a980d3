#include "property_table.hpp"

#include <algorithm>

namespace gossamer::detail {

std::int64_t PropertyTable::live_index(PropertyHandle h) const {
  const std::uint32_t index = h.index();
  if (index >= size_) return -1;
  const PropertyHot& e = chunks_[index >> kChunkBits]->hot[index & (kChunk - 1)];
  if (!e.obj || e.gen != h.generation()) return -1;
  return index;
}

PropertyHandle PropertyTable::add(void* obj, void (*destroy)(void*), std::uint64_t type,
                                  std::uint64_t first_id) {
  std::uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    if ((size_ & (kChunk - 1)) == 0) chunks_.push_back(std::make_unique<Chunk>());
    index = size_++;
  }
  PropertyHot& e = hot(index);
  PropertyCold& c = cold(index);
  e.obj = obj;
  e.type = type;
  e.dying = 0;
  c.destroy = destroy;
  c.pins = 0;
  c.ids.assign(1, first_id);
  ++live_;
  return PropertyHandle::make(index, e.gen);
}

bool PropertyTable::toggle(PropertyHandle h, std::uint64_t id) {
  const std::int64_t i = live_index(h);
  if (i < 0 || hot(std::uint32_t(i)).dying) return false;
  std::vector<std::uint64_t>& ids = cold(std::uint32_t(i)).ids;
  auto it = std::find(ids.begin(), ids.end(), id);
  if (it != ids.end()) {
    *it = ids.back();
    ids.pop_back();
  } else {
    ids.push_back(id);
  }
  if (ids.empty()) {
    if (cold(std::uint32_t(i)).pins) {
      hot(std::uint32_t(i)).dying = 1;
      ++changes_;
    } else {
      destroy(std::uint32_t(i));
    }
  }
  return true;
}

void PropertyTable::pin(PropertyHandle h) {
  if (const std::int64_t i = live_index(h); i >= 0) ++cold(std::uint32_t(i)).pins;
}

void PropertyTable::unpin(PropertyHandle h) {
  const std::int64_t i = live_index(h);
  if (i < 0) return;
  PropertyCold& c = cold(std::uint32_t(i));
  if (c.pins == 0) return;
  if (--c.pins == 0 && hot(std::uint32_t(i)).dying) destroy(std::uint32_t(i));
}

void PropertyTable::destroy(std::uint32_t index) {
  PropertyHot& e = hot(index);
  PropertyCold& c = cold(index);
  void* obj = e.obj;
  auto* fn = c.destroy;
  // Invalidate first: the destructor may drop Trusts, which may come back here.
  e.obj = nullptr;
  c.ids.clear();
  c.ids.shrink_to_fit();
  if (++e.gen == 0) e.gen = 1;
  free_.push_back(index);
  --live_;
  ++destroyed_;
  ++changes_;
  DelegatedScope scope;
  fn(obj);
}

void PropertyTable::destroy_all() {
  for (std::uint32_t i = 0; i < size_; ++i)
    if (hot(i).obj) destroy(i);
}

}  // namespace gossamer::detail
