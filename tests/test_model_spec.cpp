// model::Spec from Hugging Face config.json texts and from the built-in presets.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <cctype>
#include <fstream>
#include <optional>
#include <ostream>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "tests/support/tiny_model.h"
#include "tiergen/common/error.h"
#include "tiergen/model/presets.h"
#include "tiergen/model/spec.h"

namespace tiergen::model {
namespace {

using nlohmann::json;

// ---- Real config.json files, verbatim from the Hugging Face Hub.

constexpr const char* kOpt125m = R"({
  "_name_or_path": "facebook/opt-125m",
  "_remove_final_layer_norm": false,
  "activation_dropout": 0.0,
  "activation_function": "relu",
  "architectures": [
    "OPTForCausalLM"
  ],
  "attention_dropout": 0.0,
  "bos_token_id": 2,
  "do_layer_norm_before": true,
  "dropout": 0.1,
  "eos_token_id": 2,
  "ffn_dim": 3072,
  "hidden_size": 768,
  "init_std": 0.02,
  "layerdrop": 0.0,
  "max_position_embeddings": 2048,
  "model_type": "opt",
  "num_attention_heads": 12,
  "num_hidden_layers": 12,
  "pad_token_id": 1,
  "prefix": "</s>",
  "torch_dtype": "float16",
  "transformers_version": "4.21.0.dev0",
  "use_cache": true,
  "vocab_size": 50272,
  "word_embed_proj_dim": 768
})";

constexpr const char* kOpt350m = R"({
  "_name_or_path": "facebook/opt-350m",
  "activation_dropout": 0.0,
  "activation_function": "relu",
  "architectures": [
    "OPTForCausalLM"
  ],
  "attention_dropout": 0.0,
  "bos_token_id": 2,
  "do_layer_norm_before": false,
  "dropout": 0.1,
  "eos_token_id": 2,
  "ffn_dim": 4096,
  "hidden_size": 1024,
  "init_std": 0.02,
  "layerdrop": 0.0,
  "max_position_embeddings": 2048,
  "model_type": "opt",
  "num_attention_heads": 16,
  "num_hidden_layers": 24,
  "pad_token_id": 1,
  "prefix": "</s>",
  "torch_dtype": "float16",
  "transformers_version": "4.20.0.dev0",
  "use_cache": true,
  "vocab_size": 50272,
  "word_embed_proj_dim": 512
})";

constexpr const char* kLlama2_7b = R"({
  "_name_or_path": "meta-llama/Llama-2-7b-hf",
  "architectures": [
    "LlamaForCausalLM"
  ],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 11008,
  "max_position_embeddings": 4096,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.31.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

constexpr const char* kLlama3_8b = R"({
  "architectures": [
    "LlamaForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 8192,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

constexpr const char* kLlama31_8b = R"({
  "architectures": [
    "LlamaForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// meta-llama/Llama-3.1-8B-Instruct: the same model with three stop tokens.
constexpr const char* kLlama31_8bInstruct = R"({
  "architectures": [
    "LlamaForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [
    128001,
    128008,
    128009
  ],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.42.3",
  "use_cache": true,
  "vocab_size": 128256
})";

Spec parse(const char* text) { return spec_from_config(json::parse(text), "test config"); }

std::optional<TensorSpec> find_tensor(const Spec& spec, const std::string& name) {
  for (const auto& layer : spec.weight_layers()) {
    for (const auto& t : layer.tensors) {
      if (t.name == name) return t;
    }
  }
  return std::nullopt;
}

// The parameters a checkpoint stores: a tied head is the embedding, counted once.
int64_t stored_params(const Spec& spec) {
  int64_t n = 0;
  for (const auto& layer : spec.weight_layers()) {
    for (const auto& t : layer.tensors) {
      if (t.source_name == t.name) n += t.numel();
    }
  }
  return n;
}

TEST(ModelSpecConfig, Opt125m) {
  const Spec s = parse(kOpt125m);
  EXPECT_EQ(s.family, Family::Opt);
  EXPECT_EQ(s.hf_id, "facebook/opt-125m");
  EXPECT_EQ(s.hidden_size, 768);
  EXPECT_EQ(s.intermediate_size, 3072);
  EXPECT_EQ(s.num_layers, 12);
  EXPECT_EQ(s.num_heads, 12);
  EXPECT_EQ(s.num_kv_heads, 12);
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_EQ(s.vocab_size, 50272);
  EXPECT_EQ(s.max_positions, 2048);
  EXPECT_EQ(s.word_embed_proj_dim, 768);
  EXPECT_FALSE(s.has_projection());
  EXPECT_TRUE(s.pre_layer_norm);
  EXPECT_EQ(s.activation, "relu");
  EXPECT_TRUE(s.tie_word_embeddings);
  EXPECT_TRUE(s.attention_bias);
  EXPECT_EQ(s.bos_token_id, 2);
  EXPECT_EQ(s.eos_token_id, 2);
  EXPECT_EQ(s.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(s.pad_token_id, 1);
  EXPECT_EQ(s.num_weight_layers(), 14);
  // Learned positions carry OPT's offset of 2.
  const std::optional<TensorSpec> positions = find_tensor(s, "model.decoder.embed_positions.weight");
  ASSERT_TRUE(positions.has_value());
  EXPECT_EQ(positions->shape, (std::vector<int64_t>{2050, 768}));
  // Tied head reads the embedding.
  const std::optional<TensorSpec> head = find_tensor(s, "lm_head.weight");
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->source_name, "model.decoder.embed_tokens.weight");
  // facebook/opt-125m holds 125,239,296 parameters.
  EXPECT_EQ(stored_params(s), 125239296);
}

TEST(ModelSpecConfig, Opt350mIsPostLayerNormWithProjections) {
  const Spec s = parse(kOpt350m);
  EXPECT_EQ(s.hidden_size, 1024);
  EXPECT_EQ(s.num_layers, 24);
  EXPECT_EQ(s.num_heads, 16);
  EXPECT_EQ(s.word_embed_proj_dim, 512);
  EXPECT_TRUE(s.has_projection());
  EXPECT_FALSE(s.pre_layer_norm);
  const std::optional<TensorSpec> embed = find_tensor(s, "model.decoder.embed_tokens.weight");
  ASSERT_TRUE(embed.has_value());
  EXPECT_EQ(embed->shape, (std::vector<int64_t>{50272, 512}));
  const std::optional<TensorSpec> project_in = find_tensor(s, "model.decoder.project_in.weight");
  ASSERT_TRUE(project_in.has_value());
  EXPECT_EQ(project_in->shape, (std::vector<int64_t>{1024, 512}));
  const std::optional<TensorSpec> project_out = find_tensor(s, "model.decoder.project_out.weight");
  ASSERT_TRUE(project_out.has_value());
  EXPECT_EQ(project_out->shape, (std::vector<int64_t>{512, 1024}));
  const std::optional<TensorSpec> head = find_tensor(s, "lm_head.weight");
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->shape, (std::vector<int64_t>{50272, 512}));
  // Post-LN OPT has no final layer norm.
  EXPECT_FALSE(find_tensor(s, "model.decoder.final_layer_norm.weight").has_value());
  // facebook/opt-350m holds 331,196,416 parameters.
  EXPECT_EQ(stored_params(s), 331196416);
}

TEST(ModelSpecConfig, Llama2_7b) {
  const Spec s = parse(kLlama2_7b);
  EXPECT_EQ(s.family, Family::Llama);
  EXPECT_EQ(s.hidden_size, 4096);
  EXPECT_EQ(s.intermediate_size, 11008);
  EXPECT_EQ(s.num_layers, 32);
  EXPECT_EQ(s.num_heads, 32);
  EXPECT_EQ(s.num_kv_heads, 32);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.vocab_size, 32000);
  EXPECT_EQ(s.max_positions, 4096);
  EXPECT_DOUBLE_EQ(s.norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(s.rope_theta, 10000.0);
  EXPECT_EQ(s.rope_scaling.type, "");  // "rope_scaling": null
  EXPECT_FALSE(s.tie_word_embeddings);
  EXPECT_FALSE(s.attention_bias);
  EXPECT_FALSE(s.mlp_bias);
  EXPECT_EQ(s.activation, "silu");
  EXPECT_EQ(s.bos_token_id, 1);
  EXPECT_EQ(s.eos_token_id, 2);
  EXPECT_EQ(s.hf_id, "meta-llama/Llama-2-7b-hf");
  EXPECT_EQ(find_tensor(s, "lm_head.weight")->source_name, "lm_head.weight");
  EXPECT_EQ(s.total_params(), 6738415616);
}

TEST(ModelSpecConfig, Llama3_8bHasGroupedQueryAttention) {
  const Spec s = parse(kLlama3_8b);
  EXPECT_EQ(s.num_heads, 32);
  EXPECT_EQ(s.num_kv_heads, 8);
  EXPECT_EQ(s.kv_dim(), 1024);
  EXPECT_EQ(s.vocab_size, 128256);
  EXPECT_DOUBLE_EQ(s.rope_theta, 500000.0);
  EXPECT_EQ(s.rope_scaling.type, "");
  EXPECT_EQ(s.torch_dtype, "bfloat16");
  EXPECT_EQ(s.hf_id, "");  // no _name_or_path in this file
  EXPECT_EQ(find_tensor(s, "model.layers.0.self_attn.k_proj.weight")->shape, (std::vector<int64_t>{1024, 4096}));
  EXPECT_EQ(find_tensor(s, "model.layers.0.self_attn.q_proj.weight")->shape, (std::vector<int64_t>{4096, 4096}));
  EXPECT_EQ(s.kv_elements_per_token_per_layer(), 2048);
  EXPECT_EQ(s.total_params(), 8030261248);
}

TEST(ModelSpecConfig, Llama31_8bHasLlama3RopeScaling) {
  const Spec s = parse(kLlama31_8b);
  EXPECT_EQ(s.max_positions, 131072);
  EXPECT_EQ(s.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(s.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(s.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(s.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(s.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(s.eos_token_ids, std::vector<int64_t>{128001});
  EXPECT_EQ(s.total_params(), 8030261248);
}

TEST(ModelSpecConfig, Llama31InstructEosList) {
  const Spec s = parse(kLlama31_8bInstruct);
  EXPECT_EQ(s.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(s.eos_token_id, 128001);
  EXPECT_EQ(s.rope_scaling.type, "llama3");
}

// Special ids outside the vocabulary are kept but said, each naming the id: an eos
// there never stops a sequence.
TEST(ModelSpecConfig, SpecialIdsOutsideTheVocabularyAreWarnedAbout) {
  const auto logged_for = [](const std::function<void(nlohmann::json&)>& edit) {
    auto c = nlohmann::json::parse(kOpt125m);
    edit(c);
    auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
    spdlog::default_logger()->sinks().push_back(sink);
    parse(c.dump().c_str());
    spdlog::default_logger()->sinks().pop_back();
    std::string logged;
    for (const auto& line : sink->last_formatted()) logged += line;
    return logged;
  };
  EXPECT_EQ(logged_for([](nlohmann::json&) {}), "") << "a good config warns";
  EXPECT_EQ(logged_for([](nlohmann::json& c) { c["eos_token_id"] = -1; }), "") << "-1 is the usual 'none'";
  EXPECT_NE(logged_for([](nlohmann::json& c) { c["eos_token_id"] = 99999; }).find(
                "eos_token_id 99999 is outside the vocabulary of 50272: no sequence will stop at it"),
            std::string::npos);
  EXPECT_NE(logged_for([](nlohmann::json& c) { c["eos_token_id"] = nlohmann::json::array({2, -3}); }).find(
                "eos_token_id -3 is outside the vocabulary"),
            std::string::npos);
  EXPECT_NE(logged_for([](nlohmann::json& c) { c["eos_token_id"] = -5; }).find("eos_token_id -5 is negative"),
            std::string::npos);
  EXPECT_NE(logged_for([](nlohmann::json& c) { c["bos_token_id"] = 99999; }).find(
                "bos_token_id 99999 is outside the vocabulary of 50272"),
            std::string::npos);
}

TEST(ModelSpecConfig, ReadsConfigFilesAndModelDirectories) {
  test::TempDir dir("spec-config");
  std::ofstream(dir.path + "/config.json") << kLlama31_8b;
  const Spec from_file = spec_from_config_file(dir.path + "/config.json");
  EXPECT_EQ(from_file.rope_scaling.type, "llama3");
  const Spec from_dir = resolve_spec(dir.path);
  EXPECT_EQ(from_dir.name, dir.path);
  EXPECT_EQ(from_dir.num_kv_heads, 8);
}

// ---- Presets.

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

TEST(ModelSpecPresets, EveryPresetResolvesByNameAndHfIdCaseInsensitively) {
  const auto names = preset_names();
  ASSERT_GE(names.size(), 14u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const auto by_name = find_preset(name);
    ASSERT_TRUE(by_name.has_value());
    EXPECT_EQ(by_name->name, name);
    ASSERT_NE(by_name->hf_id.find('/'), std::string::npos) << "preset without a Hugging Face id";
    for (const std::string& key : {upper(name), by_name->hf_id, upper(by_name->hf_id)}) {
      const auto found = find_preset(key);
      ASSERT_TRUE(found.has_value()) << key;
      EXPECT_EQ(found->name, name) << key;
    }
    EXPECT_EQ(resolve_spec(name).name, name);
    // Sane sizes.
    const Spec& s = *by_name;
    EXPECT_GT(s.vocab_size, 1000);
    EXPECT_EQ(s.head_dim * s.num_heads, s.hidden_size);
    EXPECT_EQ(s.num_heads % s.num_kv_heads, 0);
    EXPECT_GT(s.intermediate_size, s.hidden_size);
    EXPECT_GE(s.max_positions, 2048);
    EXPECT_EQ(s.num_weight_layers(), s.num_layers + 2);
    EXPECT_FALSE(s.eos_token_ids.empty());
    EXPECT_EQ(s.family, name.rfind("opt", 0) == 0 ? Family::Opt : Family::Llama);
  }
  EXPECT_FALSE(find_preset("opt-31b").has_value());
  EXPECT_FALSE(find_preset("").has_value());
}

struct PresetSizes {
  const char* name;
  int64_t hidden, layers, heads, kv_heads, intermediate, vocab;
  double params;  // parameters the published checkpoint holds
};

void PrintTo(const PresetSizes& p, std::ostream* os) { *os << p.name; }

class PresetSizesTest : public ::testing::TestWithParam<PresetSizes> {};

TEST_P(PresetSizesTest, MatchesThePublishedModel) {
  const PresetSizes& e = GetParam();
  const auto s = find_preset(e.name);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->hidden_size, e.hidden);
  EXPECT_EQ(s->num_layers, e.layers);
  EXPECT_EQ(s->num_heads, e.heads);
  EXPECT_EQ(s->num_kv_heads, e.kv_heads);
  EXPECT_EQ(s->intermediate_size, e.intermediate);
  EXPECT_EQ(s->vocab_size, e.vocab);
  EXPECT_NEAR(static_cast<double>(stored_params(*s)) / e.params, 1.0, 0.01) << stored_params(*s);
  if (!s->tie_word_embeddings) EXPECT_EQ(s->total_params(), stored_params(*s));
}

// total_params() is the model's parameter count: a tied LM head is the input
// embedding and is counted once (the placement still gives it a copy of its own).
TEST(ModelSpecPresets, TotalParamsCountsATiedHeadOnce) {
  EXPECT_EQ(parse(kOpt125m).total_params(), 125239296);
  EXPECT_EQ(parse(kOpt350m).total_params(), 331196416);
  const auto opt67 = find_preset("opt-6.7b");
  ASSERT_TRUE(opt67.has_value());
  EXPECT_NEAR(static_cast<double>(opt67->total_params()) / 6.7e9, 1.0, 0.01) << opt67->total_params();
  const auto opt30 = find_preset("opt-30b");
  ASSERT_TRUE(opt30.has_value());
  EXPECT_NEAR(static_cast<double>(opt30->total_params()) / 29.97e9, 1.0, 0.01) << opt30->total_params();
}

INSTANTIATE_TEST_SUITE_P(
    Presets, PresetSizesTest,
    ::testing::Values(PresetSizes{"opt-125m", 768, 12, 12, 12, 3072, 50272, 125.2e6},
                      PresetSizes{"opt-1.3b", 2048, 24, 32, 32, 8192, 50272, 1.316e9},
                      PresetSizes{"opt-2.7b", 2560, 32, 32, 32, 10240, 50272, 2.652e9},
                      PresetSizes{"opt-6.7b", 4096, 32, 32, 32, 16384, 50272, 6.7e9},
                      PresetSizes{"opt-13b", 5120, 40, 40, 40, 20480, 50272, 12.85e9},
                      PresetSizes{"opt-30b", 7168, 48, 56, 56, 28672, 50272, 29.97e9},
                      PresetSizes{"opt-66b", 9216, 64, 72, 72, 36864, 50272, 65.7e9},
                      PresetSizes{"opt-175b", 12288, 96, 96, 96, 49152, 50272, 175e9},
                      PresetSizes{"llama-2-7b", 4096, 32, 32, 32, 11008, 32000, 6.74e9},
                      PresetSizes{"llama-2-13b", 5120, 40, 40, 40, 13824, 32000, 13.02e9},
                      PresetSizes{"llama-2-70b", 8192, 80, 64, 8, 28672, 32000, 68.98e9},
                      PresetSizes{"llama-3-8b", 4096, 32, 32, 8, 14336, 128256, 8.03e9},
                      PresetSizes{"llama-3-70b", 8192, 80, 64, 8, 28672, 128256, 70.55e9},
                      PresetSizes{"llama-3.1-8b", 4096, 32, 32, 8, 14336, 128256, 8.03e9}),
    [](const auto& info) {
      std::string n = info.param.name;
      std::replace(n.begin(), n.end(), '-', '_');
      std::replace(n.begin(), n.end(), '.', '_');
      return n;
    });

TEST(ModelSpecPresets, SpecialCases) {
  const auto opt350 = find_preset("facebook/opt-350m");
  ASSERT_TRUE(opt350.has_value());
  EXPECT_FALSE(opt350->pre_layer_norm);
  EXPECT_EQ(opt350->word_embed_proj_dim, 512);
  const auto l31 = find_preset("meta-llama/llama-3.1-8b");
  ASSERT_TRUE(l31.has_value());
  EXPECT_EQ(l31->rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(l31->rope_scaling.factor, 8.0);
  EXPECT_EQ(find_preset("llama-3-8b")->rope_scaling.type, "");
  EXPECT_DOUBLE_EQ(find_preset("llama-3-8b")->rope_theta, 500000.0);
  EXPECT_EQ(find_preset("llama-2-70b")->num_kv_heads, 8);
  EXPECT_EQ(find_preset("llama-2-7b")->num_kv_heads, 32);
}

TEST(ModelSpecPresets, UnknownModelNamesThePresets) {
  try {
    resolve_spec("no-such-model-xyz");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no-such-model-xyz"), std::string::npos) << msg;
    EXPECT_NE(msg.find("opt-30b"), std::string::npos) << msg;
  }
  test::TempDir empty("spec-empty");
  EXPECT_THROW(resolve_spec(empty.path), Error);  // a directory without config.json
}

// ---- Errors.

void expect_error(const json& config, const std::vector<std::string>& fragments) {
  try {
    spec_from_config(config, "bad/config.json");
    ADD_FAILURE() << "accepted: " << config.dump();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bad/config.json"), std::string::npos) << msg;
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  }
}

TEST(ModelSpecErrors, UnknownArchitecture) {
  json c = json::parse(kOpt125m);
  c["architectures"] = {"GPT2LMHeadModel"};
  c["model_type"] = "gpt2";
  expect_error(c, {"GPT2LMHeadModel", "architecture"});
  json none = json::parse(kLlama2_7b);
  none.erase("architectures");
  none.erase("model_type");
  expect_error(none, {"architecture"});
  // model_type alone is enough when architectures is absent.
  json by_type = json::parse(kLlama2_7b);
  by_type.erase("architectures");
  EXPECT_EQ(spec_from_config(by_type, "x").family, Family::Llama);
}

TEST(ModelSpecErrors, MissingKeys) {
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "ffn_dim",
                          "max_position_embeddings"}) {
    json c = json::parse(kOpt125m);
    c.erase(key);
    expect_error(c, {key});
  }
  for (const char* key : {"hidden_size", "intermediate_size", "num_attention_heads", "vocab_size"}) {
    json c = json::parse(kLlama3_8b);
    c.erase(key);
    expect_error(c, {key});
  }
  json null_value = json::parse(kLlama3_8b);
  null_value["hidden_size"] = nullptr;
  expect_error(null_value, {"hidden_size"});
}

TEST(ModelSpecErrors, WrongTypes) {
  json c = json::parse(kOpt125m);
  c["hidden_size"] = "768";
  expect_error(c, {"hidden_size", "wrong type"});
  c = json::parse(kLlama3_8b);
  c["num_key_value_heads"] = json::array({8});
  expect_error(c, {"num_key_value_heads", "wrong type"});
  c = json::parse(kLlama3_8b);
  c["rope_theta"] = "big";
  expect_error(c, {"rope_theta"});
  c = json::parse(kOpt350m);
  c["do_layer_norm_before"] = "no";
  expect_error(c, {"do_layer_norm_before"});
  c = json::parse(kLlama31_8bInstruct);
  c["eos_token_id"] = json::array({128001, "x"});
  expect_error(c, {"eos_token_id"});
  EXPECT_THROW(spec_from_config(json::array({1, 2}), "bad/config.json"), Error);
}

TEST(ModelSpecErrors, InconsistentShapes) {
  json c = json::parse(kOpt125m);
  c["num_attention_heads"] = 7;  // 768 % 7 != 0
  expect_error(c, {"768", "7", "divisible"});
  c = json::parse(kLlama3_8b);
  c["num_key_value_heads"] = 5;  // 32 % 5 != 0
  expect_error(c, {"num_key_value_heads"});
  c = json::parse(kLlama3_8b);
  c["num_hidden_layers"] = 0;
  expect_error(c, {"positive"});
  c = json::parse(kOpt125m);
  c["vocab_size"] = -3;
  expect_error(c, {"positive"});
  c = json::parse(kLlama2_7b);
  c["hidden_act"] = "tanh";
  expect_error(c, {"tanh"});
  c = json::parse(kLlama31_8b);
  c["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  expect_error(c, {"dynamic"});
  c = json::parse(kLlama31_8b);
  c["rope_scaling"].erase("factor");
  expect_error(c, {"factor"});
}

TEST(ModelSpecErrors, BadConfigFiles) {
  test::TempDir dir("spec-bad");
  std::ofstream(dir.path + "/config.json") << "{\"hidden_size\": 12,";
  try {
    spec_from_config_file(dir.path + "/config.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path + "/config.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(spec_from_config_file(dir.path + "/missing.json"), Error);
}

// transformers 5 writes rope_theta and the scaling fields into one "rope_parameters"
// object and "dtype" for "torch_dtype" (the golden fixtures were saved that way).
TEST(ModelSpecConfig, Transformers5RopeParametersAndDtype) {
  json c = json::parse(kLlama31_8b);
  const json legacy_scaling = c.at("rope_scaling");
  c.erase("rope_scaling");
  c.erase("rope_theta");
  c.erase("torch_dtype");
  c["dtype"] = "bfloat16";
  c["rope_parameters"] = legacy_scaling;
  c["rope_parameters"]["rope_theta"] = 500000.0;
  const Spec s = spec_from_config(c, "v5 config");
  EXPECT_DOUBLE_EQ(s.rope_theta, 500000.0);
  EXPECT_EQ(s.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(s.rope_scaling.factor, 8.0);
  EXPECT_EQ(s.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(s.torch_dtype, "bfloat16");
  EXPECT_EQ(s.total_params(), 8030261248);

  // rope_type "default": plain rotary embeddings with the given theta.
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  const Spec plain = spec_from_config(c, "v5 config");
  EXPECT_DOUBLE_EQ(plain.rope_theta, 1000000.0);
  EXPECT_EQ(plain.rope_scaling.type, "");

  // The legacy form may say "default" too.
  json legacy = json::parse(kLlama2_7b);
  legacy["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(spec_from_config(legacy, "legacy config").rope_scaling.type, "");

  // Any other rope type is refused by name, as in the legacy form.
  c["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0}};
  expect_error(c, {"rope_parameters", "yarn", "not supported"});
}

}  // namespace
}  // namespace tiergen::model
