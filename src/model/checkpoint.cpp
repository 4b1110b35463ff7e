// Opening a model directory's safetensors checkpoint (single file or sharded) and
// checking it against a model::Spec.
#include "tiergen/model/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tiergen/common/error.h"
#include "tiergen/common/strings.h"

namespace tiergen::model {

namespace {

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// weight_map of model.safetensors.index.json: tensor name -> shard file name.
std::map<std::string, std::string> read_weight_map(const std::string& index_path) {
  std::ifstream in(index_path);
  TG_CHECK(in.good(), "{}: cannot open checkpoint index", index_path);
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TG_THROW("{}: checkpoint index is not valid JSON: {}", index_path, e.what());
  }
  TG_CHECK(index.is_object() && index.contains("weight_map") && index.at("weight_map").is_object(),
           "{}: checkpoint index has no 'weight_map' object", index_path);
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, shard] : index.at("weight_map").items()) {
    TG_CHECK(shard.is_string(), "{}: weight_map entry for tensor '{}' is a JSON {}, not a file name", index_path,
             tensor, shard.type_name());
    const auto& name = shard.get_ref<const std::string&>();
    // Shards live beside the index; a path elsewhere is a corrupt or hostile index.
    TG_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
             "{}: weight_map maps tensor '{}' to '{}', which is not a file name in the model directory",
             index_path, tensor, name);
    weight_map[tensor] = name;
  }
  TG_CHECK(!weight_map.empty(), "{}: checkpoint index has an empty weight_map", index_path);
  return weight_map;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Tensors a checkpoint may hold that no model computation reads.
bool harmless_extra(const std::string& name, const Spec& spec) {
  if (ends_with(name, "rotary_emb.inv_freq")) return true;  // older LLaMA checkpoints store the RoPE buffer
  if (spec.tie_word_embeddings && name == "lm_head.weight") return true;  // a saved copy of the tied embedding
  return false;
}

// Lists up to `shown` items of a problem group, then how many more there are.
std::string listing(const std::vector<std::string>& items, size_t shown) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < shown; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > shown) out += fmt::format(", ... ({} more)", items.size() - shown);
  return out;
}

}  // namespace

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& path) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->path_ = path;
  while (ckpt->path_.size() > 1 && ckpt->path_.back() == '/') ckpt->path_.pop_back();  // "dir/" names files "dir/x"
  auto add_file = [&](const std::string& file_path) {
    ckpt->files_.push_back(SafetensorsFile::open(file_path));
    return ckpt->files_.back().get();
  };
  auto add_entries = [&](const SafetensorsFile* file) {
    for (const auto& t : file->tensors()) ckpt->tensors_[t.name] = Entry{file, &t, nullptr};
    for (const auto& u : file->unsupported()) ckpt->tensors_[u.name] = Entry{file, nullptr, &u};
  };

  const std::string& dir = ckpt->path_;
  if (is_regular_file(dir)) {
    add_entries(add_file(dir));
    return ckpt;
  }
  TG_CHECK(is_directory(dir), "{}: no such model directory or safetensors file", dir);
  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string single_path = dir + "/model.safetensors";
  if (!is_regular_file(index_path)) {
    struct stat st {};
    TG_CHECK(::lstat(single_path.c_str(), &st) != 0 || is_regular_file(single_path),
             "{}: model.safetensors is not a regular file (a directory, FIFO or device?)", dir);
    if (!is_regular_file(single_path)) {
      // PyTorch's pickled checkpoints run code when loaded, and are not read here.
      const bool pickled = is_regular_file(dir + "/pytorch_model.bin") ||
                           is_regular_file(dir + "/pytorch_model.bin.index.json");
      TG_CHECK(!pickled, "{}: the checkpoint is pytorch_model*.bin (PyTorch pickle), and tiergen reads safetensors "
               "only; convert it once with Python: `from transformers import AutoModelForCausalLM; "
               "AutoModelForCausalLM.from_pretrained(\"{}\").save_pretrained(\"OUT\", safe_serialization=True)` "
               "(then copy the tokenizer files into OUT)", dir, dir);
      TG_THROW("{}: no model.safetensors or model.safetensors.index.json in the directory", dir);
    }
    add_entries(add_file(single_path));
    return ckpt;
  }

  const auto weight_map = read_weight_map(index_path);
  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : weight_map) shard_names.insert(shard);
  std::map<std::string, const SafetensorsFile*> shards;
  for (const auto& shard : shard_names) shards[shard] = add_file(dir + "/" + shard);  // each shard opened once

  for (const auto& [tensor, shard] : weight_map) {
    const SafetensorsFile* file = shards.at(shard);
    const TensorInfo* t = file->find(tensor);
    const UnsupportedTensor* u = t ? nullptr : file->find_unsupported(tensor);
    TG_CHECK(t || u, "{}: index lists tensor '{}' in {}, but that file has no such tensor", index_path, tensor,
             file->path());
    ckpt->tensors_[tensor] = Entry{file, t, u};
  }
  // A tensor the index does not list (or lists elsewhere) would be ambiguous.
  for (const auto& [shard, file] : shards) {
    auto check_listed = [&](const std::string& tensor) {
      auto it = weight_map.find(tensor);
      TG_CHECK(it != weight_map.end(), "{}: tensor '{}' is not listed in {}", file->path(), tensor, index_path);
      TG_CHECK(it->second == shard, "{}: tensor '{}' is also in {}, where {} maps it", file->path(), tensor,
               dir + "/" + it->second, index_path);
    };
    for (const auto& t : file->tensors()) check_listed(t.name);
    for (const auto& u : file->unsupported()) check_listed(u.name);
  }
  return ckpt;
}

std::vector<std::string> Checkpoint::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

std::string Checkpoint::resolve(const std::string& name) const {
  if (tensors_.count(name)) return name;
  const std::string prefix = "model.";
  if (name.compare(0, prefix.size(), prefix) == 0 && tensors_.count(name.substr(prefix.size()))) {
    return name.substr(prefix.size());
  }
  return "";
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  const std::string actual = resolve(name);
  return actual.empty() ? nullptr : tensors_.at(actual).tensor;
}

const TensorInfo& Checkpoint::at(const std::string& name) const {
  const std::string actual = resolve(name);
  TG_CHECK(!actual.empty(), "{}: checkpoint has no tensor '{}'", path_, name);
  const Entry& e = tensors_.at(actual);
  TG_CHECK(e.tensor != nullptr, "{}: tensor '{}' has unsupported dtype '{}' (tiergen reads F32, F16 and BF16)",
           e.file->path(), actual, e.unsupported->dtype);
  return *e.tensor;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, unused] : tensors_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

void Checkpoint::validate_against(const Spec& spec) const {
  std::vector<std::string> missing, mismatched, unexpected;
  std::set<std::string> needed, used;
  for (const auto& layer : spec.weight_layers()) {
    for (const auto& ts : layer.tensors) {
      if (!needed.insert(ts.source_name).second) continue;  // a tied head reads the embedding again
      const std::string actual = resolve(ts.source_name);
      if (actual.empty()) {
        missing.push_back(fmt::format("'{}' (shape {})", ts.source_name, shape_text(ts.shape)));
        continue;
      }
      used.insert(actual);
      const Entry& e = tensors_.at(actual);
      if (e.tensor == nullptr) {
        mismatched.push_back(fmt::format("{}: tensor '{}' has unsupported dtype '{}' (tiergen reads F32, F16 and BF16)",
                                         e.file->path(), actual, e.unsupported->dtype));
      } else if (e.tensor->shape != ts.shape) {
        mismatched.push_back(fmt::format("{}: tensor '{}' has shape {}, expected {}", e.file->path(), actual,
                                         shape_text(e.tensor->shape), shape_text(ts.shape)));
      }
    }
  }
  for (const auto& name : names()) {
    if (used.count(name) || harmless_extra(name, spec)) continue;
    unexpected.push_back(fmt::format("'{}' (in {})", name, tensors_.at(name).file->path()));
  }
  if (missing.empty() && mismatched.empty() && unexpected.empty()) return;

  // One line per group so that a wholly wrong checkpoint still gives a readable message.
  std::string message = fmt::format("{}: checkpoint does not match model '{}'", path_, spec.name);
  if (!missing.empty()) {
    message += fmt::format("\n  {} tensor{} missing: {}", missing.size(), missing.size() > 1 ? "s" : "",
                           listing(missing, 5));
  }
  constexpr size_t kShownMismatches = 10;
  for (size_t i = 0; i < mismatched.size() && i < kShownMismatches; ++i) message += "\n  " + mismatched[i];
  if (mismatched.size() > kShownMismatches) {
    message += fmt::format("\n  ... and {} more tensors of the wrong shape or dtype",
                           mismatched.size() - kShownMismatches);
  }
  if (!unexpected.empty()) {
    message += fmt::format("\n  {} unexpected tensor{} the spec does not use: {}", unexpected.size(),
                           unexpected.size() > 1 ? "s" : "", listing(unexpected, 5));
  }
  TG_THROW("{}", message);
}

}  // namespace tiergen::model
