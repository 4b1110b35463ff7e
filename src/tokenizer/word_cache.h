#pragma once
// A bounded, thread-safe cache from a pre-tokenized word (bytes) to its BPE token
// ids. Text repeats its words heavily, so most words skip the merge loop entirely.
// An open-addressing table over two flat arenas (key bytes, ids): a hit costs one
// hash and usually one probe, and nothing is allocated per entry. When full it is
// emptied rather than evicted piecemeal; the working set refills within a few
// kilobytes of text.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tiergen::tokenizer {

class WordCache {
 public:
  explicit WordCache(std::size_t max_words = 1 << 17);

  // Appends the cached ids of `word` to out; false when absent.
  bool lookup(std::string_view word, std::vector<int64_t>& out) const;
  void insert(std::string_view word, const int32_t* ids, std::size_t count);

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_offset = 0;
    uint32_t key_size = 0;
    uint32_t ids_offset = 0;
    uint32_t ids_count = 0;  // 0 marks an empty slot (every word has an id)
  };
  // Index of the slot holding `word`, or of the empty slot where it would go.
  std::size_t probe(std::string_view word, uint64_t hash) const;
  void clear_locked();

  std::size_t max_words_;
  std::size_t size_ = 0;
  mutable std::mutex mutex_;
  std::vector<Slot> slots_;  // power-of-two size, at least twice max_words_
  std::string keys_;
  std::vector<int32_t> ids_;
};

}  // namespace tiergen::tokenizer
