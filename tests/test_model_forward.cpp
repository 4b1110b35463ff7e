// Forward math invariants: incremental decoding with a KV cache equals a full forward,
// and a prompt alone equals the same prompt inside a left-padded batch; both through
// the model::forward.h functions and through the Engine.
#include <gtest/gtest.h>

#include "tests/support/tiny_model.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::test {
namespace {

constexpr double kTolerance = 1e-4;

struct FamilyCase {
  std::string name;
  TinyModelOptions options;
};

void PrintTo(const FamilyCase& c, std::ostream* os) { *os << c.name; }

std::vector<FamilyCase> family_cases() {
  TinyModelOptions llama3 = tiny_llama(5);
  llama3.llama3_rope = true;
  llama3.kv_heads = 1;  // multi-query: every query head shares one kv head
  TinyModelOptions opt350 = tiny_opt(6);
  opt350.opt_post_layer_norm = true;
  opt350.opt_word_embed_proj_dim = 16;
  return {{"opt", tiny_opt(1)}, {"llama_gqa", tiny_llama(2)}, {"llama3_mqa", llama3}, {"opt_post_ln_proj", opt350}};
}

class ForwardTest : public ::testing::TestWithParam<FamilyCase> {
 protected:
  static void SetUpTestSuite() { at::manual_seed(0); }
  void SetUp() override {
    model_ = make_tiny_model(GetParam().options);
    layers_ = load_all_layers(model_.spec, *model_.weights);
  }
  TinyModel model_;
  std::vector<model::LayerWeights> layers_;
};

// Prefill of a left-padded batch, then one token per step with the cache kept by
// concatenation, against full forwards of the padded batch and of each sequence alone.
TEST_P(ForwardTest, IncrementalDecodingEqualsFullForward) {
  const model::Spec& spec = model_.spec;
  const auto prompts = make_prompts({5, 9, 2}, spec.vocab_size);
  const auto continuation = make_prompts({6, 6, 6}, spec.vocab_size, 11);
  const int64_t steps = 6;
  auto [ids, prefill] = left_padded(prompts);
  const int64_t b = ids.size(0), S = ids.size(1);

  // Full forward over prompt + continuation of the padded batch.
  at::Tensor full_ids = at::cat({ids, at::zeros({b, steps}, at::kLong)}, 1);
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t i = 0; i < steps; ++i) full_ids[r][S + i] = continuation[static_cast<size_t>(r)][static_cast<size_t>(i)];
  }
  model::StepInputs full_step;
  full_step.pad = prefill.pad;
  full_step.positions = at::clamp_min(at::arange(S + steps, at::kLong).unsqueeze(0) - prefill.pad.unsqueeze(1), 0);
  const at::Tensor reference = full_logits(spec, layers_, full_ids, full_step);  // [b, S+steps, vocab]

  // Prefill with the cache.
  std::vector<at::Tensor> keys(static_cast<size_t>(spec.num_layers)), values(keys.size());
  at::Tensor hidden = model::embed(spec, layers_[0], ids, prefill);
  for (int64_t l = 1; l <= spec.num_layers; ++l) {
    const auto& w = layers_[static_cast<size_t>(l)];
    const auto qkv = model::project_qkv(spec, w, hidden, prefill);
    ASSERT_EQ(qkv.k.size(1), spec.num_kv_heads);
    ASSERT_EQ(qkv.q.size(1), spec.num_heads);
    keys[static_cast<size_t>(l - 1)] = qkv.k;
    values[static_cast<size_t>(l - 1)] = qkv.v;
    hidden = model::finish_layer(spec, w, hidden, model::attend(qkv.q, qkv.k, qkv.v, prefill));
  }
  at::Tensor logits = model::head_logits(spec, layers_.back(), hidden);
  EXPECT_LT(relative_error(logits, reference.select(1, S - 1)), kTolerance);

  // Decode, one token per step.
  for (int64_t i = 0; i < steps; ++i) {
    model::StepInputs step;
    step.pad = prefill.pad;
    step.past_len = S + i;
    step.positions = (step.past_len - prefill.pad).unsqueeze(1);
    const at::Tensor next = full_ids.narrow(1, S + i, 1);
    hidden = model::embed(spec, layers_[0], next, step);
    for (int64_t l = 1; l <= spec.num_layers; ++l) {
      const auto& w = layers_[static_cast<size_t>(l)];
      const auto qkv = model::project_qkv(spec, w, hidden, step);
      auto& k = keys[static_cast<size_t>(l - 1)];
      auto& v = values[static_cast<size_t>(l - 1)];
      k = at::cat({k, qkv.k}, 2);
      v = at::cat({v, qkv.v}, 2);
      hidden = model::finish_layer(spec, w, hidden, model::attend(qkv.q, k, v, step));
    }
    logits = model::head_logits(spec, layers_.back(), hidden);
    EXPECT_LT(relative_error(logits, reference.select(1, S + i)), kTolerance) << "decode step " << i;
    // And against each sequence run alone, unpadded.
    for (int64_t r = 0; r < b; ++r) {
      std::vector<int64_t> alone = prompts[static_cast<size_t>(r)];
      for (int64_t t = 0; t <= i; ++t) alone.push_back(continuation[static_cast<size_t>(r)][static_cast<size_t>(t)]);
      EXPECT_LT(relative_error(logits[r], last_logits(spec, layers_, alone)), kTolerance)
          << "sequence " << r << " decode step " << i;
    }
  }
}

TEST_P(ForwardTest, PromptAloneEqualsInsideLeftPaddedBatch) {
  const model::Spec& spec = model_.spec;
  const auto prompts = make_prompts({7, 1, 12, 4}, spec.vocab_size, 3);
  auto [ids, step] = left_padded(prompts);
  const at::Tensor batch = full_logits(spec, layers_, ids, step);
  const int64_t S = ids.size(1);
  for (size_t r = 0; r < prompts.size(); ++r) {
    auto [alone_ids, alone_step] = left_padded({prompts[r]});
    const at::Tensor alone = full_logits(spec, layers_, alone_ids, alone_step)[0];  // [n, vocab]
    const int64_t n = alone.size(0);
    // Every real position, not just the last.
    EXPECT_LT(relative_error(batch[static_cast<int64_t>(r)].narrow(0, S - n, n), alone), kTolerance) << "prompt " << r;
  }
}

TEST_P(ForwardTest, EngineGreedyTokensEqualFullForwardArgmaxChain) {
  const model::Spec& spec = model_.spec;
  TempDir offload("offload");
  const auto prompts = make_prompts({5, 9, 2, 7, 3}, spec.vocab_size, 21);
  const auto requests = greedy_requests(prompts, {7, 5, 8});
  runtime::Policy policy;
  policy.gpu_batch_size = 2;
  policy.num_gpu_batches = 2;
  const auto tokens = engine_tokens(spec, *model_.weights, policy, cpu_engine_options(offload.path), requests);
  ASSERT_EQ(tokens.size(), prompts.size());
  for (size_t r = 0; r < prompts.size(); ++r) {
    EXPECT_EQ(tokens[r], greedy_reference(spec, layers_, prompts[r], requests[r].max_new_tokens)) << "prompt " << r;
  }
}

TEST_P(ForwardTest, EnginePromptAloneEqualsInsideLeftPaddedBatch) {
  const model::Spec& spec = model_.spec;
  TempDir offload("offload");
  const auto prompts = make_prompts({3, 11, 1, 6}, spec.vocab_size, 8);
  const auto requests = greedy_requests(prompts, {6});
  runtime::Policy batched;
  batched.gpu_batch_size = 4;
  const auto together = engine_tokens(spec, *model_.weights, batched, cpu_engine_options(offload.path), requests);
  runtime::Policy single;
  single.gpu_batch_size = 1;
  for (size_t r = 0; r < prompts.size(); ++r) {
    auto one = greedy_requests({prompts[r]}, {6});
    one[0].index = static_cast<int64_t>(r);
    const auto alone = engine_tokens(spec, *model_.weights, single, cpu_engine_options(offload.path), one);
    EXPECT_EQ(alone[0], together[r]) << "prompt " << r;
    EXPECT_EQ(alone[0].size(), 6u);
  }
}

// A decode step's shared tables (model::prepare_step, built once for every layer)
// give each layer the projections it computes with tables of its own, in fp32 and bf16.
TEST_P(ForwardTest, StepTablesPreparedOnceEqualEachLayersOwn) {
  const auto prompts = make_prompts({5, 3}, model_.spec.vocab_size, 9);
  auto [ids, step] = left_padded(prompts);
  step.positions = step.positions.narrow(1, step.positions.size(1) - 1, 1);  // one new token each
  step.past_len = ids.size(1) - 1;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    model::StepInputs prepared = step;
    model::prepare_step(model_.spec, prepared, at::kCPU, dtype);
    EXPECT_EQ(prepared.rope.cos.defined(), model_.spec.family == model::Family::Llama);
    const at::Tensor hidden = at::randn({2, 1, model_.spec.hidden_size}).to(dtype);
    const auto layers = load_all_layers(model_.spec, *model_.weights, dtype);
    for (size_t layer = 1; layer + 1 < layers.size(); ++layer) {
      const model::LayerWeights& w = layers[layer];
      const model::QkvProjection own = model::project_qkv(model_.spec, w, hidden, step);
      const model::QkvProjection shared = model::project_qkv(model_.spec, w, hidden, prepared);
      EXPECT_TRUE(at::equal(own.q, shared.q)) << "layer " << layer;
      EXPECT_TRUE(at::equal(own.k, shared.k)) << "layer " << layer;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ForwardTest, ::testing::ValuesIn(family_cases()),
                         [](const auto& info) { return info.param.name; });

// A sequence that samples an eos token stops there with finish reason "stop"; the
// others in its batch run to their length.
TEST(EngineStop, SequenceStopsAtEosAndOthersContinue) {
  TinyModel m = make_tiny_model(tiny_llama(3));
  const auto layers = load_all_layers(m.spec, *m.weights);
  const auto prompts = make_prompts({4, 6}, m.spec.vocab_size, 5);
  const auto expected0 = greedy_reference(m.spec, layers, prompts[0], 6);
  const auto expected1 = greedy_reference(m.spec, layers, prompts[1], 6);
  // The third token of sequence 0 becomes the eos (unless it occurs earlier).
  const int64_t eos = expected0[2];
  model::Spec spec = m.spec;
  spec.eos_token_id = eos;
  spec.eos_token_ids = {eos};
  TempDir offload("offload");
  runtime::Policy policy;
  policy.gpu_batch_size = 2;
  const auto requests = greedy_requests(prompts, {6});
  runtime::Engine engine(spec, *m.weights, policy, cpu_engine_options(offload.path), workload_of(requests));
  const auto results = engine.generate(requests);
  auto cut = [&](const std::vector<int64_t>& tokens) {
    std::vector<int64_t> out;
    for (int64_t t : tokens) {
      out.push_back(t);
      if (t == eos) break;
    }
    return out;
  };
  EXPECT_EQ(results[0].tokens, cut(expected0));
  EXPECT_EQ(results[0].finish_reason, "stop");
  EXPECT_EQ(results[1].tokens, cut(expected1));
  EXPECT_EQ(results[1].finish_reason, cut(expected1).size() < 6 ? "stop" : "length");
}

}  // namespace
}  // namespace tiergen::test
