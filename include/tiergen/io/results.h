#pragma once
// The results JSONL: one line per prompt, in input order, written as results finish
// and made durable line by line so that an hours-long job survives a crash and can be
// resumed. The file only ever holds complete lines in prompt order; a line torn by a
// crash mid-write is found and cut away on resume.
//
// Line format (keys in this order; absent optionals are left out):
//   {"id", "prompt", "text", "token_ids", "finish_reason", "num_prompt_tokens",
//    "num_output_tokens"}
// and for a prompt that failed on its own (e.g. too long) so that the job goes on:
//   {"id", "error"}
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tiergen::io {

struct ResultRecord {
  int64_t index = 0;  // the prompt's PromptRecord::index
  std::string id;
  std::optional<std::string> prompt;  // the prompt text, when it was given as text
  std::optional<std::string> text;    // the generated text, once detokenized
  std::vector<int64_t> token_ids;     // generated tokens (not the prompt's)
  std::string finish_reason;          // "stop" (EOS) or "length"
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  std::optional<std::string> error;  // set: an error record, the fields above unused
};

// One result as a JSON line without the trailing '\n'. Never throws on bad UTF-8 in
// text (generation can stop mid-character): invalid bytes become U+FFFD.
std::string result_to_json_line(const ResultRecord& record);

// Writes results in prompt order. The engine may submit them in any order (it groups
// prompts by length); a record waits in memory until all earlier ones are written.
// Every line goes out with one write() and, for a regular file, is fsync'ed before
// submit() returns. Move-only; closing without finish() keeps what was written.
class ResultWriter {
 public:
  // Opens `path` for `total_prompts` results; "" or "-" writes to stdout.
  //  resume = false: an existing non-empty file is an error unless `overwrite`.
  //  resume = true:  keeps the existing file's leading complete lines whose "id" is
  //    the id expected at that position (done_count() of them), cuts away a torn last
  //    line, and appends after them. A line with another prompt's id is an error.
  // `ids_in_order` (size total_prompts) are the prompts' ids; submit() and resume
  // check against them. Empty: no id checks.
  static ResultWriter open(const std::string& path, int64_t total_prompts, bool resume,
                           std::vector<std::string> ids_in_order = {}, bool overwrite = false);

  ResultWriter(ResultWriter&& other) noexcept;
  ResultWriter& operator=(ResultWriter&& other) noexcept;
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;
  ~ResultWriter();

  // Prompts already in the file when it was opened (resume); the engine skips them.
  int64_t done_count() const { return done_count_; }
  // Results in the file now (done_count() plus those written since).
  int64_t written_count() const { return next_index_; }
  // Results submitted but waiting for an earlier one.
  size_t pending_count() const { return pending_.size(); }
  int64_t total_prompts() const { return total_; }
  const std::string& path() const { return path_; }

  // Takes one result; writes it and any buffered successors if its predecessors are
  // all written. Throws on an index out of range or already submitted, an id that is
  // not the prompt's, or a failed write (disk full).
  void submit(ResultRecord record);

  // Checks that every result was written, then closes. Throws naming the first
  // missing prompt otherwise.
  void finish();

 private:
  ResultWriter() = default;
  void scan_for_resume();
  void write_line(const std::string& line);
  void sync();
  void close_quietly() noexcept;

  std::string path_;  // as given; "-" for stdout
  int fd_ = -1;
  bool owns_fd_ = false;
  bool regular_file_ = false;  // fsync only means something for a regular file
  int64_t total_ = 0;
  int64_t done_count_ = 0;
  int64_t next_index_ = 0;
  std::vector<std::string> ids_;
  std::map<int64_t, std::string> pending_;  // index -> serialized line
  uint64_t good_size_ = 0;  // file size after the last complete line written
  bool failed_ = false;     // a write failed: refuse more, the file ends at good_size_
  bool finished_ = false;
};

}  // namespace tiergen::io
