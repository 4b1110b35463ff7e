#include "src/tokenizer/word_cache.h"

#include <functional>

namespace tiergen::tokenizer {

WordCache::WordCache(std::size_t max_words) : max_words_(max_words) {
  std::size_t capacity = 16;
  while (capacity < 2 * max_words_) capacity <<= 1;
  slots_.resize(capacity);
}

std::size_t WordCache::probe(std::string_view word, uint64_t hash) const {
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.ids_count == 0) return i;
    if (s.hash == hash && s.key_size == word.size() && keys_.compare(s.key_offset, s.key_size, word) == 0) return i;
  }
}

bool WordCache::lookup(std::string_view word, std::vector<int64_t>& out) const {
  const uint64_t hash = std::hash<std::string_view>{}(word);
  std::lock_guard<std::mutex> lock(mutex_);
  const Slot& s = slots_[probe(word, hash)];
  if (s.ids_count == 0) return false;
  const int32_t* ids = ids_.data() + s.ids_offset;
  out.insert(out.end(), ids, ids + s.ids_count);
  return true;
}

void WordCache::insert(std::string_view word, const int32_t* ids, std::size_t count) {
  if (count == 0) return;
  const uint64_t hash = std::hash<std::string_view>{}(word);
  std::lock_guard<std::mutex> lock(mutex_);
  // Offsets are 32-bit; the size bound keeps the arenas far below that.
  if (size_ >= max_words_ || keys_.size() + word.size() > UINT32_MAX / 2) clear_locked();
  Slot& s = slots_[probe(word, hash)];
  if (s.ids_count != 0) return;  // another thread got there first
  s = Slot{hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
           static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(count)};
  keys_.append(word);
  ids_.insert(ids_.end(), ids, ids + count);
  ++size_;
}

void WordCache::clear_locked() {
  std::fill(slots_.begin(), slots_.end(), Slot{});
  keys_.clear();
  ids_.clear();
  size_ = 0;
}

}  // namespace tiergen::tokenizer
