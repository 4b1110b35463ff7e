#pragma once
// Reads a stream line by line with no fixed line buffer (a 10 MB prompt is fine) but a
// cap, so that a file without newlines fails cleanly instead of exhausting memory.
// Shared by the prompt readers and by the result writer's resume scan, which needs the
// byte offset of each line and whether it ended in '\n'.
#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace tiergen::io {

class LineReader {
 public:
  // `name` is the file name used in error messages.
  LineReader(std::istream& in, std::string name, size_t max_line_bytes);

  // Reads the next line into `line` without its '\n' (a '\r' is left for the caller).
  // Returns false at end of input. Throws tiergen::Error on a read error or a line
  // longer than the cap.
  bool next(std::string& line);

  int64_t line_number() const { return line_number_; }  // 1-based, of the last line read
  uint64_t line_offset() const { return line_offset_; }  // byte offset where it starts
  bool ended_with_newline() const { return ended_with_newline_; }

 private:
  bool refill();

  std::istream& in_;
  std::string name_;
  size_t max_line_bytes_;
  std::vector<char> buffer_;
  size_t pos_ = 0, end_ = 0;
  uint64_t consumed_ = 0;  // bytes of the stream before buffer_[pos_]
  int64_t line_number_ = 0;
  uint64_t line_offset_ = 0;
  bool ended_with_newline_ = false;
};

}  // namespace tiergen::io
