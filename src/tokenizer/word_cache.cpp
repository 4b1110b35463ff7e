#include "src/tokenizer/word_cache.h"

#include <cstring>

namespace tiergen::tokenizer {

namespace {
constexpr std::size_t kKeyBlockBytes = 1 << 16;
}

bool WordCache::lookup(std::string_view word, std::vector<int64_t>& out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = index_.find(word);
  if (it == index_.end()) return false;
  const int32_t* ids = ids_.data() + it->second.offset;
  out.insert(out.end(), ids, ids + it->second.count);
  return true;
}

void WordCache::insert(std::string_view word, const int32_t* ids, std::size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (index_.size() >= max_words_) clear_locked();
  if (index_.count(word) != 0) return;
  const std::string_view key = store_key(word);
  const auto offset = static_cast<uint32_t>(ids_.size());
  ids_.insert(ids_.end(), ids, ids + count);
  index_.emplace(key, Entry{offset, static_cast<uint32_t>(count)});
}

std::string_view WordCache::store_key(std::string_view word) {
  if (word.size() > kKeyBlockBytes) {  // oversized words get a block of their own
    key_blocks_.push_back(std::make_unique<char[]>(word.size()));
    std::memcpy(key_blocks_.back().get(), word.data(), word.size());
    block_used_ = block_size_ = 0;  // the next key starts a fresh block
    return {key_blocks_.back().get(), word.size()};
  }
  if (key_blocks_.empty() || block_used_ + word.size() > block_size_) {
    key_blocks_.push_back(std::make_unique<char[]>(kKeyBlockBytes));
    block_used_ = 0;
    block_size_ = kKeyBlockBytes;
  }
  char* dst = key_blocks_.back().get() + block_used_;
  std::memcpy(dst, word.data(), word.size());
  block_used_ += word.size();
  return {dst, word.size()};
}

void WordCache::clear_locked() {
  index_.clear();
  ids_.clear();
  key_blocks_.clear();
  block_used_ = block_size_ = 0;
}

}  // namespace tiergen::tokenizer
