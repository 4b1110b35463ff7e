#include "src/cli/policy_field_flags.h"

#include "policy/search.h"
#include "src/cli/flexgen_flags.h"
#include "tiergen/common/error.h"

namespace tiergen::cli {

std::string PolicyFieldFlags::first_given() const {
  if (!cpu_weight_compute.empty()) return "--cpu-weight-compute";
  if (cpu_weight_compute_layers >= 0) return "--cpu-weight-compute-layers";
  if (!overlap.empty()) return "--overlap";
  if (!sep_layer.empty()) return "--sep-layer";
  if (!pin_weight.empty()) return "--pin-weight";
  if (compress_weight) return "--compress-weight";
  if (compress_cache) return "--compress-cache";
  if (compress_bits > 0) return "--compress-bits";
  if (compress_group_size > 0) return "--compress-group-size";
  return "";
}

void add_policy_field_flags(CLI::App* c, PolicyFieldFlags& f) {
  const auto boolean = CLI::IsMember(flexgen_bool_spellings(), CLI::ignore_case);
  c->add_option("--cpu-weight-compute", f.cpu_weight_compute,
                "Phases whose matmuls and embedding lookups over cpu/disk-resident weights run on the CPU where "
                "the weights live instead of copying them to the device: off, decode, prefill or all (default: the "
                "policy's, off; decode looks the embedding up where it lives under any setting)")
      ->check(CLI::IsMember({"off", "decode", "prefill", "all"}));
  c->add_option("--cpu-weight-compute-layers", f.cpu_weight_compute_layers,
                "Percent of decoder layers, spread evenly, that --cpu-weight-compute applies to (the others load "
                "their weights meanwhile; default 100)")
      ->check(CLI::Range(0.0, 100.0));
  c->add_option("--overlap", f.overlap, "Overlap loads/stores with compute: on or off (FlexGen's true/false too; "
                "default on, or the --policy file's)")
      ->check(boolean);
  c->add_option("--sep-layer", f.sep_layer, "Place a layer's attention and MLP weights as two layers: true or false "
                "(FlexGen's flag; default true, or the --policy file's)")->check(boolean);
  c->add_option("--pin-weight", f.pin_weight, "Page-lock the weights' cpu homes (CUDA): true or false (FlexGen's flag; "
                "default true, or the --policy file's)")->check(boolean);
  c->add_flag("--compress-weight", f.compress_weight, "Group-wise quantize weights");
  c->add_flag("--compress-cache", f.compress_cache, "Group-wise quantize the KV cache");
  c->add_option("--compress-bits", f.compress_bits, "Bits for --compress-weight/--compress-cache: 4 or 8 (default 4)")
      ->check(CLI::IsMember({4, 8}));
  c->add_option("--compress-group-size", f.compress_group_size,
                "Elements per quantization group of --compress-weight/--compress-cache (default 64)")
      ->check(CLI::PositiveNumber);
}

void apply_policy_field_flags(const PolicyFieldFlags& f, runtime::Policy& p, bool apply_compression) {
  if (!f.cpu_weight_compute.empty()) {
    p.cpu_weight_compute_prefill = f.cpu_weight_compute == "prefill" || f.cpu_weight_compute == "all";
    p.cpu_weight_compute_decode = f.cpu_weight_compute == "decode" || f.cpu_weight_compute == "all";
  }
  if (f.cpu_weight_compute_layers >= 0) {
    TG_CHECK(p.cpu_weight_compute_prefill || p.cpu_weight_compute_decode,
             "--cpu-weight-compute-layers applies to --cpu-weight-compute decode, prefill or all (or a policy file "
             "that turns it on); neither is given");
    p.cpu_weight_compute_layer_percent = f.cpu_weight_compute_layers;
  }
  if (!f.overlap.empty()) p.overlap = parse_flexgen_bool(f.overlap, "--overlap");
  if (!f.sep_layer.empty()) p.sep_layer = parse_flexgen_bool(f.sep_layer, "--sep-layer");
  if (!f.pin_weight.empty()) p.pin_weight = parse_flexgen_bool(f.pin_weight, "--pin-weight");
  const bool detail_given = f.compress_bits > 0 || f.compress_group_size > 0;
  TG_CHECK(!detail_given || f.compresses(), "--compress-bits and --compress-group-size shape --compress-weight or "
           "--compress-cache; neither is given");
  if (apply_compression) {
    apply_compression_flags(f, p);
    return;
  }
  const runtime::CompressionConfig searched = policy::SearchOptions().compression_config;
  TG_CHECK(!detail_given || (f.compression().bits == searched.bits && f.compression().group_size == searched.group_size),
           "--compress-bits {} --compress-group-size {}: a searched plan compresses {}-bit groups of {}; give the "
           "placement (--percent or --policy FILE) to run other bits", f.compression().bits,
           f.compression().group_size, searched.bits, searched.group_size);
}

void apply_compression_flags(const PolicyFieldFlags& f, runtime::Policy& p) {
  if (f.compress_weight) p.compress_weight = f.compression();
  if (f.compress_cache) p.compress_cache = f.compression();
}

}  // namespace tiergen::cli
