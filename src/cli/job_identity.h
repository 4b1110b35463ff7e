#pragma once
// What a results file's job record says about the inputs that decide its results,
// beyond the flags: which checkpoint, which tokenizer, and which lossy choices. A
// resumed job must match them all, or two jobs' results would mix in one file.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "src/cli/engine_flags.h"

namespace tiergen::cli {

// FNV-1a, 64 bits, continuing from `h`: a content fingerprint, not a security measure.
uint64_t fnv1a64(const std::string& bytes, uint64_t h = 0xcbf29ce484222325ull);

// Per safetensors file of the model directory (model.safetensors, or the shards its
// index names): name, size, and a hash of its header and of 16 samples of its data.
// Cheap (64 KiB read per file beyond the header); a file that cannot be read is
// recorded as such, and loading the weights reports it properly.
nlohmann::ordered_json checkpoint_identity(const std::string& model_dir);

// A hash over the tokenizer's files in `dir` (tokenizer.json, or vocab.json and
// merges.txt, and tokenizer_config.json); "none" without a directory.
std::string tokenizer_identity(const std::string& dir);

// A hash of one file's bytes ("fnv1a64:..."), or "unreadable".
std::string file_identity(const std::string& path);

// The compression the job asked for: from --compress-weight/--compress-cache, a
// policy file's fields, and what --policy auto may choose (--compress).
nlohmann::ordered_json lossy_choices(const EngineFlags& flags);

}  // namespace tiergen::cli
