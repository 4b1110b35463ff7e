#pragma once
// A Hugging Face model id ("facebook/opt-125m") found in the local Hugging Face hub
// cache, as `huggingface-cli download` or transformers leave it:
// HUB/models--facebook--opt-125m/refs/main names the snapshot
// HUB/models--facebook--opt-125m/snapshots/<hash>/ that holds config.json. HUB is
// $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub.
#include <optional>
#include <string>

namespace tiergen::cli {

// Whether `name` has the shape of a hub id: "owner/name", no leading '.' or '/'.
bool looks_like_hub_id(const std::string& name);

// The hub cache folder looked in.
std::string hugging_face_hub_dir();

// The snapshot directory of `hub_id` (refs/main's, else the only snapshot), when it
// holds a config.json.
std::optional<std::string> find_in_hugging_face_cache(const std::string& hub_id);

}  // namespace tiergen::cli
