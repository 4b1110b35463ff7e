#pragma once
// Whether a copy between two [n, len, width] views can be one 2-D copy
// (cudaMemcpy2DAsync): rows of len * width contiguous elements, `n` of them, each side's
// rows a fixed pitch apart, as prefixes of the unit-major KV caches are. The decision is
// kept apart from the CUDA call so that its checks are tested on every machine.
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

namespace tiergen::runtime {

// The largest pitch cudaMemcpy2D accepts (cudaDevAttrMaxPitch, 2^31 - 1 bytes on every
// CUDA GPU so far): a longer one fails the call with cudaErrorInvalidPitchValue.
constexpr uint64_t kMaxCopyPitchBytes = (uint64_t(1) << 31) - 1;

struct PitchedRows {
  uint64_t width_bytes = 0;  // bytes of one row
  uint64_t src_pitch = 0;    // bytes from one source row to the next
  uint64_t dst_pitch = 0;
  uint64_t rows = 0;
};

// True for a 3-D view whose rows (dims 1 and 2) are contiguous.
bool is_row_pitched(const at::Tensor& t);

// The 2-D copy of src into dst, or nullopt when the copy must go another way: different
// types or shapes, a view that is not row-pitched, both sides contiguous (one plain
// copy), nothing to copy, or a pitch the 2-D copy cannot take (below the row's width,
// where rows would overlap, or above kMaxCopyPitchBytes).
std::optional<PitchedRows> pitched_rows(const at::Tensor& dst, const at::Tensor& src);

}  // namespace tiergen::runtime
