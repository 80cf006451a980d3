// A trustee's properties: a table of entries named by (index, generation).
// Requests name properties this way rather than by address, so a handle read
// from a slot is bounds- and generation-checked before use, and a stale
// TrustRef is detected instead of touching freed memory.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <gossamer/detail/core.hpp>

namespace gossamer::detail {

// An entry is split in two, in parallel arrays of a chunk: what the trustee
// reads for every request (`PropertyHot`, 32 bytes, two to a cache line)
// and what only entrust, toggles, pins and destruction touch. With many
// properties the lookups then cover half the lines they did with one
// 64-byte entry (which was 16-aligned and could straddle two lines).
struct alignas(32) PropertyHot {
  void* obj = nullptr;
  std::uint64_t type = 0;
  std::uint32_t gen = 1;
  std::uint32_t dying = 0;  // every Trust gone, waiting for pins to drop
};
static_assert(sizeof(PropertyHot) == 32);

struct PropertyCold {
  void (*destroy)(void*) = nullptr;
  std::uint32_t pins = 0;          // launched fibers still using the property
  std::vector<std::uint64_t> ids;  // live trust ids (symmetric difference set)
};

class PropertyTable {
 public:
  PropertyHandle add(void* obj, void (*destroy)(void*), std::uint64_t type, std::uint64_t first_id);
  // The property if `h` is current and of type `type`; else null and *status.
  // Inline: the trustee looks one up for every request.
  void* find(PropertyHandle h, std::uint64_t type, std::uint32_t* status) {
    const std::uint32_t index = h.index();
    if (index < size_) [[likely]] {
      const PropertyHot& e = chunks_[index >> kChunkBits]->hot[index & (kChunk - 1)];
      if (e.obj && e.gen == h.generation() && !e.dying) [[likely]] {
        if (e.type == type) [[likely]] return e.obj;
        *status = abi::kWrongType;
        return nullptr;
      }
    }
    *status = abi::kStaleProperty;
    return nullptr;
  }
  // Symmetric difference of the id set; destroys the property when it empties.
  // Returns false when `h` names no live property.
  bool toggle(PropertyHandle h, std::uint64_t id);
  void pin(PropertyHandle h);
  void unpin(PropertyHandle h);
  void destroy_all();  // runtime shutdown
  std::size_t live() const { return live_; }
  std::uint64_t destroyed() const { return destroyed_; }
  // Bumped whenever a lookup that succeeded could now fail (an entry made
  // dying or destroyed): a batch may reuse a lookup while it is unchanged.
  std::uint64_t changes() const { return changes_; }
  const std::uint64_t* changes_word() const { return &changes_; }

 private:
  static constexpr std::uint32_t kChunkBits = 8;
  static constexpr std::uint32_t kChunk = 1u << kChunkBits;
  struct alignas(64) Chunk {
    PropertyHot hot[kChunk];
    PropertyCold cold[kChunk];
  };
  // The entry's index if `h` names a live property (current generation),
  // else -1.
  std::int64_t live_index(PropertyHandle h) const;
  PropertyHot& hot(std::uint32_t index) { return chunks_[index >> kChunkBits]->hot[index & (kChunk - 1)]; }
  PropertyCold& cold(std::uint32_t index) { return chunks_[index >> kChunkBits]->cold[index & (kChunk - 1)]; }
  void destroy(std::uint32_t index);

  std::vector<std::unique_ptr<Chunk>> chunks_;  // stable addresses
  std::uint32_t size_ = 0;
  std::vector<std::uint32_t> free_;
  std::size_t live_ = 0;
  std::uint64_t destroyed_ = 0;
  std::uint64_t changes_ = 0;
};

}  // namespace gossamer::detail
