// The engine against Hugging Face transformers itself: tests/fixtures/golden holds
// small random OPT and LLaMA checkpoints that transformers built and saved
// (tools/make-golden.py), with transformers' fp32 logits at every greedy step and its
// greedy tokens. Checked on the CPU, and on a CUDA device where the build and machine
// have one (fp32 exactly as on the CPU; fp16 agreement reported).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tests/support/cli_fixture.h"
#include "tests/support/npy.h"
#include "tests/support/tiny_model.h"
#include "tiergen/model/weight_source.h"
#include "tiergen/runtime/device.h"

namespace tiergen::test {
namespace {

const fs::path kGoldenDir = fs::path(TIERGEN_TEST_FIXTURES) / "golden";

struct GoldenCase {
  std::string name;
  fs::path dir;
  nlohmann::json record;  // golden.json
  model::Spec spec;
  std::unique_ptr<model::WeightSource> weights;
  at::Tensor logits;  // [prompts, steps, vocab] transformers' fp32 CPU logits

  std::vector<std::vector<int64_t>> prompts() const { return record.at("prompts"); }
  std::vector<std::vector<int64_t>> tokens(const std::string& key) const { return record.at(key); }
  int64_t steps() const { return record.at("steps"); }
};

std::vector<std::string> golden_case_names() {
  std::vector<std::string> names;
  if (!fs::exists(kGoldenDir)) return names;
  for (const auto& entry : fs::directory_iterator(kGoldenDir)) {
    if (fs::exists(entry.path() / "golden.json")) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

GoldenCase load_case(const std::string& name) {
  GoldenCase c;
  c.name = name;
  c.dir = kGoldenDir / name;
  std::ifstream in(c.dir / "golden.json");
  c.record = nlohmann::json::parse(in);
  c.spec = model::spec_from_config_file((c.dir / "config.json").string());
  c.weights = model::open_checkpoint_weights(c.dir.string(), c.spec);
  c.logits = read_npy_float32((c.dir / "logits_fp32.npy").string());
  return c;
}

std::vector<std::string> devices() {
  std::vector<std::string> d{"cpu"};
  if (runtime::cuda_available()) d.push_back("cuda");
  return d;
}

// Logits [steps, vocab] at the positions where transformers chose each greedy token:
// one full forward over the prompt followed by transformers' own tokens.
at::Tensor step_logits(const GoldenCase& c, const std::vector<model::LayerWeights>& layers, const at::Device& device,
                       const std::vector<int64_t>& prompt, const std::vector<int64_t>& tokens) {
  std::vector<int64_t> sequence = prompt;
  sequence.insert(sequence.end(), tokens.begin(), tokens.end() - 1);
  auto [ids, step] = left_padded({sequence});
  step.pad = step.pad.to(device);
  step.positions = step.positions.to(device);
  const at::Tensor all = full_logits(c.spec, layers, ids.to(device), step)[0].to(at::kCPU);
  return all.narrow(0, static_cast<int64_t>(prompt.size()) - 1, c.steps());
}

runtime::EngineOptions engine_options(const std::string& device, const std::string& dtype, const std::string& offload) {
  runtime::EngineOptions o = cpu_engine_options(offload, 1ull << 30, dtype);
  o.device = runtime::make_device_context(device, dtype, device != "cpu");
  return o;
}

std::vector<runtime::SequenceRequest> golden_requests(const GoldenCase& c) {
  auto requests = greedy_requests(c.prompts(), {c.steps()});
  for (auto& r : requests) r.ignore_eos = true;  // transformers' loop never stopped
  return requests;
}

// Placements the tokens are checked over: everything on the compute device; weights
// and cache offloaded with attention where the cache lives (CPU).
std::vector<std::pair<std::string, runtime::Policy>> golden_policies() {
  return {{"all on the compute device", make_policy(2, 2, {100, 0, 100, 0, 100, 0}, false)},
          {"weights cpu/disk, cache cpu, cpu attention", make_policy(2, 2, {0, 50, 0, 100, 100, 0}, true)},
          {"weights disk, cache disk, activations cpu", make_policy(3, 1, {0, 0, 0, 0, 0, 100}, false)},
          {"weights cpu/disk multiplied where they live", with_cpu_weight_compute(
               make_policy(2, 2, {0, 50, 100, 0, 100, 0}, false), true, true)}};
}

double agreement(const std::vector<std::vector<int64_t>>& got, const std::vector<std::vector<int64_t>>& want) {
  size_t same = 0, total = 0;
  for (size_t r = 0; r < want.size(); ++r) {
    for (size_t t = 0; t < want[r].size(); ++t) same += t < got[r].size() && got[r][t] == want[r][t];
    total += want[r].size();
  }
  return total == 0 ? 0.0 : static_cast<double>(same) / static_cast<double>(total);
}

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { golden_ = load_case(GetParam()); }
  GoldenCase golden_;
};

TEST(GoldenFixtures, EveryCaseOfTheGeneratorIsCommitted) {
  EXPECT_EQ(golden_case_names(), (std::vector<std::string>{"llama3_rope_tied", "llama_gqa_untied", "opt_post_ln_projection",
                                                            "opt_pre_ln"}));
}

TEST_P(GoldenTest, FixtureIsConsistent) {
  const auto prompts = golden_.prompts();
  ASSERT_EQ(golden_.logits.dim(), 3);
  EXPECT_EQ(golden_.logits.size(0), static_cast<int64_t>(prompts.size()));
  EXPECT_EQ(golden_.logits.size(1), golden_.steps());
  EXPECT_EQ(golden_.logits.size(2), golden_.spec.vocab_size);
  // The recorded tokens are the argmax of the recorded logits: the two files agree.
  const auto tokens = golden_.tokens("tokens_fp32_cpu");
  for (size_t r = 0; r < prompts.size(); ++r) {
    const at::Tensor best = golden_.logits[static_cast<int64_t>(r)].argmax(-1);
    for (int64_t s = 0; s < golden_.steps(); ++s) EXPECT_EQ(best[s].item<int64_t>(), tokens[r][s]) << "prompt " << r;
  }
}

TEST_P(GoldenTest, Fp32LogitsMatchTransformers) {
  const auto prompts = golden_.prompts();
  const auto tokens = golden_.tokens("tokens_fp32_cpu");
  for (const auto& device_name : devices()) {
    const at::Device device(device_name);
    const auto layers = load_all_layers(golden_.spec, *golden_.weights, at::kFloat, device);
    for (size_t r = 0; r < prompts.size(); ++r) {
      const at::Tensor engine = step_logits(golden_, layers, device, prompts[r], tokens[r]);
      const at::Tensor expected = golden_.logits[static_cast<int64_t>(r)];
      for (int64_t s = 0; s < golden_.steps(); ++s) {
        EXPECT_LT(relative_error(engine[s], expected[s]), 1e-4)
            << device_name << ", prompt " << r << " (length " << prompts[r].size() << "), step " << s;
      }
    }
  }
}

TEST_P(GoldenTest, Fp32GreedyTokensMatchTransformersOverPlacements) {
  const auto want = golden_.tokens("tokens_fp32_cpu");
  for (const auto& device : devices()) {
    for (const auto& [placement, policy] : golden_policies()) {
      TempDir offload("golden-offload");
      const auto got = engine_tokens(golden_.spec, *golden_.weights, policy,
                                     engine_options(device, "float32", offload.path), golden_requests(golden_));
      EXPECT_EQ(got, want) << device << ", " << placement;
    }
  }
}

// transformers' own fp32 run on the GPU, where the fixture recorded one, chose the
// same tokens as on the CPU: the fixture's reference is not a CPU artefact.
TEST_P(GoldenTest, TransformersGpuFp32AgreedWithItsCpuRun) {
  if (!golden_.record.contains("tokens_fp32_cuda")) GTEST_SKIP() << "fixture made without a GPU";
  EXPECT_EQ(golden_.tokens("tokens_fp32_cuda"), golden_.tokens("tokens_fp32_cpu"));
  EXPECT_LT(golden_.record.at("fp32_cuda_logit_relative_error").get<double>(), 1e-4);
}

// fp16 on the GPU is not exact: the test reports the engine's and transformers' fp16
// agreement with the fp32 tokens, and holds the engine to transformers' own rate.
TEST_P(GoldenTest, CudaFp16AgreementIsReported) {
  if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
  TempDir offload("golden-offload");
  const auto want = golden_.tokens("tokens_fp32_cpu");
  const auto got = engine_tokens(golden_.spec, *golden_.weights, golden_policies()[0].second,
                                 engine_options("cuda", "float16", offload.path), golden_requests(golden_));
  const double engine_rate = agreement(got, want);
  const double hf_rate =
      golden_.record.contains("tokens_fp16_cuda") ? agreement(golden_.tokens("tokens_fp16_cuda"), want) : -1.0;
  std::cout << "[golden] " << golden_.name << ": fp16 greedy agreement with fp32, engine " << engine_rate
            << ", transformers " << hf_rate << "\n";
  RecordProperty("engine_fp16_agreement", std::to_string(engine_rate));
  RecordProperty("transformers_fp16_agreement", std::to_string(hf_rate));
  // Every prompt's first token has a clear margin in these models.
  for (size_t r = 0; r < want.size(); ++r) EXPECT_EQ(got[r].at(0), want[r].at(0)) << "prompt " << r;
  if (hf_rate >= 0) EXPECT_GE(engine_rate, hf_rate - 0.25);
}

// End to end through `tiergen generate` with its defaults (--dtype auto computes in
// float32 on the CPU): the checkpoint directory as transformers 5 saved it loads, and
// the tokens are transformers'.
TEST_P(GoldenTest, CliGenerateWithDefaultsGivesTransformersTokens) {
  TempDir dir("golden-cli");
  std::string prompts;
  for (const auto& p : golden_.prompts()) prompts += nlohmann::json{{"prompt_token_ids", p}}.dump() + "\n";
  const std::string in = dir.write("prompts.jsonl", prompts), out = dir.file("out.jsonl");
  Child run({kTiergen, "generate", "-m", golden_.dir.string(), "-p", in, "-o", out, "-n", std::to_string(golden_.steps()),
             "--ignore-eos", "--device", "cpu", "-q"},
            dir.path);
  const Exit e = run.wait();
  ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  std::ifstream results(out);
  std::vector<std::vector<int64_t>> got;
  for (std::string line; std::getline(results, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains("token_ids")) got.push_back(record.at("token_ids").get<std::vector<int64_t>>());
  }
  EXPECT_EQ(got, golden_.tokens("tokens_fp32_cpu"));
}

INSTANTIATE_TEST_SUITE_P(Transformers, GoldenTest, ::testing::ValuesIn(golden_case_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tiergen::test
