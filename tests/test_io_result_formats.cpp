// Result lines in OpenAI batch format (vLLM run-batch's field names), n > 1 samples in
// tiergen's format, and the job record that keeps --resume from mixing two jobs.
#include <gtest/gtest.h>

#include "tests/support/error_of.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/support/temp_dir.h"
#include "tiergen/common/error.h"
#include "tiergen/io/results.h"

namespace tiergen::io {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::vector<std::string> keys(const ordered_json& j) {
  std::vector<std::string> k;
  for (const auto& [key, value] : j.items()) k.push_back(key);
  return k;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

using test::error_of;

ResultRecord completed(int64_t index, const std::string& id) {
  ResultRecord r;
  r.index = index;
  r.id = id;
  r.custom_id = "cid-" + id;
  r.model = "tiny";
  r.text = " hello";
  r.token_ids = {5, 6};
  r.finish_reason = "stop";
  r.stop_reason = "\n";
  r.num_prompt_tokens = 3;
  r.num_output_tokens = 2;
  return r;
}

TEST(OpenAiResultLine, HasVllmRunBatchFieldsInOrder) {
  const auto j = ordered_json::parse(result_to_openai_line(completed(0, "a"), 1700000000));
  EXPECT_EQ(keys(j), (std::vector<std::string>{"id", "custom_id", "response", "error"}));
  EXPECT_EQ(j["id"].get<std::string>().rfind("vllm-", 0), 0u);
  EXPECT_EQ(j["custom_id"], "cid-a");
  EXPECT_TRUE(j["error"].is_null());
  const auto& response = j["response"];
  EXPECT_EQ(keys(response), (std::vector<std::string>{"status_code", "request_id", "body"}));
  EXPECT_EQ(response["status_code"], 200);
  const auto& body = response["body"];
  EXPECT_EQ(keys(body), (std::vector<std::string>{"id", "object", "created", "model", "choices", "usage"}));
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["created"], 1700000000);
  EXPECT_EQ(body["model"], "tiny");
  ASSERT_EQ(body["choices"].size(), 1u);
  const auto& c = body["choices"][0];
  EXPECT_EQ(keys(c), (std::vector<std::string>{"index", "text", "logprobs", "finish_reason", "stop_reason"}));
  EXPECT_EQ(c["text"], " hello");
  EXPECT_EQ(c["stop_reason"], "\n");
  EXPECT_EQ(keys(body["usage"]), (std::vector<std::string>{"prompt_tokens", "completion_tokens", "total_tokens"}));
  EXPECT_EQ(body["usage"]["total_tokens"], 5);
  // Fresh ids per line, as vLLM's.
  EXPECT_NE(ordered_json::parse(result_to_openai_line(completed(0, "a"), 0))["id"], j["id"]);
}

TEST(OpenAiResultLine, FailedRequestHasAnErrorObject) {
  ResultRecord r;
  r.id = "x";
  r.error = "p.jsonl:3: \"foo\": unsupported field";
  const auto j = ordered_json::parse(result_to_openai_line(r, 0));
  EXPECT_EQ(j["custom_id"], "x");
  EXPECT_EQ(j["response"]["status_code"], 400);
  EXPECT_TRUE(j["response"]["body"].is_null());
  EXPECT_EQ(keys(j["error"]), (std::vector<std::string>{"object", "message", "type", "param", "code"}));
  EXPECT_EQ(j["error"]["message"], *r.error);
}

TEST(OpenAiResultLine, ChatAndSeveralSamples) {
  ResultRecord r = completed(0, "a");
  r.chat = true;
  Completion second;
  second.text = " bye";
  second.finish_reason = "length";
  r.more.push_back(second);
  const auto body = ordered_json::parse(result_to_openai_line(r, 0))["response"]["body"];
  EXPECT_EQ(body["object"], "chat.completion");
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], " hello");
  EXPECT_EQ(body["choices"][1]["index"], 1);
  EXPECT_EQ(body["choices"][1]["message"]["content"], " bye");
  EXPECT_TRUE(body["choices"][1]["stop_reason"].is_null());
}

TEST(TiergenResultLine, SeveralSamplesGoIntoChoices) {
  ResultRecord r = completed(0, "a");
  Completion second;
  second.text = " bye";
  second.token_ids = {9};
  second.finish_reason = "length";
  r.more.push_back(second);
  const auto j = ordered_json::parse(result_to_json_line(r));
  EXPECT_EQ(keys(j), (std::vector<std::string>{"id", "choices", "num_prompt_tokens", "num_output_tokens"}));
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["stop_reason"], "\n");
  EXPECT_EQ(j["choices"][1]["token_ids"], ordered_json::array({9}));
}

ResultFileOptions job_options(ResultFormat format, int64_t max_tokens, const std::string& hash) {
  ResultFileOptions o;
  o.format = format;
  o.job = {{"prompts_hash", hash}, {"max_tokens", max_tokens}, {"sampling", {{"temperature", 0.0}}}};
  return o;
}

class JobRecordTest : public ::testing::TestWithParam<ResultFormat> {
 protected:
  test::TempDir dir_{"tiergen-io-job"};
};

TEST_P(JobRecordTest, ResumeOfTheSameJobContinues) {
  const std::string p = dir_.file("out.jsonl");
  const std::vector<std::string> ids = {"a", "b"};
  {
    auto w = ResultWriter::open(p, 2, false, ids, false, job_options(GetParam(), 16, "h1"));
    auto r = completed(0, "a");
    r.custom_id = "a";
    w.submit(r);
  }
  auto w = ResultWriter::open(p, 2, true, ids, false, job_options(GetParam(), 16, "h1"));
  EXPECT_EQ(w.done_count(), 1);
  auto r = completed(1, "b");
  r.custom_id = "b";
  w.submit(r);
  w.finish();
  const std::string text = slurp(p);
  const bool header = GetParam() == ResultFormat::Tiergen;
  EXPECT_EQ(text.rfind("{\"tiergen_job\":", 0) == 0, header) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), header ? 3 : 2);
  EXPECT_EQ(std::filesystem::exists(p + ".job.json"), !header);
}

TEST_P(JobRecordTest, ResumeOfAnotherJobIsRefusedSayingWhatDiffers) {
  const std::string p = dir_.file("out.jsonl");
  const std::vector<std::string> ids = {"a", "b"};
  {
    auto w = ResultWriter::open(p, 2, false, ids, false, job_options(GetParam(), 16, "h1"));
    auto r = completed(0, "a");
    r.custom_id = "a";
    w.submit(r);
  }
  const std::string before = slurp(p);
  const auto msg = error_of([&] { ResultWriter::open(p, 2, true, ids, false, job_options(GetParam(), 32, "h2")); });
  EXPECT_NE(msg.find("different job"), std::string::npos) << msg;
  EXPECT_NE(msg.find("max_tokens: was 16, now 32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("prompts_hash: was \"h1\", now \"h2\""), std::string::npos) << msg;
  EXPECT_EQ(msg.find("temperature"), std::string::npos) << msg;  // only what differs
  EXPECT_EQ(slurp(p), before);  // nothing touched
}

// An interrupted job's failed requests still count: its resumed run must be able to
// exit as the uninterrupted one would.
TEST_P(JobRecordTest, ResumeCountsTheFailedRequestsAlreadyDone) {
  const std::string p = dir_.file("out.jsonl");
  const std::vector<std::string> ids = {"a", "b", "c", "d"};
  {
    auto w = ResultWriter::open(p, 4, false, ids, false, job_options(GetParam(), 16, "h1"));
    for (int64_t i = 0; i < 3; ++i) {
      auto r = completed(i, ids[static_cast<size_t>(i)]);
      r.custom_id = ids[static_cast<size_t>(i)];
      if (i != 1) r.error = "prompt too long";
      w.submit(r);
    }
  }
  auto w = ResultWriter::open(p, 4, true, ids, false, job_options(GetParam(), 16, "h1"));
  EXPECT_EQ(w.done_count(), 3);
  EXPECT_EQ(w.failed_before(), 2);
}

// --retry-failed: the failed requests already done are run again; their new lines
// take the error lines' places (the file rewritten whole, under the same lock), later
// results follow, and a run cut short before every retried request is back keeps the
// error lines as they were.
TEST_P(JobRecordTest, RetriedRequestsReplaceTheirErrorLinesInPlace) {
  const std::string p = dir_.file("out.jsonl");
  const std::vector<std::string> ids = {"a", "b", "c", "d"};
  const auto result = [&](int64_t i, bool error) {
    auto r = completed(i, ids[static_cast<size_t>(i)]);
    r.custom_id = ids[static_cast<size_t>(i)];
    if (error) r.error = "out of memory";
    return r;
  };
  {
    auto w = ResultWriter::open(p, 4, false, ids, false, job_options(GetParam(), 16, "h1"));
    for (int64_t i = 0; i < 3; ++i) w.submit(result(i, i != 1));
  }
  const std::string with_errors = slurp(p);
  auto options = job_options(GetParam(), 16, "h1");
  options.retry_failed = true;
  {  // cut short: one of the two retried results came, and the last prompt's
    auto w = ResultWriter::open(p, 4, true, ids, false, options);
    EXPECT_EQ(w.retried(), (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(w.failed_before(), 0);
    w.submit(result(2, false));
    w.submit(result(3, false));
    const auto msg = error_of([&] { w.finish(); });
    EXPECT_NE(msg.find("1 of 2 retried requests have no result (the first: prompt 0)"), std::string::npos) << msg;
  }
  EXPECT_EQ(slurp(p).substr(0, with_errors.size()), with_errors);  // the error lines as they were
  {
    auto w = ResultWriter::open(p, 4, true, ids, false, options);
    EXPECT_EQ(w.done_count(), 4);
    ASSERT_EQ(w.retried(), (std::vector<int64_t>{0, 2}));
    w.submit(result(2, false));
    w.submit(result(0, false));
    const auto msg = error_of([&] { w.submit(result(0, false)); });
    EXPECT_NE(msg.find("already done before resuming, or submitted twice"), std::string::npos) << msg;
    w.finish();
  }
  // The file a run without failures writes (OpenAI lines differ only in random ids).
  const std::string clean_path = dir_.file("clean.jsonl");
  {
    auto w = ResultWriter::open(clean_path, 4, false, ids, false, job_options(GetParam(), 16, "h1"));
    for (int64_t i = 0; i < 4; ++i) w.submit(result(i, false));
    w.finish();
  }
  std::istringstream got(slurp(p)), want(slurp(clean_path));
  std::string a, b;
  while (std::getline(want, b)) {
    ASSERT_TRUE(std::getline(got, a));
    auto ja = ordered_json::parse(a), jb = ordered_json::parse(b);
    for (auto* j : {&ja, &jb}) {
      if (j->contains("response")) {
        (*j)["id"] = "ID";
        (*j)["response"]["request_id"] = "R";
        (*j)["response"]["body"]["id"] = "B";
      }
    }
    EXPECT_EQ(ja, jb);
  }
  EXPECT_FALSE(std::getline(got, a)) << a;
  for (const auto& name : test::files_in(dir_.path)) {
    EXPECT_EQ(name.find(".retry."), std::string::npos) << name;  // no temporary left
  }
}

// The rewrite replaces the results file itself: a symbolic link to it (as -o) still
// leads to the results, a hard link would be left behind and is refused, and a
// rewrite a crash cut short is cleared away by the next resume.
TEST_P(JobRecordTest, RetryRewritesTheFileALinkNamesAndRefusesHardLinks) {
  const std::string real = dir_.file("real.jsonl"), link = dir_.file("link.jsonl"), hard = dir_.file("hard.jsonl");
  const std::vector<std::string> ids = {"a", "b"};
  const auto result = [&](int64_t i, bool error) {
    auto r = completed(i, ids[static_cast<size_t>(i)]);
    r.custom_id = ids[static_cast<size_t>(i)];
    if (error) r.error = "out of memory";
    return r;
  };
  std::filesystem::create_symlink(real, link);  // -o names the link throughout
  {
    auto w = ResultWriter::open(link, 2, false, ids, false, job_options(GetParam(), 16, "h1"));
    w.submit(result(0, true));
    w.submit(result(1, false));
    w.finish();
  }
  const std::string stale = real + ".retry.AbC123";
  std::ofstream(stale) << "half a rewrite";
  auto options = job_options(GetParam(), 16, "h1");
  options.retry_failed = true;
  {
    auto w = ResultWriter::open(link, 2, true, ids, false, options);
    EXPECT_FALSE(std::filesystem::exists(stale));
    w.submit(result(0, false));
    w.finish();
  }
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(slurp(real).find("out of memory"), std::string::npos) << slurp(real);
  {  // a new job's file with a failure, then a second name for it
    auto w = ResultWriter::open(link, 2, false, ids, /*overwrite=*/true, job_options(GetParam(), 16, "h1"));
    w.submit(result(0, true));
    w.submit(result(1, false));
    w.finish();
  }
  std::filesystem::create_hard_link(real, hard);
  const auto msg = error_of([&] { ResultWriter::open(link, 2, true, ids, false, options); });
  EXPECT_NE(msg.find("has 2 names (hard links)"), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(BothFormats, JobRecordTest, ::testing::Values(ResultFormat::Tiergen, ResultFormat::OpenAi));

// The OpenAI job record is written under a fresh name and renamed: a name planted
// beside the results (a symlink to someone's file) is never opened.
TEST(JobRecord, APlantedSymlinkBesideTheResultsIsNotFollowed) {
  test::TempDir dir("tiergen-io-job");
  const std::string p = dir.file("out.jsonl"), victim = dir.file("victim.txt");
  {
    std::ofstream(victim) << "IMPORTANT\n";
  }
  for (const char* suffix : {".job.json.tmp", ".job.json.XXXXXX"}) {
    std::filesystem::create_symlink(victim, p + suffix);
  }
  auto w = ResultWriter::open(p, 1, false, {"a"}, false, job_options(ResultFormat::OpenAi, 16, "h1"));
  auto r = completed(0, "a");
  r.custom_id = "a";
  w.submit(r);
  w.finish();
  EXPECT_EQ(slurp(victim), "IMPORTANT\n");
  EXPECT_FALSE(std::filesystem::is_symlink(p + ".job.json"));
  EXPECT_NE(slurp(p + ".job.json").find("\"prompts_hash\": \"h1\""), std::string::npos) << slurp(p + ".job.json");
}

TEST(JobRecord, AFileWithoutOneIsNotResumedAsThisJob) {
  test::TempDir dir("tiergen-io-job");
  const std::string p = dir.write("out.jsonl", "{\"id\":\"a\",\"token_ids\":[],\"finish_reason\":\"stop\"}\n");
  const auto msg = error_of([&] { ResultWriter::open(p, 2, true, {"a", "b"}, false, job_options(ResultFormat::Tiergen, 1, "h")); });
  EXPECT_NE(msg.find("not a job record"), std::string::npos) << msg;
}

TEST(JobRecord, EachDoneLinesPromptTextIsChecked) {
  test::TempDir dir("tiergen-io-job");
  const std::string p = dir.file("out.jsonl");
  auto options = job_options(ResultFormat::Tiergen, 1, "h");
  options.prompt_text_hashes = {io::prompt_text_hash("first prompt"), io::prompt_text_hash("second")};
  {
    auto w = ResultWriter::open(p, 2, false, {"0", "1"}, false, options);
    auto r = completed(0, "0");
    r.prompt = "first prompt";
    w.submit(r);
  }
  EXPECT_EQ(ResultWriter::open(p, 2, true, {"0", "1"}, false, options).done_count(), 1);
  options.prompt_text_hashes[0] = io::prompt_text_hash("edited prompt");
  const auto msg = error_of([&] { ResultWriter::open(p, 2, true, {"0", "1"}, false, options); });
  EXPECT_NE(msg.find("another prompt text"), std::string::npos) << msg;
}

TEST(JobRecord, DifferencesListChangedAddedAndRemovedFields) {
  const auto d = job_differences(json{{"a", 1}, {"b", "x"}, {"gone", true}}, json{{"a", 2}, {"b", "x"}, {"new", 0}});
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], "a: was 1, now 2");
  EXPECT_EQ(d[1], "new: was not recorded, now 0");
  EXPECT_EQ(d[2], "gone: was true, now not set");
}

}  // namespace
}  // namespace tiergen::io
