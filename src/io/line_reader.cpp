#include "src/io/line_reader.h"

#include <cstring>

#include "tiergen/common/bytes.h"
#include "tiergen/common/error.h"

namespace tiergen::io {

namespace {
constexpr size_t kChunkBytes = size_t{1} << 20;
}

LineReader::LineReader(std::istream& in, std::string name, size_t max_line_bytes)
    : in_(in), name_(std::move(name)), max_line_bytes_(max_line_bytes), buffer_(kChunkBytes) {}

bool LineReader::refill() {
  if (!in_.good()) return false;
  in_.read(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
  const auto got = static_cast<size_t>(in_.gcount());
  // eof sets failbit too; only badbit means the bytes could not be read.
  TG_CHECK(!in_.bad(), "{}: read error after {} bytes", name_, consumed_);
  pos_ = 0;
  end_ = got;
  return got > 0;
}

bool LineReader::next(std::string& line) {
  line.clear();
  bool any = false;
  const uint64_t start = consumed_;
  for (;;) {
    if (pos_ == end_ && !refill()) break;
    any = true;
    const char* begin = buffer_.data() + pos_;
    const auto* newline = static_cast<const char*>(std::memchr(begin, '\n', end_ - pos_));
    const size_t take = newline ? static_cast<size_t>(newline - begin) : end_ - pos_;
    TG_CHECK(line.size() + take <= max_line_bytes_,
             "{}:{}: line is longer than the limit of {} (is this really a prompt file?)", name_,
             line_number_ + 1, format_bytes(max_line_bytes_));
    line.append(begin, take);
    pos_ += take;
    consumed_ += take;
    if (newline) {
      ++pos_;
      ++consumed_;
      ++line_number_;
      line_offset_ = start;
      ended_with_newline_ = true;
      return true;
    }
  }
  if (!any) return false;
  ++line_number_;
  line_offset_ = start;
  ended_with_newline_ = false;
  return true;
}

}  // namespace tiergen::io
