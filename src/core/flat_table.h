// FlatTable: an open-addressing hash table from a 128-bit key hash to a small payload and the time
// at which that payload may be dropped. Linear probing, backward-shift deletion (no tombstones), at
// most 7/8 full. Not thread-safe: LocalStore guards each table with its shard's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/key_hash.h"

namespace sluice::detail {

template <class Payload>
class FlatTable {
 public:
  using PayloadType = Payload;
  struct Slot {
    Hash128 key;                  // all zero: empty
    std::int64_t expires_us = 0;  // the payload is back to its initial state from then on
    Payload payload{};
  };

  // A usable key: never all zero, since that marks an empty slot.
  static Hash128 usable(Hash128 h) {
    h.hi |= 1;
    return h;
  }

  std::size_t size() const { return size_; }
  std::size_t capacity() const { return slots_.size(); }
  std::size_t memory_bytes() const { return slots_.capacity() * sizeof(Slot); }

  Slot* find(const Hash128& key) {
    if (size_ == 0) return nullptr;
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == key) return &s;
      if (empty(s)) return nullptr;
    }
  }

  // Inserts a key that is not present, with a value-initialised payload. Invalidates Slot pointers.
  Slot& insert(const Hash128& key) {
    if ((size_ + 1) * 8 > slots_.size() * 7) grow();
    std::size_t i = home(key);
    while (!empty(slots_[i])) i = (i + 1) & mask_;
    slots_[i].key = key;
    ++size_;
    return slots_[i];
  }

  // Invalidates Slot pointers.
  void erase(Slot& slot) { erase_at(static_cast<std::size_t>(&slot - slots_.data())); }

  // Looks at up to `n` slots from the sweep cursor and erases those expired at `now_us`.
  void sweep(std::int64_t now_us, std::size_t n) {
    for (; n > 0 && size_ > 0; --n) {
      cursor_ &= mask_;
      Slot& s = slots_[cursor_];
      if (!empty(s) && s.expires_us <= now_us) {
        erase_at(cursor_);  // a later slot may shift into the cursor: look at it next
      } else {
        ++cursor_;
      }
    }
  }

  // Erases, among up to `n` occupied slots from the sweep cursor, the one that expires first.
  void evict(std::size_t n) {
    if (size_ == 0) return;
    std::size_t victim = slots_.size();
    for (std::size_t i = cursor_ & mask_, seen = 0; seen < n && seen < size_; i = (i + 1) & mask_) {
      if (empty(slots_[i])) continue;
      if (victim == slots_.size() || slots_[i].expires_us < slots_[victim].expires_us) victim = i;
      ++seen;
    }
    cursor_ = victim + 1;
    erase_at(victim);
  }

 private:
  static bool empty(const Slot& s) { return s.key.lo == 0 && s.key.hi == 0; }

  std::size_t home(const Hash128& key) const { return static_cast<std::size_t>(key.lo >> shift_); }

  void erase_at(std::size_t hole) {
    // Move each following slot of the probe run back into the hole unless that would put it
    // before its home slot.
    for (std::size_t j = (hole + 1) & mask_; !empty(slots_[j]); j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].key);
      if (((j - h) & mask_) >= ((j - hole) & mask_)) {
        slots_[hole] = std::move(slots_[j]);
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --size_;
  }

  void grow() {
    const std::size_t capacity = slots_.empty() ? 8 : slots_.size() * 2;
    std::vector<Slot> old(capacity);
    old.swap(slots_);
    mask_ = capacity - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    size_ = 0;
    cursor_ = 0;
    for (Slot& s : old) {
      if (empty(s)) continue;
      Slot& moved = insert(s.key);
      moved.expires_us = s.expires_us;
      moved.payload = std::move(s.payload);
    }
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
  std::size_t size_ = 0;
  std::size_t cursor_ = 0;
};

}  // namespace sluice::detail
