#pragma once
// The flags that set a policy's fields beside its placement and block shape: what the
// CPU multiplies where the weights live, overlap and FlexGen's layout flags, and weight
// and cache compression. `generate`, `bench` and `policy` take them alike and apply
// them alike, so the "tiergen flags" line of a plan (policy/report.cpp) prices under
// `tiergen policy` as it runs under `generate`.
#include <CLI/CLI.hpp>

#include <string>

#include "tiergen/runtime/policy.h"

namespace tiergen::cli {

struct PolicyFieldFlags {
  std::string cpu_weight_compute;         // off, decode, prefill or all; empty: the policy's
  double cpu_weight_compute_layers = -1;  // percent of decoder layers; < 0: the policy's
  std::string overlap;                    // on/off, or FlexGen's true/false; empty: the policy's (on)
  std::string sep_layer, pin_weight;      // FlexGen's true/false; empty: the policy's
  bool compress_weight = false, compress_cache = false;
  int compress_bits = 0, compress_group_size = 0;  // 0: not given (4 bits, groups of 64)

  bool compresses() const { return compress_weight || compress_cache; }
  // The compression the flags ask for (CompressionConfig's defaults where not given).
  runtime::CompressionConfig compression() const {
    runtime::CompressionConfig c;
    c.enabled = true;
    if (compress_bits > 0) c.bits = compress_bits;
    if (compress_group_size > 0) c.group_size = compress_group_size;
    return c;
  }
  // Whether the flags say what CPU weight compute the plan has (a search then plans without it).
  bool fix_cpu_weight_compute() const { return !cpu_weight_compute.empty() || cpu_weight_compute_layers >= 0; }
  // The first flag given, as a user spelled it ("" when none): for errors that name it.
  std::string first_given() const;
};

void add_policy_field_flags(CLI::App* command, PolicyFieldFlags& flags);

// Sets the fields the flags give over `policy`, and its compression where
// `apply_compression` (a plan searched with --compress keeps the search's, 4-bit groups
// of 64: other bits or groups are refused there). --compress-bits or
// --compress-group-size without --compress-weight or --compress-cache is refused.
void apply_policy_field_flags(const PolicyFieldFlags& flags, runtime::Policy& policy, bool apply_compression);
// --compress-weight / --compress-cache (with --compress-bits and --compress-group-size)
// over what `policy` compresses.
void apply_compression_flags(const PolicyFieldFlags& flags, runtime::Policy& policy);

}  // namespace tiergen::cli
