#include "src/tokenizer/tokenizer_impl.h"
#include "tiergen/tokenizer/tokenizer.h"
#include "tiergen/tokenizer/utf8.h"

namespace tiergen::tokenizer {

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer),
      skip_special_tokens_(skip_special_tokens),
      strip_left_(tokenizer.impl_->decoder.strip_start) {}

std::string StreamingDecoder::push(int64_t id) {
  const Tokenizer::Impl& impl = *tokenizer_.impl_;
  impl.append_bytes(id, skip_special_tokens_, pending_);
  std::size_t ready = complete_utf8_prefix(pending_);
  const std::string& c = impl.decoder.strip_content;
  if (impl.decoder.strip_stop > 0 && !c.empty()) {
    // Trailing strip characters are held back until something follows them: at the
    // end of the text decode() would remove them.
    while (ready >= c.size() && pending_.compare(ready - c.size(), c.size(), c) == 0) ready -= c.size();
  }
  return take(ready);
}

std::string StreamingDecoder::flush() {
  const DecoderSpec& decoder = tokenizer_.impl_->decoder;
  const std::string& c = decoder.strip_content;
  std::size_t end = pending_.size();
  for (std::size_t n = 0; n < decoder.strip_stop && !c.empty() && end >= c.size() &&
                          pending_.compare(end - c.size(), c.size(), c) == 0;
       ++n) {
    end -= c.size();
  }
  pending_.resize(end);
  std::string text = take(pending_.size());
  strip_left_ = decoder.strip_start;
  return text;
}

std::string StreamingDecoder::take(std::size_t count) {
  std::string text = replace_invalid_utf8(std::string_view(pending_).substr(0, count));
  pending_.erase(0, count);
  const std::string& c = tokenizer_.impl_->decoder.strip_content;
  std::size_t begin = 0;
  while (strip_left_ > 0 && !c.empty() && text.compare(begin, c.size(), c) == 0) {
    begin += c.size();
    --strip_left_;
  }
  // Once any other text has been produced, the leading strip no longer applies.
  if (begin < text.size()) strip_left_ = 0;
  return text.substr(begin);
}

}  // namespace tiergen::tokenizer
