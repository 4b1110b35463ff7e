// Checkpoint: single-file and sharded model directories, index consistency, the
// "model." prefix fallback, and validation against a model::Spec.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "tiergen/common/error.h"
#include "tiergen/model/checkpoint.h"
#include "tiergen/model/weight_source.h"
#include "tests/support/temp_dir.h"

namespace tiergen::model {
namespace {

namespace fs = std::filesystem;

Spec tiny_opt(bool tied = true) {
  nlohmann::json c = {{"architectures", {"OPTForCausalLM"}}, {"hidden_size", 8},  {"ffn_dim", 16},
                      {"num_hidden_layers", 2},              {"num_attention_heads", 2},
                      {"max_position_embeddings", 6},        {"vocab_size", 12}, {"tie_word_embeddings", tied}};
  return spec_from_config(c, "tiny-opt");
}

Spec tiny_llama() {
  nlohmann::json c = {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 8}, {"intermediate_size", 12},
                      {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                      {"max_position_embeddings", 16}, {"vocab_size", 10}};
  return spec_from_config(c, "tiny-llama");
}

// Tensors for every checkpoint name a spec reads, with distinct F16 contents.
struct Weights {
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<TensorToWrite> tensors;

  void add(const std::string& name, const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    buffers.emplace_back(static_cast<size_t>(n) * 2);
    for (size_t i = 0; i < buffers.back().size(); ++i) buffers.back()[i] = static_cast<uint8_t>(i * 7 + buffers.size());
    tensors.push_back({name, DType::F16, shape, nullptr, buffers.back().size()});
  }
  // Data pointers are taken last: `buffers` reallocates while tensors are added.
  const std::vector<TensorToWrite>& finish() {
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = buffers[i].data();
    return tensors;
  }
  void erase(const std::string& name) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].name == name) {
        tensors.erase(tensors.begin() + i);
        buffers.erase(buffers.begin() + i);
        return;
      }
    }
    ADD_FAILURE() << "no tensor " << name;
  }
};

Weights weights_for(const Spec& spec, const std::string& strip_prefix = "") {
  Weights w;
  std::set<std::string> seen;
  for (const auto& layer : spec.weight_layers()) {
    for (const auto& t : layer.tensors) {
      if (!seen.insert(t.source_name).second) continue;
      std::string name = t.source_name;
      if (!strip_prefix.empty() && name.rfind(strip_prefix, 0) == 0) name = name.substr(strip_prefix.size());
      w.add(name, t.shape);
    }
  }
  return w;
}

class CheckpointTest : public ::testing::Test {
 protected:

  std::string validate_error(const Checkpoint& ckpt, const Spec& spec) {
    try {
      ckpt.validate_against(spec);
    } catch (const tiergen::Error& e) {
      return e.what();
    }
    return "<no error>";
  }
  std::string open_error(const std::string& path) {
    try {
      Checkpoint::open(path);
    } catch (const tiergen::Error& e) {
      return e.what();
    }
    return "<no error>";
  }
  nlohmann::json read_index() {
    std::ifstream in(dir_ + "/model.safetensors.index.json");
    return nlohmann::json::parse(in);
  }
  void write_index(const nlohmann::json& index) { std::ofstream(dir_ + "/model.safetensors.index.json") << index.dump(); }

  test::TempDir temp_{"tiergen-ckpt"};
  std::string dir_ = temp_.path;
};

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

TEST_F(CheckpointTest, SingleFileMatchesSpec) {
  const Spec spec = tiny_opt();
  Weights w = weights_for(spec);
  write_safetensors(dir_ + "/model.safetensors", w.finish());
  auto ckpt = Checkpoint::open(dir_);
  ASSERT_EQ(ckpt->files().size(), 1u);
  EXPECT_EQ(ckpt->files()[0], dir_ + "/model.safetensors");
  EXPECT_EQ(ckpt->names().size(), w.tensors.size());
  EXPECT_NO_THROW(ckpt->validate_against(spec));
  const TensorInfo& fc1 = ckpt->at("model.decoder.layers.1.fc1.weight");
  EXPECT_EQ(fc1.shape, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(fc1.dtype, DType::F16);
  // Opening the file itself, or the directory spelled with a trailing slash, gives the
  // same tensors and file names.
  EXPECT_EQ(Checkpoint::open(dir_ + "/model.safetensors")->names(), ckpt->names());
  EXPECT_EQ(Checkpoint::open(dir_ + "/")->at("model.decoder.final_layer_norm.bias").file, dir_ + "/model.safetensors");
}

// Reading weights: a NaN is an error naming the tensor, and a file cut shorter after
// it was opened and validated is an error naming the file (the mapped pages past its
// new end would otherwise kill the process with SIGBUS).
TEST_F(CheckpointTest, WeightsHoldingNaNOrCutAfterOpeningAreErrorsNotGarbageOrSigbus) {
  const Spec spec = tiny_opt();
  Weights w = weights_for(spec);
  for (auto& b : w.buffers) std::fill(b.begin(), b.end(), uint8_t{0});
  const std::string nan_tensor = "model.decoder.layers.1.fc1.weight";
  for (size_t i = 0; i < w.tensors.size(); ++i) {
    if (w.tensors[i].name == nan_tensor) w.buffers[i][1] = 0x7E;  // F16 0x7E00: a NaN
  }
  const std::string file = dir_ + "/model.safetensors";
  write_safetensors(file, w.finish());
  const auto weights = open_checkpoint_weights(dir_, spec);
  std::optional<TensorSpec> last;  // the tensor that ends the file
  const auto layers = spec.weight_layers();
  for (const auto& layer : layers) {
    for (const auto& t : layer.tensors) {
      if (t.source_name == nan_tensor) {
        try {
          weights->read(t, at::kFloat);
          ADD_FAILURE() << "NaN weights were read silently";
        } catch (const tiergen::Error& e) {
          expect_contains(e.what(), "'" + nan_tensor + "' holds non-finite values");
        }
        continue;
      }
      EXPECT_NO_THROW(weights->read(t, at::kFloat)) << t.source_name;
      if (!last || weights->file_tensor(t)->file_offset > weights->file_tensor(*last)->file_offset) last = t;
    }
  }
  ASSERT_TRUE(last.has_value());
  fs::resize_file(file, weights->file_tensor(*last)->file_offset);  // rewritten in place, shorter
  try {
    weights->read(*last, at::kFloat);
    ADD_FAILURE() << "a tensor past the file's new end was read";
  } catch (const tiergen::Error& e) {
    expect_contains(e.what(), file);
    expect_contains(e.what(), "shrank");
  }
}

// read_into (a home its owner allocated, e.g. on huge pages) holds the bits read()
// returns, converted the same way; its checks are read()'s: a NaN names the tensor, a
// home of another shape is refused.
TEST_F(CheckpointTest, ReadIntoAHomeHoldsWhatReadReturns) {
  const Spec spec = tiny_opt();
  Weights w = weights_for(spec);
  for (auto& b : w.buffers) {  // finite F16 values of both signs
    for (size_t e = 0; e + 1 < b.size(); e += 2) {
      const uint16_t bits = static_cast<uint16_t>(0x3C00 + (e * 37 % 1024)) | (e % 4 == 0 ? 0x8000 : 0);
      b[e] = static_cast<uint8_t>(bits & 0xFF);
      b[e + 1] = static_cast<uint8_t>(bits >> 8);
    }
  }
  const std::string nan_tensor = "model.decoder.layers.0.fc2.weight";
  for (size_t i = 0; i < w.tensors.size(); ++i) {
    if (w.tensors[i].name == nan_tensor) w.buffers[i][1] = 0x7E;  // F16 0x7E00: a NaN
  }
  write_safetensors(dir_ + "/model.safetensors", w.finish());
  const auto weights = open_checkpoint_weights(dir_, spec);
  int compared = 0;
  for (const auto& layer : spec.weight_layers()) {
    for (const auto& t : layer.tensors) {
      for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
        at::Tensor home = at::full(t.shape, 7.0, at::TensorOptions().dtype(dtype));
        if (t.source_name == nan_tensor) {
          EXPECT_THROW(weights->read_into(t, home), tiergen::Error);
          continue;
        }
        weights->read_into(t, home);
        EXPECT_TRUE(at::equal(home, weights->read(t, dtype))) << t.source_name << " as " << c10::toString(dtype);
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0);
  const auto layer1 = spec.weight_layers()[1].tensors;
  const auto fc1 = std::find_if(layer1.begin(), layer1.end(),
                                [](const TensorSpec& t) { return t.source_name.find("fc1.weight") != std::string::npos; });
  ASSERT_NE(fc1, layer1.end());
  ASSERT_EQ(fc1->shape, (std::vector<int64_t>{16, 8}));
  at::Tensor transposed = at::empty({8, 16}, at::kFloat);
  try {
    weights->read_into(*fc1, transposed);
    ADD_FAILURE() << "a home of another shape took " << fc1->source_name;
  } catch (const tiergen::Error& e) {
    expect_contains(e.what(), "'" + fc1->source_name + "'");
  }
}

TEST_F(CheckpointTest, ShardedRoundTripKeepsBytesAndOffsets) {
  const Spec spec = tiny_opt();
  Weights w = weights_for(spec);
  const auto shards = write_safetensors_sharded(dir_, w.finish(), 600);
  ASSERT_GT(shards.size(), 2u);
  auto ckpt = Checkpoint::open(dir_);
  EXPECT_EQ(ckpt->files().size(), shards.size());  // each shard opened once
  EXPECT_NO_THROW(ckpt->validate_against(spec));
  std::set<std::string> files_used;
  for (const auto& expected : w.tensors) {
    SCOPED_TRACE(expected.name);
    const TensorInfo* t = ckpt->find(expected.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->shape, expected.shape);
    EXPECT_EQ(t->nbytes, expected.nbytes);
    ASSERT_EQ(std::memcmp(t->data, expected.data, expected.nbytes), 0);
    std::ifstream in(t->file, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(t->file_offset));
    std::vector<char> on_disk(t->nbytes);
    in.read(on_disk.data(), static_cast<std::streamsize>(on_disk.size()));
    ASSERT_TRUE(in.good());
    EXPECT_EQ(std::memcmp(on_disk.data(), expected.data, expected.nbytes), 0);
    files_used.insert(t->file);
  }
  EXPECT_EQ(files_used.size(), shards.size());
}

TEST_F(CheckpointTest, IndexInconsistenciesAreErrors) {
  Weights w = weights_for(tiny_opt());
  const auto shards = write_safetensors_sharded(dir_, w.finish(), 600);
  const nlohmann::json good = read_index();

  nlohmann::json index = good;
  index["weight_map"]["model.decoder.ghost.weight"] = shards[0];
  write_index(index);
  std::string message = open_error(dir_);
  expect_contains(message, "'model.decoder.ghost.weight'");
  expect_contains(message, shards[0]);

  index = good;
  index["weight_map"].erase("model.decoder.layers.0.fc1.weight");
  write_index(index);
  message = open_error(dir_);
  expect_contains(message, "'model.decoder.layers.0.fc1.weight'");
  expect_contains(message, "not listed");

  index = good;
  index["weight_map"]["model.decoder.layers.0.fc1.weight"] = "model-00099-of-00099.safetensors";
  write_index(index);
  expect_contains(open_error(dir_), "model-00099-of-00099.safetensors");

  index = good;
  index["weight_map"]["model.decoder.layers.0.fc1.weight"] = "../elsewhere.safetensors";
  write_index(index);
  expect_contains(open_error(dir_), "not a file name in the model directory");

  std::ofstream(dir_ + "/model.safetensors.index.json") << "{\"weight_map\": ";
  message = open_error(dir_);
  expect_contains(message, "model.safetensors.index.json");
  expect_contains(message, "not valid JSON");

  write_index(nlohmann::json{{"metadata", nlohmann::json::object()}});
  expect_contains(open_error(dir_), "weight_map");
}

TEST_F(CheckpointTest, MissingDirectoryOrWeights) {
  expect_contains(open_error(dir_), "no model.safetensors");
  expect_contains(open_error(dir_ + "/absent"), "absent");
  fs::create_directory(dir_ + "/model.safetensors");  // there, but not a file
  expect_contains(open_error(dir_), "model.safetensors is not a regular file");
}

TEST_F(CheckpointTest, ValidateReportsMissingTensor) {
  const Spec spec = tiny_opt();
  Weights w = weights_for(spec);
  w.erase("model.decoder.layers.1.self_attn.k_proj.bias");
  write_safetensors(dir_ + "/model.safetensors", w.finish());
  const std::string message = validate_error(*Checkpoint::open(dir_), spec);
  expect_contains(message, dir_);
  expect_contains(message, "1 tensor missing: 'model.decoder.layers.1.self_attn.k_proj.bias' (shape [8])");
}

TEST_F(CheckpointTest, ValidateReportsWrongShape) {
  const Spec spec = tiny_opt();
  Weights w = weights_for(spec);
  for (auto& t : w.tensors) {
    if (t.name == "model.decoder.layers.0.fc2.weight") t.shape = {16, 8};  // transposed
  }
  write_safetensors(dir_ + "/model.safetensors", w.finish());
  const std::string message = validate_error(*Checkpoint::open(dir_), spec);
  expect_contains(message, dir_ + "/model.safetensors: tensor 'model.decoder.layers.0.fc2.weight'");
  expect_contains(message, "shape [16, 8], expected [8, 16]");
}

TEST_F(CheckpointTest, ValidateReportsUnexpectedTensorsButNotHarmlessExtras) {
  const Spec spec = tiny_opt(/*tied=*/true);
  Weights w = weights_for(spec);
  w.add("lm_head.weight", {12, 8});  // a saved copy of the tied embedding
  w.add("model.decoder.layers.0.self_attn.rotary_emb.inv_freq", {4});
  write_safetensors(dir_ + "/model.safetensors", w.finish());
  EXPECT_NO_THROW(Checkpoint::open(dir_)->validate_against(spec));

  w.add("model.decoder.layers.0.adapter.weight", {8});
  write_safetensors(dir_ + "/model.safetensors", w.finish());
  const std::string message = validate_error(*Checkpoint::open(dir_), spec);
  expect_contains(message, "1 unexpected tensor");
  expect_contains(message, "'model.decoder.layers.0.adapter.weight' (in " + dir_ + "/model.safetensors)");
}

TEST_F(CheckpointTest, UntiedHeadIsRequired) {
  const Spec spec = tiny_opt(/*tied=*/false);
  Weights w = weights_for(tiny_opt(true));
  write_safetensors(dir_ + "/model.safetensors", w.finish());
  expect_contains(validate_error(*Checkpoint::open(dir_), spec), "1 tensor missing: 'lm_head.weight'");
}

TEST_F(CheckpointTest, NamesWithoutModelPrefixAreFound) {
  const Spec spec = tiny_opt();
  Weights w = weights_for(spec, "model.");
  write_safetensors(dir_ + "/model.safetensors", w.finish());
  auto ckpt = Checkpoint::open(dir_);
  const TensorInfo* t = ckpt->find("model.decoder.layers.0.fc1.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->name, "decoder.layers.0.fc1.weight");
  EXPECT_EQ(ckpt->find("decoder.layers.0.fc1.weight"), t);
  EXPECT_EQ(ckpt->find("model.decoder.nothing"), nullptr);
  EXPECT_NO_THROW(ckpt->validate_against(spec));
}

TEST_F(CheckpointTest, LlamaCheckpointValidates) {
  const Spec spec = tiny_llama();
  Weights w = weights_for(spec);
  write_safetensors_sharded(dir_, w.finish(), 256);
  auto ckpt = Checkpoint::open(dir_);
  EXPECT_NO_THROW(ckpt->validate_against(spec));
  EXPECT_EQ(ckpt->at("model.layers.0.self_attn.k_proj.weight").shape, (std::vector<int64_t>{4, 8}));
  // A wholly different model: the message is capped but counts every problem.
  const std::string message = validate_error(*ckpt, tiny_opt());
  expect_contains(message, "tensors missing: 'model.decoder.embed_tokens.weight' (shape [12, 8])");
  expect_contains(message, "more)");
  expect_contains(message, "unexpected tensors the spec does not use");
}

TEST_F(CheckpointTest, UnsupportedDtypeIsAnErrorOnlyWhenUsed) {
  // A hand-made file: one F32 tensor and one I64 tensor.
  const std::string header =
      R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(uint64_t(header.size()) >> (8 * i));
  bytes += header + std::string(12, '\0');
  const std::string path = dir_ + "/model.safetensors";
  std::ofstream(path, std::ios::binary) << bytes;
  auto ckpt = Checkpoint::open(dir_);
  EXPECT_EQ(ckpt->names(), (std::vector<std::string>{"ids", "w"}));
  EXPECT_EQ(ckpt->find("ids"), nullptr);
  EXPECT_EQ(ckpt->at("w").nbytes, 4u);
  try {
    ckpt->at("ids");
    FAIL() << "I64 tensor returned";
  } catch (const tiergen::Error& e) {
    expect_contains(e.what(), path + ": tensor 'ids'");
    expect_contains(e.what(), "'I64'");
  }
}

}  // namespace
}  // namespace tiergen::model
