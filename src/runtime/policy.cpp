#include "tiergen/runtime/policy.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "tiergen/common/error.h"
#include "tiergen/common/torch_compat.h"

namespace tiergen::runtime {

using nlohmann::json;

namespace {

void check_percent_pair(double gpu, double cpu, const char* what) {
  TG_CHECK(std::isfinite(gpu) && std::isfinite(cpu) && gpu >= 0 && cpu >= 0 && gpu + cpu <= 100 + 1e-9,
           "policy: {} percentages gpu {} + cpu {} must be within 0..100 (disk gets the rest)", what, gpu,
           cpu);
}

void check_compression(const CompressionConfig& c, const char* what) {
  if (!c.enabled) return;
  TG_CHECK(c.bits == 4 || c.bits == 8, "policy: {} bits must be 4 or 8, got {}", what, c.bits);
  TG_CHECK(c.group_size > 0 && c.group_size % 2 == 0 && c.group_size <= 4096,
           "policy: {} group size must be an even number in 2..4096, got {}", what, c.group_size);
}

json compression_to_json(const CompressionConfig& c) {
  return json{{"num_bits", c.bits}, {"group_size", c.group_size}};
}

// FlexGen's policy files hold compress_weight as a bool and a shared
// comp_weight_config; we accept both that and an object with bits/group size.
CompressionConfig compression_from_json(const json& j, const json* config, const std::string& source,
                                        const char* key) {
  CompressionConfig c;
  auto read_config = [&](const json& cfg) {
    TG_CHECK(cfg.is_object(), "{}: '{}' config must be an object", source, key);
    for (const auto& [k, v] : cfg.items()) {
      if (k == "num_bits" || k == "bits") {
        c.bits = v.get<int>();
      } else if (k == "group_size") {
        c.group_size = v.get<int>();
      } else if (k != "group_dim" && k != "symmetric") {
        TG_THROW("{}: unknown key '{}' in {} config", source, k, key);
      }
    }
  };
  if (j.is_boolean()) {
    c.enabled = j.get<bool>();
    if (config) read_config(*config);
  } else {
    c.enabled = true;
    read_config(j);
  }
  return c;
}

// The phases, and the share of layers when not all of them.
std::string cpu_weight_compute_text(const Policy& p) {
  const std::string phases = p.cpu_weight_compute_phases();
  if (phases == "off" || p.cpu_weight_compute_layer_percent >= 100) return phases;
  return fmt::format("{} in {:g}% of layers", phases, p.cpu_weight_compute_layer_percent);
}

}  // namespace

void Policy::validate() const {
  TG_CHECK(gpu_batch_size >= 1, "policy: gpu_batch_size must be at least 1, got {}", gpu_batch_size);
  TG_CHECK(num_gpu_batches >= 1, "policy: num_gpu_batches must be at least 1, got {}", num_gpu_batches);
  // Far beyond any job, and small enough that byte counts of a block cannot overflow.
  constexpr int64_t kMaxBlockSequences = int64_t{1} << 24;
  TG_CHECK(gpu_batch_size <= kMaxBlockSequences && num_gpu_batches <= kMaxBlockSequences / gpu_batch_size,
           "policy: a block of gpu_batch_size {} x num_gpu_batches {} sequences is more than the {} a block may hold",
           gpu_batch_size, num_gpu_batches, kMaxBlockSequences);
  check_percent_pair(w_gpu_percent, w_cpu_percent, "weight");
  check_percent_pair(cache_gpu_percent, cache_cpu_percent, "KV cache");
  check_percent_pair(act_gpu_percent, act_cpu_percent, "activation");
  TG_CHECK(!attn_sparsity_enabled, "policy: attention sparsity is not supported");
  TG_CHECK(std::isfinite(cpu_weight_compute_layer_percent) && cpu_weight_compute_layer_percent >= 0 &&
               cpu_weight_compute_layer_percent <= 100,
           "policy: cpu_weight_compute_layer_percent must be within 0..100, got {}", cpu_weight_compute_layer_percent);
  check_compression(compress_weight, "compress_weight");
  check_compression(compress_cache, "compress_cache");
  TG_CHECK(threads.compute_intra_op >= 0 && threads.compute_inter_op >= 0 && threads.io_threads >= 0,
           "policy: thread counts must not be negative");
  TG_CHECK(small_matmul.max_rows >= 0, "policy: small_matmul.max_rows must not be negative, got {}",
           small_matmul.max_rows);
  TG_CHECK(small_matmul.max_rows == 0 || compat::is_dtype_name(small_matmul.dtype),
           "policy: small_matmul.dtype must be float32, float16 or bfloat16, not '{}'", small_matmul.dtype);
}

std::string Policy::cpu_weight_compute_phases() const {
  if (cpu_weight_compute_prefill && cpu_weight_compute_decode) return "prefill+decode";
  if (cpu_weight_compute_prefill) return "prefill";
  return cpu_weight_compute_decode ? "decode" : "off";
}

Policy Policy::fitted_to(int64_t sequences) const {
  Policy fitted = *this;
  if (sequences <= 0 || sequences >= block_size()) return fitted;
  fitted.num_gpu_batches = std::min(num_gpu_batches, (sequences + gpu_batch_size - 1) / gpu_batch_size);
  fitted.gpu_batch_size = (sequences + fitted.num_gpu_batches - 1) / fitted.num_gpu_batches;
  return fitted;
}

std::string Policy::exactness() const {
  if (exact()) return "output: exact (no compression; tokens are those of a full-precision run)";
  std::string what;
  if (compress_weight.enabled) what += fmt::format("{}-bit weights", compress_weight.bits);
  if (compress_cache.enabled) what += fmt::format("{}{}-bit KV cache", what.empty() ? "" : " and ", compress_cache.bits);
  return fmt::format("output: LOSSY ({} compression): tokens may differ from a full-precision run", what);
}

std::string Policy::describe() const {
  auto comp = [](const CompressionConfig& c) {
    return c.enabled ? fmt::format("{}-bit/g{}", c.bits, c.group_size) : std::string("off");
  };
  return fmt::format(
      "gpu batch {} x {} batches; weights gpu/cpu/disk {:g}/{:g}/{:g}%; cache {:g}/{:g}/{:g}%; "
      "activations {:g}/{:g}/{:g}%; overlap {}; cpu attention {}; cpu weight compute {}; compress weight {}, "
      "cache {}",
      gpu_batch_size, num_gpu_batches, w_gpu_percent, w_cpu_percent, w_disk_percent(), cache_gpu_percent,
      cache_cpu_percent, cache_disk_percent(), act_gpu_percent, act_cpu_percent, act_disk_percent(),
      overlap ? "on" : "off", cpu_cache_compute ? "on" : "off", cpu_weight_compute_text(*this),
      comp(compress_weight), comp(compress_cache));
}

json policy_to_json(const Policy& p) {
  json j{{"gpu_batch_size", p.gpu_batch_size},
         {"num_gpu_batches", p.num_gpu_batches},
         {"w_gpu_percent", p.w_gpu_percent},
         {"w_cpu_percent", p.w_cpu_percent},
         {"cache_gpu_percent", p.cache_gpu_percent},
         {"cache_cpu_percent", p.cache_cpu_percent},
         {"act_gpu_percent", p.act_gpu_percent},
         {"act_cpu_percent", p.act_cpu_percent},
         {"overlap", p.overlap},
         {"sep_layer", p.sep_layer},
         {"pin_weight", p.pin_weight},
         {"cpu_cache_compute", p.cpu_cache_compute},
         {"cpu_weight_compute_prefill", p.cpu_weight_compute_prefill},
         {"cpu_weight_compute_decode", p.cpu_weight_compute_decode},
         {"cpu_weight_compute_layer_percent", p.cpu_weight_compute_layer_percent},
         {"attn_sparsity", 1.0},
         {"compress_weight", p.compress_weight.enabled},
         {"comp_weight_config", compression_to_json(p.compress_weight)},
         {"compress_cache", p.compress_cache.enabled},
         {"comp_cache_config", compression_to_json(p.compress_cache)},
         {"threads",
          {{"compute_intra_op", p.threads.compute_intra_op},
           {"compute_inter_op", p.threads.compute_inter_op},
           {"io_threads", p.threads.io_threads}}}};
  if (p.small_matmul.max_rows > 0) {
    j["small_matmul"] = {{"dtype", p.small_matmul.dtype}, {"max_rows", p.small_matmul.max_rows}};
  }
  return j;
}

Policy policy_from_json(const json& input, const std::string& source) {
  TG_CHECK(input.is_object(), "{}: a policy must be a JSON object", source);
  // `tiergen policy --json` writes {"policy": {...}, "predicted": {...}}.
  const json& j = input.contains("policy") ? input.at("policy") : input;
  TG_CHECK(j.is_object(), "{}: 'policy' must be a JSON object", source);
  Policy p;
  static const std::set<std::string> known = {
      "gpu_batch_size", "num_gpu_batches", "w_gpu_percent", "w_cpu_percent", "cache_gpu_percent",
      "cache_cpu_percent", "act_gpu_percent", "act_cpu_percent", "overlap", "sep_layer", "pin_weight",
      "cpu_cache_compute", "cpu_weight_compute_prefill", "cpu_weight_compute_decode",
      "cpu_weight_compute_layer_percent", "attn_sparsity", "compress_weight", "comp_weight_config", "compress_cache",
      "comp_cache_config", "threads", "small_matmul"};
  for (const auto& [key, value] : j.items()) {
    TG_CHECK(known.count(key), "{}: unknown policy field '{}'", source, key);
  }
  try {
    p.gpu_batch_size = j.value("gpu_batch_size", p.gpu_batch_size);
    p.num_gpu_batches = j.value("num_gpu_batches", p.num_gpu_batches);
    p.w_gpu_percent = j.value("w_gpu_percent", p.w_gpu_percent);
    p.w_cpu_percent = j.value("w_cpu_percent", p.w_cpu_percent);
    p.cache_gpu_percent = j.value("cache_gpu_percent", p.cache_gpu_percent);
    p.cache_cpu_percent = j.value("cache_cpu_percent", p.cache_cpu_percent);
    p.act_gpu_percent = j.value("act_gpu_percent", p.act_gpu_percent);
    p.act_cpu_percent = j.value("act_cpu_percent", p.act_cpu_percent);
    p.overlap = j.value("overlap", p.overlap);
    p.sep_layer = j.value("sep_layer", p.sep_layer);
    p.pin_weight = j.value("pin_weight", p.pin_weight);
    p.cpu_cache_compute = j.value("cpu_cache_compute", p.cpu_cache_compute);
    p.cpu_weight_compute_prefill = j.value("cpu_weight_compute_prefill", p.cpu_weight_compute_prefill);
    p.cpu_weight_compute_decode = j.value("cpu_weight_compute_decode", p.cpu_weight_compute_decode);
    p.cpu_weight_compute_layer_percent =
        j.value("cpu_weight_compute_layer_percent", p.cpu_weight_compute_layer_percent);
    p.attn_sparsity_enabled = j.value("attn_sparsity", 1.0) < 1.0;
    if (j.contains("compress_weight")) {
      const json* cfg = j.contains("comp_weight_config") ? &j.at("comp_weight_config") : nullptr;
      p.compress_weight = compression_from_json(j.at("compress_weight"), cfg, source, "compress_weight");
    }
    if (j.contains("compress_cache")) {
      const json* cfg = j.contains("comp_cache_config") ? &j.at("comp_cache_config") : nullptr;
      p.compress_cache = compression_from_json(j.at("compress_cache"), cfg, source, "compress_cache");
    }
    if (j.contains("threads")) {
      const json& t = j.at("threads");
      p.threads.compute_intra_op = t.value("compute_intra_op", 0);
      p.threads.compute_inter_op = t.value("compute_inter_op", 0);
      p.threads.io_threads = t.value("io_threads", 0);
    }
    if (j.contains("small_matmul")) {
      const json& m = j.at("small_matmul");
      TG_CHECK(m.is_object() && m.size() == 2 && m.contains("dtype") && m.contains("max_rows"),
               "{}: policy field 'small_matmul' must be {{\"dtype\": ..., \"max_rows\": ...}}", source);
      p.small_matmul.dtype = m.at("dtype").get<std::string>();
      TG_CHECK(m.at("max_rows").is_number_integer(), "{}: policy field 'small_matmul.max_rows' must be an integer",
               source);
      p.small_matmul.max_rows = m.at("max_rows").get<int64_t>();
    }
  } catch (const json::exception& e) {
    TG_THROW("{}: policy field has the wrong type: {}", source, e.what());
  }
  try {
    p.validate();
  } catch (const Error& e) {
    TG_THROW("{}: {}", source, e.what());
  }
  return p;
}

json read_policy_file(const std::string& path) {
  std::ifstream in(path);
  TG_CHECK(in.good(), "{}: cannot open policy file", path);
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    TG_THROW("{}: invalid JSON: {}", path, e.what());
  }
}

Policy policy_from_file(const std::string& path) { return policy_from_json(read_policy_file(path), path); }

}  // namespace tiergen::runtime
