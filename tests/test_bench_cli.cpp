// `tiergen bench` end to end on a tiny random model (--device cpu): FlexGen's report
// lines are printed, the --json record has every field with consistent numbers
// (N·n tokens per run, FlexGen's size formulas, throughput = tokens / latency), bad
// arguments fail cleanly; plus the pure helpers behind the report and the progress bar.
// No timing thresholds: only that times are positive and add up.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

// The CLI's sources are not in tiergen_core; the helpers under test are small and
// self-contained, so this file compiles them in (no other test file does).
#include "src/cli/bench_report.cpp"
#include "src/cli/progress.cpp"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kTiergen = TIERGEN_BINARY_DIR "/tiergen";
const std::string kMakeTinyModel = TIERGEN_BINARY_DIR "/make-tiny-model";

struct Result {
  int code = -1;  // exit code, or -signal
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Runs `args` (args[0] is the program) with stdout and stderr to files in `dir`.
Result run(const std::vector<std::string>& args, const fs::path& dir) {
  static int counter = 0;
  const std::string out = (dir / ("out-" + std::to_string(++counter))).string();
  const std::string err = out + ".err";
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0) ::_exit(126);
    ::dup2(o, STDOUT_FILENO);
    ::dup2(e, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  Result r;
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid) {
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

class BenchCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::path(::testing::TempDir()) / ("tiergen-bench-cli-" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    const Result made = run({kMakeTinyModel, "--arch", "opt", "--out", model_dir(), "--seed", "3"}, *dir_);
    ASSERT_EQ(made.code, 0) << made.err;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    tiergen::test::remove_tree(*dir_);
    delete dir_;
  }
  static std::string model_dir() { return (*dir_ / "tiny-opt").string(); }
  static fs::path dir() { return *dir_; }

  // bench on the tiny model with --device cpu and budgets small enough to offload.
  static std::vector<std::string> bench_args(const std::string& json_path, std::vector<std::string> extra) {
    std::vector<std::string> a = {kTiergen, "bench", "--model", model_dir(), "--device", "cpu",
                                  "--prompt-len", "16", "--gen-len", "4", "-r", "2", "--json", json_path,
                                  "--offload-dir", (dir() / "offload").string(), "--gpu-mem", "64MiB",
                                  "--cpu-mem", "512MiB", "--disk-mem", "512MiB"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  static fs::path* dir_;
};

fs::path* BenchCli::dir_ = nullptr;

// `one_block`: the default workload, gpu batch size x gpu batches prompts (not --num-prompts).
void expect_record_consistent(const json& j, int64_t num_prompts, int64_t prompt_len, int64_t gen_len,
                              int64_t repetitions, bool one_block = true) {
  for (const char* key : {"tool", "date", "command", "model", "device", "dtype", "prompt_len", "gen_len", "num_prompts",
                          "gpu_batch_size", "num_gpu_batches", "repetitions", "total_tokens", "model_size_bytes",
                          "cache_size_bytes", "hidden_size_bytes", "peak_gpu_mem_bytes", "peak_bytes",
                          "prefill_latency_s", "prefill_throughput", "decode_latency_s", "decode_throughput",
                          "total_latency_s", "total_throughput", "summary", "runs", "policy", "prediction",
                          "predicted_vs_measured"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["tool"], "tiergen");
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["prompt_len"], prompt_len);
  EXPECT_EQ(j["gen_len"], gen_len);
  EXPECT_EQ(j["num_prompts"], num_prompts);
  if (one_block) EXPECT_EQ(j["gpu_batch_size"].get<int64_t>() * j["num_gpu_batches"].get<int64_t>(), num_prompts);
  EXPECT_EQ(j["repetitions"], repetitions);
  EXPECT_EQ(j["total_tokens"], num_prompts * gen_len);
  EXPECT_GT(j["model_size_bytes"].get<double>(), 0);
  EXPECT_GT(j["peak_gpu_mem_bytes"].get<double>(), 0);
  EXPECT_LE(j["peak_bytes"]["gpu"].get<double>(), j["budget_bytes"]["gpu"].get<double>());
  ASSERT_EQ(j["runs"].size(), static_cast<size_t>(repetitions));
  for (const auto& run : j["runs"]) {
    EXPECT_EQ(run["sequences"], num_prompts);
    EXPECT_EQ(run["generated_tokens"], num_prompts * gen_len);  // EOS ignored: exactly n each
    EXPECT_EQ(run["prompt_tokens"], num_prompts * prompt_len);
    const double prefill = run["prefill_latency_s"], decode = run["decode_latency_s"], total = run["total_latency_s"];
    EXPECT_GT(prefill, 0);
    EXPECT_GT(decode, 0);
    EXPECT_NEAR(total, prefill + decode, 1e-9 * std::max(1.0, total));
    EXPECT_NEAR(run["total_throughput"].get<double>(), num_prompts * gen_len / total, 1e-6 * run["total_throughput"].get<double>());
    EXPECT_NEAR(run["prefill_throughput"].get<double>(), num_prompts * prompt_len / prefill,
                1e-6 * run["prefill_throughput"].get<double>());
    EXPECT_NEAR(run["decode_throughput"].get<double>(), num_prompts * (gen_len - 1) / decode,
                1e-6 * run["decode_throughput"].get<double>());
    EXPECT_GT(run["task_seconds"]["compute"]["prefill"].get<double>(), 0);
  }
  for (const char* metric : {"prefill_latency_s", "prefill_throughput", "decode_latency_s", "decode_throughput",
                             "total_latency_s", "total_throughput"}) {
    const json& s = j["summary"][metric];
    EXPECT_GT(s["mean"].get<double>(), 0) << metric;
    EXPECT_GE(s["sd"].get<double>(), 0) << metric;
    EXPECT_LE(s["min"].get<double>(), s["median"].get<double>()) << metric;
    EXPECT_LE(s["median"].get<double>(), s["max"].get<double>()) << metric;
    EXPECT_DOUBLE_EQ(j[metric].get<double>(), s["median"].get<double>()) << metric;
  }
  EXPECT_GT(j["predicted_vs_measured"]["throughput"]["measured"]["total"].get<double>(), 0);
}

TEST_F(BenchCli, ReportLinesAndJsonRecordWithOffloadToCpuAndDisk) {
  const std::string json_path = (dir() / "bench-offload.json").string();
  // Weights 40% gpu / 30% cpu / 30% disk, KV cache on cpu and disk with CPU attention.
  const Result r = run(bench_args(json_path, {"--gpu-batch-size", "2", "--num-gpu-batches", "2", "--percent", "40",
                                              "30", "0", "60", "100", "0", "--cpu-attention"}),
                       dir());
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* line : {"model size: ", "cache size: ", "hidden size (p): ", "peak gpu mem: ", "prefill latency: ",
                           "prefill throughput: ", "decode latency: ", "decode throughput: ", "total latency: ",
                           "total throughput: ", "policy: ", "predicted vs measured", "over 2 measured runs", "±"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << "missing '" << line << "' in:\n" << r.out;
  }
  const json j = json::parse(slurp(json_path));
  expect_record_consistent(j, 4, 16, 4, 2);
  // The tiny OPT model: 2 layers, hidden 64, 4 heads (kv_dim 64), float32 on cpu.
  EXPECT_EQ(j["dtype"], "float32");
  EXPECT_EQ(j["cache_size_bytes"], 4 * (16 + 4) * 2 * 2 * 64 * 4);
  EXPECT_EQ(j["hidden_size_bytes"], 4 * (16 + 4) * 64 * 4);
  EXPECT_GT(j["peak_bytes"]["disk"].get<double>(), 0);
  EXPECT_GT(j["runs"][0]["task_seconds"]["load_weight"]["decode"].get<double>(), 0);
  EXPECT_FALSE(fs::exists(dir() / "offload")) << "the offload directory the run created outlived it";
}

// A plan searched on a profile that measured where the small-row kernel stops beating
// the GEMM carries that limit (it was priced with it) and its run uses it and says so,
// also from the saved policy file; a fixed policy keeps the default limit, so its
// results never depend on the profile at hand.
TEST_F(BenchCli, ASearchedPlanCarriesTheSmallRowLimitItsProfileMeasured) {
  json profile = json::parse(slurp(fs::path(TIERGEN_SOURCE_DIR) / "configs/hw/t4-flexgen.json"));
  profile["cpu"]["product_dtype"] = "float32";
  profile["cpu"]["small_matmul_max_rows"] = 40;
  const fs::path path = dir() / "measured-profile.json";
  std::ofstream(path) << profile.dump();
  const std::string said = "CPU products of float32 weights: the small-row kernel up to 40 rows (default 16)";
  const std::string searched_json = (dir() / "bench-limit.json").string();
  const Result searched =
      run(bench_args(searched_json, {"--policy", "auto", "--hw", path.string(), "--warmup", "0", "--cpu-gemm"}), dir());
  ASSERT_EQ(searched.code, 0) << searched.err;
  EXPECT_NE(searched.err.find(said), std::string::npos) << searched.err;
  const json plan = json::parse(slurp(searched_json))["policy"];
  ASSERT_TRUE(plan.contains("small_matmul")) << plan.dump();
  EXPECT_EQ(plan["small_matmul"], (json{{"dtype", "float32"}, {"max_rows", 40}}));

  const fs::path plan_file = dir() / "searched-policy.json";
  std::ofstream(plan_file) << plan.dump();
  const Result from_file =
      run(bench_args((dir() / "bench-file.json").string(), {"--policy", plan_file.string(), "--warmup", "0",
                                                            "--cpu-gemm"}), dir());
  ASSERT_EQ(from_file.code, 0) << from_file.err;
  EXPECT_NE(from_file.err.find(said), std::string::npos) << from_file.err;
  // Batch-invariant products (the default) take every row count on the kernel.
  const Result invariant =
      run(bench_args((dir() / "bench-invariant.json").string(), {"--policy", plan_file.string(), "--warmup", "0"}),
          dir());
  ASSERT_EQ(invariant.code, 0) << invariant.err;
  EXPECT_EQ(invariant.err.find("the small-row kernel up to"), std::string::npos) << invariant.err;

  const Result fixed = run(bench_args((dir() / "bench-fixed.json").string(), {"--hw", path.string(), "--warmup", "0"}),
                           dir());
  ASSERT_EQ(fixed.code, 0) << fixed.err;
  EXPECT_EQ(fixed.err.find("the small-row kernel up to"), std::string::npos) << fixed.err;
}

TEST_F(BenchCli, PolicyAutoAndOverlapOff) {
  const std::string json_path = (dir() / "bench-auto.json").string();
  const Result r = run(bench_args(json_path, {"--policy", "auto", "--warmup", "0"}), dir());
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(slurp(json_path));
  expect_record_consistent(j, j["num_prompts"].get<int64_t>(), 16, 4, 2);

  const std::string json_off = (dir() / "bench-off.json").string();
  const Result off = run(bench_args(json_off, {"--percent", "0", "100", "100", "0", "100", "0", "--overlap", "off"}), dir());
  ASSERT_EQ(off.code, 0) << off.err;
  const json k = json::parse(slurp(json_off));
  expect_record_consistent(k, 4, 16, 4, 2);
  EXPECT_EQ(k["policy"]["overlap"], false);
}

// --num-prompts: a job of several blocks and a partial one; with --policy auto the
// search plans for the job (no block larger than it).
TEST_F(BenchCli, NumPromptsSizesTheJob) {
  const std::string json_path = (dir() / "bench-seven.json").string();
  const Result r = run(bench_args(json_path, {"--gpu-batch-size", "2", "--num-gpu-batches", "2", "--num-prompts", "7",
                                              "--warmup", "0"}),
                       dir());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("7 prompts (2 x 2, blocks of 4)"), std::string::npos) << r.out;
  const json j = json::parse(slurp(json_path));
  expect_record_consistent(j, 7, 16, 4, 2, /*one_block=*/false);
  EXPECT_EQ(j["gpu_batch_size"], 2);
  EXPECT_EQ(j["num_gpu_batches"], 2);

  const std::string auto_path = (dir() / "bench-three.json").string();
  const Result searched = run(bench_args(auto_path, {"--policy", "auto", "--num-prompts", "3", "--warmup", "0"}), dir());
  ASSERT_EQ(searched.code, 0) << searched.err;
  const json k = json::parse(slurp(auto_path));
  expect_record_consistent(k, 3, 16, 4, 2, /*one_block=*/false);
  EXPECT_LE(k["gpu_batch_size"].get<int64_t>() * k["num_gpu_batches"].get<int64_t>(), 3) << k["policy"].dump();
}

TEST_F(BenchCli, BadArgumentsFailCleanly) {
  const fs::path json_path = dir() / "never.json";
  Result r = run(bench_args(json_path.string(), {"-r", "0"}), dir());
  EXPECT_NE(r.code, 0);
  EXPECT_GT(r.code, 0) << "crashed: " << r.err;
  // Prompt plus generation longer than the tiny model's 256 positions.
  r = run({kTiergen, "bench", "--model", model_dir(), "--device", "cpu", "--prompt-len", "250", "--gen-len", "16",
           "--json", json_path.string()},
          dir());
  EXPECT_GT(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("positions"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(json_path));
}

TEST_F(BenchCli, GenerateDrawsNoProgressBarWhenStderrIsNotATerminal) {
  const fs::path prompts = dir() / "prompts.jsonl";
  std::ofstream(prompts) << "{\"prompt_token_ids\": [5, 6, 7]}\n{\"prompt_token_ids\": [8, 9]}\n";
  for (bool quiet : {false, true}) {
    std::vector<std::string> args = {kTiergen, "generate", "--model", model_dir(), "--device", "cpu",
                                     "--prompts", prompts.string(), "-n", "3", "--offload-dir",
                                     (dir() / "offload").string()};
    if (quiet) args.push_back("--quiet");
    const Result r = run(args, dir());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err.find(" prompts  "), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\r'), std::string::npos);
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2);
  }
}

TEST(BenchReport, SummaryStatistics) {
  const tiergen::cli::Summary s = tiergen::cli::summarize({3.0, 1.0, 2.0, 6.0});
  EXPECT_DOUBLE_EQ(s.mean, 3.0);
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 6.0);
  EXPECT_NEAR(s.sd, std::sqrt(14.0 / 3.0), 1e-12);
  const tiergen::cli::Summary one = tiergen::cli::summarize({5.0});
  EXPECT_DOUBLE_EQ(one.sd, 0.0);
  EXPECT_DOUBLE_EQ(one.median, 5.0);
}

TEST(BenchReport, FlexGenLinesParseLikeFlexGensLog) {
  tiergen::cli::BenchSizes sizes{12ull << 30, 3ull << 29, 1ull << 20};
  tiergen::cli::MetricSummaries m;
  m.prefill_latency.median = 2.0;
  m.prefill_throughput.median = 1024.0;
  m.decode_latency.median = 8.0;
  m.decode_throughput.median = 15.5;
  m.total_latency.median = 10.0;
  m.total_throughput.median = 12.8;
  const std::string text = tiergen::cli::flexgen_report(sizes, 1ull << 30, m);
  EXPECT_NE(text.find("model size: 12.000 GB\tcache size: 1.500 GB\thidden size (p): 0.001 GB\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("peak gpu mem: 1.000 GB\tprojected: False\n"), std::string::npos) << text;
  EXPECT_NE(text.find("total latency: 10.000 s\ttotal throughput: 12.800 token/s"), std::string::npos) << text;
  EXPECT_NE(tiergen::cli::flexgen_report(sizes, 1ull << 30, m, true).find("projected: True\n"), std::string::npos);
}

TEST(Progress, RenderShowsCountRateAndEta) {
  using tiergen::cli::ProgressBar;
  using tiergen::cli::ProgressState;
  // ProgressState: items done/total, token budget done/total, tokens.
  EXPECT_EQ(ProgressBar::render(ProgressState{1, 4, 100, 400, 100}, 10.0, "prompts", 8),
            "[##......] 1/4 prompts  100 tokens  10.0 tok/s  elapsed 10s  ETA 30s");
  EXPECT_EQ(ProgressBar::render(ProgressState{0, 4, 0, 400, 0}, 0.0, "prompts", 4),
            "[....] 0/4 prompts  0 tokens  0.0 tok/s  elapsed 0s  ETA ?");
  EXPECT_EQ(ProgressBar::render(ProgressState{4, 4, 400, 400, 40}, 125.0, "prompts", 4),
            "[####] 4/4 prompts  40 tokens  0.3 tok/s  elapsed 2m05s  ETA 0s");
  EXPECT_EQ(tiergen::cli::format_duration(3725), "1h02m");
  // Disabled: draws nothing, and finish is idempotent.
  ProgressBar quiet(10, 100, false);
  quiet.add_token();
  quiet.end_item();
  quiet.finish();
  quiet.finish();
  EXPECT_FALSE(quiet.enabled());
  EXPECT_EQ(quiet.draws(), 0);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(BenchReport, ProjectionScalesDecodeToTheFullLength) {
  tiergen::cli::StatsSnapshot run;
  run.prefill_seconds = 1.0;
  run.decode_seconds = 2.0;  // 4 prompts x 3 tokens: 2 decode steps
  run.generated_tokens = 12;
  run.decode_tokens = 8;
  run.prompt_tokens = 64;
  run.decode_task[0] = 0.5;
  run.prefill_task[0] = 0.25;
  const auto p = run.projected(4, 3, 11);  // 10 decode steps
  EXPECT_DOUBLE_EQ(p.decode_seconds, 10.0);
  EXPECT_DOUBLE_EQ(p.decode_task[0], 2.5);
  EXPECT_DOUBLE_EQ(p.prefill_seconds, 1.0);
  EXPECT_DOUBLE_EQ(p.prefill_task[0], 0.25);
  EXPECT_EQ(p.generated_tokens, 44);
  EXPECT_EQ(p.decode_tokens, 40);
  EXPECT_EQ(p.prompt_tokens, 64);
}

TEST(BenchFormat, CsvAndMarkdownHaveEveryColumnAndQuoteThePolicy) {
  const json record = {{"model", "opt-125m"},
                       {"prompt_len", 16},
                       {"total_throughput", 12.5},
                       {"policy_description", "gpu batch 2 x 1 batches; weights gpu/cpu/disk 100/0/0%, \"x\" | y"},
                       {"summary", {{"total_throughput", {{"mean", 12.0}, {"sd", 0.5}}}}},
                       {"peak_bytes", {{"gpu", 1024}, {"cpu", 0}, {"disk", 0}}}};
  const std::string csv = tiergen::cli::format_bench_record(record, "csv");
  const auto rows = lines_of(csv);
  ASSERT_EQ(rows.size(), 2u) << csv;
  std::string header;
  for (const auto& c : tiergen::cli::kBenchColumns) header += (header.empty() ? "" : ",") + c;
  EXPECT_EQ(rows[0], header);
  EXPECT_EQ(rows[1].rfind("opt-125m,,,16,", 0), 0u) << rows[1];
  EXPECT_TRUE(contains(rows[1], ",\"gpu batch 2 x 1 batches; weights gpu/cpu/disk 100/0/0%, \"\"x\"\" | y\",")) << rows[1];
  EXPECT_TRUE(contains(rows[1], ",12.5,12,0.5,1024,0,0,")) << rows[1];
  const auto md = lines_of(tiergen::cli::format_bench_record(record, "md"));
  ASSERT_EQ(md.size(), 3u);
  EXPECT_EQ(md[0].rfind("| model | device |", 0), 0u) << md[0];
  EXPECT_EQ(std::count(md[1].begin(), md[1].end(), '|'), static_cast<long>(tiergen::cli::kBenchColumns.size()) + 1);
  EXPECT_TRUE(contains(md[2], "\\| y")) << md[2];  // a pipe in a cell is escaped
  EXPECT_EQ(json::parse(tiergen::cli::format_bench_record(record, "json")), record);
}

TEST(ProgressBar, MovesWithEveryTokenAndCreditsEarlyEnds) {
  using tiergen::cli::ProgressBar;
  std::FILE* sink = std::tmpfile();
  ASSERT_NE(sink, nullptr);
  tiergen::cli::ProgressOptions options;
  options.sink = sink;
  options.min_interval = std::chrono::milliseconds(0);  // draw every change
  {
    // Two prompts of 4 tokens budget each.
    ProgressBar bar(2, 8, true, options);
    EXPECT_EQ(bar.draws(), 1);  // 0/2 at once
    for (int t = 0; t < 3; ++t) bar.add_token();
    EXPECT_EQ(bar.draws(), 4);  // one draw per token, inside the block
    EXPECT_EQ(bar.state().budget_done, 3);
    bar.end_sequence(3, 4);  // ended one token early (EOS): its last token is credited
    EXPECT_EQ(bar.state().budget_done, 4);
    EXPECT_EQ(bar.state().tokens, 3);
    bar.end_item();
    for (int t = 0; t < 4; ++t) bar.add_token();
    bar.end_sequence(4, 4);
    bar.end_item();
    EXPECT_EQ(bar.state().budget_done, 8);
    bar.finish();
  }
  std::rewind(sink);
  std::string drawn;
  for (int c; (c = std::fgetc(sink)) != EOF;) drawn += static_cast<char>(c);
  std::fclose(sink);
  EXPECT_TRUE(contains(drawn, "] 0/2 prompts  3 tokens")) << drawn;  // mid-block: prompts 0, tokens 3
  EXPECT_TRUE(contains(drawn, "] 2/2 prompts  7 tokens")) << drawn;
  EXPECT_EQ(drawn.back(), '\n');
  // The bar fills by token budget.
  tiergen::cli::ProgressState half{0, 2, 4, 8, 4};
  EXPECT_EQ(ProgressBar::render(half, 10.0, "prompts", 8),
            "[####....] 0/2 prompts  4 tokens  0.4 tok/s  elapsed 10s  ETA 10s");
  tiergen::cli::ProgressState runs{2, 4, 0, 0, 0};  // no budget: by items
  EXPECT_EQ(ProgressBar::render(runs, 0.0, "runs", 4), "[##..] 2/4 runs  0 tokens  0.0 tok/s  elapsed 0s  ETA ?");
  // Disabled: draws nothing.
  ProgressBar quiet(2, 8, false, options);
  quiet.add_token();
  EXPECT_EQ(quiet.draws(), 0);
}

TEST(ProgressBar, LogLinesGoAboveTheBar) {
  using tiergen::cli::ProgressBar;
  std::FILE* screen = std::tmpfile();
  ASSERT_NE(screen, nullptr);
  tiergen::cli::ProgressOptions options;
  options.sink = screen;
  options.min_interval = std::chrono::milliseconds(0);
  std::ostringstream logged;
  auto logger = std::make_shared<spdlog::logger>(
      "bar-test", tiergen::cli::bar_aware_sink(std::make_shared<spdlog::sinks::ostream_sink_mt>(logged)));
  logger->set_pattern("%v");
  {
    ProgressBar bar(1, 2, true, options);
    bar.add_token();
    logger->warn("a log line");  // clears the bar's line, then the bar is drawn again
    EXPECT_EQ(bar.draws(), 3);
    bar.add_token();
    bar.end_item();
  }
  logger->warn("after the bar");  // no bar on screen: nothing cleared or drawn
  std::rewind(screen);
  std::string drawn;
  for (int c; (c = std::fgetc(screen)) != EOF;) drawn += static_cast<char>(c);
  std::fclose(screen);
  EXPECT_EQ(logged.str(), "a log line\nafter the bar\n");
  // The bar's line ends, is cleared for the log line, and is drawn again.
  EXPECT_TRUE(contains(drawn, "\033[K\r\033[K\r[")) << drawn;
  EXPECT_EQ(drawn.back(), '\n');
  EXPECT_EQ(std::count(drawn.begin(), drawn.end(), '\n'), 1);
}

}  // namespace
