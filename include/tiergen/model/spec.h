#pragma once
// model::Spec: everything the engine needs to know about a model's shape, read from a
// Hugging Face config.json (OPTForCausalLM, LlamaForCausalLM) or a built-in preset.
// Sizes used by placement and the cost model come from here, never from formulas
// that assume one family.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tiergen::model {

enum class Family { Opt, Llama };
std::string family_name(Family family);

// Llama 3.x "rope_scaling": {"rope_type": "llama3", ...}; type "" means none.
struct RopeScaling {
  std::string type;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// Shape of one weight tensor as the checkpoint names it.
struct TensorSpec {
  std::string name;             // e.g. "model.decoder.layers.3.fc1.weight"
  std::vector<int64_t> shape;   // as stored: Linear weights are [out, in]
  // Checkpoint tensor to read; differs from `name` only for a tied LM head, which
  // reads the input embedding (and, uncompressed, shares its home:
  // runtime::place_stage_weights).
  std::string source_name;
  int64_t numel() const;
};

// FlexGen streams the model layer by layer; the input embedding and the output head
// are layers of their own. Index 0 is the embedding, 1..num_layers the decoder
// layers, num_layers+1 the head.
struct WeightLayer {
  std::string kind;  // "embedding", "decoder", "head"
  std::vector<TensorSpec> tensors;
  int64_t numel() const;
  // Whether `tensor` of this layer is read by row lookup (the embedding's token and
  // position tables) rather than multiplied (OPT's project_in is a product).
  bool is_lookup_table(const TensorSpec& tensor) const;
};

struct Spec {
  std::string name;            // preset short name or model directory
  std::string hf_id;           // "_name_or_path" when known
  Family family = Family::Opt;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;         // h1
  int64_t intermediate_size = 0;   // h2 (OPT ffn_dim)
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;        // grouped-query attention; == num_heads for OPT
  int64_t head_dim = 0;
  int64_t max_positions = 0;
  int64_t word_embed_proj_dim = 0; // OPT-350M: 512; otherwise == hidden_size
  bool pre_layer_norm = true;      // OPT do_layer_norm_before (OPT-350M: false)
  std::string activation;          // "relu", "gelu", "silu"
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = true;
  bool attention_bias = true;      // OPT: true, LLaMA: false
  bool mlp_bias = true;
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;       // first of the list when config gives several
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = -1;
  std::string torch_dtype = "float16";

  bool has_projection() const { return word_embed_proj_dim != hidden_size; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }

  // Every tensor of the model grouped by FlexGen layer (see WeightLayer).
  std::vector<WeightLayer> weight_layers() const;
  int64_t num_weight_layers() const { return num_layers + 2; }
  int64_t total_params() const;
  int64_t decoder_layer_params() const;
  // KV cache elements for one token in one decoder layer (keys and values).
  int64_t kv_elements_per_token_per_layer() const { return 2 * kv_dim(); }
};

// Parses a config.json document; `source` (a path or preset name) goes into errors.
Spec spec_from_config(const nlohmann::json& config, const std::string& source);
Spec spec_from_config_file(const std::string& path);

}  // namespace tiergen::model
