// The engine's forward math against a naive float64 reference written here from the
// published formulas (OPT: transformers' OPTDecoder; LLaMA: Meta's reference model and
// transformers' LlamaModel), sharing nothing with src/model/ but the checkpoint names.
#include <gtest/gtest.h>

#include <cmath>

#include "src/model/model_internal.h"
#include "tests/support/tiny_model.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::test {
namespace {

using at::Tensor;

// ---- Reference building blocks (float64, one unpadded sequence, rows = positions).

struct Reference {
  TinyModelOptions o;
  std::map<std::string, Tensor> tensors;

  const Tensor w(const std::string& name) const {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw std::runtime_error("reference: no tensor " + name);
    return it->second.to(at::kDouble);
  }
  bool has(const std::string& name) const { return tensors.count(name) > 0; }

  // x [T, in] · W[out, in]^T + b
  Tensor linear(const Tensor& x, const std::string& prefix, bool bias) const {
    Tensor y = at::matmul(x, w(prefix + ".weight").t());
    return bias ? y + w(prefix + ".bias") : y;
  }

  // (x - mean) / sqrt(var + eps) * g + b, biased variance, eps 1e-5 (nn.LayerNorm).
  Tensor layer_norm(const Tensor& x, const std::string& prefix) const {
    const Tensor mean = x.mean(-1, true);
    const Tensor var = (x - mean).pow(2).mean(-1, true);
    return (x - mean) / at::sqrt(var + 1e-5) * w(prefix + ".weight") + w(prefix + ".bias");
  }

  // x / sqrt(mean(x^2) + eps) * g
  Tensor rms_norm(const Tensor& x, const std::string& name) const {
    return x / at::sqrt(x.pow(2).mean(-1, true) + 1e-5) * w(name);
  }

  int64_t head_dim() const { return o.hidden / o.heads; }

  // Rotary frequencies theta^(-2i/d), with Llama 3.1's apply_scaling when configured.
  std::vector<double> rope_frequencies() const {
    const int64_t d = head_dim();
    std::vector<double> freqs;
    for (int64_t i = 0; i < d / 2; ++i) {
      const double f = 1.0 / std::pow(o.rope_theta, static_cast<double>(2 * i) / static_cast<double>(d));
      if (!o.llama3_rope) {
        freqs.push_back(f);
        continue;
      }
      const double scale = 8.0, low = 1.0, high = 4.0;
      const double old_len = static_cast<double>(o.rope_original_max_positions);
      const double low_wavelen = old_len / low, high_wavelen = old_len / high;
      const double wavelen = 2 * M_PI / f;
      if (wavelen < high_wavelen) {
        freqs.push_back(f);
      } else if (wavelen > low_wavelen) {
        freqs.push_back(f / scale);
      } else {
        const double smooth = (old_len / wavelen - low) / (high - low);
        freqs.push_back((1 - smooth) * f / scale + smooth * f);
      }
    }
    return freqs;
  }

  // Rotate-half RoPE (the Hugging Face layout): pairs (i, i + d/2) rotated by pos*f_i.
  Tensor rope(const Tensor& x /* [T, heads, d] */) const {
    const auto freqs = rope_frequencies();
    const int64_t T = x.size(0), heads = x.size(1), d = x.size(2), half = d / 2;
    Tensor out = x.clone();
    auto in = x.accessor<double, 3>();
    auto o_acc = out.accessor<double, 3>();
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < half; ++i) {
          const double angle = static_cast<double>(t) * freqs[static_cast<size_t>(i)];
          const double a = in[t][h][i], b = in[t][h][i + half];
          o_acc[t][h][i] = a * std::cos(angle) - b * std::sin(angle);
          o_acc[t][h][i + half] = b * std::cos(angle) + a * std::sin(angle);
        }
      }
    }
    return out;
  }

  // Causal softmax attention with explicit loops; query head h reads kv head
  // h / (heads / kv_heads). q [T, heads, d], k/v [T, kv_heads, d] -> [T, heads*d].
  static Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v) {
    const int64_t T = q.size(0), heads = q.size(1), d = q.size(2), kv_heads = k.size(1);
    const int64_t group = heads / kv_heads;
    Tensor out = at::zeros({T, heads * d}, at::kDouble);
    auto qa = q.accessor<double, 3>();
    auto ka = k.accessor<double, 3>();
    auto va = v.accessor<double, 3>();
    auto oa = out.accessor<double, 2>();
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kvh = h / group;
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> scores(static_cast<size_t>(i + 1));
        double max_score = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t e = 0; e < d; ++e) s += qa[i][h][e] * ka[j][kvh][e];
          s /= std::sqrt(static_cast<double>(d));
          scores[static_cast<size_t>(j)] = s;
          max_score = std::max(max_score, s);
        }
        double total = 0;
        for (auto& s : scores) total += s = std::exp(s - max_score);
        for (int64_t j = 0; j <= i; ++j) {
          const double p = scores[static_cast<size_t>(j)] / total;
          for (int64_t e = 0; e < d; ++e) oa[i][h * d + e] += p * va[j][kvh][e];
        }
      }
    }
    return out;
  }

  // Logits [T, vocab] at every position of `tokens`.
  Tensor logits(const std::vector<int64_t>& tokens) const {
    return o.arch == "opt" ? opt_logits(tokens) : llama_logits(tokens);
  }

  Tensor embedding_rows(const std::string& name, const std::vector<int64_t>& rows) const {
    const Tensor table = w(name);
    std::vector<Tensor> picked;
    for (int64_t r : rows) picked.push_back(table[r]);
    return at::stack(picked, 0);
  }

  Tensor opt_logits(const std::vector<int64_t>& tokens) const {
    const std::string p = "model.decoder.";
    const int64_t T = static_cast<int64_t>(tokens.size()), heads = o.heads, d = head_dim();
    Tensor x = embedding_rows(p + "embed_tokens.weight", tokens);
    if (has(p + "project_in.weight")) x = at::matmul(x, w(p + "project_in.weight").t());
    std::vector<int64_t> positions;
    for (int64_t t = 0; t < T; ++t) positions.push_back(t + 2);  // OPT's learned-position offset
    x = x + embedding_rows(p + "embed_positions.weight", positions);
    const bool pre = !o.opt_post_layer_norm;
    for (int64_t l = 0; l < o.layers; ++l) {
      const std::string L = p + "layers." + std::to_string(l) + ".";
      const Tensor a_in = pre ? layer_norm(x, L + "self_attn_layer_norm") : x;
      const Tensor q = linear(a_in, L + "self_attn.q_proj", true).view({T, heads, d});
      const Tensor k = linear(a_in, L + "self_attn.k_proj", true).view({T, heads, d});
      const Tensor v = linear(a_in, L + "self_attn.v_proj", true).view({T, heads, d});
      x = x + linear(attention(q.contiguous(), k.contiguous(), v.contiguous()), L + "self_attn.out_proj", true);
      if (!pre) x = layer_norm(x, L + "self_attn_layer_norm");
      const Tensor m_in = pre ? layer_norm(x, L + "final_layer_norm") : x;
      x = x + linear(at::relu(linear(m_in, L + "fc1", true)), L + "fc2", true);
      if (!pre) x = layer_norm(x, L + "final_layer_norm");
    }
    if (pre) x = layer_norm(x, p + "final_layer_norm");
    if (has(p + "project_out.weight")) x = at::matmul(x, w(p + "project_out.weight").t());
    return at::matmul(x, w(p + "embed_tokens.weight").t());  // tied head
  }

  Tensor llama_logits(const std::vector<int64_t>& tokens) const {
    const int64_t T = static_cast<int64_t>(tokens.size()), d = head_dim();
    Tensor x = embedding_rows("model.embed_tokens.weight", tokens);
    for (int64_t l = 0; l < o.layers; ++l) {
      const std::string L = "model.layers." + std::to_string(l) + ".";
      const Tensor a_in = rms_norm(x, L + "input_layernorm.weight");
      const Tensor q = rope(linear(a_in, L + "self_attn.q_proj", false).view({T, o.heads, d}).contiguous());
      const Tensor k = rope(linear(a_in, L + "self_attn.k_proj", false).view({T, o.kv_heads, d}).contiguous());
      const Tensor v = linear(a_in, L + "self_attn.v_proj", false).view({T, o.kv_heads, d}).contiguous();
      x = x + linear(attention(q, k, v), L + "self_attn.o_proj", false);
      const Tensor m_in = rms_norm(x, L + "post_attention_layernorm.weight");
      const Tensor gate = linear(m_in, L + "mlp.gate_proj", false);
      const Tensor silu = gate / (1 + at::exp(-gate));  // SwiGLU: silu(gate) * up
      x = x + linear(silu * linear(m_in, L + "mlp.up_proj", false), L + "mlp.down_proj", false);
    }
    x = rms_norm(x, "model.norm.weight");
    return at::matmul(x, w(o.tie ? "model.embed_tokens.weight" : "lm_head.weight").t());
  }

  std::vector<int64_t> greedy(std::vector<int64_t> sequence, int64_t n) const {
    std::vector<int64_t> out;
    for (int64_t i = 0; i < n; ++i) {
      const Tensor last = logits(sequence)[static_cast<int64_t>(sequence.size()) - 1];
      const int64_t token = last.argmax().item<int64_t>();
      out.push_back(token);
      sequence.push_back(token);
    }
    return out;
  }
};

struct ReferenceCase {
  std::string name;
  TinyModelOptions options;
};

void PrintTo(const ReferenceCase& c, std::ostream* os) { *os << c.name; }

std::vector<ReferenceCase> reference_cases() {
  TinyModelOptions post_ln = tiny_opt(11);
  post_ln.opt_post_layer_norm = true;
  post_ln.opt_word_embed_proj_dim = 16;
  TinyModelOptions llama3 = tiny_llama(13);
  llama3.llama3_rope = true;  // head_dim 8, original context 100: all three frequency bands
  llama3.tie = true;
  llama3.rope_theta = 500000.0;
  TinyModelOptions mha = tiny_llama(14);
  mha.kv_heads = 4;
  return {{"opt_pre_ln", tiny_opt(10)}, {"opt_post_ln_projection", post_ln}, {"llama_gqa", tiny_llama(12)},
          {"llama3_rope_tied", llama3}, {"llama_mha", mha}};
}

class ReferenceTest : public ::testing::TestWithParam<ReferenceCase> {
 protected:
  void SetUp() override {
    model_ = make_tiny_model(GetParam().options);
    reference_ = Reference{GetParam().options, model_.tensors};
  }
  TinyModel model_;
  Reference reference_;
};

TEST_P(ReferenceTest, Fp32LogitsMatchTheNaiveReference) {
  const auto layers = load_all_layers(model_.spec, *model_.weights, at::kFloat);
  // Long enough that rotary positions beyond one wavelength of the fast bands matter.
  for (const auto& prompt : make_prompts({1, 5, 23}, model_.spec.vocab_size, 4)) {
    auto [ids, step] = left_padded({prompt});
    const Tensor engine = full_logits(model_.spec, layers, ids, step)[0];
    const Tensor expected = reference_.logits(prompt);
    ASSERT_EQ(engine.sizes(), expected.sizes());
    EXPECT_LT(relative_error(engine, expected), 1e-4) << "prompt length " << prompt.size();
  }
}

TEST_P(ReferenceTest, EngineGreedyTokensMatchTheNaiveReference) {
  TempDir offload("offload");
  const auto prompts = make_prompts({6, 2, 9}, model_.spec.vocab_size, 17);
  const auto requests = greedy_requests(prompts, {8});
  runtime::Policy policy;
  policy.gpu_batch_size = 2;
  policy.num_gpu_batches = 2;
  const auto tokens = engine_tokens(model_.spec, *model_.weights, policy, cpu_engine_options(offload.path), requests);
  for (size_t r = 0; r < prompts.size(); ++r) {
    EXPECT_EQ(tokens[r], reference_.greedy(prompts[r], 8)) << "prompt " << r;
  }
}

// Scored prompt tokens (echo with logprobs) against the float64 log-softmax of the
// reference's logits at every position.
TEST_P(ReferenceTest, EnginePromptLogprobsMatchTheNaiveReference) {
  TempDir offload("offload");
  const auto prompts = make_prompts({6, 2, 9}, model_.spec.vocab_size, 19);
  auto requests = greedy_requests(prompts, {1});
  for (auto& r : requests) r.prompt_logprobs = 2;
  runtime::Policy policy;
  policy.gpu_batch_size = 3;
  runtime::Engine engine(model_.spec, *model_.weights, policy, cpu_engine_options(offload.path), workload_of(requests));
  const auto results = engine.generate(requests);
  for (size_t r = 0; r < prompts.size(); ++r) {
    const Tensor expected = at::log_softmax(reference_.logits(prompts[r]), 1);
    const auto& scores = results[r].prompt_logprobs;
    ASSERT_EQ(scores.size(), prompts[r].size() - 1);
    for (size_t t = 0; t < scores.size(); ++t) {
      const int64_t token = prompts[r][t + 1];
      const auto position = static_cast<int64_t>(t);
      EXPECT_NEAR(scores[t].logprob, expected[position][token].item<double>(), 1e-4) << "prompt " << r << " token " << t;
      const int64_t best = expected[position].argmax().item<int64_t>();
      EXPECT_NEAR(scores[t].top[0].second, expected[position][best].item<double>(), 1e-4);
    }
  }
}

TEST_P(ReferenceTest, Bf16StaysCloseToTheReference) {
  const auto layers = load_all_layers(model_.spec, *model_.weights, at::kBFloat16);
  const auto prompt = make_prompts({12}, model_.spec.vocab_size, 5)[0];
  auto [ids, step] = left_padded({prompt});
  const Tensor engine = full_logits(model_.spec, layers, ids, step)[0];
  EXPECT_EQ(engine.scalar_type(), at::kFloat);  // logits come back as float32
  const Tensor expected = reference_.logits(prompt);
  const double error = relative_error(engine, expected);
  EXPECT_LT(error, 5e-2);
  EXPECT_GT(error, 1e-6) << "bf16 weights should not reproduce float64 exactly";

  // Through the engine in bf16: the first token agrees wherever fp32's choice is clear.
  TempDir offload("offload");
  const auto prompts = make_prompts({5, 8, 3, 10}, model_.spec.vocab_size, 31);
  runtime::Policy policy;
  policy.gpu_batch_size = 2;
  const auto tokens = engine_tokens(model_.spec, *model_.weights, policy,
                                    cpu_engine_options(offload.path, 1ull << 30, "bfloat16"), greedy_requests(prompts, {3}));
  for (size_t r = 0; r < prompts.size(); ++r) {
    ASSERT_EQ(tokens[r].size(), 3u);
    const Tensor last = reference_.logits(prompts[r])[static_cast<int64_t>(prompts[r].size()) - 1];
    const auto top = at::topk(last, 2);
    const double margin = (std::get<0>(top)[0] - std::get<0>(top)[1]).item<double>();
    const double range = (last.max() - last.min()).item<double>();
    if (margin > 0.1 * range) EXPECT_EQ(tokens[r][0], std::get<1>(top)[0].item<int64_t>()) << "prompt " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ReferenceTest, ::testing::ValuesIn(reference_cases()),
                         [](const auto& info) { return info.param.name; });

// The engine's llama3 frequencies for Llama 3.1 8B against Meta's apply_scaling.
TEST(ModelReferenceRope, Llama3ScalingOfLlama31_8b) {
  model::Spec spec;
  spec.head_dim = 128;
  spec.rope_theta = 500000.0;
  spec.rope_scaling.type = "llama3";
  spec.rope_scaling.factor = 8.0;
  spec.rope_scaling.low_freq_factor = 1.0;
  spec.rope_scaling.high_freq_factor = 4.0;
  spec.rope_scaling.original_max_position_embeddings = 8192;
  const Tensor engine = model::llama::rope_inv_freq(spec);
  ASSERT_EQ(engine.numel(), 64);
  TinyModelOptions o;
  o.hidden = 128;
  o.heads = 1;
  o.rope_theta = 500000.0;
  o.llama3_rope = true;
  o.rope_original_max_positions = 8192;
  const auto expected = Reference{o, {}}.rope_frequencies();
  int kept = 0, scaled = 0, smoothed = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const double f = 1.0 / std::pow(500000.0, 2.0 * static_cast<double>(i) / 128.0);
    const double e = expected[static_cast<size_t>(i)];
    EXPECT_NEAR(engine[i].item<double>(), e, 1e-5 * e) << "frequency " << i;
    if (e == f) ++kept;
    else if (std::abs(e - f / 8.0) < 1e-15) ++scaled;
    else ++smoothed;
  }
  // All three bands occur, so the test covers each branch of the formula.
  EXPECT_GT(kept, 0);
  EXPECT_GT(scaled, 0);
  EXPECT_GT(smoothed, 0);
  // Without scaling: plain theta^(-2i/d).
  spec.rope_scaling.type = "";
  const Tensor plain = model::llama::rope_inv_freq(spec);
  for (int64_t i = 0; i < 64; i += 9) {
    EXPECT_NEAR(plain[i].item<double>(), 1.0 / std::pow(500000.0, 2.0 * static_cast<double>(i) / 128.0), 1e-5 * plain[i].item<double>());
  }
}

}  // namespace
}  // namespace tiergen::test
