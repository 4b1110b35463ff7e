#include "src/runtime/pitched_rows.h"

namespace tiergen::runtime {

bool is_row_pitched(const at::Tensor& t) {
  return t.dim() == 3 && t.stride(2) == 1 && (t.size(1) <= 1 || t.stride(1) == t.size(2));
}

namespace {

// Bytes from one row to the next (ATen strides are never negative). A single row is
// taken as its own width apart; such a view is contiguous, so pitched_rows() declines
// it before asking.
uint64_t row_pitch(const at::Tensor& t, uint64_t width_bytes, uint64_t elem) {
  return t.size(0) <= 1 ? width_bytes : static_cast<uint64_t>(t.stride(0)) * elem;
}

bool pitch_fits(uint64_t pitch, uint64_t width_bytes) {
  return pitch >= width_bytes && pitch <= kMaxCopyPitchBytes;
}

}  // namespace

std::optional<PitchedRows> pitched_rows(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.scalar_type() != src.scalar_type() || dst.sizes() != src.sizes() || !is_row_pitched(dst) ||
      !is_row_pitched(src) || (dst.is_contiguous() && src.is_contiguous()) || dst.numel() == 0) {
    return std::nullopt;
  }
  const uint64_t elem = c10::elementSize(src.scalar_type());
  PitchedRows p;
  p.width_bytes = static_cast<uint64_t>(src.size(1) * src.size(2)) * elem;
  p.rows = static_cast<uint64_t>(src.size(0));
  p.src_pitch = row_pitch(src, p.width_bytes, elem);
  p.dst_pitch = row_pitch(dst, p.width_bytes, elem);
  if (!pitch_fits(p.src_pitch, p.width_bytes) || !pitch_fits(p.dst_pitch, p.width_bytes)) return std::nullopt;
  return p;
}

}  // namespace tiergen::runtime
