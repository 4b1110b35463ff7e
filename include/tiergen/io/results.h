#pragma once
// The results JSONL: one line per prompt, in input order, written as results finish
// and made durable line by line so that an hours-long job survives a crash and can be
// resumed. The file only ever holds complete lines in prompt order; a line torn by a
// crash mid-write is found and cut away on resume.
//
// Two line formats (ResultFormat):
//  Tiergen (keys in this order; absent optionals are left out):
//   {"id", "prompt", "text", "token_ids", "finish_reason", "stop_reason", "logprobs",
//    "num_prompt_tokens", "num_output_tokens"}
//   with n > 1 samples, "text" ... "logprobs" move into "choices": [{...}, ...];
//   a prompt list of texts ("prompt": ["a", "b"]) is written as the list (one of token
//   ids writes no "prompt", as a single one), and its choices are prompt i's sample j
//   at i * n + j;
//   and for a prompt that failed on its own (e.g. too long) so that the job goes on:
//   {"id", "error"}
//   A file written with a job fingerprint starts with one {"tiergen_job": {...}} line.
//  OpenAi: vLLM `run-batch` / OpenAI Batch API output, one line per request:
//   {"id", "custom_id", "response": {"status_code": 200, "request_id", "body": {"id",
//    "object": "text_completion", "created", "model", "choices": [{"index", "text",
//    "logprobs", "finish_reason", "stop_reason"}], "usage": {"prompt_tokens",
//    "completion_tokens", "total_tokens"}}}, "error": null}
//   (chat requests: "object": "chat.completion" and "message": {"role", "content"}
//   in place of "text"); a failed request: "response": {"status_code": 400,
//   "request_id", "body": null}, "error": {"object": "error", "message", "type",
//   "param", "code"}.
#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tiergen::io {

// One sample of a prompt.
struct Completion {
  std::optional<std::string> text;    // the generated text, once detokenized
  std::vector<int64_t> token_ids;     // generated tokens (not the prompt's)
  std::string finish_reason;          // "stop" (EOS, stop string or stop token) or "length"
  nlohmann::ordered_json stop_reason;   // null, the stop string, or the stop token id
  nlohmann::ordered_json logprobs;      // null, or OpenAI's completions logprobs object
};

struct ResultRecord : Completion {
  int64_t index = 0;  // the prompt's PromptRecord::index
  std::string id;
  std::optional<std::string> prompt;  // the prompt text, when it was given as text
  // A prompt list's texts after the first: "prompt" is then written as the list.
  std::vector<std::string> more_prompts;
  std::vector<Completion> more;       // samples 2..n when n > 1 (the first is the base)
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;      // over all samples
  std::optional<std::string> error;  // set: an error record, the fields above unused
  // For OpenAI output.
  std::string custom_id;  // default: id
  std::string model;      // the request's "model", else the job's model
  bool chat = false;      // a /v1/chat/completions request
};

enum class ResultFormat { Tiergen, OpenAi };

// "tiergen" / "openai" -> format; else tiergen::Error.
ResultFormat parse_result_format(const std::string& name);

// One result as a JSON line without the trailing '\n'. Never throws on bad UTF-8 in
// text (generation can stop mid-character): invalid bytes become U+FFFD.
std::string result_to_json_line(const ResultRecord& record);
// The OpenAI batch output line; `created` is the job's start (Unix seconds). The
// "id"s are fresh random ones, as vLLM's are.
std::string result_to_openai_line(const ResultRecord& record, int64_t created);

// How a results file is written and checked on resume.
struct ResultFileOptions {
  ResultFormat format = ResultFormat::Tiergen;
  int64_t created = 0;  // OpenAI "created"
  // What produced the file (a JSON object: prompts hash, model, sampling flags ...).
  // Tiergen format: the first line {"tiergen_job": job}; OpenAI format (whose lines are
  // all results): the file PATH.job.json beside it. On resume a file made by another
  // job is refused naming the fields that differ. Null: not recorded, not checked.
  nlohmann::ordered_json job;
  // Tiergen format: a hash of each prompt's text (prompt_text_hash, when it had one); a
  // done line whose "prompt" differs is refused on resume. Empty: not checked. Hashes,
  // not copies: a job's prompts may be hundreds of MB.
  std::vector<std::optional<uint64_t>> prompt_text_hashes;
  // Resume only: the done prompts whose lines are errors are run again (retried()),
  // and their new lines replace the old ones.
  bool retry_failed = false;
};

// What ResultFileOptions::prompt_text_hashes holds for a prompt's text.
uint64_t prompt_text_hash(std::string_view text);

// The fields in which two job fingerprints differ, as "field: was X, now Y".
std::vector<std::string> job_differences(const nlohmann::json& was, const nlohmann::json& now);

// Writes results in prompt order. The engine may submit them in any order (it groups
// prompts by length); a record waits in memory until all earlier ones are written.
// Every line goes out with one write() and, for a regular file, is fsync'ed before
// submit() returns. Move-only; closing without finish() keeps what was written.
//
// The file is this job's alone: open() takes an exclusive lock on it for the writer's
// whole life and refuses a file another process holds, naming it. Nothing in the file
// changes before begin() or the first submit() (once the job is known to be able to
// run): a run that fails before leaves an old file as it was, and a file it created
// is removed.
class ResultWriter {
 public:
  // Opens `path` for `total_prompts` results; "" or "-" writes to stdout.
  //  resume = false: an existing non-empty file is an error unless `overwrite`.
  //  resume = true:  keeps the existing file's leading complete lines whose "id" is
  //    the id expected at that position (done_count() of them), cuts away a torn last
  //    line, and appends after them. A line with another prompt's id is an error.
  // `ids_in_order` (size total_prompts) are the prompts' ids; submit() and resume
  // check against them. Empty: no id checks.
  // In OpenAI format the ids are the lines' "custom_id"s.
  static ResultWriter open(const std::string& path, int64_t total_prompts, bool resume,
                           std::vector<std::string> ids_in_order = {}, bool overwrite = false,
                           const ResultFileOptions& options = {});

  ResultWriter(ResultWriter&& other) noexcept;
  ResultWriter& operator=(ResultWriter&& other) noexcept;
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;
  ~ResultWriter();

  // Prompts already in the file when it was opened (resume); the engine skips them.
  int64_t done_count() const { return done_count_; }
  // Of those, the error records: requests that failed before the interruption (not
  // counting those retried).
  int64_t failed_before() const { return failed_before_; }
  // With retry_failed: the done prompts whose error lines are to be replaced. The job
  // submits a result for each; when the last has arrived the file is rewritten with
  // them in place, under a fresh locked name renamed over the old (a crash leaves the
  // old file or the new one, never a mix), and later results follow as before.
  std::vector<int64_t> retried() const;
  // Results in the file now (done_count() plus those written since).
  int64_t written_count() const { return next_index_; }
  // Results submitted but waiting for an earlier one.
  size_t pending_count() const { return pending_.size(); }
  int64_t total_prompts() const { return total_; }
  const std::string& path() const { return path_; }

  // The work starts: cuts a torn last line (resume) or empties the old file
  // (overwrite), writes the job record. submit() and finish() begin if nothing did.
  void begin();

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
  void check_id(const ResultRecord& record) const;
  void submit_retried(ResultRecord record);
  void remove_stale_rewrites();
  void rewrite_with_retried();
  void check_job_line(const std::string& line, int64_t line_number);
  void lock_for_this_job(const struct stat& st);
  void record_job();
  void write_sidecar(const std::string& sidecar, const std::string& text);
  void write_pending();
  std::string serialize(const ResultRecord& record) const;
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
  ResultFileOptions options_;
  std::map<int64_t, std::string> pending_;  // index -> serialized line
  uint64_t good_size_ = 0;  // file size after the last complete line written
  bool failed_ = false;     // a write failed: refuse more, the file ends at good_size_
  bool finished_ = false;
  bool begun_ = false;             // the file may change (begin())
  bool created_ = false;           // open() created the file: removed if never begun
  bool needs_job_record_ = false;  // begin() writes the job record
  std::optional<uint64_t> cut_to_;  // begin() truncates the file to this size
  int64_t failed_before_ = 0;
  // An error line to replace (retry_failed): its prompt and its bytes in the file.
  struct RetriedLine {
    int64_t index;
    uint64_t begin, end;
  };
  std::vector<RetriedLine> retry_;         // in file order
  std::map<int64_t, std::string> retried_;  // index -> new line, until all have come
};

}  // namespace tiergen::io
