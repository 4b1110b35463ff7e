#include "src/tokenizer/bpe_model.h"

#include <algorithm>
#include <queue>

#include "src/tokenizer/byte_level.h"
#include "tiergen/common/error.h"
#include "tiergen/tokenizer/utf8.h"

namespace tiergen::tokenizer {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 "▁"
// Longer words rarely repeat; caching them would only churn the cache.
constexpr std::size_t kMaxCachedWordBytes = 256;

bool ends_with_metaspace(std::string_view s) { return s.size() >= 3 && s.substr(s.size() - 3) == kMetaspace; }
bool starts_with_metaspace(std::string_view s) { return s.substr(0, 3) == kMetaspace; }

struct MergeCandidate {
  int32_t rank;
  int32_t pos;    // index of the left symbol
  int32_t left;   // ids expected at pos and at its right neighbour; a mismatch
  int32_t right;  // means an earlier merge consumed one of them
  int32_t right_pos;
  int32_t merged;
};

struct LaterCandidate {
  bool operator()(const MergeCandidate& a, const MergeCandidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

// Scratch space reused across calls on one thread, so the merge loop does not allocate.
struct MergeScratch {
  std::vector<int32_t> prev, next;
  std::vector<MergeCandidate> heap;
  std::vector<int32_t> ids;
};

MergeScratch& scratch() {
  thread_local MergeScratch s;
  return s;
}

}  // namespace

BpeModel::BpeModel(const BpeSpec& spec)
    : byte_level_(spec.byte_level),
      byte_fallback_(spec.byte_fallback),
      fuse_unk_(spec.fuse_unk),
      ignore_merges_(spec.ignore_merges) {
  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  std::unordered_map<std::string_view, int32_t> spelled;  // file spelling -> id
  spelled.reserve(spec.vocab.size());
  piece_keys_.reserve(spec.vocab.size());
  std::string bytes;
  for (const auto& [token, id] : spec.vocab) {
    TG_CHECK(id >= 0 && id < (int64_t{1} << 31), "{}: token '{}' has id {} outside [0, 2^31)", spec.where, token, id);
    const auto id32 = static_cast<int32_t>(id);
    spelled.emplace(token, id32);
    id_limit_ = std::max(id_limit_, id + 1);
    if (byte_level_) {
      // Tokens outside the byte mapping cannot come out of byte-level merges.
      if (!byte_level_to_bytes(token, bytes)) continue;
      if (bytes.size() == 1) byte_ids_[static_cast<unsigned char>(bytes[0])] = id32;
    } else {
      bytes = token;
      const int b = parse_byte_token(token);
      if (b >= 0) byte_ids_[b] = id32;
    }
    piece_keys_.push_back(bytes);
  }
  // Keys are stored first, then indexed, so that the views stay valid.
  piece_ids_.reserve(piece_keys_.size());
  std::size_t key = 0;
  for (const auto& [token, id] : spec.vocab) {
    if (byte_level_ && !byte_level_to_bytes(token, bytes)) continue;
    piece_ids_.emplace(piece_keys_[key++], static_cast<int32_t>(id));
  }

  if (spec.unk_token) {
    const auto it = spelled.find(*spec.unk_token);
    TG_CHECK(it != spelled.end(), "{}: unk_token '{}' is not in the vocabulary", spec.where, *spec.unk_token);
    unk_id_ = it->second;
  }

  merges_.reserve(spec.merges.size());
  std::string joined;
  for (std::size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    const auto l = spelled.find(left);
    const auto r = spelled.find(right);
    joined = left + right;
    const auto m = spelled.find(joined);
    TG_CHECK(l != spelled.end() && r != spelled.end() && m != spelled.end(),
             "{}: merge {} ('{}' '{}') uses a token that is not in the vocabulary ('{}')", spec.where, rank + 1, left,
             right, l == spelled.end() ? left : r == spelled.end() ? right : joined);
    merges_.insert(l->second, r->second, MergeRule{static_cast<int32_t>(rank), m->second});
  }
  if (!byte_level_) check_sentencepiece_chunking(spec);
}

void BpeModel::check_sentencepiece_chunking(const BpeSpec& spec) {
  for (const auto& [left, right] : spec.merges) {
    if (starts_with_metaspace(right) && !ends_with_metaspace(left)) return;
  }
  split_at_metaspace_ = true;
}

std::optional<int32_t> BpeModel::find_piece(std::string_view bytes) const {
  const auto it = piece_ids_.find(bytes);
  if (it == piece_ids_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::encode(std::string_view piece, IdTail& out) const {
  if (!split_at_metaspace_) {
    encode_word(piece, out.ids);
    out.trim_amortised();
    return;
  }
  std::size_t start = 0;
  for (std::size_t i = 3; i + 3 <= piece.size(); ++i) {
    if (piece.compare(i, 3, kMetaspace) == 0 && !ends_with_metaspace(piece.substr(0, i))) {
      encode_word(piece.substr(start, i - start), out.ids);
      out.trim_amortised();
      start = i;
      i += 2;
    }
  }
  encode_word(piece.substr(start), out.ids);
  out.trim_amortised();
}

void BpeModel::encode_word(std::string_view word, std::vector<int64_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = find_piece(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable && cache_.lookup(word, out)) return;

  MergeScratch& s = scratch();
  initial_symbols(word, s.ids);
  merge(s.ids);
  out.insert(out.end(), s.ids.begin(), s.ids.end());
  if (cacheable) cache_.insert(word, s.ids.data(), s.ids.size());
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  ids.clear();
  auto push_unknown = [&](std::string_view what) {
    TG_CHECK(unk_id_.has_value(), "no token for '{}' and the vocabulary has no unk_token", what);
    if (fuse_unk_ && !ids.empty() && ids.back() == *unk_id_) return;
    ids.push_back(*unk_id_);
  };
  if (byte_level_) {
    for (unsigned char b : word) {
      if (byte_ids_[b] >= 0) ids.push_back(byte_ids_[b]);
      else push_unknown(std::string_view(reinterpret_cast<const char*>(&b), 1));
    }
    return;
  }
  std::size_t pos = 0;
  while (pos < word.size()) {
    const std::size_t len = static_cast<std::size_t>(utf8_sequence_length(static_cast<unsigned char>(word[pos])));
    const std::string_view ch = word.substr(pos, len);
    pos += len;
    if (const auto id = find_piece(ch)) {
      ids.push_back(*id);
      continue;
    }
    const bool all_bytes = byte_fallback_ && std::all_of(ch.begin(), ch.end(), [&](char c) {
                             return byte_ids_[static_cast<unsigned char>(c)] >= 0;
                           });
    if (all_bytes) {
      for (char c : ch) ids.push_back(byte_ids_[static_cast<unsigned char>(c)]);
    } else {
      push_unknown(ch);
    }
  }
}

// Heap-ordered merging over a doubly linked list of symbols: O(n log n) per word,
// which matters for the long words (runs of digits, URLs, base64) that would make
// the quadratic textbook loop crawl.
void BpeModel::merge(std::vector<int32_t>& ids) const {
  const auto n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  MergeScratch& s = scratch();
  s.prev.resize(n);
  s.next.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    s.prev[i] = i - 1;
    s.next[i] = i + 1 < n ? i + 1 : -1;
  }
  s.heap.clear();
  auto push_pair = [&](int32_t pos) {
    if (pos < 0) return;
    const int32_t right_pos = s.next[pos];
    if (right_pos < 0) return;
    if (const MergeRule* rule = merges_.find(ids[pos], ids[right_pos])) {
      s.heap.push_back({rule->rank, pos, ids[pos], ids[right_pos], right_pos, rule->merged});
      std::push_heap(s.heap.begin(), s.heap.end(), LaterCandidate{});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  constexpr int32_t kGone = -1;
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), LaterCandidate{});
    const MergeCandidate c = s.heap.back();
    s.heap.pop_back();
    if (ids[c.pos] != c.left || s.next[c.pos] != c.right_pos || ids[c.right_pos] != c.right) continue;
    ids[c.pos] = c.merged;
    ids[c.right_pos] = kGone;
    const int32_t after = s.next[c.right_pos];
    s.next[c.pos] = after;
    if (after >= 0) s.prev[after] = c.pos;
    push_pair(s.prev[c.pos]);
    push_pair(c.pos);
  }
  ids.erase(std::remove(ids.begin(), ids.end(), kGone), ids.end());
}

}  // namespace tiergen::tokenizer
