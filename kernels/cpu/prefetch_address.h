#pragma once
// The address a software prefetch reads ahead of a stream. Computed as an integer: it may
// lie past the stream's allocation, which pointer arithmetic may not reach, and a
// prefetch never faults.
#include <cstdint>

namespace tiergen::kernels::detail {

inline const char* prefetch_address(const void* p, int64_t ahead_bytes) {
  return reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + uintptr_t(ahead_bytes));
}

}  // namespace tiergen::kernels::detail
