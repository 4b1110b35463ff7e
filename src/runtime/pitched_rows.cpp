#include "src/runtime/pitched_rows.h"

namespace tiergen::runtime {

bool is_row_pitched(const at::Tensor& t) {
  return t.dim() == 3 && t.stride(2) == 1 && (t.size(1) <= 1 || t.stride(1) == t.size(2));
}

namespace {

bool pitch_fits(uint64_t pitch, uint64_t width_bytes) {
  return pitch >= width_bytes && pitch <= kMaxCopyPitchBytes;
}

}  // namespace

std::optional<PitchedRows> pitched_rows(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.scalar_type() != src.scalar_type() || dst.sizes() != src.sizes() || !is_row_pitched(dst) ||
      !is_row_pitched(src) || (dst.is_contiguous() && src.is_contiguous())) {
    return std::nullopt;  // (an empty view, or one of a single row, is contiguous)
  }
  const uint64_t elem = c10::elementSize(src.scalar_type());
  PitchedRows p;
  p.width_bytes = static_cast<uint64_t>(src.size(1) * src.size(2)) * elem;
  p.rows = static_cast<uint64_t>(src.size(0));
  // ATen strides are never negative; with two or more rows each side has its pitch.
  p.src_pitch = static_cast<uint64_t>(src.stride(0)) * elem;
  p.dst_pitch = static_cast<uint64_t>(dst.stride(0)) * elem;
  if (!pitch_fits(p.src_pitch, p.width_bytes) || !pitch_fits(p.dst_pitch, p.width_bytes)) return std::nullopt;
  return p;
}

}  // namespace tiergen::runtime
