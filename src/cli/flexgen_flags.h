#pragma once
// FlexGen's command-line flags (flexgen/flex_opt.py) accepted as FlexGen spells them,
// with FlexGen's meaning, so a FlexGen command line runs under `tiergen bench`:
//   --path _DUMMY_        dummy weights; --path DIR: DIR is the checkpoint directory
//   --attn-sparsity F     only 1 (exact attention): anything else is refused
//   --verbose [N]         0 warnings only, 1-2 the usual info, 3 or no N debug
// FlexGen's policy fields --sep-layer B, --pin-weight B and --overlap B (B is FlexGen's
// str2bool: true/false, yes/no, t/f, y/n, 1/0, any case; on/off too) are policy field
// flags (policy_field_flags.h), which `tiergen policy` takes as well. The others
// (--model, --offload-dir, --percent, --gpu-batch-size, --num-gpu-batches,
// --cpu-cache-compute) are engine flags of their own name, --compress-weight/-cache
// policy field flags,
// and --prompt-len, --gen-len, --cut-gen-len, --log-file, --no-log belong to `bench`.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "src/cli/engine_flags.h"
#include "tiergen/runtime/policy.h"

namespace tiergen::cli {

std::vector<std::string> flexgen_bool_spellings();
// FlexGen's str2bool (and on/off); `flag` names the flag in the error for anything else.
bool parse_flexgen_bool(const std::string& value, const std::string& flag);

void add_flexgen_flags(CLI::App* command, EngineFlags& flags);
// --path: _DUMMY_ turns on dummy weights; a directory with config.json becomes the
// model; anything else (FlexGen's numpy weight cache) is refused. Then -m or --path
// must have named a model.
void resolve_flexgen_path(EngineFlags& flags);
void apply_flexgen_verbosity(const EngineFlags& flags);
// Refuses an --attn-sparsity under 1 (tiergen's attention is exact).
void check_flexgen_attention_sparsity(const EngineFlags& flags);

// A flag of another command or of FlexGen that this command cannot honour: accepted
// by the parser (hidden from --help) so that using it fails with `why`, never silently.
struct RefusedFlag {
  std::string name;
  CLI::Option* option;
  std::string why;
};
RefusedFlag refuse_flag(CLI::App* command, const std::string& name, bool takes_value, std::string why);
void check_refused_flags(const std::vector<RefusedFlag>& flags);

}  // namespace tiergen::cli
