#pragma once
// The safetensors format (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON mapping tensor names to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the byte after
// the header) plus an optional "__metadata__" string map, then the raw tensor bytes.
//
// Reading is strict: a checkpoint is user input, and the runtime later reads disk-homed
// tensors straight from these files at the offsets recorded here, so every offset and
// size is checked against the file before anything trusts it. Every failure is a
// tiergen::Error naming the file and, where there is one, the tensor.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace tiergen::model {

// Element types tiergen computes with. Other safetensors dtypes (I64, U8, F64, ...) are
// recognised so that files holding them still validate, but such tensors are listed
// apart (UnsupportedTensor) and are an error only when a model needs them.
enum class DType { F32, F16, BF16 };

size_t dtype_size(DType dtype);
// The safetensors spelling: "F32", "F16", "BF16".
std::string dtype_name(DType dtype);
// Parses a safetensors dtype string; anything but F32/F16/BF16 throws, naming the
// file, the tensor and the dtype.
DType parse_safetensors_dtype(const std::string& text, const std::string& file, const std::string& tensor);

// One tensor of a checkpoint file. `file_offset` is absolute (header included), so
// `file` can be read at [file_offset, file_offset + nbytes) without this object, e.g.
// by page-cache-bypassing reads. Offsets carry no alignment guarantee beyond what the
// writer chose (tiergen's writer and Hugging Face's align the data section to 8 bytes).
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::string file;
  uint64_t file_offset = 0;
  uint64_t nbytes = 0;
  // Into the read-only mapping of `file` (or the buffer given to
  // parse_safetensors_header); valid while its owner lives. Possibly unaligned.
  const uint8_t* data = nullptr;

  int64_t numel() const;
};

// A well-formed tensor whose dtype tiergen does not compute with.
struct UnsupportedTensor {
  std::string name;
  std::string dtype;  // as written in the file, e.g. "I64"
  std::vector<int64_t> shape;
  std::string file;
  uint64_t file_offset = 0;
  uint64_t nbytes = 0;
};

// Everything the header of one file says, validated against the file's size.
struct SafetensorsHeader {
  uint64_t header_size = 0;  // bytes of JSON (padding included) after the length field
  uint64_t data_start = 0;   // absolute offset of the data section: 8 + header_size
  std::vector<TensorInfo> tensors;  // in file-offset order
  std::vector<UnsupportedTensor> unsupported;
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Largest header accepted; real headers are well under 10 MB even for 175B models, so
// a bigger length field means a corrupt or hostile file.
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Validates a whole safetensors file held in memory (`data`, `size` bytes; `data` may be
// null when `size` is 0). `path` only names the file in errors and in TensorInfo::file.
// Never reads outside [data, data + size) and throws tiergen::Error on any bad input.
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& path);

// One safetensors file, memory-mapped read-only for its lifetime.
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_start() const { return header_.data_start; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::vector<UnsupportedTensor>& unsupported() const { return header_.unsupported; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // nullptr when the file has no tensor of that name with a supported dtype.
  const TensorInfo* find(const std::string& name) const;
  const UnsupportedTensor* find_unsupported(const std::string& name) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  void* map_ = nullptr;
  uint64_t size_ = 0;
  SafetensorsHeader header_;
  std::unordered_map<std::string, size_t> index_;
  std::unordered_map<std::string, size_t> unsupported_index_;
};

// ---- Writing (tools, tests, weight conversion).

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  uint64_t nbytes = 0;  // must equal product(shape) * dtype_size(dtype)
};

// Writes one file: header padded with spaces to a multiple of 8 bytes (as Hugging Face
// does, so the data section is 8-aligned), tensors in name order. The bytes go to
// `path` + ".tmp", are flushed, and only then renamed to `path`: a failure (bad input,
// full disk, unwritable directory) throws and leaves no file that looks complete.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes `dir`/model-0000i-of-0000N.safetensors shards of at most `max_shard_bytes` of
// tensor data each (a larger tensor gets a shard of its own), in name order, then
// `dir`/model.safetensors.index.json (last, so an interrupted write has no index).
// Returns the shard file names.
std::vector<std::string> write_safetensors_sharded(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                                                   uint64_t max_shard_bytes,
                                                   const std::map<std::string, std::string>& metadata = {});

}  // namespace tiergen::model
