#pragma once
// Built-in model presets (configs/models/*.json, compiled in): OPT-125M … OPT-175B,
// LLaMA-2 7B/13B/70B, LLaMA-3 8B/70B. A preset answers to its file stem ("opt-30b")
// and to its Hugging Face id ("facebook/opt-30b"), case-insensitively.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tiergen/model/spec.h"

namespace tiergen::model {

// (short name, config.json text) pairs; generated at build time.
const std::vector<std::pair<std::string, std::string>>& builtin_preset_texts();

std::vector<std::string> preset_names();
std::optional<Spec> find_preset(const std::string& name_or_hf_id);

// A model directory (with config.json) or a preset name; throws naming both options.
Spec resolve_spec(const std::string& model);

}  // namespace tiergen::model
