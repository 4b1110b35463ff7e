// Reading and validating safetensors files. The header is parsed from a byte buffer
// (parse_safetensors_header) so that the same checks serve the memory-mapped file and
// a fuzz target; SafetensorsFile only adds the mapping around it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "tiergen/common/error.h"
#include "tiergen/common/strict_json.h"
#include "tiergen/common/json_describe.h"
#include "tiergen/model/safetensors.h"

namespace tiergen::model {

using nlohmann::json;

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
  }
  TG_THROW("invalid DType value {}", static_cast<int>(dtype));
}

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
  }
  TG_THROW("invalid DType value {}", static_cast<int>(dtype));
}

DType parse_safetensors_dtype(const std::string& text, const std::string& file, const std::string& tensor) {
  if (text == "F32") return DType::F32;
  if (text == "F16") return DType::F16;
  if (text == "BF16") return DType::BF16;
  TG_THROW("{}: tensor '{}' has unsupported dtype '{}' (tiergen reads F32, F16 and BF16)", file, tensor, text);
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

namespace {

// Element sizes of every dtype the safetensors format defines, so that tensors tiergen
// does not compute with can still be checked for size and overlap.
size_t any_dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// Parses the header, refusing a repeated key: nlohmann keeps only the last value of
// one, which would silently hide a tensor.
json parse_json_rejecting_duplicates(const char* begin, const char* end, const std::string& path) {
  StrictJson doc;
  try {
    doc = parse_json_noting_repeated_keys(begin, end);
  } catch (const json::exception& e) {
    TG_THROW("{}: safetensors header is not valid JSON: {}", path, e.what());
  }
  TG_CHECK(!doc.repeated_key, "{}: safetensors header names '{}' more than once", path, doc.repeated_key.value_or(""));
  return std::move(doc.value);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A tensor entry as the header states it, before it is split by dtype support.
struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the data section
};

Entry parse_entry(const std::string& name, const json& value, const std::string& path) {
  TG_CHECK(!name.empty(), "{}: safetensors header has a tensor with an empty name", path);
  TG_CHECK(value.is_object(), "{}: tensor '{}': header entry is a JSON {}, not an object", path, name,
           value.type_name());
  for (const auto& [key, unused] : value.items()) {
    TG_CHECK(key == "dtype" || key == "shape" || key == "data_offsets",
             "{}: tensor '{}': unknown header field '{}' (expected dtype, shape, data_offsets)", path, name, key);
  }
  Entry e;
  e.name = name;
  TG_CHECK(value.contains("dtype") && value.at("dtype").is_string(), "{}: tensor '{}': missing or non-string 'dtype'",
           path, name);
  e.dtype = value.at("dtype").get<std::string>();
  TG_CHECK(any_dtype_size(e.dtype) != 0, "{}: tensor '{}': unknown dtype '{}'", path, name, e.dtype);

  TG_CHECK(value.contains("shape") && value.at("shape").is_array(), "{}: tensor '{}': missing or non-array 'shape'",
           path, name);
  for (const auto& dim : value.at("shape")) {
    // nlohmann stores non-negative integer literals as unsigned; anything else (negative,
    // fractional, exponent, string) is not a dimension.
    TG_CHECK(dim.is_number_unsigned() && dim.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()),
             "{}: tensor '{}': shape has a dimension that is not a non-negative integer: {}", path, name,
             describe_json_value(dim));
    e.shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
  }

  TG_CHECK(value.contains("data_offsets"), "{}: tensor '{}': missing 'data_offsets'", path, name);
  const json& offsets = value.at("data_offsets");
  TG_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
               offsets[1].is_number_unsigned(),
           "{}: tensor '{}': data_offsets ({}) is not a pair of non-negative integers", path, name,
           describe_json_value(offsets));
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  TG_CHECK(e.begin <= e.end, "{}: tensor '{}': data_offsets [{}, {}] end before they begin", path, name, e.begin,
           e.end);
  return e;
}

// product(shape) * element size, or an error when it does not fit 64 bits.
uint64_t expected_bytes(const Entry& e, const std::string& path) {
  const bool empty = std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end();
  if (empty) return 0;
  uint64_t n = any_dtype_size(e.dtype);
  for (auto d : e.shape) {
    TG_CHECK(!__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n), "{}: tensor '{}': shape {} is too large", path,
             e.name, shape_text(e.shape));
  }
  return n;
}

std::map<std::string, std::string> parse_metadata(const json& value, const std::string& path) {
  TG_CHECK(value.is_object(), "{}: safetensors '__metadata__' is a JSON {}, not an object of strings", path,
           value.type_name());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, v] : value.items()) {
    TG_CHECK(v.is_string(), "{}: safetensors '__metadata__' entry '{}' is a JSON {}, not a string", path, key,
             v.type_name());
    metadata[key] = v.get<std::string>();
  }
  return metadata;
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& path) {
  TG_CHECK(size >= 8, "{}: file is {} bytes, too short for a safetensors header (at least 8)", path, size);
  TG_CHECK(data != nullptr, "{}: no data", path);
  SafetensorsHeader h;
  h.header_size = read_le64(data);
  TG_CHECK(h.header_size <= kMaxSafetensorsHeaderBytes,
           "{}: safetensors header length {} is absurd (limit {} bytes); not a safetensors file?", path,
           h.header_size, kMaxSafetensorsHeaderBytes);
  TG_CHECK(h.header_size <= size - 8, "{}: safetensors header length {} exceeds the file size {}", path,
           h.header_size, size);
  h.data_start = 8 + h.header_size;
  const uint64_t data_bytes = size - h.data_start;

  const char* text = reinterpret_cast<const char*>(data + 8);
  const json doc = parse_json_rejecting_duplicates(text, text + h.header_size, path);
  TG_CHECK(doc.is_object(), "{}: safetensors header is a JSON {}, not an object", path, doc.type_name());

  std::vector<Entry> entries;
  for (const auto& [name, value] : doc.items()) {
    if (name == "__metadata__") {
      h.metadata = parse_metadata(value, path);
      continue;
    }
    Entry e = parse_entry(name, value, path);
    TG_CHECK(e.end <= data_bytes,
             "{}: tensor '{}': data_offsets [{}, {}] reach past the end of the file (data section holds {} bytes)",
             path, name, e.begin, e.end, data_bytes);
    const uint64_t want = expected_bytes(e, path);
    TG_CHECK(e.end - e.begin == want,
             "{}: tensor '{}': data_offsets [{}, {}] hold {} bytes but shape {} of {} needs {}", path, name, e.begin,
             e.end, e.end - e.begin, shape_text(e.shape), e.dtype, want);
    entries.push_back(std::move(e));
  }

  // Overlap check over tensors sorted by start; empty tensors occupy no bytes.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Entry* previous = nullptr;
  for (const auto& e : entries) {
    if (e.begin == e.end) continue;
    TG_CHECK(previous == nullptr || previous->end <= e.begin,
             "{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", path, previous ? previous->name : "",
             previous ? previous->begin : 0, previous ? previous->end : 0, e.name, e.begin, e.end);
    previous = &e;
  }

  for (auto& e : entries) {
    const uint64_t offset = h.data_start + e.begin;
    if (e.dtype == "F32" || e.dtype == "F16" || e.dtype == "BF16") {
      TensorInfo t;
      t.name = std::move(e.name);
      t.dtype = parse_safetensors_dtype(e.dtype, path, t.name);
      t.shape = std::move(e.shape);
      t.file = path;
      t.file_offset = offset;
      t.nbytes = e.end - e.begin;
      t.data = data + offset;
      h.tensors.push_back(std::move(t));
    } else {
      h.unsupported.push_back(
          UnsupportedTensor{std::move(e.name), e.dtype, std::move(e.shape), path, offset, e.end - e.begin});
    }
  }
  return h;
}

// ---- SafetensorsFile

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TG_CHECK(fd >= 0, "{}: cannot open safetensors file: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    TG_THROW("{}: cannot stat safetensors file: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    TG_THROW("{}: not a regular file", path);
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ > 0) {
    // MAP_PRIVATE + PROT_READ: the file is never written through the mapping. No
    // prefetch advice: a model may be larger than memory, and the runtime decides what
    // to read when (disk-homed tensors bypass the mapping entirely).
    void* map = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    if (map == MAP_FAILED) {
      ::close(fd);
      TG_THROW("{}: cannot memory-map {} bytes: {}", path, file->size_, std::strerror(err));
    }
    file->map_ = map;
  }
  ::close(fd);  // the mapping keeps the file alive
  // On error `file` is destroyed and unmaps.
  file->header_ = parse_safetensors_header(static_cast<const uint8_t*>(file->map_), file->size_, path);
  for (size_t i = 0; i < file->header_.tensors.size(); ++i) file->index_[file->header_.tensors[i].name] = i;
  for (size_t i = 0; i < file->header_.unsupported.size(); ++i) {
    file->unsupported_index_[file->header_.unsupported[i].name] = i;
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

const UnsupportedTensor* SafetensorsFile::find_unsupported(const std::string& name) const {
  auto it = unsupported_index_.find(name);
  return it == unsupported_index_.end() ? nullptr : &header_.unsupported[it->second];
}

}  // namespace tiergen::model
