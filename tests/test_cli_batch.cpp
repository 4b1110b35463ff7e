// `tiergen generate` with batch files as vLLM users write them: OpenAI batch output
// (a golden input/output pair, checked field by field with the random ids masked),
// request parameters through the whole CLI, failed requests counted in the exit
// status, resume refusing another job's results, and early refusals.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "tests/support/cli_fixture.h"
#include "tiergen/io/prompts.h"

namespace {

using nlohmann::json;

class CliBatch : public CliReliability {
 protected:
  // The result lines of `path` as JSON (the job record line skipped).
  static std::vector<json> result_lines(const fs::path& path) {
    std::vector<json> lines;
    std::istringstream in(read_file(path));
    std::string line;
    while (std::getline(in, line)) {
      json j = json::parse(line);
      if (!j.contains("tiergen_job")) lines.push_back(std::move(j));
    }
    return lines;
  }

  Exit generate(const std::string& prompts_jsonl, const fs::path& out, const std::vector<std::string>& extra = {}) {
    const fs::path prompts = dir_ / "prompts.jsonl";
    write_file(prompts, prompts_jsonl);
    return run(generate_args(prompts, out, extra));
  }
};

const std::string kGoldenDir = TIERGEN_TEST_FIXTURES "/openai_batch";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// Log-probabilities are compared to 4 decimals: LibTorch versions round the last
// float bits of a log-softmax differently.
void round_floats(json& j) {
  if (j.is_number_float()) {
    j = std::round(j.get<double>() * 1e4) / 1e4;
  } else if (j.is_structured()) {
    for (auto& item : j) round_floats(item);
  }
}

// vLLM's ids are random and "created" is the clock: masked before comparing, as are
// the paths in error messages.
json masked(json j, const fs::path& model_dir) {
  round_floats(j);
  j["id"] = "ID";
  if (j["error"].is_object()) {
    std::string message = j["error"]["message"];
    message = replace_all(message, kGoldenDir + "/input.jsonl", "INPUT");
    j["error"]["message"] = replace_all(message, model_dir.string(), "MODEL_DIR");
  }
  if (j["response"].is_object()) {
    j["response"]["request_id"] = "REQUEST_ID";
    if (j["response"]["body"].is_object()) {
      j["response"]["body"]["id"] = "BODY_ID";
      j["response"]["body"]["created"] = 0;
      j["response"]["body"]["model"] = "MODEL";
    }
  }
  return j;
}

TEST_F(CliBatch, OpenAiBatchInputGivesTheGoldenOpenAiOutput) {
  const fs::path out = dir_ / "out.jsonl";
  const Exit e = run(generate_args(kGoldenDir + "/input.jsonl", out, {"--max-failures", "2"}));
  ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  const auto got = result_lines(out);
  std::vector<json> want;
  {
    std::istringstream in(read_file(kGoldenDir + "/output.jsonl"));
    std::string line;
    while (std::getline(in, line)) want.push_back(json::parse(line));
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]["id"].get<std::string>().rfind("vllm-", 0), 0u);
    const json g = masked(got[i], model()), w = masked(want[i], model());
    for (const auto& [key, value] : w.items()) EXPECT_EQ(g[key], value) << "line " << i + 1 << " field " << key;
    EXPECT_EQ(g, w) << "line " << i + 1;
  }
  // The OpenAI output holds only result lines; the job record sits beside it.
  EXPECT_TRUE(fs::exists(fs::path(out.string() + ".job.json")));
}

TEST_F(CliBatch, OutputFormatCanBeChosenForAnyInput) {
  const fs::path out = dir_ / "out.jsonl";
  const Exit e = generate("{\"prompt\": \"hello there\", \"max_tokens\": 3}\n", out, {"--output-format", "openai"});
  ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  const auto lines = result_lines(out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["custom_id"], "0");
  EXPECT_EQ(lines[0]["response"]["body"]["usage"]["completion_tokens"], 3);
}

TEST_F(CliBatch, MalformedTokenIdsAreRequestErrorsCountedInTheExitStatus) {
  const fs::path out = dir_ / "out.jsonl";
  const std::string prompts =
      "{\"prompt_token_ids\": [5, 6, 7]}\n"
      "{\"prompt_token_ids\": []}\n"
      "{\"prompt_token_ids\": [1, -4]}\n"
      "{\"prompt_token_ids\": [1, \"x\"]}\n"
      "{\"prompt_token_ids\": [8, 9]}\n";
  const Exit e = generate(prompts, out, {"-n", "2"});
  ASSERT_TRUE(e.exited && e.code == 1) << e.describe();
  EXPECT_NE(e.err.find("3 of 5 requests failed"), std::string::npos) << e.describe();
  EXPECT_NE(e.err.find("2 completed, 3 failed"), std::string::npos) << e.describe();
  const auto lines = result_lines(out);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_FALSE(lines[0].contains("error"));
  for (size_t i : {1, 2, 3}) {
    ASSERT_TRUE(lines[i].contains("error")) << lines[i];
    EXPECT_NE(lines[i]["error"].get<std::string>().find("prompts.jsonl:" + std::to_string(i + 1) + ":"), std::string::npos);
  }
  EXPECT_EQ(lines[4]["token_ids"].size(), 2u);
  // Tolerated failures: the same job exits 0.
  const Exit tolerated = generate(prompts, dir_ / "out2.jsonl", {"-n", "2", "--max-failures", "3"});
  EXPECT_TRUE(tolerated.exited && tolerated.code == 0) << tolerated.describe();
}

TEST_F(CliBatch, AdviceForTooLongRequestsCanWork) {
  const fs::path out = dir_ / "out.jsonl";
  const Exit e = generate("{\"prompt_token_ids\": [5, 6, 7], \"max_tokens\": 300}\n"
                          "{\"prompt_token_ids\": [5, 6, 7, 8, 9, 10], \"max_tokens\": 4}\n",
                          out, {"--max-model-len", "8", "--max-failures", "2"});
  ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  const auto lines = result_lines(out);
  ASSERT_EQ(lines.size(), 2u);
  const std::string first = lines[0]["error"], second = lines[1]["error"];
  EXPECT_EQ(first.find("--truncate"), std::string::npos) << first;  // truncation cannot help there
  EXPECT_NE(first.find("ask for fewer than 8 tokens"), std::string::npos) << first;
  EXPECT_NE(second.find("--max-model-len 8"), std::string::npos) << second;
  EXPECT_NE(second.find("keep the last 4 prompt tokens"), std::string::npos) << second;
  EXPECT_NE(second.find("at most 2 tokens"), std::string::npos) << second;
  EXPECT_EQ(second.find("last 0"), std::string::npos) << second;
}

TEST_F(CliBatch, ResumeRefusesResultsOfAChangedPromptFileOrFlags) {
  const fs::path prompts = prompt_file("p.txt", 6), out = dir_ / "out.jsonl";
  const Exit first = run(generate_args(prompts, out, {"-n", "3"}));
  ASSERT_TRUE(first.exited && first.code == 0) << first.describe();
  const std::string before = read_file(out);
  // Another -n: refused, naming max_tokens.
  Exit e = run(generate_args(prompts, out, {"-n", "4", "--resume"}));
  expect_clear_failure(e, {"different job", "max_tokens: was 3, now 4"});
  // A changed prompt file: refused, naming the prompts.
  write_file(prompts, read_file(prompts) + "one more prompt\n");
  e = run(generate_args(prompts, out, {"-n", "3", "--resume"}));
  expect_clear_failure(e, {"different job", "prompts_hash"});
  EXPECT_EQ(read_file(out), before);
}

// --resume says how many of the done results are failures; --resume --retry-failed
// runs them again: one that fails no more gets its result in place of its error line
// (the file then equals an uninterrupted run's), one that fails again keeps failing
// and counts in the exit status.
TEST_F(CliBatch, RetryFailedReplacesTheErrorLinesOfADoneJob) {
  const std::string prompts_jsonl = R"({"prompt": "the quick brown fox", "max_tokens": 3})" "\n"
                                    R"({"prompt": "hello world", "max_tokens": 3})" "\n"
                                    R"({"prompt_token_ids": [5, 99999], "max_tokens": 3})" "\n"
                                    R"({"prompt": "the quick brown fox", "max_tokens": 2})" "\n";
  const Exit full = generate(prompts_jsonl, dir_ / "full.jsonl");
  ASSERT_TRUE(full.exited && full.code == 1) << full.describe();  // prompt 2 is outside the vocabulary
  // The same job interrupted before its last result, with prompt 1 failed (say, out of memory).
  std::istringstream in(read_file(dir_ / "full.jsonl"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u);  // the job record and 4 results
  lines[2] = R"({"id":"1","error":"out of memory"})";
  std::string cut;
  for (size_t i = 0; i + 1 < lines.size(); ++i) cut += lines[i] + "\n";
  write_file(dir_ / "out.jsonl", cut);

  const fs::path prompts = dir_ / "prompts.jsonl";
  const Exit resumed = run(generate_args(prompts, dir_ / "out.jsonl", {"--resume"}));
  EXPECT_TRUE(resumed.exited && resumed.code == 1) << resumed.describe();
  EXPECT_NE(resumed.err.find("2 of the 3 results already done are failed requests (--retry-failed runs them again)"),
            std::string::npos) << resumed.err;
  const Exit retried = run(generate_args(prompts, dir_ / "out.jsonl", {"--resume", "--retry-failed"}));
  EXPECT_TRUE(retried.exited && retried.code == 1) << retried.describe();  // prompt 2 fails again
  EXPECT_NE(retried.err.find("running the 2 failed requests among them again"), std::string::npos) << retried.err;
  EXPECT_EQ(read_file(dir_ / "out.jsonl"), read_file(dir_ / "full.jsonl"));

  const Exit alone = run(generate_args(prompts, dir_ / "out.jsonl", {"--retry-failed"}));
  EXPECT_TRUE(alone.exited && alone.code == 2) << alone.describe();
  EXPECT_NE(alone.err.find("--resume"), std::string::npos) << alone.err;
}

TEST_F(CliBatch, OutEqualToPromptsIsRefused) {
  const fs::path prompts = prompt_file("p.txt", 2);
  const std::string before = read_file(prompts);
  expect_clear_failure(run(generate_args(prompts, prompts)), {"is the prompt file itself"});
  expect_clear_failure(run(generate_args(prompts, dir_ / "." / "p.txt")), {"is the prompt file itself"});
  EXPECT_EQ(read_file(prompts), before);
}

TEST_F(CliBatch, UnsupportedDtypeOnTheDeviceIsOneLineBeforeAnyWork) {
  const fs::path prompts = prompt_file("p.txt", 2), out = dir_ / "out.jsonl";
  const Exit e = run(generate_args(prompts, out, {"--dtype", "float16", "-n", "2"}));
  if (e.exited && e.code == 0) GTEST_SKIP() << "this LibTorch runs float16 on the CPU";
  expect_clear_failure(e, {"--dtype float16 is not supported on --device cpu", "--dtype float32"});
  EXPECT_EQ(e.err.find("frame #"), std::string::npos) << "a LibTorch backtrace: " << e.describe();
  EXPECT_EQ(e.err.find("[error]"), e.err.rfind("[error]")) << "one error line: " << e.describe();
  EXPECT_FALSE(fs::exists(out));
}

// ---- Request parameters through the CLI (text prompts, the byte-level tokenizer).

std::string request(const std::string& fields) { return "{\"prompt\": \"the quick brown fox\"" + fields + "}\n"; }

TEST_F(CliBatch, StopStringsEndTheTextAndAreNotIncluded) {
  const auto plain = (generate(request(", \"max_tokens\": 12"), dir_ / "a.jsonl"), result_lines(dir_ / "a.jsonl"));
  ASSERT_EQ(plain.size(), 1u);
  const std::string text = plain[0]["text"];
  ASSERT_GE(text.size(), 4u);
  const std::string stop = text.substr(2, 2);  // starts at byte 2 of the text
  const size_t at = text.find(stop);
  const json quoted = stop;
  const Exit e = generate(request(", \"max_tokens\": 12, \"stop\": [\"\\u0000never\", " + quoted.dump() + "]"),
                          dir_ / "b.jsonl");
  ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  const auto got = result_lines(dir_ / "b.jsonl");
  EXPECT_EQ(got[0]["text"], text.substr(0, at));
  EXPECT_EQ(got[0]["finish_reason"], "stop");
  EXPECT_EQ(got[0]["stop_reason"], stop);
  EXPECT_LT(got[0]["token_ids"].size(), 12u);
}

// include_stop_str_in_output keeps the stop string at the end of the text (per request,
// and --include-stop-str-in-output for the job); min_p 1 samples greedily.
TEST_F(CliBatch, IncludeStopStrInOutputAndMinP) {
  const auto plain = (generate(request(", \"max_tokens\": 12"), dir_ / "a.jsonl"), result_lines(dir_ / "a.jsonl"));
  ASSERT_EQ(plain.size(), 1u);
  const std::string text = plain[0]["text"];
  ASSERT_GE(text.size(), 4u);
  const std::string stop = text.substr(2, 2);
  const size_t at = text.find(stop);
  const json quoted = stop;
  const std::string stopping = ", \"max_tokens\": 12, \"stop\": [" + quoted.dump() + "]";
  ASSERT_TRUE(generate(request(stopping + ", \"include_stop_str_in_output\": true"), dir_ / "b.jsonl").code == 0);
  const auto kept = result_lines(dir_ / "b.jsonl");
  EXPECT_EQ(kept[0]["text"], text.substr(0, at + stop.size()));
  EXPECT_EQ(kept[0]["stop_reason"], stop);
  ASSERT_TRUE(generate(request(stopping), dir_ / "c.jsonl", {"--include-stop-str-in-output"}).code == 0);
  EXPECT_EQ(result_lines(dir_ / "c.jsonl")[0]["text"], text.substr(0, at + stop.size()));
  // The request's false wins over the job's flag.
  ASSERT_TRUE(generate(request(stopping + ", \"include_stop_str_in_output\": false"), dir_ / "d.jsonl",
                       {"--include-stop-str-in-output"}).code == 0);
  EXPECT_EQ(result_lines(dir_ / "d.jsonl")[0]["text"], text.substr(0, at));
  // A hot temperature with min_p 1 keeps only the most likely token: the greedy text.
  ASSERT_TRUE(generate(request(", \"max_tokens\": 12, \"temperature\": 30.0, \"seed\": 1, \"min_p\": 1.0"),
                       dir_ / "e.jsonl").code == 0);
  EXPECT_EQ(result_lines(dir_ / "e.jsonl")[0]["token_ids"], plain[0]["token_ids"]);
}

// skip_special_tokens false keeps the fixture's special token (id 300) in an echoed text.
TEST_F(CliBatch, SkipSpecialTokensFalseKeepsThemInTheText) {
  const std::string ids = "{\"prompt_token_ids\": [300, 104, 105], \"echo\": true, \"max_tokens\": 0";
  ASSERT_TRUE(generate(ids + "}\n" + ids + ", \"skip_special_tokens\": false}\n", dir_ / "a.jsonl").code == 0);
  const auto lines = result_lines(dir_ / "a.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  const std::string skipped = lines[0]["text"], kept = lines[1]["text"];
  EXPECT_EQ(skipped.find("<|endoftext|>"), std::string::npos) << skipped;
  EXPECT_EQ(kept.rfind("<|endoftext|>", 0), 0u) << kept;
  EXPECT_EQ(kept.substr(std::string("<|endoftext|>").size()), skipped);
}

TEST_F(CliBatch, SeveralSamplesSeedsAndTemperature) {
  // The tiny random model is very sure of itself: a high temperature makes samples vary.
  const std::string sampled = ", \"max_tokens\": 8, \"temperature\": 30.0, \"n\": 3, \"seed\": 4";
  generate(request(sampled), dir_ / "a.jsonl");
  generate(request(sampled), dir_ / "b.jsonl");
  generate(request(", \"max_tokens\": 8, \"temperature\": 30.0, \"n\": 3, \"seed\": 5"), dir_ / "c.jsonl");
  const auto a = result_lines(dir_ / "a.jsonl"), b = result_lines(dir_ / "b.jsonl"), c = result_lines(dir_ / "c.jsonl");
  ASSERT_EQ(a[0]["choices"].size(), 3u);
  EXPECT_EQ(a[0]["num_output_tokens"], 24);
  EXPECT_EQ(a, b);                                                    // same seed, same samples
  EXPECT_NE(a[0]["choices"], c[0]["choices"]);                          // another seed
  EXPECT_NE(a[0]["choices"][0]["token_ids"], a[0]["choices"][1]["token_ids"]);  // samples differ
  // top_k = 1 at any temperature is greedy.
  generate(request(", \"max_tokens\": 8"), dir_ / "g.jsonl");
  generate(request(", \"max_tokens\": 8, \"temperature\": 5.0, \"top_k\": 1"), dir_ / "k.jsonl");
  generate(request(", \"max_tokens\": 8, \"temperature\": 5.0, \"top_p\": 0.0001"), dir_ / "p.jsonl");
  const auto greedy = result_lines(dir_ / "g.jsonl")[0]["token_ids"];
  EXPECT_EQ(result_lines(dir_ / "k.jsonl")[0]["token_ids"], greedy);
  EXPECT_EQ(result_lines(dir_ / "p.jsonl")[0]["token_ids"], greedy);
  EXPECT_NE(a[0]["choices"][0]["token_ids"], greedy);
}

TEST_F(CliBatch, LogprobsComeAsOpenAiCompletionsLogprobs) {
  const Exit e = generate(request(", \"max_tokens\": 5, \"logprobs\": 3"), dir_ / "a.jsonl");
  ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  const json lp = result_lines(dir_ / "a.jsonl")[0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 5u);
  ASSERT_EQ(lp["token_logprobs"].size(), 5u);
  ASSERT_EQ(lp["top_logprobs"].size(), 5u);
  ASSERT_EQ(lp["text_offset"].size(), 5u);
  for (size_t t = 0; t < 5; ++t) {
    EXPECT_LE(lp["token_logprobs"][t].get<double>(), 0.0);
    EXPECT_GE(lp["top_logprobs"][t].size(), 1u);
    EXPECT_LE(lp["top_logprobs"][t].size(), 3u);
  }
}

// OpenAI's echo: the text starts with the prompt, and the logprobs object starts with
// the prompt's tokens (the first unscored, null), then the generated ones.
TEST_F(CliBatch, EchoPrependsThePromptAndScoresItsTokens) {
  const Exit plain_exit = generate(request(", \"max_tokens\": 4, \"logprobs\": 2"), dir_ / "a.jsonl");
  ASSERT_TRUE(plain_exit.exited && plain_exit.code == 0) << plain_exit.describe();
  const json plain = result_lines(dir_ / "a.jsonl")[0];
  const Exit e = generate(request(", \"max_tokens\": 4, \"logprobs\": 2, \"echo\": true"), dir_ / "b.jsonl");
  ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  const json echoed = result_lines(dir_ / "b.jsonl")[0];
  EXPECT_EQ(echoed["text"], "the quick brown fox" + plain["text"].get<std::string>());
  EXPECT_EQ(echoed["token_ids"], plain["token_ids"]);
  const size_t prompt_tokens = echoed["num_prompt_tokens"];
  const json lp = echoed["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), prompt_tokens + 4);
  ASSERT_EQ(lp["token_logprobs"].size(), prompt_tokens + 4);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  for (size_t t = 1; t < prompt_tokens + 4; ++t) {
    EXPECT_LE(lp["token_logprobs"][t].get<double>(), 0.0) << t;
    EXPECT_GE(lp["top_logprobs"][t].size(), 1u) << t;
  }
  // The generated part is what it is without echo.
  for (size_t t = 0; t < 4; ++t) {
    EXPECT_EQ(lp["tokens"][prompt_tokens + t], plain["logprobs"]["tokens"][t]);
    EXPECT_NEAR(lp["token_logprobs"][prompt_tokens + t].get<double>(),
                plain["logprobs"]["token_logprobs"][t].get<double>(), 1e-5);
  }
}

// max_tokens 0 with echo scores a prompt without generating (perplexity); without
// echo it is an error for that request, and -n 0 without --echo is refused.
TEST_F(CliBatch, MaxTokensZeroOnlyScoresThePrompt) {
  const Exit e = generate(request(", \"max_tokens\": 0, \"echo\": true, \"logprobs\": 0") +
                              request(", \"max_tokens\": 0"), dir_ / "a.jsonl");
  EXPECT_TRUE(e.exited && e.code == 1) << e.describe();
  const auto lines = result_lines(dir_ / "a.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  const json& scored = lines[0];
  EXPECT_EQ(scored["text"], "the quick brown fox");
  EXPECT_TRUE(scored["token_ids"].empty());
  EXPECT_EQ(scored["num_output_tokens"], 0);
  EXPECT_EQ(scored["finish_reason"], "length");
  const size_t prompt_tokens = scored["num_prompt_tokens"];
  ASSERT_GE(prompt_tokens, 2u);
  ASSERT_EQ(scored["logprobs"]["token_logprobs"].size(), prompt_tokens);
  for (size_t t = 1; t < prompt_tokens; ++t) EXPECT_LE(scored["logprobs"]["token_logprobs"][t].get<double>(), 0.0);
  EXPECT_NE(lines[1]["error"].get<std::string>().find("echo"), std::string::npos) << lines[1];

  const Exit refused = generate(request(""), dir_ / "b.jsonl", {"-n", "0"});
  EXPECT_TRUE(refused.exited && refused.code != 0) << refused.describe();
  EXPECT_NE(refused.err.find("--echo"), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(dir_ / "b.jsonl"));
}

TEST_F(CliBatch, UnsupportedFieldsAreRequestErrorsNamingThem) {
  const Exit e = generate(request(", \"suffix\": \"x\"") + request(", \"best_of\": 2") + request(""), dir_ / "a.jsonl");
  ASSERT_TRUE(e.exited && e.code == 1) << e.describe();
  const auto lines = result_lines(dir_ / "a.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0]["error"].get<std::string>().find("\"suffix\""), std::string::npos);
  EXPECT_NE(lines[1]["error"].get<std::string>().find("\"best_of\""), std::string::npos);
  EXPECT_FALSE(lines[2].contains("error"));
  // best_of equal to the job's --num-samples changes nothing: accepted.
  const Exit same = generate(request(", \"best_of\": 2, \"max_tokens\": 2"), dir_ / "b.jsonl", {"--num-samples", "2"});
  ASSERT_TRUE(same.exited && same.code == 0) << same.describe();
  EXPECT_FALSE(result_lines(dir_ / "b.jsonl")[0].contains("error"));
}

TEST_F(CliBatch, MaxTokensMinTokensAndStopTokenIds) {
  generate(request(", \"max_tokens\": 7"), dir_ / "a.jsonl");
  const auto plain = result_lines(dir_ / "a.jsonl")[0];
  EXPECT_EQ(plain["token_ids"].size(), 7u);
  const int64_t third = plain["token_ids"][2];
  generate(request(", \"max_tokens\": 7, \"stop_token_ids\": [" + std::to_string(third) + "]"), dir_ / "b.jsonl");
  const auto stopped = result_lines(dir_ / "b.jsonl")[0];
  EXPECT_EQ(stopped["finish_reason"], "stop");
  EXPECT_EQ(stopped["stop_reason"], third);
  EXPECT_LE(stopped["token_ids"].size(), 3u);
  // min_tokens > max_tokens is refused for that request.
  const Exit e = generate(request(", \"max_tokens\": 2, \"min_tokens\": 3"), dir_ / "c.jsonl");
  EXPECT_EQ(e.code, 1);
  EXPECT_NE(result_lines(dir_ / "c.jsonl")[0]["error"].get<std::string>().find("min_tokens"), std::string::npos);
}

TEST_F(CliBatch, ListPresetsAndVerboseAfterTheSubcommand) {
  const Exit presets = run({kTiergen, "list-presets"});
  ASSERT_TRUE(presets.exited && presets.code == 0) << presets.describe();
  EXPECT_NE(presets.out.find("opt-125m"), std::string::npos) << presets.out;
  EXPECT_NE(presets.out.find("llama-3-8b"), std::string::npos) << presets.out;
  const Exit verbose = generate(request(", \"max_tokens\": 2"), dir_ / "v.jsonl", {"-v"});
  ASSERT_TRUE(verbose.exited && verbose.code == 0) << verbose.describe();
  EXPECT_NE(verbose.err.find("[debug]"), std::string::npos) << verbose.describe();
}

}  // namespace

namespace {

// Any model's chat template renders (here Qwen2's ChatML): a chat request generates
// what the same text sent as a completion generates. --chat-template replaces the
// config's template, a conversation the template refuses fails only its request with
// the template's message, and a resume under another template file is refused.
TEST_F(CliBatch, AnyChatTemplateRendersAndAChatTemplateFileReplacesIt) {
  const fs::path chat_model = dir_ / "chatml-model";
  fs::copy(model(), chat_model, fs::copy_options::recursive);
  std::ifstream templates_in(std::string(TIERGEN_SOURCE_DIR) + "/tests/chat/templates.json");
  const json qwen2 = json::parse(templates_in)["chatml_qwen2"];
  write_file(chat_model / "tokenizer_config.json", json{{"chat_template", qwen2["chat_template"]}}.dump());
  const std::string rendered =
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi there<|im_end|>\n"
      "<|im_start|>assistant\n";
  const auto body = [](const json& b) {
    return json{{"custom_id", b.contains("messages") ? "chat" : "text"}, {"method", "POST"},
                {"url", b.contains("messages") ? "/v1/chat/completions" : "/v1/completions"}, {"body", b}}.dump() + "\n";
  };
  const fs::path prompts = dir_ / "chatml.jsonl", out = dir_ / "chatml-out.jsonl";
  write_file(prompts, body({{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi there"}}}}, {"max_tokens", 6}}) +
                          body({{"model", "m"}, {"prompt", rendered}, {"max_tokens", 6}}));
  const Exit e = run(generate_args(prompts, out, {"--ignore-eos"}, chat_model));
  ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  const auto lines = result_lines(out);
  ASSERT_EQ(lines.size(), 2u);
  const json chat = lines[0]["response"]["body"], text = lines[1]["response"]["body"];
  EXPECT_EQ(chat["usage"]["prompt_tokens"], text["usage"]["prompt_tokens"]) << chat.dump() << text.dump();
  EXPECT_EQ(chat["choices"][0]["message"]["content"], text["choices"][0]["text"]) << chat.dump() << text.dump();

  const fs::path file = dir_ / "roles.jinja";
  write_file(file, "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tool turns here') }}"
                   "{% endif %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:");
  write_file(prompts, body({{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}}) +
                          body({{"model", "m"}, {"messages", {{{"role", "tool"}, {"content", "x"}}}}, {"max_tokens", 2}}) +
                          body({{"model", "m"}, {"prompt", "user: hi\nassistant:"}, {"max_tokens", 2}}));
  const fs::path file_out = dir_ / "file-out.jsonl";
  const Exit with_file = run(generate_args(prompts, file_out, {"--ignore-eos", "--chat-template", file.string()}, chat_model));
  EXPECT_TRUE(with_file.exited && with_file.code == 1) << "one request failed: " << with_file.describe();
  const auto file_lines = result_lines(file_out);
  ASSERT_EQ(file_lines.size(), 3u);
  EXPECT_EQ(file_lines[0]["response"]["body"]["choices"][0]["message"]["content"],
            file_lines[2]["response"]["body"]["choices"][0]["text"]);
  const std::string refused = file_lines[1].dump();
  EXPECT_NE(refused.find("no tool turns here"), std::string::npos) << refused;
  EXPECT_NE(refused.find("--chat-template " + file.string()), std::string::npos) << refused;

  // The job record knows the template file: another file's results are not mixed in.
  write_file(file, "{% for m in messages %}{{ m.content }}{% endfor %}");
  const Exit resumed = run(generate_args(prompts, file_out, {"--ignore-eos", "--resume", "--max-failures", "1",
                                                             "--chat-template", file.string()}, chat_model));
  EXPECT_TRUE(resumed.exited && resumed.code != 0) << resumed.describe();
  EXPECT_NE(resumed.err.find("chat_template"), std::string::npos) << resumed.describe();

  write_file(dir_ / "broken.jinja", "{% for m in messages %}");
  const Exit broken = run(generate_args(prompts, dir_ / "broken-out.jsonl",
                                        {"--chat-template", (dir_ / "broken.jinja").string()}, chat_model));
  EXPECT_TRUE(broken.exited && broken.code != 0) << broken.describe();
  EXPECT_NE(broken.err.find("expected {% endfor %}"), std::string::npos) << broken.describe();
  EXPECT_FALSE(fs::exists(dir_ / "broken-out.jsonl")) << "a template file that cannot be used is refused before any result";
}

// OpenAI's details as vLLM writes them: chat logprobs "bytes" are 0-255, and
// completions "text_offset" counts characters of the text, not its UTF-8 bytes.
TEST_F(CliBatch, ChatLogprobBytesAreUnsignedAndTextOffsetsCountCharacters) {
  const fs::path chat_model = dir_ / "chat-model";
  fs::copy(model(), chat_model, fs::copy_options::recursive);
  std::ifstream templates_in(std::string(TIERGEN_SOURCE_DIR) + "/tests/chat/templates.json");
  const json llama3 = json::parse(templates_in)["llama3"];
  write_file(chat_model / "tokenizer_config.json",
             json{{"chat_template", llama3["chat_template"]}, {"bos_token", "<s>"}, {"eos_token", "</s>"}}.dump());
  const fs::path chat_prompts = dir_ / "chat.jsonl", chat_out = dir_ / "chat-out.jsonl";
  write_file(chat_prompts, R"({"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": )"
                           R"({"model": "m", "messages": [{"role": "user", "content": "h\u00e9llo"}], "max_tokens": 32, )"
                           R"("temperature": 30, "seed": 3, "logprobs": true, "top_logprobs": 2}})" "\n");
  const Exit chat = run(generate_args(chat_prompts, chat_out, {"--ignore-eos"}, chat_model));
  ASSERT_TRUE(chat.exited && chat.code == 0) << chat.describe();
  const json content = result_lines(chat_out)[0]["response"]["body"]["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 32u);
  bool high_byte = false;
  for (const auto& token : content) {
    for (const auto& b : token["bytes"]) {
      EXPECT_TRUE(b.get<int>() >= 0 && b.get<int>() <= 255) << token.dump();
      high_byte = high_byte || b.get<int>() > 127;
    }
  }
  EXPECT_TRUE(high_byte) << "no byte above 127 in 32 sampled tokens: the check above checked nothing";

  // Echoed non-ASCII prompt: each offset counts the characters of the tokens before it
  // (vLLM's sum of len(token); a character split over two tokens is a U+FFFD in each).
  const Exit echo = generate(R"({"prompt": "h\u00e9llo w\u00f6rld", "max_tokens": 2, "echo": true, "logprobs": 0})" "\n",
                             dir_ / "echo.jsonl");
  ASSERT_TRUE(echo.exited && echo.code == 0) << echo.describe();
  const json result = result_lines(dir_ / "echo.jsonl")[0];
  const json lp = result["logprobs"];
  int64_t characters = 0, bytes = 0;
  for (size_t t = 0; t < lp["tokens"].size(); ++t) {
    EXPECT_EQ(lp["text_offset"][t].get<int64_t>(), characters) << t;
    characters += tiergen::io::count_characters(lp["tokens"][t].get<std::string>());
    bytes += static_cast<int64_t>(lp["tokens"][t].get<std::string>().size());
  }
  EXPECT_LT(characters, bytes) << "no token with a multi-byte character: the check above told nothing apart";
}

}  // namespace

// A prompt list in one request (OpenAI's and vLLM's "prompt": ["a", "b"]): each prompt
// sampled n times, the choices numbered as vLLM numbers them (prompt i's sample j at
// i * n + j), echo per prompt, usage summed; each choice is what the prompt gives alone.
TEST_F(CliBatch, APromptListIsOneRequestWithVllmsChoiceNumbering) {
  const auto openai = [](const std::string& id, const std::string& prompt, const std::string& fields) {
    return R"({"custom_id": ")" + id + R"(", "method": "POST", "url": "/v1/completions", "body": {"model": "m", )"
           R"("prompt": )" + prompt + R"(, "max_tokens": 4, "echo": true, "logprobs": 1)" + fields + "}}\n";
  };
  const Exit e = generate(openai("list", R"(["the quick brown fox", "hello world"])", R"(, "n": 2)") +
                              openai("fox", R"("the quick brown fox")", "") + openai("hello", R"("hello world")", "") +
                              openai("bad", R"([[5, 6], [99999]])", ""),
                          dir_ / "a.jsonl", {"--ignore-eos"});
  EXPECT_TRUE(e.exited && e.code == 1) << e.describe();  // the one bad request
  const auto lines = result_lines(dir_ / "a.jsonl");
  ASSERT_EQ(lines.size(), 4u);
  const json list = lines[0]["response"]["body"], fox = lines[1]["response"]["body"],
             hello = lines[2]["response"]["body"];
  ASSERT_EQ(list["choices"].size(), 4u) << list;
  for (size_t c = 0; c < 4; ++c) {
    EXPECT_EQ(list["choices"][c]["index"], c);
    const json& alone = c < 2 ? fox["choices"][0] : hello["choices"][0];
    EXPECT_EQ(list["choices"][c]["text"], alone["text"]) << c;  // echoed: starts with its own prompt
    EXPECT_EQ(list["choices"][c]["logprobs"]["tokens"], alone["logprobs"]["tokens"]) << c;
  }
  EXPECT_EQ(list["choices"][2]["text"].get<std::string>().rfind("hello world", 0), 0u);
  EXPECT_EQ(list["usage"]["prompt_tokens"], fox["usage"]["prompt_tokens"].get<int>() + hello["usage"]["prompt_tokens"].get<int>());
  EXPECT_EQ(list["usage"]["completion_tokens"], 16);
  // One bad prompt of a list fails its request, naming which prompt.
  const std::string error = lines[3]["error"]["message"];
  EXPECT_NE(error.find("prompt[1]: token id 99999 is outside the model's vocabulary"), std::string::npos) << error;

  // tiergen's own format writes the list as given, with the choices in the same order.
  const Exit own = generate(R"({"prompt": ["the quick brown fox", "hello world"], "max_tokens": 2})" "\n",
                            dir_ / "b.jsonl", {"--ignore-eos"});
  ASSERT_TRUE(own.exited && own.code == 0) << own.describe();
  const json line = result_lines(dir_ / "b.jsonl")[0];
  EXPECT_EQ(line["prompt"], json::array({"the quick brown fox", "hello world"}));
  ASSERT_EQ(line["choices"].size(), 2u);
  EXPECT_EQ(line["num_output_tokens"], 4);
}

// A sequence's record does not depend on the batch around it (README): byte for byte
// under -b 1, 2 and 8, beside prompts of other lengths (left padding), with logprobs
// and echo, for OPT and LLaMA, with and without compressed weights, and after a resume
// at every cut point (the rest of the job then runs in other batches). --cpu-gemm,
// which gives that up for speed, is recorded in the job record.
TEST_F(CliBatch, ARowsRecordDoesNotDependOnItsBatch) {
  const fs::path llama = shared_tiny_model("tiny-llama", {"--arch", "llama", "--seed", "7", "--tokenizer", kTokenizer});
  const char* texts[] = {"hello world, this is a longer prompt with many words in it", "hi",
                         "the quick brown fox jumps over the lazy dog", "a b",
                         "once upon a time there was", "x y z w v u t s r q p o n m l k j", "abcdef", "uvwxyz"};
  std::string lines;
  for (int i = 0; i < 8; ++i) {
    lines += json{{"id", std::to_string(i)}, {"prompt", texts[i]}, {"logprobs", 3}, {"echo", true},
                  {"max_tokens", 7}}.dump() + "\n";
  }
  const fs::path prompts = dir_ / "prompts.jsonl";
  write_file(prompts, lines);
  // Also with compressed weights, whose products take one kernel in prefill and another
  // in decode, whatever the rows (model::quantized_linear_product): the last two prompts
  // have as many tokens, so their prefill shares a product of more rows than either's
  // alone, more than the in-place limit.
  for (const auto& [model_dir, compress] : std::vector<std::pair<fs::path, bool>>{
           {model(), false}, {llama, false}, {model(), true}, {llama, true}}) {
    SCOPED_TRACE(model_dir.filename().string() + (compress ? " --compress-weight" : ""));
    const auto with = [&](std::vector<std::string> flags) {
      if (compress) flags.push_back("--compress-weight");
      return flags;
    };
    const auto records = [&](const std::string& b) {
      const fs::path out = dir_ / ("b" + b + ".jsonl");
      const Exit e = run(generate_args(prompts, out, with({"-b", b, "--overwrite"}), model_dir));
      EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
      return read_file(out);
    };
    const std::string alone = records("1");
    ASSERT_EQ(result_lines(dir_ / "b1.jsonl").size(), 8u);
    EXPECT_EQ(records("2"), alone);
    EXPECT_EQ(records("8"), alone);
    // Cut after each result, resumed with -b 8: the rest runs in a smaller batch.
    std::vector<std::string> kept;
    std::istringstream in(alone);
    for (std::string line; std::getline(in, line);) kept.push_back(line + "\n");
    for (size_t cut = 1; cut + 1 < kept.size(); ++cut) {
      std::string prefix;
      for (size_t i = 0; i <= cut; ++i) prefix += kept[i];  // the job record and `cut` results
      const fs::path out = dir_ / "resumed.jsonl";
      write_file(out, prefix);
      const Exit e = run(generate_args(prompts, out, with({"-b", "8", "--resume"}), model_dir));
      ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
      EXPECT_EQ(read_file(out), alone) << "resumed after " << cut << " results";
    }
  }
  const fs::path gemm = dir_ / "gemm.jsonl";
  const Exit e = run(generate_args(prompts, gemm, {"--cpu-gemm"}));
  ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  EXPECT_NE(read_file(gemm).find(R"("cpu_products":"gemm, not batch-invariant")"), std::string::npos);
}
