#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tiergen::tokenizer {

// Ids as a text is encoded, of which only the last `keep` need to be kept: the front
// is dropped (and counted) whenever the ids held grow past twice that, so a text of
// millions of tokens cut to a model's context never holds all of its ids.
struct IdTail {
  std::vector<int64_t> ids;
  std::size_t keep = SIZE_MAX;
  int64_t dropped = 0;

  void trim(std::size_t slack) {
    if (keep == SIZE_MAX || ids.size() <= keep + slack) return;
    const std::size_t drop = ids.size() - keep;
    ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(drop));
    dropped += static_cast<int64_t>(drop);
  }
  // After each piece: amortised, each id is moved at most once more.
  void trim_amortised() { trim(keep + 4096); }
};

}  // namespace tiergen::tokenizer
