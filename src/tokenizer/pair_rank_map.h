#pragma once
// Open-addressing hash map from a pair of token ids to (merge rank, merged id).
// The merge loop probes it once per adjacent pair, so it avoids std::unordered_map's
// node indirection.
#include <cstdint>
#include <vector>

namespace tiergen::tokenizer {

struct MergeRule {
  int32_t rank;
  int32_t merged;
};

class PairRankMap {
 public:
  void reserve(std::size_t count) {
    std::size_t capacity = 16;
    while (capacity < count * 2) capacity <<= 1;
    slots_.assign(capacity, Slot{kEmpty, {0, 0}});
    mask_ = capacity - 1;
  }

  // Later insertions of the same pair replace earlier ones (as in the reference
  // implementations, where the merges list is turned into a map in order).
  void insert(int32_t left, int32_t right, MergeRule rule) {
    if (size_ * 2 >= slots_.size()) grow();
    const uint64_t key = pack(left, right);
    for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) {
        slots_[i].rule = rule;
        return;
      }
      if (slots_[i].key == kEmpty) {
        slots_[i] = Slot{key, rule};
        ++size_;
        return;
      }
    }
  }

  const MergeRule* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].rule;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

  std::size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key;
    MergeRule rule;
  };
  static uint64_t pack(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  static std::size_t hash(uint64_t key) { return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 20); }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    reserve(old.empty() ? 8 : old.size());
    size_ = 0;
    for (const Slot& s : old) {
      if (s.key != kEmpty) insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xFFFFFFFFu), s.rule);
    }
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace tiergen::tokenizer
