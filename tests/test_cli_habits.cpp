// CLI habits users bring from FlexGen and vLLM: one batch-size flag (-b,
// --gpu-batch-size), "did you mean" for flags, commands and presets, --prompt TEXT,
// bench --format json|csv|md, a progress bar that moves per token (and only on a
// terminal), FlexGen's flags as flex_opt.py spells them (honoured or refused, never
// ignored), bench/ scripts that answer --help without their optional dependencies,
// and a README that documents every subcommand. No timings: only behaviour.
#include <pty.h>

#include <nlohmann/json.hpp>

#include "tests/support/cli_fixture.h"
#include "tests/support/tiny_model.h"

// The pure helpers under test are compiled in (no other test file includes these).
#include "src/cli/suggest.cpp"

using nlohmann::json;

namespace {

const fs::path kSourceDir = TIERGEN_SOURCE_DIR;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

class CliHabits : public CliReliability {
 protected:
  // `tiergen bench` on the tiny model, cpu, small workload, one run after `warmup`.
  std::vector<std::string> bench_args(const std::vector<std::string>& extra, int warmup = 0) const {
    std::vector<std::string> a = {kTiergen, "bench", "--model", model().string(), "--device", "cpu",
                                  "--prompt-len", "8", "--gen-len", "3", "-r", "1", "--warmup", std::to_string(warmup),
                                  "--offload-dir", (dir_ / "offload").string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  // `tiergen generate` on the tiny model with prompts given as --prompt (`-n 3` unless
  // `tokens_flag` is empty).
  std::vector<std::string> prompt_args(const std::vector<std::string>& extra, const std::string& tokens_flag = "-n") const {
    std::vector<std::string> a = {kTiergen, "generate", "--model", model().string(), "--device", "cpu",
                                  "--offload-dir", (dir_ / "offload").string()};
    if (!tokens_flag.empty()) a.insert(a.end(), {tokens_flag, "3"});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

// A --prompt that looks like a bracketed list is one prompt, as written.
TEST_F(CliHabits, ABracketedPromptIsOnePrompt) {
  const Exit e = run(prompt_args({"--prompt", "[INST] a, b [/INST]"}));
  ASSERT_EQ(e.code, 0) << e.describe();
  EXPECT_TRUE(contains(e.out, "\"prompt\":\"[INST] a, b [/INST]\"")) << e.out;
  EXPECT_EQ(std::count(e.out.begin(), e.out.end(), '\n'), 1) << e.out;
}

// ---- 1. One batch-size flag.

TEST_F(CliHabits, BatchSizeHasOneFlagWithItsAliases) {
  for (const std::string flag : {"-b", "--gpu-batch-size", "--batch-size"}) {
    const Exit e = run(prompt_args({"--prompt", "the cat", "--prompt", "a dog", "--prompt", "on the mat", flag, "2"}));
    ASSERT_EQ(e.code, 0) << flag << ": " << e.describe();
    EXPECT_TRUE(contains(e.err, "): gpu batch 2 x 1 batches")) << flag << ": " << e.err;
  }
  // Without placement flags the batch is the searched plan's; with --percent it is 8.
  const Exit searched = run(prompt_args({"--prompt", "the cat"}));
  ASSERT_EQ(searched.code, 0) << searched.describe();
  const std::string device_line = "device: cpu (host memory stands in for the GPU tier); compute dtype float32 (--dtype auto)";
  EXPECT_TRUE(contains(searched.err, device_line)) << searched.err;
  EXPECT_EQ(searched.err.find(device_line), searched.err.rfind(device_line)) << "said once: " << searched.err;
  EXPECT_TRUE(contains(searched.err, "policy (searched for this job; --percent or --policy fixes one): gpu batch"))
      << searched.err;
  const Exit defaulted = run(prompt_args({"--prompt", "the cat", "--percent", "100", "0", "100", "0", "100", "0"}));
  ASSERT_EQ(defaulted.code, 0) << defaulted.describe();
  EXPECT_TRUE(contains(defaulted.err, "policy: gpu batch 8 x 1 batches")) << defaulted.err;
  // bench takes the same flag.
  const fs::path record = dir_ / "b.json";
  const Exit bench = run(bench_args({"-b", "3", "--json", record.string()}));
  ASSERT_EQ(bench.code, 0) << bench.describe();
  EXPECT_EQ(json::parse(read_file(record))["gpu_batch_size"], 3);
  expect_clear_failure(run(prompt_args({"--prompt", "x", "-b", "0"})), {"gpu-batch-size"});
}

// `tiergen help [COMMAND]` as git and cargo have it: the same text as --help.
TEST_F(CliHabits, HelpCommandPrintsTheHelpOfTiergenOrOfACommand) {
  const Exit all = run({kTiergen, "help"});
  ASSERT_EQ(all.code, 0) << all.describe();
  EXPECT_EQ(all.out, run({kTiergen, "--help"}).out);
  const Exit generate = run({kTiergen, "help", "generate"});
  ASSERT_EQ(generate.code, 0) << generate.describe();
  EXPECT_EQ(generate.out, run({kTiergen, "generate", "--help"}).out);
  EXPECT_TRUE(contains(generate.out, "--max-new-tokens")) << generate.out;
  expect_clear_failure(run({kTiergen, "help", "genrate"}), {"no command 'genrate'", "generate"});
}

// "16G" is GiB to some tools and GB to others: the run says which it read.
TEST_F(CliHabits, ABareSizeSuffixSaysWhichPowersItMeans) {
  const Exit e = run(prompt_args({"--prompt", "x", "--cpu-mem", "1G"}));
  ASSERT_EQ(e.code, 0) << e.describe();
  EXPECT_TRUE(contains(e.err, "--cpu-mem: '1G' is read as GB (powers of 1000); write GiB for powers of 1024")) << e.err;
  const Exit exact = run(prompt_args({"--prompt", "x", "--cpu-mem", "1GiB"}));
  EXPECT_FALSE(contains(exact.err, "is read as")) << exact.err;
}

// A value out of range says what the range is in words, not as the largest double's
// 300 digits.
TEST_F(CliHabits, OutOfRangeNumbersAreRefusedInAFewWords) {
  const Exit negative = run(prompt_args({"--prompt", "x", "-n", "-5"}, ""));
  expect_clear_failure(negative, {"--max-new-tokens", "must be at least 0, not -5"});
  const Exit zero = run(prompt_args({"--prompt", "x", "-b", "0"}));
  expect_clear_failure(zero, {"must be more than 0, not 0"});
  const Exit word = run(prompt_args({"--prompt", "x", "--num-gpu-batches", "two"}));
  expect_clear_failure(word, {"must be a number, not 'two'"});
  for (const Exit* e : {&negative, &zero, &word}) {
    EXPECT_EQ(e->err.find("179769313486"), std::string::npos) << e->err;
    EXPECT_LT(e->err.size(), 400u) << e->err;
  }
}

// ---- 2. Did you mean.

TEST(Suggest, EditDistanceAndClosestNames) {
  using tiergen::cli::closest_names;
  using tiergen::cli::edit_distance;
  EXPECT_EQ(edit_distance("gpu-bach-size", "gpu-batch-size"), 1u);
  EXPECT_EQ(edit_distance("genreate", "generate"), 1u);  // a swap is one edit
  EXPECT_EQ(edit_distance("OPT-30B", "opt-30b"), 0u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  const std::vector<std::string> flags = {"--gpu-batch-size", "--num-gpu-batches", "--prompts", "--prompt", "-p"};
  EXPECT_EQ(closest_names("--gpu-bach-size", flags), std::vector<std::string>{"--gpu-batch-size"});
  EXPECT_EQ(closest_names("--promts", flags), std::vector<std::string>{"--prompts"});  // --prompt is 2 edits away
  EXPECT_EQ(closest_names("--promp", flags), (std::vector<std::string>{"--prompt", "--prompts"}));  // both start so
  EXPECT_EQ(closest_names("opt-30", {"opt-13b", "opt-30b", "opt-350m"}), std::vector<std::string>{"opt-30b"});
  EXPECT_EQ(closest_names("--num-gpu", flags), std::vector<std::string>{"--num-gpu-batches"});  // a prefix
  EXPECT_TRUE(closest_names("--temperature", flags).empty());
  EXPECT_EQ(tiergen::cli::did_you_mean("genrate", {"generate", "bench"}), " (did you mean 'generate'?)");
  EXPECT_EQ(tiergen::cli::did_you_mean("zzz", {"generate", "bench"}), "");
}

TEST_F(CliHabits, UnknownFlagsCommandsAndPresetsGetSuggestions) {
  Exit e = run(prompt_args({"--prompt", "x", "--gpu-bach-size", "2"}));
  expect_clear_failure(e, {"--gpu-bach-size", "did you mean '--gpu-batch-size'"});
  e = run(bench_args({"--prompt-lne", "4"}));
  expect_clear_failure(e, {"did you mean '--prompt-len'"});
  e = run({kTiergen, "genrate", "--model", "opt-125m"});
  expect_clear_failure(e, {"did you mean 'generate'"});
  e = run({kTiergen, "generate", "--model", "opt-30", "--device", "cpu", "--prompt", "x"});
  expect_clear_failure(e, {"--model 'opt-30'", "did you mean 'opt-30b'?", "presets:"});
  e = run({kTiergen, "bench", "--model", "facebook/opt-125", "--device", "cpu"});
  expect_clear_failure(e, {"did you mean 'facebook/opt-125m'"});
}

// A parse error is one line (what was wrong, the closest flags, where the usage is) and
// exit status 2, as other command-line tools give it.
TEST_F(CliHabits, ParseErrorsAreOneLineWithStatusTwo) {
  Exit e = run(prompt_args({"--prompt", "x", "--gpu-bach-size", "2"}));
  EXPECT_EQ(e.code, 2) << e.describe();
  EXPECT_EQ(lines_of(e.err).size(), 1u) << e.err;
  expect_clear_failure(e, {"tiergen generate: unknown flag '--gpu-bach-size' (did you mean '--gpu-batch-size'?)",
                           "tiergen help generate"});
  e = run(bench_args({"--num-gpu-batches", "many"}));
  EXPECT_EQ(e.code, 2) << e.describe();
  EXPECT_EQ(lines_of(e.err).size(), 1u) << e.err;
  expect_clear_failure(e, {"tiergen bench:", "--num-gpu-batches", "tiergen help bench"});
  e = run({kTiergen, "genrate"});
  EXPECT_EQ(e.code, 2) << e.describe();
  expect_clear_failure(e, {"unknown command 'genrate' (did you mean 'generate'?)"});
  // A mistyped required flag: the typo is the news, not the missing --model.
  e = run({kTiergen, "policy", "--modle", "opt-125m"});
  EXPECT_EQ(e.code, 2) << e.describe();
  EXPECT_EQ(lines_of(e.err).size(), 1u) << e.err;
  expect_clear_failure(e, {"unknown flag '--modle' (did you mean '--model'?)"});
}

// vLLM's spellings with underscores are read as ours: --top_p is --top-p.
TEST_F(CliHabits, UnderscoredFlagsAreReadAsTheirDashedSpelling) {
  const Exit dashed = run(prompt_args({"--prompt", "the cat", "--temperature", "0.8", "--seed", "3", "--top-p", "0.5"}));
  ASSERT_EQ(dashed.code, 0) << dashed.describe();
  const Exit underscored =
      run(prompt_args({"--prompt", "the cat", "--temperature", "0.8", "--seed", "3", "--top_p=0.5"}));
  ASSERT_EQ(underscored.code, 0) << underscored.describe();
  const auto results = [](const std::string& out) {
    std::vector<json> r;
    for (const auto& l : lines_of(out)) {
      const json j = json::parse(l);
      if (!j.contains("tiergen_job")) r.push_back(j);
    }
    return r;
  };
  ASSERT_EQ(results(dashed.out).size(), 1u) << dashed.out;
  EXPECT_EQ(results(underscored.out), results(dashed.out));
}

// JSONL requests in a file named .txt are read as text, as the name says, with a warning.
TEST_F(CliHabits, JsonLinesInATxtFileAreWarnedAbout) {
  const fs::path prompts = dir_ / "requests.txt";
  write_file(prompts, "{\"prompt\": \"the cat\"}\n");
  const Exit e = run(prompt_args({"-p", prompts.string()}));
  ASSERT_EQ(e.code, 0) << e.describe();
  EXPECT_NE(e.err.find("requests.txt:1: the file is read as plain text"), std::string::npos) << e.err;
  EXPECT_NE(e.err.find("--format jsonl"), std::string::npos) << e.err;
  const Exit asked = run(prompt_args({"-p", prompts.string(), "--format", "text"}));
  ASSERT_EQ(asked.code, 0) << asked.describe();
  EXPECT_EQ(asked.err.find("read as plain text"), std::string::npos) << asked.err;
}

// ---- 3. --prompt TEXT.

TEST_F(CliHabits, PromptFlagGivesOneRequestEachOnStdout) {
  const Exit e = run(prompt_args({"--prompt", "the quick brown fox", "--prompt", "a lazy dog"}));
  ASSERT_EQ(e.code, 0) << e.describe();
  const auto lines = lines_of(e.out);
  std::vector<json> results;
  for (const auto& l : lines) {
    const json j = json::parse(l);
    if (!j.contains("tiergen_job")) results.push_back(j);
  }
  ASSERT_EQ(results.size(), 2u) << e.out;
  EXPECT_EQ(results[0]["prompt"], "the quick brown fox");
  EXPECT_EQ(results[1]["prompt"], "a lazy dog");
  EXPECT_EQ(results[0]["num_output_tokens"], 3);
  // With a prompt file too: refused; with neither: told how to give prompts.
  const fs::path prompts = prompt_file("p.txt", 1);
  expect_clear_failure(run(prompt_args({"--prompt", "x", "-p", prompts.string()})), {"--prompt", "excludes"});
  expect_clear_failure(run(prompt_args({})), {"no prompts", "--prompt TEXT"});
  expect_clear_failure(run(prompt_args({"--prompt", "ok", "--prompt", "bad \xff byte"})),
                       {"--prompt:2: not valid UTF-8 (byte 5)"});
}

// ---- 4. bench --format (format_bench_record itself: test_bench_cli.cpp).

TEST_F(CliHabits, BenchPrintsTheChosenFormatOnStdout) {
  const fs::path record = dir_ / "record.json";
  const Exit as_json = run(bench_args({"--format", "json", "--json", record.string()}));
  ASSERT_EQ(as_json.code, 0) << as_json.describe();
  const json j = json::parse(as_json.out);
  EXPECT_EQ(j["prompt_len"], 8);
  EXPECT_EQ(j["total_tokens"], j["num_prompts"].get<int64_t>() * 3);
  EXPECT_EQ(j["num_prompts"], json::parse(read_file(record))["num_prompts"]);  // the same record

  const Exit as_csv = run(bench_args({"--format", "csv"}));
  ASSERT_EQ(as_csv.code, 0) << as_csv.describe();
  const auto rows = lines_of(as_csv.out);
  ASSERT_EQ(rows.size(), 2u) << as_csv.out;
  EXPECT_EQ(rows[0].rfind("model,device,dtype,prompt_len,gen_len,", 0), 0u) << rows[0];
  EXPECT_TRUE(contains(rows[1], ",cpu,float32,8,3,")) << rows[1];

  const Exit as_md = run(bench_args({"--format", "md"}));
  ASSERT_EQ(as_md.code, 0) << as_md.describe();
  const auto md = lines_of(as_md.out);
  ASSERT_EQ(md.size(), 3u) << as_md.out;
  EXPECT_TRUE(contains(md[2], "| cpu | float32 | 8 | 3 |")) << md[2];
  EXPECT_FALSE(contains(as_md.out, "total throughput:"));  // not the text report

  const Exit text = run(bench_args({}));
  ASSERT_EQ(text.code, 0) << text.describe();
  EXPECT_TRUE(contains(text.out, "total throughput: ")) << text.out;
  expect_clear_failure(run(bench_args({"--format", "xml"})), {"--format"});
}

// ---- 5. Progress per token (the ProgressBar itself: test_bench_cli.cpp).

TEST(EngineTokenHook, ReportsEveryTokenOfEveryRequestBeforeItsResult) {
  using namespace tiergen;
  const auto m = test::make_tiny_model(test::tiny_opt(5));
  const test::TempDir offload("token-hook");
  const auto requests = test::greedy_requests(test::make_prompts({3, 5, 4}, m.spec.vocab_size, 9), {4, 2, 3});
  runtime::Engine engine(m.spec, *m.weights, test::make_policy(2, 1, {100, 0, 100, 0, 100, 0}, false),
                         test::cpu_engine_options(offload.path), test::workload_of(requests));
  std::vector<std::vector<int64_t>> streamed(requests.size());
  std::vector<bool> finished(requests.size(), false);
  engine.generate(
      requests,
      [&](size_t i, const runtime::SequenceResult& r) {
        finished[i] = true;
        EXPECT_EQ(streamed[i], r.tokens) << "request " << i;
      },
      [&](size_t i, int64_t token) {
        ASSERT_LT(i, requests.size());
        EXPECT_FALSE(finished[i]) << "token of request " << i << " after its result";
        streamed[i].push_back(token);
      });
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_TRUE(finished[i]);
}

// Runs `args` with stderr on a pseudo-terminal (stdout to a file): what the terminal got.
std::string stderr_on_terminal(const std::vector<std::string>& args, const fs::path& dir, int* code) {
  int master = -1, slave = -1;
  if (::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) return "openpty failed";
  const std::string out = (dir / "pty.out").string();
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(master);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0) ::_exit(126);
    ::dup2(o, STDOUT_FILENO);
    ::dup2(slave, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(slave);
  std::string got;
  char buf[4096];
  for (;;) {  // until the child's side closes (EIO)
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n > 0) got.append(buf, static_cast<size_t>(n));
    else if (n < 0 && errno == EINTR) continue;
    else break;
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return got;
}

TEST_F(CliHabits, BenchDrawsItsBarOnATerminalOnlyWithoutQuiet) {
  {  // A root without /dev/pts (e.g. a bare chroot) has no pseudo-terminals to test on.
    int master = -1, slave = -1;
    if (::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) GTEST_SKIP() << "no pseudo-terminal here";
    ::close(master);
    ::close(slave);
  }
  int code = -1;
  const std::string drawn = stderr_on_terminal(bench_args({}, /*warmup=*/1), dir_, &code);
  ASSERT_EQ(code, 0) << drawn;
  EXPECT_TRUE(contains(drawn, "\r[")) << drawn;
  EXPECT_TRUE(contains(drawn, "0/2 runs")) << drawn;  // warm-up and measured runs count
  EXPECT_TRUE(contains(drawn, "2/2 runs")) << drawn;
  const std::string quiet = stderr_on_terminal(bench_args({"-q"}), dir_, &code);
  ASSERT_EQ(code, 0) << quiet;
  EXPECT_FALSE(contains(quiet, " runs  ")) << quiet;
  // Not a terminal: no bar (the fixture's children write stderr to a file).
  const Exit piped = run(bench_args({}));
  ASSERT_EQ(piped.code, 0) << piped.describe();
  EXPECT_FALSE(contains(piped.err, " runs  ")) << piped.err;
}

// ---- 6. FlexGen's flags, as flex_opt.py spells them.

TEST_F(CliHabits, FlexGenCommandLineRunsWithFlexGensMeaning) {
  const fs::path record = dir_ / "flexgen.json", log = dir_ / "flexgen.log";
  const Exit e = run({kTiergen, "bench", "--model", model().string(), "--path", "_DUMMY_", "--device", "cpu",
                      "--offload-dir", (dir_ / "offload").string(), "--prompt-len", "8", "--gen-len", "3",
                      "--cut-gen-len", "3", "--gpu-batch-size", "2", "--num-gpu-batches", "2", "--percent", "100", "0",
                      "0", "100", "100", "0", "--sep-layer", "false", "--pin-weight", "False", "--cpu-cache-compute",
                      "--overlap", "false", "--attn-sparsity", "1", "--log-file", log.string(), "--verbose", "2",
                      "-r", "1", "--warmup", "0", "--json", record.string()});
  ASSERT_EQ(e.code, 0) << e.describe();
  const json j = json::parse(read_file(record));
  EXPECT_EQ(j["num_prompts"], 4);
  EXPECT_EQ(j["policy"]["sep_layer"], false);
  EXPECT_EQ(j["policy"]["pin_weight"], false);
  EXPECT_EQ(j["policy"]["overlap"], false);
  EXPECT_EQ(j["policy"]["cpu_cache_compute"], true);
  EXPECT_TRUE(contains(e.err, "dummy weights")) << e.err;  // --path _DUMMY_
  // --log-file: FlexGen's report lines appended; --no-log writes none.
  EXPECT_TRUE(contains(read_file(log), "total latency: ")) << read_file(log);
  const fs::path unlogged = dir_ / "unlogged.log";
  const Exit no_log = run(bench_args({"--log-file", unlogged.string(), "--no-log"}));
  ASSERT_EQ(no_log.code, 0) << no_log.describe();
  EXPECT_FALSE(fs::exists(unlogged));
  // --path DIR: a checkpoint directory is the model.
  const Exit by_path = run({kTiergen, "bench", "--path", model().string(), "--device", "cpu", "--prompt-len", "8",
                            "--gen-len", "2", "-r", "1", "--warmup", "0", "--offload-dir", (dir_ / "offload").string()});
  ASSERT_EQ(by_path.code, 0) << by_path.describe();
  EXPECT_FALSE(contains(by_path.err, "dummy weights")) << by_path.err;
}

TEST_F(CliHabits, FlexGenFlagsTiergenCannotHonourAreRefused) {
  expect_clear_failure(run(bench_args({"--attn-sparsity", "0.5"})), {"--attn-sparsity", "not supported"});
  expect_clear_failure(run(bench_args({"--cut-gen-len", "1"})), {"--cut-gen-len 1", "at least 2"});
  expect_clear_failure(run(bench_args({"--path", (dir_ / "no-such-weights").string()})),
                       {"--path", "numpy weight cache"});
  expect_clear_failure(run(bench_args({"--overlap", "maybe"})), {"--overlap"});
  expect_clear_failure(run(bench_args({"--sep-layer", "sometimes"})), {"--sep-layer"});
  // bench's workload flags in generate: refused, naming bench.
  for (const std::string flag : {"--prompt-len", "--cut-gen-len", "--log-file"}) {
    expect_clear_failure(run(prompt_args({"--prompt", "x", flag, "4"})), {flag, "tiergen bench"});
  }
  expect_clear_failure(run(prompt_args({"--prompt", "x", "--no-log"})), {"--no-log", "tiergen bench"});
  // --gen-len is meaningful in generate: the tokens per prompt.
  const Exit gen_len = run(prompt_args({"--prompt", "the cat"}, "--gen-len"));
  ASSERT_EQ(gen_len.code, 0) << gen_len.describe();
  EXPECT_TRUE(contains(gen_len.out, "\"num_output_tokens\":3")) << gen_len.out;
}

TEST_F(CliHabits, CutGenLenProjectsDecodeToTheFullLengthAndSaysSo) {
  const fs::path record = dir_ / "cut.json";
  // bench_args: --gen-len 3; each run generates 2 tokens per prompt, projected to 3.
  const Exit e = run(bench_args({"--cut-gen-len", "2", "--json", record.string()}));
  ASSERT_EQ(e.code, 0) << e.describe();
  EXPECT_TRUE(contains(e.out, "projected: True")) << e.out;
  EXPECT_TRUE(contains(e.out, "runs cut to 2: decode projected")) << e.out;
  EXPECT_TRUE(contains(e.err, "projected")) << e.err;
  const json j = json::parse(read_file(record));
  EXPECT_EQ(j["projected"], true);
  EXPECT_EQ(j["cut_gen_len"], 2);
  const int64_t n = j["num_prompts"];
  EXPECT_EQ(j["total_tokens"], n * 3);
  const json& r = j["runs"][0];
  EXPECT_EQ(r["generated_tokens"], n * 3);  // counted as the full run's
  EXPECT_NEAR(r["decode_throughput"].get<double>(), n * 2 / r["decode_latency_s"].get<double>(),
              1e-6 * r["decode_throughput"].get<double>());
  // Not cut (the default, or --cut-gen-len >= --gen-len): measured, and said so.
  const Exit full = run(bench_args({"--cut-gen-len", "3"}));
  ASSERT_EQ(full.code, 0) << full.describe();
  EXPECT_TRUE(contains(full.out, "projected: False")) << full.out;
}

// ---- 7. bench/ scripts answer --help without their optional dependencies.

TEST_F(CliHabits, BenchScriptsAnswerHelpWithoutOptionalDependencies) {
  // Python modules that may be missing (matplotlib, numpy) fail to import; node and npm
  // are stubs that fail loudly.
  const fs::path blocked = dir_ / "blocked-modules", stubs = dir_ / "stub-bin";
  for (const char* module : {"matplotlib", "numpy"}) {
    fs::create_directories(blocked / module);
    write_file(blocked / module / "__init__.py", "raise ImportError('optional dependency hidden by the test')\n");
  }
  fs::create_directories(stubs);
  for (const char* tool : {"node", "npm"}) {
    write_file(stubs / tool, "#!/bin/sh\necho STUB-CALLED >&2\nexit 1\n");
    fs::permissions(stubs / tool, fs::perms::owner_all);
  }
  const std::string path_env = "PATH=" + stubs.string() + ":" + (std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin");
  int scripts = 0;
  for (const auto& entry : fs::directory_iterator(kSourceDir / "bench")) {
    const fs::path script = entry.path();
    const std::string ext = script.extension().string();
    if (ext != ".sh" && ext != ".py") continue;
    ++scripts;
    const Exit e = run({"/usr/bin/env", "PYTHONPATH=" + blocked.string(), path_env,
                        ext == ".py" ? "python3" : "bash", script.string(), "--help"});
    EXPECT_EQ(e.code, 0) << script << ": " << e.describe();
    EXPECT_GT(e.out.size(), 40u) << script << " printed no help";
    EXPECT_FALSE(contains(e.out + e.err, "STUB-CALLED")) << script;
    EXPECT_FALSE(contains(e.out + e.err, "missing")) << script << ": " << e.err;
  }
  EXPECT_GE(scripts, 7);
}

// ---- 8. The README documents every subcommand.

TEST_F(CliHabits, ReadmeDocumentsEverySubcommandAndTheOpenAiFormats) {
  const Exit help = run({kTiergen, "--help"});
  ASSERT_EQ(help.code, 0) << help.describe();
  const std::string readme = read_file(kSourceDir / "README.md");
  ASSERT_FALSE(readme.empty());
  // CLI11 lists the subcommands under "Subcommands:", one per line: "  NAME  description".
  const auto at = help.out.find("Subcommands:");
  ASSERT_NE(at, std::string::npos) << help.out;
  int commands = 0;
  for (const auto& line : lines_of(help.out.substr(at))) {
    if (line.rfind("  ", 0) != 0) continue;
    std::istringstream words(line);
    std::string name;
    words >> name;
    ++commands;
    EXPECT_TRUE(contains(readme, "tiergen " + name)) << "README.md does not document `tiergen " << name << "`";
  }
  EXPECT_GE(commands, 6);
  for (const char* topic : {"/v1/completions", "/v1/chat/completions", "--output-format", "tokenizer",
                            "--gpu-batch-size", "--prompt ", "--format text|json|csv|md", "--path _DUMMY_"}) {
    EXPECT_TRUE(contains(readme, topic)) << "README.md does not mention " << topic;
  }
}

}  // namespace

namespace {

// ---- Hugging Face names and layouts.

class CliHubNames : public CliHabits {};

// `generate -m facebook/opt-125m` without a local folder is refused (it would run random
// weights) unless --dummy, naming the cache it looked in; a snapshot in the Hugging Face
// cache is found and run; a folder of pytorch_model.bin says how to convert it.
TEST_F(CliHubNames, HubIdsResolveThroughTheCacheAndPresetsNeedDummy) {
  const fs::path hub = dir_ / "hf-home" / "hub";
  SpawnOptions empty_cache;
  empty_cache.env = {"HF_HOME=" + (dir_ / "hf-home").string(), "HF_HUB_CACHE="};
  const std::vector<std::string> job = {"--device", "cpu", "--prompt", "the cat", "-n", "2", "-o",
                                        (dir_ / "out.jsonl").string(), "--overwrite"};
  auto generate = [&](const std::string& model, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {kTiergen, "generate", "--model", model};
    a.insert(a.end(), job.begin(), job.end());
    a.insert(a.end(), extra.begin(), extra.end());
    Child child(a, dir_, empty_cache);
    return child.wait();
  };
  expect_clear_failure(generate("facebook/opt-125m"),
                       {"--model 'facebook/opt-125m' is a preset, not a checkpoint", hub.string(), "--dummy"});
  EXPECT_FALSE(fs::exists(dir_ / "out.jsonl"));
  expect_clear_failure(generate("opt-125m"), {"is a preset, not a checkpoint", "--dummy"});
  const Exit dummy = generate("opt-125m", {"--dummy", "--tokenizer", kTokenizer});
  ASSERT_TRUE(dummy.exited && dummy.code == 0) << dummy.describe();
  EXPECT_NE(dummy.err.find("DUMMY WEIGHTS"), std::string::npos) << dummy.err;

  // The tiny model as the hub cache holds a download: refs/main -> snapshots/<hash>.
  const fs::path repo = hub / "models--tiny--opt";
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots");
  fs::copy(model(), repo / "snapshots" / "0123abcd", fs::copy_options::recursive);
  write_file(repo / "refs" / "main", "0123abcd");
  const Exit cached = generate("tiny/opt");
  ASSERT_TRUE(cached.exited && cached.code == 0) << cached.describe();
  EXPECT_NE(cached.err.find("the Hugging Face cache's snapshot"), std::string::npos) << cached.err;
  EXPECT_EQ(cached.err.find("DUMMY WEIGHTS"), std::string::npos) << cached.err;

  // A PyTorch pickle checkpoint: named, with the conversion.
  const fs::path pickled = dir_ / "pickled";
  fs::create_directories(pickled);
  for (const auto& entry : fs::directory_iterator(model())) {
    if (entry.path().extension() != ".safetensors") fs::copy(entry.path(), pickled / entry.path().filename());
  }
  write_file(pickled / "pytorch_model.bin", "not really");
  expect_clear_failure(generate(pickled.string()), {"pytorch_model*.bin", "safe_serialization=True"});
}

}  // namespace
