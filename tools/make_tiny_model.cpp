// make-tiny-model: writes a small random OPT or LLaMA model in Hugging Face layout
// (config.json, model.safetensors, and the tokenizer files of --tokenizer DIR), for
// the demo, the tests and anyone trying the engine without downloading a checkpoint.
#include <CLI/CLI.hpp>
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tiergen/common/error.h"
#include "tiergen/common/torch_compat.h"
#include "tiergen/model/safetensors.h"
#include "tiergen/model/spec.h"
#include "tiergen/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace tiergen;

namespace {

struct Options {
  std::string arch = "opt";
  std::string out;
  uint64_t seed = 0;
  std::string tokenizer;
  std::string dtype = "float32";
  int64_t hidden = 64, layers = 2, heads = 4, kv_heads = 2, intermediate = 128, vocab = 512, max_positions = 256;
  bool llama3_rope = false;
  bool tie = false;
};

json opt_config(const Options& o, int64_t vocab, int64_t bos, int64_t eos, int64_t pad) {
  return {{"architectures", {"OPTForCausalLM"}}, {"model_type", "opt"}, {"activation_function", "relu"},
          {"hidden_size", o.hidden}, {"ffn_dim", o.intermediate}, {"num_hidden_layers", o.layers},
          {"num_attention_heads", o.heads}, {"max_position_embeddings", o.max_positions}, {"vocab_size", vocab},
          {"word_embed_proj_dim", o.hidden}, {"do_layer_norm_before", true}, {"enable_bias", true},
          {"bos_token_id", bos}, {"eos_token_id", eos}, {"pad_token_id", pad}, {"tie_word_embeddings", true},
          {"torch_dtype", o.dtype}, {"_name_or_path", "tiny-opt"}};
}

json llama_config(const Options& o, int64_t vocab, int64_t bos, int64_t eos) {
  json c = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_act", "silu"},
            {"hidden_size", o.hidden}, {"intermediate_size", o.intermediate}, {"num_hidden_layers", o.layers},
            {"num_attention_heads", o.heads}, {"num_key_value_heads", o.kv_heads},
            {"max_position_embeddings", o.max_positions}, {"vocab_size", vocab}, {"rms_norm_eps", 1e-5},
            {"rope_theta", 10000.0}, {"bos_token_id", bos}, {"eos_token_id", eos},
            {"tie_word_embeddings", o.tie}, {"torch_dtype", o.dtype}, {"_name_or_path", "tiny-llama"}};
  if (o.llama3_rope) {
    c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}};
  }
  return c;
}

// Values with enough spread that greedy choices are not near-ties.
at::Tensor random_tensor(const model::TensorSpec& t, at::Generator& gen) {
  const auto& n = t.name;
  const auto ends = [&](const std::string& s) { return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0; };
  at::Tensor x = at::normal(0.0, 1.0, t.shape, gen);
  if (ends("norm.weight") || ends("layer_norm.weight") || ends("layernorm.weight")) return 1.0 + 0.1 * x;
  if (ends(".bias")) return 0.1 * x;
  if (n.find("embed_positions") != std::string::npos) return 0.1 * x;
  if (t.shape.size() == 2 && n.find("embed_tokens") == std::string::npos) return x / std::sqrt(static_cast<double>(t.shape[1]));
  return x;
}

void copy_tokenizer(const std::string& from, const fs::path& to) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                           "special_tokens_map.json"}) {
    if (fs::exists(fs::path(from) / name)) fs::copy_file(fs::path(from) / name, to / name, fs::copy_options::overwrite_existing);
  }
}

void run(const Options& o) {
  TG_CHECK(o.arch == "opt" || o.arch == "llama", "--arch must be opt or llama, got '{}'", o.arch);
  int64_t vocab = o.vocab, bos = 1, eos = 2, pad = 0;
  if (!o.tokenizer.empty()) {
    const auto tok = tokenizer::Tokenizer::load(o.tokenizer);
    vocab = tok->vocab_size();
    bos = std::max<int64_t>(tok->bos_id(), 0);
    eos = std::max<int64_t>(tok->eos_id(), 0);
    pad = tok->pad_id() >= 0 ? tok->pad_id() : eos;
  }
  const json config = o.arch == "opt" ? opt_config(o, vocab, bos, eos, pad) : llama_config(o, vocab, bos, eos);
  const model::Spec spec = model::spec_from_config(config, "make-tiny-model");
  const at::ScalarType dtype = compat::parse_dtype(o.dtype);
  at::Generator gen = at::detail::createCPUGenerator(o.seed);

  std::vector<at::Tensor> keep;
  std::vector<model::TensorToWrite> tensors;
  for (const auto& layer : spec.weight_layers()) {
    for (const auto& t : layer.tensors) {
      if (t.source_name != t.name) continue;  // tied head: stored once as the embedding
      keep.push_back(random_tensor(t, gen).to(dtype).contiguous());
      const model::DType file_dtype = dtype == at::kFloat ? model::DType::F32
                                      : dtype == at::kHalf ? model::DType::F16
                                                           : model::DType::BF16;
      tensors.push_back({t.name, file_dtype, t.shape, keep.back().data_ptr(), static_cast<uint64_t>(keep.back().nbytes())});
    }
  }
  fs::create_directories(o.out);
  std::ofstream(fs::path(o.out) / "config.json") << config.dump(2) << "\n";
  model::write_safetensors((fs::path(o.out) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  if (!o.tokenizer.empty()) copy_tokenizer(o.tokenizer, o.out);
  std::cerr << "wrote tiny " << o.arch << " model (" << spec.total_params() << " parameters, " << o.dtype << ") to "
            << o.out << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Write a small random OPT or LLaMA model in Hugging Face layout (config.json + model.safetensors)"};
  app.add_option("--arch", o.arch, "opt or llama")->check(CLI::IsMember({"opt", "llama"}));
  app.add_option("--out", o.out, "Output directory")->required();
  app.add_option("--seed", o.seed, "Random seed");
  app.add_option("--tokenizer", o.tokenizer, "Directory with tokenizer files to pair with the model (sets vocab size)");
  app.add_option("--dtype", o.dtype, "float32, float16 or bfloat16")->check(CLI::IsMember({"float32", "float16", "bfloat16"}));
  app.add_option("--hidden", o.hidden, "Hidden size");
  app.add_option("--layers", o.layers, "Decoder layers");
  app.add_option("--heads", o.heads, "Attention heads");
  app.add_option("--kv-heads", o.kv_heads, "Key/value heads (llama; grouped-query attention)");
  app.add_option("--intermediate", o.intermediate, "MLP width");
  app.add_option("--vocab", o.vocab, "Vocabulary size (without --tokenizer)");
  app.add_option("--max-positions", o.max_positions, "max_position_embeddings");
  app.add_flag("--llama3-rope", o.llama3_rope, "Use llama3 rope_scaling (llama)");
  app.add_flag("--tie", o.tie, "Tie the LM head to the embedding (llama)");
  CLI11_PARSE(app, argc, argv);
  try {
    run(o);
  } catch (const std::exception& e) {
    std::cerr << "make-tiny-model: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
