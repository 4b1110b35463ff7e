// A results file belongs to one job: `tiergen generate` refuses a second process on
// it, leaves it untouched when a run fails before its work starts, refuses to resume
// it with another job (other weights, tokenizer, compression, per-request seed), and
// counts the failures it already holds. Numbers that cannot give a result (NaN
// weights, a config that makes NaNs, logits that overflow) fail clearly, and a prompt
// the tokenizer cannot encode fails only its own request.
//
// Real processes throughout: the built `tiergen` and `make-tiny-model`, as children.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "tests/support/cli_fixture.h"

namespace {

class CliJobIntegrity : public CliReliability {
 protected:
  // A copy of the tiny model in this test's directory, to damage.
  fs::path copy_of_model(const std::string& name) const {
    const fs::path dest = dir_ / name;
    fs::copy(model(), dest, fs::copy_options::recursive);
    return dest;
  }

  // Every JSON line of a results file parses, and it has `lines` result lines.
  static void expect_whole_lines(const fs::path& out, int64_t lines) {
    std::istringstream in(read_file(out));
    std::string line;
    int64_t results = 0;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << "a damaged line in " << out << ": " << line;
      if (!j.contains("tiergen_job")) ++results;
    }
    EXPECT_EQ(results, lines);
  }
};

// Overwrites the first float32 of tensor `name` in a safetensors file with `value`.
void poke_float(const fs::path& file, const std::string& name, float value) {
  std::string bytes = read_file(file);
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  const auto j = nlohmann::json::parse(bytes.substr(8, header));
  ASSERT_EQ(j.at(name).at("dtype"), "F32");
  const size_t at = 8 + header + j.at(name).at("data_offsets")[0].get<size_t>();
  std::memcpy(bytes.data() + at, &value, sizeof value);
  write_file(file, bytes);
}

void edit_config(const fs::path& model_dir, const std::function<void(nlohmann::json&)>& edit) {
  auto config = nlohmann::json::parse(read_file(model_dir / "config.json"));
  edit(config);
  write_file(model_dir / "config.json", config.dump(2));
}

// ---- One writer per results file

TEST_F(CliJobIntegrity, ASecondTiergenOnTheSameResultsFileIsRefusedNamingTheFirst) {
  constexpr int kPrompts = 48;
  const fs::path prompts = prompt_file("prompts.txt", kPrompts), out = dir_ / "out.jsonl";
  const std::vector<std::string> flags = {"-n", "40", "--ignore-eos", "-b", "2"};
  Child first(generate_args(prompts, out, flags), dir_);
  const pid_t first_pid = first.pid();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline && !(fs::exists(out) && count_lines(out) >= 1)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Stopped mid-job, it still holds the file, however slow this machine is.
  ASSERT_EQ(::kill(first_pid, SIGSTOP), 0);
  ASSERT_GE(count_lines(out), 1) << "the first run wrote no result";
  ASSERT_LT(count_lines(out), kPrompts) << "the first run finished before it could be stopped";
  const std::string held = read_file(out);
  std::vector<std::string> resume = flags;
  resume.push_back("--resume");
  const Exit second = run(generate_args(prompts, out, {"-n", "4", "--overwrite"}));
  const Exit resumer = run(generate_args(prompts, out, resume));
  EXPECT_EQ(read_file(out), held) << "a refused process changed the file";
  ASSERT_EQ(::kill(first_pid, SIGTERM), 0);
  ASSERT_EQ(::kill(first_pid, SIGCONT), 0);
  const Exit e = first.wait();
  EXPECT_TRUE(e.exited && e.code == 128 + SIGTERM) << e.describe();
  expect_clear_failure(second, {"in use by another process (PID " + std::to_string(first_pid), out.string()});
  expect_clear_failure(resumer, {"in use by another process"});
  expect_whole_lines(out, count_lines(out));
  // With the first gone, the job resumes from what it wrote.
  const Exit resumed = run(generate_args(prompts, out, resume));
  ASSERT_TRUE(resumed.exited && resumed.code == 0) << resumed.describe();
  expect_whole_lines(out, kPrompts);
}

// ---- A run that cannot start leaves the results as they were

TEST_F(CliJobIntegrity, ARunThatCannotStartLeavesTheResultsFileAsItFoundIt) {
  const fs::path prompts = prompt_file("prompts.txt", 3), out = dir_ / "out.jsonl";
  const Exit done = run(generate_args(prompts, out, {"-n", "3"}));
  ASSERT_TRUE(done.exited && done.code == 0) << done.describe();
  const std::string before = read_file(out);
  const Exit too_small = run(generate_args(prompts, out, {"-n", "3", "--overwrite", "--gpu-mem", "1KiB"}));
  expect_clear_failure(too_small, {"fits the memory budgets (gpu 1.00 KiB"});
  EXPECT_EQ(read_file(out), before) << "an infeasible run destroyed the results it was to overwrite";
  // A fixed placement that does not fit is refused by the engine's own check, as early.
  const Exit fixed_too_small = run(generate_args(
      prompts, out, {"-n", "3", "--overwrite", "--gpu-mem", "1KiB", "--percent", "100", "0", "100", "0", "100", "0"}));
  expect_clear_failure(fixed_too_small, {"does not fit"});
  EXPECT_EQ(read_file(out), before) << "an infeasible fixed policy destroyed the results it was to overwrite";

  const fs::path broken = copy_of_model("broken");
  fs::resize_file(broken / "model.safetensors", fs::file_size(broken / "model.safetensors") - 1);
  const fs::path fresh = dir_ / "fresh.jsonl";
  const Exit bad = run(generate_args(prompts, fresh, {"-n", "3"}, broken));
  expect_clear_failure(bad, {"model.safetensors"});
  EXPECT_FALSE(fs::exists(fresh)) << "a run that never started left a results file, which blocks the rerun";
  const Exit stats = run(generate_args(prompts, fresh, {"-n", "3", "--stats-json", (dir_ / "no" / "s.json").string()}));
  expect_clear_failure(stats, {"--stats-json", "does not exist"});
  EXPECT_FALSE(fs::exists(fresh));
}

// --stats-json counts the prompt tokens the requests hold, as the results do; the
// padding their gpu batch computed over is its own field.
TEST_F(CliJobIntegrity, StatsCountThePromptTokensAskedForNotThePadding) {
  const fs::path prompts = dir_ / "ragged.txt", out = dir_ / "out.jsonl", stats = dir_ / "stats.json";
  write_file(prompts, "a\nb c d e f g h\nb c\n");
  const Exit done = run(generate_args(prompts, out, {"-n", "2", "-b", "3", "--stats-json", stats.string()}));
  ASSERT_TRUE(done.exited && done.code == 0) << done.describe();
  int64_t asked = 0, longest = 0, lines = 0;
  std::istringstream in(read_file(out));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("tiergen_job")) continue;
    asked += j.at("num_prompt_tokens").get<int64_t>();
    longest = std::max(longest, j.at("num_prompt_tokens").get<int64_t>());
    ++lines;
  }
  ASSERT_EQ(lines, 3);
  const auto s = nlohmann::json::parse(read_file(stats));
  EXPECT_EQ(s.at("prompt_tokens").get<int64_t>(), asked);
  EXPECT_EQ(s.at("padded_prompt_tokens").get<int64_t>(), 3 * longest);  // one gpu batch of three
  EXPECT_LT(asked, 3 * longest);
}

// ---- Resume: the same job only, and its exit status as if never interrupted

TEST_F(CliJobIntegrity, AResumedJobCountsTheFailuresRecordedBeforeTheInterruption) {
  const fs::path prompts = dir_ / "prompts.jsonl", out = dir_ / "out.jsonl";
  write_file(prompts, "{\"prompt\": \"a b\"}\n{\"prompt\": \"c\", \"bogus\": 1}\n{\"prompt\": \"d e\"}\n"
                      "{\"prompt\": \"f\"}\n");
  const Exit whole = run(generate_args(prompts, out, {"-n", "3"}));
  EXPECT_TRUE(whole.exited && whole.code == 1) << whole.describe();
  const std::string all = read_file(out);
  size_t cut = 0;
  for (int line = 0; line < 3; ++line) cut = all.find('\n', cut) + 1;  // the job line and two results
  write_file(out, all.substr(0, cut));
  const Exit resumed = run(generate_args(prompts, out, {"-n", "3", "--resume"}));
  EXPECT_TRUE(resumed.exited && resumed.code == 1) << "the failed request before the interruption was forgotten: "
                                                   << resumed.describe();
  EXPECT_EQ(read_file(out), all);
  const Exit tolerated = run(generate_args(prompts, out, {"-n", "3", "--resume", "--max-failures", "1"}));
  EXPECT_TRUE(tolerated.exited && tolerated.code == 0) << tolerated.describe();
}

TEST_F(CliJobIntegrity, ResumeRefusesAJobWithOtherWeightsTokenizerCompressionOrSeeds) {
  const fs::path prompts = prompt_file("prompts.txt", 4), out = dir_ / "out.jsonl";
  const fs::path weights = dir_ / "weights";
  const auto make = [&](const std::string& seed) {
    tiergen::test::remove_tree(weights);
    Child m({kMakeTinyModel, "--arch", "opt", "--out", weights.string(), "--seed", seed, "--tokenizer", kTokenizer},
            dir_);
    const Exit e = m.wait();
    ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  };
  make("7");
  const Exit first = run(generate_args(prompts, out, {"-n", "3"}, weights));
  ASSERT_TRUE(first.exited && first.code == 0) << first.describe();
  const std::string all = read_file(out);
  const std::string half = all.substr(0, all.find('\n', all.find('\n') + 1) + 1);  // the job line and one result
  const auto refused = [&](const std::vector<std::string>& flags, const fs::path& model_dir, const std::string& field) {
    write_file(out, half);
    std::vector<std::string> args = {"-n", "3", "--resume"};
    args.insert(args.end(), flags.begin(), flags.end());
    const Exit e = run(generate_args(prompts, out, args, model_dir));
    expect_clear_failure(e, {"different job", field});
    EXPECT_EQ(read_file(out), half) << field;
  };
  refused({"--compress-weight"}, weights, "lossy");
  refused({"--compress-cache"}, weights, "lossy");
  const fs::path other_tokenizer = dir_ / "tokenizer";
  fs::create_directories(other_tokenizer);
  write_file(other_tokenizer / "tokenizer.json", read_file(weights / "tokenizer.json") + "\n");  // other bytes
  fs::copy_file(weights / "tokenizer_config.json", other_tokenizer / "tokenizer_config.json");
  refused({"--tokenizer", other_tokenizer.string()}, weights, "tokenizer");
  make("99");  // other weights at the same path
  refused({}, weights, "checkpoint");

  // A request's "seed": -1 is a seed given, not the absence of one.
  const fs::path with_seed = dir_ / "seeded.jsonl", without = dir_ / "unseeded.jsonl", seed_out = dir_ / "seed.jsonl";
  write_file(without, "{\"prompt\": \"a b\", \"temperature\": 1}\n{\"prompt\": \"c d\", \"temperature\": 1}\n");
  write_file(with_seed, "{\"prompt\": \"a b\", \"temperature\": 1}\n{\"prompt\": \"c d\", \"temperature\": 1, "
                        "\"seed\": -1}\n");
  ASSERT_EQ(run(generate_args(without, seed_out, {"-n", "3"})).code, 0);
  const std::string seeded = read_file(seed_out);
  write_file(seed_out, seeded.substr(0, seeded.find('\n', seeded.find('\n') + 1) + 1));
  expect_clear_failure(run(generate_args(with_seed, seed_out, {"-n", "3", "--resume"})), {"prompts_hash"});
}

// ---- Numbers that cannot give a result

TEST_F(CliJobIntegrity, NonFiniteWeightsAndConfigValuesFailNamingWhatIsWrong) {
  const fs::path prompts = prompt_file("prompts.txt", 2), out = dir_ / "out.jsonl";
  const fs::path nan_norm = copy_of_model("nan-norm");
  poke_float(nan_norm / "model.safetensors", "model.decoder.final_layer_norm.weight",
             std::numeric_limits<float>::quiet_NaN());
  expect_clear_failure(run(generate_args(prompts, out, {"-n", "3"}, nan_norm)),
                       {"final_layer_norm.weight", "non-finite"});
  EXPECT_FALSE(fs::exists(out));
  // Weights read in place from the checkpoint on the disk tier are not scanned: the
  // logits are, and the request fails.
  const Exit disk = run(generate_args(prompts, out, {"-n", "3", "--percent", "0", "0", "100", "0", "100", "0",
                                                      "--offload-dir", (dir_ / "offload").string()}, nan_norm));
  EXPECT_TRUE(disk.exited && disk.code == 1) << disk.describe();
  EXPECT_NE(read_file(out).find("logits for generated token 1 are not finite"), std::string::npos) << read_file(out);

  const fs::path llama = shared_tiny_model("tiny-llama", {"--arch", "llama", "--seed", "7", "--tokenizer", kTokenizer});
  const std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>> configs = {
      {"rms_norm_eps", [](nlohmann::json& c) { c["rms_norm_eps"] = -1; }},
      {"rope_theta", [](nlohmann::json& c) { c["rope_theta"] = 0; }},
      {"factor", [](nlohmann::json& c) {
         c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 0}, {"original_max_position_embeddings", 64}};
       }}};
  for (const auto& [field, edit] : configs) {
    const fs::path m = dir_ / ("config-" + field);
    fs::copy(llama, m, fs::copy_options::recursive);
    edit_config(m, edit);
    expect_clear_failure(run(generate_args(prompts, dir_ / ("out-" + field + ".jsonl"), {"-n", "3"}, m)),
                         {"config.json", field});
  }
}

TEST_F(CliJobIntegrity, ATemperatureTooSmallToDivideByIsGreedy) {
  const fs::path prompts = prompt_file("prompts.txt", 3);
  const Exit greedy = run(generate_args(prompts, dir_ / "greedy.jsonl", {"-n", "6", "--temperature", "0"}));
  const Exit tiny = run(generate_args(prompts, dir_ / "tiny.jsonl", {"-n", "6", "--temperature", "1e-30"}));
  ASSERT_EQ(greedy.code, 0);
  ASSERT_EQ(tiny.code, 0) << tiny.describe();
  const auto tokens = [](const fs::path& p) {
    std::string all;
    std::istringstream in(read_file(p));
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("token_ids")) all += j["token_ids"].dump();
    }
    return all;
  };
  EXPECT_EQ(tokens(dir_ / "tiny.jsonl"), tokens(dir_ / "greedy.jsonl"));
}

// ---- Bad requests fail alone

TEST_F(CliJobIntegrity, APromptTheTokenizerCannotEncodeFailsOnlyItsRequest) {
  const fs::path m = copy_of_model("no-z");
  auto tokenizer = nlohmann::json::parse(read_file(m / "tokenizer.json"));
  ASSERT_TRUE(tokenizer["model"]["vocab"].contains("z"));
  tokenizer["model"]["vocab"].erase("z");
  write_file(m / "tokenizer.json", tokenizer.dump());
  const fs::path prompts = dir_ / "prompts.txt", out = dir_ / "out.jsonl";
  write_file(prompts, "hello\nfizz\nworld\n");
  const Exit e = run(generate_args(prompts, out, {"-n", "2", "--max-failures", "1"}, m));
  ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  const std::string results = read_file(out);
  EXPECT_NE(results.find("{\"id\":\"1\",\"error\":\"" + prompts.string() + ":2: the tokenizer cannot encode"),
            std::string::npos) << results;
  expect_whole_lines(out, 3);
}

TEST_F(CliJobIntegrity, RepeatedIdsAndRepeatedKeysFailTheirRequests) {
  const fs::path prompts = dir_ / "prompts.jsonl", out = dir_ / "out.jsonl";
  write_file(prompts, "{\"id\": \"a\", \"prompt\": \"x y\"}\n{\"id\": \"a\", \"prompt\": \"z\"}\n"
                      "{\"id\": \"b\", \"prompt\": \"p\", \"prompt\": \"q\"}\n");
  const Exit e = run(generate_args(prompts, out, {"-n", "2", "--max-failures", "2"}));
  ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  const std::string results = read_file(out);
  EXPECT_NE(results.find(":2: the id \\\"a\\\" is already the id of line 1"), std::string::npos) << results;
  EXPECT_NE(results.find(":3: the key \\\"prompt\\\" appears twice"), std::string::npos) << results;
  EXPECT_NE(results.find("{\"id\":\"a\",\"prompt\":\"x y\""), std::string::npos) << results;
}

// ---- Odd process states and sizes

TEST_F(CliJobIntegrity, ResultsToAClosedStdoutAreRefused) {
  const fs::path prompts = prompt_file("prompts.txt", 2);
  std::string command = "exec";
  for (const auto& a : generate_args(prompts, "-", {"-n", "2"})) command += " '" + a + "'";
  const Exit e = run({"/bin/sh", "-c", command + " >&-"});
  expect_clear_failure(e, {"stdout was closed"});
}

TEST_F(CliJobIntegrity, ABlockTooLargeToCountIsRefusedNotSpunOn) {
  const fs::path prompts = prompt_file("prompts.txt", 2), out = dir_ / "out.jsonl";
  for (const auto& flags : std::vector<std::vector<std::string>>{{"-b", "4611686018427387904"},
                                                                 {"--num-gpu-batches", "4611686018427387904"}}) {
    Child c(generate_args(prompts, out, flags), dir_);
    const Exit e = c.wait(std::chrono::seconds(60));
    EXPECT_FALSE(e.timed_out) << flags[0];
    expect_clear_failure(e, {"more than the 16777216 a block may hold"});
  }
  expect_clear_failure(run(generate_args(prompts, out, {"--num-gpu-batches", "0"})), {"--num-gpu-batches"});
}

}  // namespace
