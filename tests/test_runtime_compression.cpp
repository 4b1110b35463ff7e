// Generation with group-wise compressed weights and KV cache: placement still never
// changes results, and the error against uncompressed runs is small and reported.
#include <gtest/gtest.h>

#include <array>
#include <iostream>

#include "tests/support/tiny_model.h"
#include "tiergen/runtime/compressed_tensor.h"
#include "tiergen/runtime/placement.h"

namespace tiergen::test {
namespace {

using A = std::array<double, 6>;

runtime::Policy compressed_policy(int64_t gbs, int64_t ngb, const A& percent, bool cpu_attention, int bits) {
  runtime::Policy p = make_policy(gbs, ngb, percent, cpu_attention);
  p.compress_weight = {true, bits, 16};
  p.compress_cache = {true, bits, 16};
  return p;
}

struct TierCase {
  const char* name;
  int64_t gbs, ngb;
  A percent;
  bool cpu_attention;
};

// Every tier each kind of tensor can live on, with attention on both sides.
const TierCase kTierCases[] = {
    {"all_gpu_2x2", 2, 2, {100, 0, 100, 0, 100, 0}, false},
    {"weights_cpu", 2, 2, {0, 100, 100, 0, 100, 0}, false},
    {"weights_disk", 2, 2, {0, 0, 100, 0, 100, 0}, false},
    {"weights_mixed", 1, 3, {30, 40, 100, 0, 100, 0}, false},
    {"cache_cpu", 2, 2, {100, 0, 0, 100, 100, 0}, false},
    {"cache_cpu_cpu_attention", 2, 2, {100, 0, 0, 100, 100, 0}, true},
    {"cache_disk", 2, 2, {100, 0, 0, 0, 100, 0}, false},
    {"cache_disk_cpu_attention", 4, 1, {100, 0, 0, 0, 100, 0}, true},
    {"cache_mixed_cpu_attention", 2, 2, {100, 0, 30, 40, 100, 0}, true},
    {"activations_disk", 2, 2, {100, 0, 100, 0, 0, 0}, false},
    {"everything_mixed", 1, 4, {20, 40, 20, 40, 30, 30}, true},
};

class CompressionTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CompressionTest, PlacementNeverChangesCompressedResults) {
  const auto& [arch, bits] = GetParam();
  const TinyModel model = make_tiny_model(arch == "opt" ? tiny_opt(41) : tiny_llama(42));
  const auto requests = greedy_requests(make_prompts({5, 9, 3, 7, 6}, model.spec.vocab_size, 11), {6, 8});
  TempDir offload("offload");
  const runtime::EngineOptions options = cpu_engine_options(offload.path);

  // Also with every worker's stream emulated asynchronously (emulated_stream.h): the
  // dequantization queued behind a load must wait for it.
  const runtime::EngineOptions emulated = [&] {
    runtime::EngineOptions o = options;
    o.device.emulation = emulated_streams(static_cast<uint64_t>(bits));
    return o;
  }();

  std::vector<std::vector<int64_t>> reference;
  for (const auto& c : kTierCases) {
    for (const runtime::EngineOptions* o : {&options, &emulated}) {
      SCOPED_TRACE(std::string(c.name) + (o == &emulated ? " (emulated streams)" : ""));
      const auto tokens = engine_tokens(model.spec, *model.weights,
                                        compressed_policy(c.gbs, c.ngb, c.percent, c.cpu_attention, bits), *o, requests);
      if (reference.empty()) reference = tokens;
      EXPECT_EQ(tokens, reference);
      EXPECT_TRUE(files_in(offload.path).empty());
    }
  }

  // Agreement with the uncompressed run, reported (greedy chains diverge after the
  // first differing token, so it is counted per position up to the first mismatch).
  runtime::Policy dense = compressed_policy(2, 2, {100, 0, 100, 0, 100, 0}, false, bits);
  dense.compress_weight.enabled = dense.compress_cache.enabled = false;
  const auto uncompressed = engine_tokens(model.spec, *model.weights, dense, options, requests);
  int64_t agree = 0, total = 0;
  for (size_t r = 0; r < uncompressed.size(); ++r) {
    total += static_cast<int64_t>(uncompressed[r].size());
    for (size_t t = 0; t < uncompressed[r].size() && reference[r][t] == uncompressed[r][t]; ++t) ++agree;
  }
  std::cout << "[ compression ] " << arch << " " << bits << "-bit: greedy prefix agreement with uncompressed "
            << agree << " of " << total << " tokens\n";
  if (bits == 8) EXPECT_GT(agree * 2, total);
}

// Logits of a full forward with weights passed through quantize/dequantize, against
// the dense weights: the relative error each format costs.
TEST_P(CompressionTest, QuantizedWeightLogitsStayClose) {
  const auto& [arch, bits] = GetParam();
  const TinyModel model = make_tiny_model(arch == "opt" ? tiny_opt(41) : tiny_llama(42));
  const auto dense = load_all_layers(model.spec, *model.weights);
  auto quantized = load_all_layers(model.spec, *model.weights);
  const runtime::CompressionConfig config{true, bits, 16};
  const auto weight_layers = model.spec.weight_layers();
  for (size_t l = 0; l < weight_layers.size(); ++l) {
    for (const auto& t : weight_layers[l].tensors) {
      if (!runtime::weight_is_compressed(weight_layers[l], t, config)) continue;
      const at::Tensor w = model.weights->read(t, at::kFloat);
      quantized[l].set(t.name, runtime::decompress(runtime::compress(w.t().contiguous(), config), at::kFloat).t());
    }
  }
  const auto prompts = make_prompts({8, 5}, model.spec.vocab_size, 3);
  auto [ids, step] = left_padded(prompts);
  const at::Tensor a = full_logits(model.spec, dense, ids, step);
  const at::Tensor b = full_logits(model.spec, quantized, ids, step);
  const double error = relative_error(b, a);
  std::cout << "[ compression ] " << arch << " " << bits << "-bit weights: logits relative error " << error << "\n";
  EXPECT_GT(error, 0.0);  // the weights really were quantized
  EXPECT_LT(error, bits == 8 ? 0.02 : 0.3);
}

INSTANTIATE_TEST_SUITE_P(Formats, CompressionTest,
                         ::testing::Combine(::testing::Values("opt", "llama"), ::testing::Values(4, 8)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "bit";
                         });

}  // namespace
}  // namespace tiergen::test
