// Writing safetensors files, single or sharded with a Hugging Face style index. Every
// file is written beside its final name and renamed into place only when complete, so
// a crash or error never leaves a truncated file under a name readers would open.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tiergen/common/error.h"
#include "tiergen/model/safetensors.h"

namespace tiergen::model {

namespace {

// A file under construction at `path`.tmp; removed unless commit() renames it to `path`.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    TG_CHECK(fd_ >= 0, "{}: cannot create {}: {}", path_, tmp_, std::strerror(errno));
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, uint64_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (size > 0) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size, 1u << 30));
      const ssize_t n = ::write(fd_, p, chunk);
      if (n < 0 && errno == EINTR) continue;
      TG_CHECK(n > 0, "{}: write failed: {}", path_, n < 0 ? std::strerror(errno) : "no progress");
      p += n;
      size -= static_cast<uint64_t>(n);
    }
  }

  // Data reaches the disk before the rename publishes it.
  void commit() {
    TG_CHECK(::fsync(fd_) == 0, "{}: fsync failed: {}", path_, std::strerror(errno));
    const int rc = ::close(fd_);
    fd_ = -1;
    TG_CHECK(rc == 0, "{}: close failed: {}", path_, std::strerror(errno));
    TG_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, "{}: cannot rename {} into place: {}", path_, tmp_,
             std::strerror(errno));
    committed_ = true;
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

void check_tensor(const TensorToWrite& t, const std::string& path) {
  TG_CHECK(!t.name.empty(), "{}: cannot write a tensor with an empty name", path);
  TG_CHECK(t.name != "__metadata__", "{}: '__metadata__' is reserved and cannot name a tensor", path);
  uint64_t n = dtype_size(t.dtype);
  bool overflow = false;
  for (auto d : t.shape) {
    TG_CHECK(d >= 0, "{}: tensor '{}' has a negative dimension {}", path, t.name, d);
    overflow |= __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n);
  }
  TG_CHECK(!overflow, "{}: tensor '{}' is too large", path, t.name);
  TG_CHECK(n == t.nbytes, "{}: tensor '{}' has {} bytes of data but its shape and dtype {} need {}", path, t.name,
           t.nbytes, dtype_name(t.dtype), n);
  TG_CHECK(t.nbytes == 0 || t.data != nullptr, "{}: tensor '{}' has no data pointer", path, t.name);
}

// Tensors in name order, after checking each and that names are unique.
std::vector<const TensorToWrite*> sorted_checked(const std::vector<TensorToWrite>& tensors, const std::string& path) {
  std::vector<const TensorToWrite*> order;
  for (const auto& t : tensors) {
    check_tensor(t, path);
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
  for (size_t i = 1; i < order.size(); ++i) {
    TG_CHECK(order[i]->name != order[i - 1]->name, "{}: tensor '{}' is given twice", path, order[i]->name);
  }
  return order;
}

void write_file(const std::string& path, const std::vector<const TensorToWrite*>& order,
                const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps "__metadata__" first and the tensors in name order, as written.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) header["__metadata__"][key] = value;
  }
  uint64_t offset = 0;
  for (const auto* t : order) {
    header[t->name] = {{"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->nbytes}}};
    offset += t->nbytes;
  }
  std::string text = header.dump();
  // Pad so that the data section starts 8-aligned (the length field is 8 bytes).
  text.append((8 - text.size() % 8) % 8, ' ');
  TG_CHECK(text.size() <= kMaxSafetensorsHeaderBytes, "{}: header of {} bytes is too large", path, text.size());

  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(uint64_t(text.size()) >> (8 * i));
  AtomicFile file(path);
  file.write(length, sizeof length);
  file.write(text.data(), text.size());
  for (const auto* t : order) file.write(t->data, t->nbytes);
  file.commit();
}

std::string shard_name(size_t index, size_t count) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index + 1, count);
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_file(path, sorted_checked(tensors, path), metadata);
}

std::vector<std::string> write_safetensors_sharded(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                                                   uint64_t max_shard_bytes,
                                                   const std::map<std::string, std::string>& metadata) {
  TG_CHECK(max_shard_bytes > 0, "{}: max_shard_bytes must be positive", dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TG_CHECK(!ec, "{}: cannot create directory: {}", dir, ec.message());

  const auto order = sorted_checked(tensors, dir);
  std::vector<std::vector<const TensorToWrite*>> shards;
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (const auto* t : order) {
    if (shards.empty() || (shard_bytes > 0 && shard_bytes + t->nbytes > max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(t);
    shard_bytes += t->nbytes;
    total_bytes += t->nbytes;
  }
  if (shards.empty()) shards.emplace_back();  // an empty model still gets one (empty) shard

  std::vector<std::string> names;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    names.push_back(shard_name(i, shards.size()));
    write_file(dir + "/" + names.back(), shards[i], metadata);
    for (const auto* t : shards[i]) weight_map[t->name] = names.back();
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";
  AtomicFile file(dir + "/model.safetensors.index.json");
  file.write(text.data(), text.size());
  file.commit();
  return names;
}

}  // namespace tiergen::model
