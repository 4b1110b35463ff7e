// Result writer: line format, in-order writing, refusing to clobber, and resume after
// an interruption giving the same bytes as an uninterrupted run.
#include <gtest/gtest.h>

#include "tests/support/error_of.h"
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tiergen/common/error.h"
#include "tiergen/io/results.h"
#include "tests/support/temp_dir.h"

namespace tiergen::io {
namespace {

namespace fs = std::filesystem;

using test::error_of;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void append(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out << bytes;
}

std::vector<std::string> ids_for(int n) {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) ids.push_back("req-" + std::to_string(i));
  return ids;
}

// A result whose content depends on its index, as generation's would.
ResultRecord make_result(int64_t index) {
  ResultRecord r;
  r.index = index;
  r.id = "req-" + std::to_string(index);
  if (index % 5 == 3) {
    r.error = "prompt is longer than the model's 2048 positions";
    return r;
  }
  r.prompt = "prompt " + std::to_string(index);
  r.text = " generated \"text\"\n" + std::string(static_cast<size_t>(index % 7), 'z');
  for (int64_t t = 0; t <= index % 4; ++t) r.token_ids.push_back(100 + index * 10 + t);
  r.finish_reason = index % 2 ? "length" : "stop";
  r.num_prompt_tokens = 2;
  r.num_output_tokens = static_cast<int64_t>(r.token_ids.size());
  return r;
}

class ResultWriterTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }

  // The reference: every result submitted in order, never interrupted.
  std::string straight_run(int n) {
    const auto p = path("straight.jsonl");
    auto w = ResultWriter::open(p, n, false, ids_for(n));
    for (int i = 0; i < n; ++i) w.submit(make_result(i));
    w.finish();
    return slurp(p);
  }

  test::TempDir dir_{"tiergen-io-results"};
};

TEST(ResultJson, FixedKeyOrder) {
  ResultRecord r;
  r.id = "a";
  r.prompt = "Hi";
  r.text = " there";
  r.token_ids = {1, 2};
  r.finish_reason = "stop";
  r.num_prompt_tokens = 3;
  r.num_output_tokens = 2;
  EXPECT_EQ(result_to_json_line(r),
            R"({"id":"a","prompt":"Hi","text":" there","token_ids":[1,2],"finish_reason":"stop",)"
            R"("num_prompt_tokens":3,"num_output_tokens":2})");
  r.prompt.reset();
  r.text.reset();
  EXPECT_EQ(result_to_json_line(r),
            R"({"id":"a","token_ids":[1,2],"finish_reason":"stop","num_prompt_tokens":3,"num_output_tokens":2})");
}

TEST(ResultJson, ErrorRecordHasOnlyIdAndError) {
  ResultRecord r;
  r.id = "b";
  r.token_ids = {5};
  r.error = "prompt too long";
  EXPECT_EQ(result_to_json_line(r), R"({"id":"b","error":"prompt too long"})");
}

TEST(ResultJson, InvalidUtf8IsReplacedNotThrown) {
  ResultRecord r;
  r.id = "c";
  r.text = "cut \xE2\x82";  // generation stopped inside "€"
  r.finish_reason = "length";
  std::string line;
  ASSERT_NO_THROW(line = result_to_json_line(r));
  EXPECT_NE(line.find("cut \xEF\xBF\xBD"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST_F(ResultWriterTest, WritesStrictlyInIndexOrder) {
  const auto p = path("out.jsonl");
  auto w = ResultWriter::open(p, 4, false, ids_for(4));
  EXPECT_EQ(w.done_count(), 0);
  w.submit(make_result(2));
  EXPECT_EQ(slurp(p), "");  // waits for 0 and 1
  EXPECT_EQ(w.pending_count(), 1u);
  w.submit(make_result(0));
  EXPECT_EQ(slurp(p), result_to_json_line(make_result(0)) + "\n");
  EXPECT_EQ(w.written_count(), 1);
  w.submit(make_result(3));
  w.submit(make_result(1));  // releases 1, 2, 3
  EXPECT_EQ(w.pending_count(), 0u);
  EXPECT_EQ(w.written_count(), 4);
  w.finish();
  std::string expected;
  for (int i = 0; i < 4; ++i) expected += result_to_json_line(make_result(i)) + "\n";
  EXPECT_EQ(slurp(p), expected);
}

TEST_F(ResultWriterTest, SubmitRejectsBadRecords) {
  auto w = ResultWriter::open(path("out.jsonl"), 3, false, ids_for(3));
  w.submit(make_result(0));
  w.submit(make_result(2));
  EXPECT_NE(error_of([&] { w.submit(make_result(0)); }).find("twice"), std::string::npos);
  EXPECT_NE(error_of([&] { w.submit(make_result(2)); }).find("twice"), std::string::npos);
  EXPECT_NE(error_of([&] { w.submit(make_result(3)); }).find("only 3 prompts"), std::string::npos);
  auto wrong = make_result(1);
  wrong.id = "someone-else";
  EXPECT_NE(error_of([&] { w.submit(wrong); }).find("req-1"), std::string::npos);
  w.submit(make_result(1));
  w.finish();
}

TEST_F(ResultWriterTest, FinishNamesTheFirstMissingResult) {
  const auto p = path("out.jsonl");
  auto w = ResultWriter::open(p, 3, false, ids_for(3));
  w.submit(make_result(0));
  w.submit(make_result(2));
  const auto msg = error_of([&] { w.finish(); });
  EXPECT_NE(msg.find("1 of 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("req-1"), std::string::npos) << msg;
  // The file holds only the complete, in-order prefix.
  EXPECT_EQ(slurp(p), result_to_json_line(make_result(0)) + "\n");
}

TEST_F(ResultWriterTest, RefusesToClobberExistingResults) {
  const auto p = path("out.jsonl");
  { std::ofstream(p) << "{\"id\":\"old\"}\n"; }
  const auto msg = error_of([&] { ResultWriter::open(p, 1, false, ids_for(1)); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("already exists"), std::string::npos) << msg;
  EXPECT_EQ(slurp(p), "{\"id\":\"old\"}\n");

  auto w = ResultWriter::open(p, 1, false, ids_for(1), /*overwrite=*/true);
  w.submit(make_result(0));
  w.finish();
  EXPECT_EQ(slurp(p), result_to_json_line(make_result(0)) + "\n");

  // An existing empty file holds nothing to lose.
  const auto empty = path("empty.jsonl");
  { std::ofstream(empty) << ""; }
  EXPECT_NO_THROW(ResultWriter::open(empty, 1, false));
}

TEST_F(ResultWriterTest, ResumeCutsATornLastLine) {
  const int n = 6;
  const auto p = path("out.jsonl");
  {
    auto w = ResultWriter::open(p, n, false, ids_for(n));
    for (int i = 0; i < 3; ++i) w.submit(make_result(i));
  }
  const auto good = slurp(p);
  const auto line3 = result_to_json_line(make_result(3)) + "\n";
  append(p, line3.substr(0, line3.size() / 2));  // a crash mid-write
  auto w = ResultWriter::open(p, n, true, ids_for(n));
  EXPECT_EQ(w.done_count(), 3);
  EXPECT_EQ(slurp(p), good + line3.substr(0, line3.size() / 2)) << "nothing changes before the work begins";
  w.begin();
  EXPECT_EQ(slurp(p), good);
  for (int i = 3; i < n; ++i) w.submit(make_result(i));
  w.finish();
  EXPECT_EQ(slurp(p), straight_run(n));
}

TEST_F(ResultWriterTest, ResumeCutsACompleteButUnparsableLastLine) {
  const auto p = path("out.jsonl");
  {
    auto w = ResultWriter::open(p, 4, false, ids_for(4));
    w.submit(make_result(0));
    w.submit(make_result(1));
  }
  const auto good = slurp(p);
  append(p, std::string("{\"id\":\"req-2\",\"tok\0\0\0\n", 22));
  auto w = ResultWriter::open(p, 4, true, ids_for(4));
  EXPECT_EQ(w.done_count(), 2);
  w.begin();
  EXPECT_EQ(slurp(p), good);
}

// A run that fails before its work begins (a budget that does not fit, a broken
// checkpoint) leaves the file it found as it was, and none where there was none.
TEST_F(ResultWriterTest, NothingChangesBeforeTheWorkBegins) {
  const auto old = path("old.jsonl");
  {
    auto w = ResultWriter::open(old, 2, false, ids_for(2));
    w.submit(make_result(0));
    w.submit(make_result(1));
    w.finish();
  }
  const std::string before = slurp(old);
  { auto w = ResultWriter::open(old, 2, false, ids_for(2), /*overwrite=*/true); }
  EXPECT_EQ(slurp(old), before);
  const auto fresh = path("fresh.jsonl");
  { auto w = ResultWriter::open(fresh, 2, false, ids_for(2)); }
  EXPECT_FALSE(fs::exists(fresh));
  {
    auto w = ResultWriter::open(old, 2, false, ids_for(2), /*overwrite=*/true);
    w.begin();
  }
  EXPECT_EQ(slurp(old), "") << "begun: the overwrite happened";
}

// Two jobs writing one file would interleave their lines: while another process holds
// the file, a writer is refused, naming it, and the file is untouched. (The CLI tests
// run two tiergen processes on one file.)
TEST_F(ResultWriterTest, ASecondProcessWritingTheSameFileIsRefusedNamingTheFirst) {
  const auto p = path("shared.jsonl");
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  {
    auto w = ResultWriter::open(p, 2, false, ids_for(2));
    w.submit(make_result(0));
  }
  // The other process takes the lock as a writer does (only async-signal-safe calls
  // between fork and _exit: this process has threads).
  const std::string path_copy = p;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = ::open(path_copy.c_str(), O_WRONLY | O_CLOEXEC);
    char byte = 1;
    const bool ok = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::write(ready[1], &byte, 1) == 1 &&
                    ::read(release[0], &byte, 1) == 1;
    ::_exit(ok ? 0 : 2);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  const std::string before = slurp(p);
  const auto msg = error_of([&] { ResultWriter::open(p, 2, false, ids_for(2), /*overwrite=*/true); });
  const auto resume_msg = error_of([&] { ResultWriter::open(p, 2, true, ids_for(2)); });
  EXPECT_EQ(slurp(p), before);
  ASSERT_EQ(::write(release[1], &byte, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_NE(msg.find("in use by another process (PID " + std::to_string(child)), std::string::npos) << msg;
  EXPECT_NE(resume_msg.find("in use by another process"), std::string::npos) << resume_msg;
  // Once the first process is gone, the file is free again.
  auto w = ResultWriter::open(p, 2, true, ids_for(2));
  EXPECT_EQ(w.done_count(), 1);
  for (int fd : {ready[0], ready[1], release[0], release[1]}) ::close(fd);
}

TEST_F(ResultWriterTest, ResumeRefusesDamageBeforeTheEnd) {
  const auto p = path("out.jsonl");
  const auto line0 = result_to_json_line(make_result(0)) + "\n";
  const auto line2 = result_to_json_line(make_result(2)) + "\n";
  { std::ofstream(p, std::ios::binary) << line0 << "garbage\n" << line2; }
  const auto msg = error_of([&] { ResultWriter::open(p, 4, true, ids_for(4)); });
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("damaged"), std::string::npos) << msg;
  EXPECT_EQ(slurp(p), line0 + "garbage\n" + line2);  // nothing cut
}

TEST_F(ResultWriterTest, ResumeRefusesResultsOfAnotherPromptFile) {
  const auto p = path("out.jsonl");
  {
    auto w = ResultWriter::open(p, 3, false, ids_for(3));
    w.submit(make_result(0));
    w.submit(make_result(1));
  }
  std::vector<std::string> other = {"req-0", "different", "req-2"};
  const auto msg = error_of([&] { ResultWriter::open(p, 3, true, other); });
  EXPECT_NE(msg.find(p + " line 2 has id \"req-1\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"different\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("another prompt file"), std::string::npos) << msg;

  const auto fewer = error_of([&] { ResultWriter::open(p, 1, true, ids_for(1)); });
  EXPECT_NE(fewer.find("more lines than the 1 prompts"), std::string::npos) << fewer;
}

TEST_F(ResultWriterTest, ResumeOfAMissingFileStartsFresh) {
  const auto p = path("new.jsonl");
  auto w = ResultWriter::open(p, 2, true, ids_for(2));
  EXPECT_EQ(w.done_count(), 0);
  w.submit(make_result(1));
  w.submit(make_result(0));
  w.finish();
  EXPECT_EQ(slurp(p), straight_run(2));
}

TEST_F(ResultWriterTest, ResumeOfAFinishedFileHasNothingToDo) {
  const int n = 3;
  const auto reference = straight_run(n);
  const auto p = path("straight.jsonl");
  auto w = ResultWriter::open(p, n, true, ids_for(n));
  EXPECT_EQ(w.done_count(), n);
  EXPECT_NE(error_of([&] { w.submit(make_result(1)); }).find("already done"), std::string::npos);
  w.finish();
  EXPECT_EQ(slurp(p), reference);
}

// The engine finishes prompts out of order; a crash loses what waited in memory and
// may tear the line being written. Resuming must give the bytes of a clean run.
TEST_F(ResultWriterTest, InterruptedAndResumedRunIsByteIdenticalToAStraightRun) {
  const int n = 40;
  const auto reference = straight_run(n);
  const auto p = path("resumed.jsonl");

  // Groups of 4 finish in reverse: 3, 2, 1, 0, 7, 6, 5, 4, ...
  std::vector<int64_t> order(n);
  for (int i = 0; i < n; ++i) order[i] = (i / 4) * 4 + (3 - i % 4);
  int64_t written_before_crash = 0;
  {
    auto w = ResultWriter::open(p, n, false, ids_for(n));
    for (int k = 0; k < 22; ++k) w.submit(make_result(order[k]));
    written_before_crash = w.written_count();
    EXPECT_EQ(written_before_crash, 20);
    EXPECT_EQ(w.pending_count(), 2u);  // finished, but lost with the process
  }
  const auto next = result_to_json_line(make_result(written_before_crash));
  append(p, next.substr(0, 10));

  auto w = ResultWriter::open(p, n, true, ids_for(n));
  EXPECT_EQ(w.done_count(), written_before_crash);
  for (int k = n - 1; k >= 0; --k) {  // a different order this time
    if (order[k] >= w.done_count()) w.submit(make_result(order[k]));
  }
  w.finish();
  EXPECT_EQ(slurp(p), reference);
}

TEST_F(ResultWriterTest, MovedWriterKeepsWriting) {
  const auto p = path("out.jsonl");
  auto a = ResultWriter::open(p, 2, false, ids_for(2));
  a.submit(make_result(1));
  ResultWriter b = std::move(a);
  EXPECT_EQ(b.pending_count(), 1u);
  b.submit(make_result(0));
  b.finish();
  EXPECT_EQ(slurp(p), straight_run(2));
}

TEST_F(ResultWriterTest, AFailedWriteIsAnErrorAndStopsTheWriter) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  auto w = ResultWriter::open("/dev/full", 2, false, ids_for(2));
  const auto msg = error_of([&] { w.submit(make_result(0)); });
  EXPECT_NE(msg.find("cannot write the result for prompt 0"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { w.submit(make_result(1)); }).find("earlier write failed"), std::string::npos);
  EXPECT_NE(error_of([&] { w.finish(); }).find("earlier write failed"), std::string::npos);
}

TEST_F(ResultWriterTest, StdoutWhenPathIsEmptyOrDash) {
  EXPECT_NE(error_of([] { ResultWriter::open("-", 1, true); }).find("stdout"), std::string::npos);
  ::testing::internal::CaptureStdout();
  {
    auto w = ResultWriter::open("", 2, false, ids_for(2));
    w.submit(make_result(1));
    w.submit(make_result(0));
    w.finish();
  }
  const auto out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(out, result_to_json_line(make_result(0)) + "\n" + result_to_json_line(make_result(1)) + "\n");
}

}  // namespace
}  // namespace tiergen::io
