#pragma once
// A bounded, thread-safe cache from a pre-tokenized word (bytes) to its BPE token
// ids. Text repeats its words heavily, so most words skip the merge loop entirely.
// When full it is emptied rather than evicted piecemeal: simpler, allocation-free on
// hits, and the working set refills within a few kilobytes of text.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tiergen::tokenizer {

class WordCache {
 public:
  explicit WordCache(std::size_t max_words = 1 << 17) : max_words_(max_words) {}

  // Appends the cached ids of `word` to out; false when absent.
  bool lookup(std::string_view word, std::vector<int64_t>& out) const;
  void insert(std::string_view word, const int32_t* ids, std::size_t count);

 private:
  struct Entry {
    uint32_t offset;
    uint32_t count;
  };
  // Keys point into key_blocks_, so lookups hash a string_view without allocating.
  std::string_view store_key(std::string_view word);
  void clear_locked();

  std::size_t max_words_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string_view, Entry> index_;
  std::vector<int32_t> ids_;
  std::vector<std::unique_ptr<char[]>> key_blocks_;
  std::size_t block_used_ = 0;
  std::size_t block_size_ = 0;
};

}  // namespace tiergen::tokenizer
