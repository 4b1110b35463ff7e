#include "src/cli/job_identity.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "tiergen/runtime/policy.h"

namespace tiergen::cli {

namespace {

namespace fs = std::filesystem;

uint64_t fnv1a(const char* data, size_t size, uint64_t h = 0xcbf29ce484222325ull) {
  for (size_t i = 0; i < size; ++i) h = (h ^ static_cast<unsigned char>(data[i])) * 0x100000001b3ull;
  return h;
}

// The header (8 little-endian bytes of length, then that much JSON: every tensor's
// name, dtype, shape and offsets) and 16 samples of 4 KiB spread over the data, which
// tell apart weights of the same shapes (a model regenerated or re-downloaded in
// place) at the cost of a few reads. Capped as the reader caps a header; the reader
// also says what is wrong with a bad one.
nlohmann::ordered_json safetensors_file_identity(const fs::path& file) {
  nlohmann::ordered_json j;
  j["file"] = file.filename().string();
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  std::ifstream in(file, std::ios::binary);
  unsigned char length_bytes[8] = {};
  if (ec || !in.read(reinterpret_cast<char*>(length_bytes), 8)) {
    j["unreadable"] = true;
    return j;
  }
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | length_bytes[i];
  constexpr uint64_t kHeaderLimit = 100ull << 20;
  std::string header(static_cast<size_t>(std::min<uint64_t>({length, kHeaderLimit, size - 8})), '\0');
  in.read(header.data(), static_cast<std::streamsize>(header.size()));
  const uint64_t data_begin = 8 + header.size();
  constexpr uint64_t kSamples = 16, kSampleBytes = 4096;
  uint64_t h = fnv1a(header.data(), header.size());
  std::string sample(kSampleBytes, '\0');
  for (uint64_t k = 0; k < kSamples && size > data_begin; ++k) {
    const uint64_t at = data_begin + (size - data_begin) * k / kSamples;
    in.clear();
    in.seekg(static_cast<std::streamoff>(at));
    in.read(sample.data(), static_cast<std::streamsize>(std::min(kSampleBytes, size - at)));
    h = fnv1a(sample.data(), static_cast<size_t>(in.gcount()), h);
  }
  j["bytes"] = size;
  j["sampled_hash"] = fmt::format("fnv1a64:{:016x}", h);
  return j;
}

// The shard names an index maps tensors to, in name order.
std::set<std::string> shard_names(const fs::path& index) {
  std::set<std::string> names;
  std::ifstream in(index, std::ios::binary);
  const auto doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object()) return names;
  for (const auto& [tensor, shard] : doc["weight_map"].items()) {
    if (shard.is_string()) names.insert(shard.get<std::string>());
  }
  return names;
}

std::string compression_text(const runtime::CompressionConfig& c) {
  return c.enabled ? fmt::format("{}-bit groups of {}", c.bits, c.group_size) : "off";
}

}  // namespace

uint64_t fnv1a64(const std::string& bytes, uint64_t h) { return fnv1a(bytes.data(), bytes.size(), h); }

nlohmann::ordered_json checkpoint_identity(const std::string& model_dir) {
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  const fs::path dir(model_dir), index = dir / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index, ec)) {
    for (const auto& shard : shard_names(index)) {
      // Names outside the directory are refused when the weights load.
      if (fs::path(shard).filename() == fs::path(shard)) files.push_back(safetensors_file_identity(dir / shard));
    }
  } else {
    files.push_back(safetensors_file_identity(dir / "model.safetensors"));
  }
  return files;
}

std::string tokenizer_identity(const std::string& dir) {
  if (dir.empty()) return "none";
  uint64_t h = 0xcbf29ce484222325ull;
  bool any = false;
  for (const char* name : {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"}) {
    std::ifstream in(fs::path(dir) / name, std::ios::binary);
    if (!in) continue;
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    h = fnv1a(name, std::strlen(name) + 1, h);  // which file, then its bytes
    h = fnv1a(bytes.data(), bytes.size(), h);
    any = true;
  }
  return any ? fmt::format("fnv1a64:{:016x}", h) : "none";
}

std::string file_identity(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "unreadable";
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return fmt::format("fnv1a64:{:016x}", fnv1a64(bytes));
}

nlohmann::ordered_json lossy_choices(const EngineFlags& f) {
  runtime::Policy asked;  // only its compression matters here
  if (!f.policy_file.empty() && f.policy_file != "auto") {
    try {
      asked = runtime::policy_from_file(f.policy_file);
    } catch (const std::exception&) {
      // A bad policy file is reported where the policy is made.
    }
  }
  apply_compression_flags(f.fields, asked);
  nlohmann::ordered_json j;
  j["weights"] = compression_text(asked.compress_weight);
  j["kv_cache"] = compression_text(asked.compress_cache);
  if (f.policy_file == "auto") j["auto_may_compress"] = f.compress;
  return j;
}

}  // namespace tiergen::cli
