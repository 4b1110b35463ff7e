// Durable, ordered, resumable results. The file is the job's checkpoint: what is in it
// is done, so it must only ever hold complete lines in prompt order. Hence one write()
// per line, fsync before submit() returns, and on resume a scan that keeps the longest
// prefix of good lines and cuts away a line torn by a crash.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/sysmacros.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <utility>

#include "src/io/line_reader.h"
#include "tiergen/common/error.h"
#include "tiergen/common/standard_streams.h"
#include "tiergen/io/results.h"

namespace tiergen::io {

namespace {

// The rewrite of --retry-failed is written beside the results, named RESULTS.retry.XXXXXX.
constexpr const char* kRewriteSuffix = ".retry.";

// Where the OpenAI format keeps its job record (its lines must all be results).
std::string job_sidecar_path(const std::string& results_path) { return results_path + ".job.json"; }

std::string errno_text() { return std::strerror(errno); }

// A new file's name is only durable once its directory is synced.
void sync_parent_directory(const std::string& path) {
  auto dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: some file systems refuse fsync on directories
  ::close(fd);
}

// The process holding a flock on `st`'s file, from /proc/locks ("1: FLOCK ADVISORY
// WRITE PID MAJ:MIN:INODE 0 EOF"); nullopt where that cannot be told.
std::optional<long> flock_holder(const struct stat& st) {
  std::ifstream locks("/proc/locks");
  const std::string file = fmt::format("{:02x}:{:02x}:{}", major(st.st_dev), minor(st.st_dev),
                                       static_cast<unsigned long>(st.st_ino));
  std::string line;
  while (std::getline(locks, line)) {
    std::istringstream fields(line);
    std::string number, kind, advisory, mode, pid, where;
    if (!(fields >> number >> kind)) continue;
    if (kind == "->") fields >> kind;  // a waiter's line
    if (kind != "FLOCK" || !(fields >> advisory >> mode >> pid >> where) || where != file) continue;
    try {
      return std::stol(pid);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

// What a process is, for a message: its command line, cut short.
std::string process_text(long pid) {
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
  while (!cmdline.empty() && cmdline.back() == ' ') cmdline.pop_back();
  if (cmdline.size() > 160) cmdline = cmdline.substr(0, 157) + "...";
  return cmdline.empty() ? fmt::format("PID {}", pid) : fmt::format("PID {}: {}", pid, cmdline);
}

// Writes all of `data` to `fd`: "" when it did, else why it could not.
std::string write_all(int fd, const std::string& data) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno_text() : "wrote nothing";
    p += n;
    left -= static_cast<size_t>(n);
  }
  return {};
}

}  // namespace

uint64_t prompt_text_hash(std::string_view text) { return std::hash<std::string_view>{}(text); }

ResultWriter ResultWriter::open(const std::string& path, int64_t total_prompts, bool resume,
                                std::vector<std::string> ids_in_order, bool overwrite,
                                const ResultFileOptions& options) {
  TG_CHECK(total_prompts >= 0, "results: negative prompt count {}", total_prompts);
  TG_CHECK(ids_in_order.empty() || static_cast<int64_t>(ids_in_order.size()) == total_prompts,
           "results: {} prompt ids for {} prompts", ids_in_order.size(), total_prompts);
  TG_CHECK(!(resume && overwrite), "results: resume and overwrite exclude each other");
  ResultWriter w;
  w.path_ = path.empty() ? "-" : path;
  w.total_ = total_prompts;
  w.ids_ = std::move(ids_in_order);
  w.options_ = options;

  if (w.path_ == "-") {
    TG_CHECK(!resume, "results go to stdout, which cannot be resumed; write them to a file");
    TG_CHECK(!standard_stream_was_closed(STDOUT_FILENO),
             "results go to stdout, but stdout was closed when tiergen started; pass -o FILE");
    std::cout.flush();  // lines go to the fd directly; nothing buffered may follow them
    std::fflush(stdout);
    w.fd_ = STDOUT_FILENO;
    struct stat st {};
    w.regular_file_ = ::fstat(w.fd_, &st) == 0 && S_ISREG(st.st_mode);
    w.begun_ = true;  // a stream has nothing to keep safe from a doomed run
    return w;
  }

  std::error_code ec;
  const bool existed = std::filesystem::exists(w.path_, ec);
  w.fd_ = ::open(w.path_.c_str(), (resume ? O_RDWR : O_WRONLY) | O_CREAT | O_CLOEXEC, 0644);
  TG_CHECK(w.fd_ >= 0, "{}: cannot open results file: {}", w.path_, errno_text());
  w.owns_fd_ = true;
  struct stat st {};
  TG_CHECK(::fstat(w.fd_, &st) == 0, "{}: cannot stat results file: {}", w.path_, errno_text());
  w.regular_file_ = S_ISREG(st.st_mode);
  if (w.regular_file_) w.lock_for_this_job(st);
  w.created_ = !existed;
  if (!existed) sync_parent_directory(w.path_);

  const bool fresh = !resume || st.st_size == 0;
  if (resume && !fresh) {
    TG_CHECK(w.regular_file_, "{}: can only resume a regular file", w.path_);
    w.remove_stale_rewrites();
    w.scan_for_resume();
    // The rewrite replaces the file under its name: another name (a hard link) would
    // keep the old lines and lose the results that follow.
    TG_CHECK(w.retry_.empty() || st.st_nlink <= 1, "results file {} has {} names (hard links); --retry-failed "
             "replaces the file and would leave the others behind: resume a copy of it", w.path_, st.st_nlink);
  } else if (w.regular_file_ && st.st_size > 0) {
    // Hours of results may be in there.
    TG_CHECK(overwrite,
             "{}: results file already exists ({} bytes); resume it (--resume), replace it (--overwrite), or "
             "choose another -o",
             w.path_, static_cast<int64_t>(st.st_size));
    w.cut_to_ = 0;  // when the work starts: a run that fails before it keeps the old results
  }
  w.needs_job_record_ = fresh || (w.regular_file_ && w.good_size_ == 0);  // new, or only a torn record was there
  return w;
}

// Two jobs appending to one file would interleave their lines. The lock lasts as long
// as the descriptor (the whole run) and goes with the process, however it ends.
void ResultWriter::lock_for_this_job(const struct stat& st) {
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) {
    // A --retry-failed run renames a new file over the results and then lets go of the
    // old one: a lock on that old file guards nothing.
    struct stat now {};
    if (::stat(path_.c_str(), &now) == 0 && (now.st_dev != st.st_dev || now.st_ino != st.st_ino)) {
      close_quietly();
      TG_THROW("results file {} was replaced by another process while this one opened it (a --retry-failed "
               "rewrite?); run the command again", path_);
    }
    return;
  }
  const int err = errno;
  const auto holder = err == EWOULDBLOCK ? flock_holder(st) : std::nullopt;
  close_quietly();
  TG_CHECK(err != EWOULDBLOCK,
           "results file {} is in use by another process ({}); two jobs writing one file would mix their lines. "
           "Wait for it to end, or choose another -o", path_, holder ? process_text(*holder) : "its PID is unknown");
  TG_THROW("{}: cannot lock the results file: {}", path_, std::strerror(err));
}

void ResultWriter::begin() {
  if (begun_) return;
  TG_CHECK(fd_ >= 0, "{}: the results file is closed", path_);
  if (regular_file_) {
    if (cut_to_) {
      TG_CHECK(::ftruncate(fd_, static_cast<off_t>(*cut_to_)) == 0, "{}: cannot truncate: {}", path_, errno_text());
      if (*cut_to_ == 0) spdlog::info("{}: overwriting the existing results file", path_);
      cut_to_.reset();
    }
    TG_CHECK(::lseek(fd_, static_cast<off_t>(good_size_), SEEK_SET) >= 0, "{}: cannot seek: {}", path_,
             errno_text());
  }
  begun_ = true;
  if (needs_job_record_) record_job();
  write_pending();
}

// Keeps the leading lines that are complete, JSON, and carry the expected id; cuts a
// damaged last line. A damaged line with more lines after it is not a crash's doing,
// so that is an error rather than something to cut.
void ResultWriter::scan_for_resume() {
  std::ifstream in(path_, std::ios::binary);
  TG_CHECK(in.is_open(), "{}: cannot read results file: {}", path_, errno_text());
  LineReader reader(in, path_, std::numeric_limits<size_t>::max());
  struct Damage {
    int64_t line;
    std::string why;
  };
  std::optional<Damage> damage;
  std::string line;
  const bool openai = options_.format == ResultFormat::OpenAi;
  const char* id_key = openai ? "custom_id" : "id";
  const bool job_line_expected = !options_.job.is_null() && !openai;
  if (!options_.job.is_null() && openai) check_job_line("", 0);
  while (reader.next(line)) {
    const int64_t n = reader.line_number();
    TG_CHECK(!damage, "results file {} line {} is damaged ({}) but more lines follow it; fix or move the file",
             path_, damage ? damage->line : 0, damage ? damage->why : "");
    if (!reader.ended_with_newline()) {
      damage = Damage{n, "no newline at its end"};
      break;
    }
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (n == 1 && job_line_expected) {
      check_job_line(line, n);
      good_size_ = reader.line_offset() + line.size() + 1;
      continue;
    }
    if (j.is_discarded() || !j.is_object() || !j.contains(id_key) || !j[id_key].is_string()) {
      damage = Damage{n, j.is_discarded() ? "not valid JSON" : "not a result record"};
      continue;
    }
    TG_CHECK(done_count_ < total_, "results file {} has more lines than the {} prompts: was it made from another "
             "prompt file?", path_, total_);
    const auto id = j[id_key].get<std::string>();
    if (!ids_.empty()) {
      TG_CHECK(id == ids_[done_count_],
               "results file {} line {} has id \"{}\" but the prompt at that position (index {}) is \"{}\": was "
               "it made from another prompt file?",
               path_, n, id, done_count_, ids_[done_count_]);
    }
    const auto& hashes = options_.prompt_text_hashes;
    if (static_cast<int64_t>(hashes.size()) > done_count_ && hashes[done_count_] && j.contains("prompt")) {
      TG_CHECK(j["prompt"].is_string() && prompt_text_hash(j["prompt"].get_ref<const std::string&>()) == *hashes[done_count_],
               "results file {} line {} (id \"{}\") was made from another prompt text than the prompt file's "
               "now; resume it with the prompt file it was made from, or start a new results file",
               path_, n, id);
    }
    // An error record: the request failed before the interruption, and still counts,
    // unless it is to be run again.
    if (j.contains("error") && !j["error"].is_null()) {
      const uint64_t begin = reader.line_offset();
      if (options_.retry_failed) retry_.push_back({done_count_, begin, begin + line.size() + 1});
      else ++failed_before_;
    }
    ++done_count_;
    good_size_ = reader.line_offset() + line.size() + 1;
  }
  in.close();

  struct stat st {};
  TG_CHECK(::fstat(fd_, &st) == 0, "{}: cannot stat results file: {}", path_, errno_text());
  if (static_cast<uint64_t>(st.st_size) > good_size_) {
    spdlog::warn("results file {} line {} is torn ({}), probably by a crash mid-write; its {} bytes are cut "
                 "away when the work starts", path_, damage ? damage->line : done_count_ + 1,
                 damage ? damage->why : "partial", static_cast<uint64_t>(st.st_size) - good_size_);
    cut_to_ = good_size_;
  }
  next_index_ = done_count_;
  spdlog::info("{}: resuming with {} of {} results already done", path_, done_count_, total_);
}

// Refuses to resume a file made by another job. `line` is the file's first line
// (tiergen format); the OpenAI format keeps the record beside the file.
void ResultWriter::check_job_line(const std::string& line, int64_t line_number) {
  nlohmann::json was;
  if (options_.format == ResultFormat::OpenAi) {
    const std::string sidecar = job_sidecar_path(path_);
    std::ifstream in(sidecar, std::ios::binary);
    TG_CHECK(in.is_open(), "results file {} has no job record {} beside it, so resuming cannot tell whether it "
             "was made by this job; start a new results file", path_, sidecar);
    was = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    TG_CHECK(was.is_object(), "{}: not a job record (not a JSON object)", sidecar);
  } else {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    TG_CHECK(j.is_object() && j.contains("tiergen_job") && j["tiergen_job"].is_object(),
             "results file {} line {} is not a job record {{\"tiergen_job\": ...}}, so resuming cannot tell whether "
             "the file was made by this job (written by an older tiergen?); start a new results file",
             path_, line_number);
    was = j["tiergen_job"];
  }
  const auto differences = job_differences(was, nlohmann::json(options_.job));
  if (!differences.empty()) {
    std::string list;
    for (const auto& d : differences) list += "\n  " + d;
    TG_THROW("results file {} was made by a different job; --resume would mix the two. What differs:{}\n"
             "Rerun with the original prompts and flags, or write to a new results file.", path_, list);
  }
}

void ResultWriter::record_job() {
  if (options_.job.is_null() || path_ == "-") return;
  if (options_.format == ResultFormat::OpenAi) {
    write_sidecar(job_sidecar_path(path_), options_.job.dump(2) + "\n");
    return;
  }
  nlohmann::ordered_json j;
  j["tiergen_job"] = options_.job;
  write_line(j.dump() + "\n");
  sync();
}

// Written whole under a fresh name (mkstemp: never a name someone planted, such as a
// symlink), synced, then renamed over the record: a reader sees the old record or the
// new one, never a part.
void ResultWriter::write_sidecar(const std::string& sidecar, const std::string& text) {
  std::string name = sidecar + ".XXXXXX";
  const int fd = ::mkstemp(name.data());
  TG_CHECK(fd >= 0, "{}: cannot create the job record: {}", name, errno_text());
  try {
    TG_CHECK(::fchmod(fd, 0644) == 0, "{}: cannot set the job record's mode: {}", name, errno_text());
    const std::string why = write_all(fd, text);
    TG_CHECK(why.empty(), "{}: cannot write the job record: {}", name, why);
    TG_CHECK(::fsync(fd) == 0, "{}: cannot sync the job record: {}", name, errno_text());
  } catch (...) {
    ::close(fd);
    ::unlink(name.c_str());
    throw;
  }
  const bool closed = ::close(fd) == 0;
  const std::string close_error = errno_text();
  std::error_code ec;
  if (closed) std::filesystem::rename(name, sidecar, ec);
  if (!closed || ec) {
    ::unlink(name.c_str());
    TG_THROW("{}: cannot write the job record: {}", sidecar, closed ? ec.message() : close_error);
  }
  sync_parent_directory(sidecar);
}

std::string ResultWriter::serialize(const ResultRecord& record) const {
  return options_.format == ResultFormat::OpenAi ? result_to_openai_line(record, options_.created)
                                                 : result_to_json_line(record);
}

ResultWriter::ResultWriter(ResultWriter&& other) noexcept { *this = std::move(other); }

ResultWriter& ResultWriter::operator=(ResultWriter&& other) noexcept {
  if (this != &other) {
    close_quietly();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    owns_fd_ = std::exchange(other.owns_fd_, false);
    regular_file_ = other.regular_file_;
    total_ = other.total_;
    done_count_ = other.done_count_;
    next_index_ = other.next_index_;
    ids_ = std::move(other.ids_);
    options_ = std::move(other.options_);
    pending_ = std::move(other.pending_);
    other.pending_.clear();
    good_size_ = other.good_size_;
    failed_ = other.failed_;
    finished_ = std::exchange(other.finished_, true);
    begun_ = std::exchange(other.begun_, true);
    created_ = std::exchange(other.created_, false);
    needs_job_record_ = other.needs_job_record_;
    cut_to_ = other.cut_to_;
    failed_before_ = other.failed_before_;
    retry_ = std::move(other.retry_);
    retried_ = std::move(other.retried_);
  }
  return *this;
}

ResultWriter::~ResultWriter() { close_quietly(); }

void ResultWriter::close_quietly() noexcept {
  if (!finished_ && !pending_.empty()) {
    spdlog::warn("{}: closing with {} finished results unwritten (they wait for prompt {}); resuming redoes them",
                 path_, pending_.size(), next_index_);
  }
  pending_.clear();
  // A run that failed before its work started leaves no file behind it (it still holds
  // the lock, so the name is still its own).
  if (owns_fd_ && fd_ >= 0 && created_ && !begun_) ::unlink(path_.c_str());
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
  fd_ = -1;
  owns_fd_ = false;
}

void ResultWriter::submit(ResultRecord record) {
  TG_CHECK(!finished_, "{}: result for prompt {} submitted after finish()", path_, record.index);
  TG_CHECK(!failed_, "{}: an earlier write failed; no more results are written", path_);
  TG_CHECK(record.index >= 0 && record.index < total_, "{}: result for prompt {} but there are only {} prompts",
           path_, record.index, total_);
  if (record.index < done_count_) return submit_retried(std::move(record));
  TG_CHECK(record.index >= next_index_ && pending_.count(record.index) == 0,
           "{}: result for prompt {} (id \"{}\") submitted twice", path_, record.index, record.id);
  check_id(record);
  pending_.emplace(record.index, serialize(record) + '\n');
  begin();
  write_pending();
}

void ResultWriter::check_id(const ResultRecord& record) const {
  if (ids_.empty()) return;
  // The OpenAI format names its lines by "custom_id".
  const std::string& id = options_.format == ResultFormat::OpenAi && !record.custom_id.empty() ? record.custom_id
                                                                                              : record.id;
  TG_CHECK(id == ids_[record.index], "{}: result for prompt {} has id \"{}\" but the prompt's id is \"{}\"",
           path_, record.index, id, ids_[record.index]);
}

// A rewrite cut short by a crash leaves its file beside the results; whoever holds the
// results file's lock knows that no rewrite is under way, so any such file is stale.
void ResultWriter::remove_stale_rewrites() {
  std::error_code ec;
  const std::filesystem::path file = std::filesystem::canonical(path_, ec);
  if (ec) return;
  const std::string prefix = file.filename().string() + kRewriteSuffix;
  for (const auto& entry : std::filesystem::directory_iterator(file.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() == prefix.size() + 6 && name.compare(0, prefix.size(), prefix) == 0) {
      std::filesystem::remove(entry.path(), ec);
      spdlog::info("{}: removed {}, left by a --retry-failed rewrite that did not finish", path_, name);
    }
  }
}

std::vector<int64_t> ResultWriter::retried() const {
  std::vector<int64_t> out;
  for (const auto& r : retry_) out.push_back(r.index);
  return out;
}

void ResultWriter::submit_retried(ResultRecord record) {
  const auto it = std::find_if(retry_.begin(), retry_.end(), [&](const auto& r) { return r.index == record.index; });
  TG_CHECK(it != retry_.end() && retried_.count(record.index) == 0,
           "{}: result for prompt {} (id \"{}\") was already done before resuming, or submitted twice", path_,
           record.index, record.id);
  check_id(record);
  retried_.emplace(record.index, serialize(record) + '\n');
  begin();
  if (retried_.size() == retry_.size()) rewrite_with_retried();
}

// The file as it is, with each retried line in place of its error line, written under
// a fresh name (mkstemp), locked, synced and renamed over the results: the lock moves
// with the new file, and a crash leaves the old file or the new one.
void ResultWriter::rewrite_with_retried() {
  // The file itself, where -o is a symbolic link: the link keeps pointing at it.
  std::error_code canonical_error;
  const std::string target = std::filesystem::canonical(path_, canonical_error).string();
  if (canonical_error) {
    failed_ = true;
    TG_THROW("{}: cannot resolve the results file to rewrite it: {}", path_, canonical_error.message());
  }
  std::string name = target + kRewriteSuffix + "XXXXXX";
  const int out = ::mkstemp(name.data());
  if (out < 0) {
    failed_ = true;
    TG_THROW("{}: cannot create a file to rewrite the results in: {}", name, errno_text());
  }
  const auto fail = [&](const std::string& why) {
    ::close(out);
    ::unlink(name.c_str());
    failed_ = true;
    TG_THROW("{}: cannot rewrite the results with the retried requests ({}); the file is as it was", path_, why);
  };
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || ::fchmod(out, st.st_mode & 07777) != 0) fail(errno_text());
  if (::flock(out, LOCK_EX | LOCK_NB) != 0) fail(errno_text());
  std::string buffer(size_t{1} << 20, '\0');
  const auto copy = [&](uint64_t from, uint64_t to) {
    while (from < to) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), to - from));
      const ssize_t got = ::pread(fd_, buffer.data(), want, static_cast<off_t>(from));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) fail(got < 0 ? errno_text() : "the results file is shorter than it was");
      const std::string why = write_all(out, buffer.substr(0, static_cast<size_t>(got)));
      if (!why.empty()) fail(why);
      from += static_cast<uint64_t>(got);
    }
  };
  uint64_t at = 0, size = good_size_;
  for (const auto& r : retry_) {
    copy(at, r.begin);
    const std::string& line = retried_.at(r.index);
    const std::string why = write_all(out, line);
    if (!why.empty()) fail(why);
    size = size - (r.end - r.begin) + line.size();
    at = r.end;
  }
  copy(at, good_size_);
  if (::fsync(out) != 0) fail(errno_text());
  std::error_code ec;
  std::filesystem::rename(name, target, ec);
  if (ec) fail(ec.message());
  sync_parent_directory(target);
  ::close(fd_);
  fd_ = out;
  good_size_ = size;
  TG_CHECK(::lseek(fd_, static_cast<off_t>(good_size_), SEEK_SET) >= 0, "{}: cannot seek: {}", path_, errno_text());
  spdlog::info("{}: the {} retried requests' results replace their error lines", path_, retry_.size());
  retry_.clear();
  retried_.clear();
}

void ResultWriter::write_pending() {
  bool wrote = false;
  while (!pending_.empty() && pending_.begin()->first == next_index_) {
    write_line(pending_.begin()->second);
    pending_.erase(pending_.begin());
    ++next_index_;
    wrote = true;
  }
  if (wrote) sync();
}

void ResultWriter::write_line(const std::string& line) {
  const std::string why = write_all(fd_, line);
  if (!why.empty()) {
    failed_ = true;
    // Take back a partial line so that the file still ends with a complete one.
    if (regular_file_ && ::ftruncate(fd_, static_cast<off_t>(good_size_)) == 0) {
      ::lseek(fd_, static_cast<off_t>(good_size_), SEEK_SET);
    }
    TG_THROW("{}: cannot write the result for prompt {}: {}", path_, next_index_, why);
  }
  good_size_ += line.size();
}

void ResultWriter::sync() {
  if (!regular_file_) return;  // a pipe or terminal has nothing to sync
  if (::fsync(fd_) != 0) {
    failed_ = true;
    TG_THROW("{}: cannot sync results to disk: {}", path_, errno_text());
  }
}

void ResultWriter::finish() {
  TG_CHECK(!finished_, "{}: finish() called twice", path_);
  TG_CHECK(!failed_, "{}: an earlier write failed; the file holds {} of {} results", path_, next_index_, total_);
  begin();
  if (!retry_.empty()) {
    const auto missing = std::find_if(retry_.begin(), retry_.end(), [&](const auto& r) { return !retried_.count(r.index); });
    const int64_t index = missing == retry_.end() ? retry_.front().index : missing->index;
    TG_THROW("{}: {} of {} retried requests have no result (the first: prompt {}); the file keeps their error "
             "lines", path_, retry_.size() - retried_.size(), retry_.size(), index);
  }
  if (next_index_ < total_) {
    const std::string id = ids_.empty() ? std::to_string(next_index_) : ids_[next_index_];
    TG_THROW("{}: only {} of {} results written: prompt {} (id \"{}\") has none{}", path_, next_index_, total_,
             next_index_, id,
             pending_.empty() ? "" : fmt::format(" and {} later results wait for it", pending_.size()));
  }
  sync();
  finished_ = true;
  if (owns_fd_) {
    const int fd = std::exchange(fd_, -1);
    owns_fd_ = false;
    TG_CHECK(::close(fd) == 0, "{}: closing the results file failed: {}", path_, errno_text());
  }
}

}  // namespace tiergen::io
