// libFuzzer target: the safetensors header parser (model::parse_safetensors_header).
// The input is a whole safetensors file. Contract checked beyond "no crash": the only
// exception is tiergen::Error, and every tensor the parser accepts lies inside the
// buffer with nbytes == numel * element size, so code that trusts the header (the
// runtime reads tensors straight from the file) never reads outside the file.
#include <cstdint>
#include <cstdlib>
#include <cstdio>

#include "tiergen/common/error.h"
#include "tiergen/model/safetensors.h"

namespace {

[[noreturn]] void fail(const char* what, const std::string& tensor) {
  std::fprintf(stderr, "fuzz_safetensors: contract broken: %s (tensor '%s')\n", what, tensor.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tiergen::model;
  SafetensorsHeader h;
  try {
    h = parse_safetensors_header(size ? data : nullptr, size, "fuzz.safetensors");
  } catch (const tiergen::Error&) {
    return 0;  // a clear error is the expected outcome for most inputs
  }
  if (h.data_start != 8 + h.header_size || h.data_start > size) fail("data_start outside the file", "");
  volatile uint8_t sink = 0;
  for (const auto& t : h.tensors) {
    const uint64_t element = dtype_size(t.dtype);
    uint64_t n = element;
    bool overflow = false, empty = false;
    for (int64_t d : t.shape) {
      if (d < 0) fail("negative dimension", t.name);
      empty |= d == 0;
      overflow |= __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n);
    }
    if (empty ? t.nbytes != 0 : (overflow || n != t.nbytes)) fail("nbytes != numel * element size", t.name);
    if (t.file_offset < h.data_start || t.file_offset > size || t.nbytes > size - t.file_offset) {
      fail("tensor bytes outside the file", t.name);
    }
    if (t.nbytes > 0) {
      if (t.data != data + t.file_offset) fail("data pointer does not match file_offset", t.name);
      sink ^= t.data[0];
      sink ^= t.data[t.nbytes - 1];  // ASan checks both ends are inside the input
    }
  }
  for (const auto& u : h.unsupported) {
    if (u.file_offset < h.data_start || u.file_offset > size || u.nbytes > size - u.file_offset) {
      fail("unsupported tensor bytes outside the file", u.name);
    }
  }
  (void)sink;
  return 0;
}
