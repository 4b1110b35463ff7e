// CUDA kernels of the group-wise quantizer: one warp per group for quantization (the
// group's min/max is a warp reduction), one thread per packed byte for dequantization.
#include <algorithm>

#include "kernels/cpu/half.h"
#include "kernels/cpu/quant_group.h"
#include "kernels/cuda/quantize.cuh"
#include "tiergen/common/error.h"

namespace tiergen::kernels {
namespace {

constexpr int kThreads = 256;
constexpr uint16_t kHalfNaN = 0x7E00;

__device__ inline float load_as_float(const void* base, int type, int64_t i) {
  if (type == int(ElemType::F32)) return static_cast<const float*>(base)[i];
  const uint16_t bits = static_cast<const uint16_t*>(base)[i];
  return type == int(ElemType::F16) ? half_to_float(bits) : bf16_to_float(bits);
}

__device__ inline void store_from_float(void* base, int type, int64_t i, float v) {
  if (type == int(ElemType::F32)) {
    static_cast<float*>(base)[i] = v;
  } else {
    static_cast<uint16_t*>(base)[i] = type == int(ElemType::F16) ? float_to_half(v) : float_to_bf16(v);
  }
}

__global__ void quantize_kernel(const void* src, int type, int64_t rows, int64_t cols, int bits, int g,
                                int64_t groups_per_row, int64_t packed_per_row, uint8_t* packed,
                                uint16_t* mins, uint16_t* scales, int* error_flag) {
  const int lane = threadIdx.x & 31;
  const int64_t first_warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t num_warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  const int max_level = (1 << bits) - 1;
  for (int64_t grp = first_warp; grp < rows * groups_per_row; grp += num_warps) {
    const int64_t r = grp / groups_per_row, k = grp % groups_per_row;
    const int64_t j0 = k * g;
    const int n = int(min(int64_t(g), cols - j0));
    const int64_t base = r * cols + j0;
    float lo = INFINITY, hi = -INFINITY;
    bool bad = false;
    for (int i = lane; i < n; i += 32) {
      const float x = load_as_float(src, type, base + i);
      bad = bad || !(fabsf(x) <= kHalfMax);
      lo = fminf(lo, x);
      hi = fmaxf(hi, x);
    }
    for (int off = 16; off > 0; off >>= 1) {
      lo = fminf(lo, __shfl_xor_sync(0xFFFFFFFFu, lo, off));
      hi = fmaxf(hi, __shfl_xor_sync(0xFFFFFFFFu, hi, off));
    }
    bad = __any_sync(0xFFFFFFFFu, bad);
    uint8_t* out = packed + r * packed_per_row + k * g * bits / 8;
    const int group_bytes = g * bits / 8;
    if (bad) {
      if (lane == 0) {
        mins[grp] = kHalfNaN;
        scales[grp] = kHalfNaN;
        if (error_flag) atomicExch(error_flag, 1);
      }
      for (int b = lane; b < group_bytes; b += 32) out[b] = 0;
      continue;
    }
    // Every lane derives the same parameters from the same min/max.
    const quant::GroupParams p = quant::group_params(lo, hi, max_level);
    if (lane == 0) {
      mins[grp] = p.min_bits;
      scales[grp] = p.scale_bits;
    }
    for (int b = lane; b < group_bytes; b += 32) {
      uint32_t byte;
      if (bits == 8) {
        byte = b < n ? quant::quantize_value(load_as_float(src, type, base + b), p.min, p.scale, max_level) : 0;
      } else {
        const int e = 2 * b;
        const uint32_t q0 = e < n ? quant::quantize_value(load_as_float(src, type, base + e), p.min, p.scale, max_level) : 0;
        const uint32_t q1 = e + 1 < n ? quant::quantize_value(load_as_float(src, type, base + e + 1), p.min, p.scale, max_level) : 0;
        byte = q0 | (q1 << 4);
      }
      out[b] = uint8_t(byte);
    }
  }
}

// Two neighbouring elements of one row in one store (4-bit levels come in pairs):
// the element index is even and rows have an even length, so the address is aligned.
__device__ inline void store_pair(void* base, int type, uint32_t i, float v0, float v1) {
  if (type == int(ElemType::F32)) {
    reinterpret_cast<float2*>(static_cast<float*>(base) + i)[0] = make_float2(v0, v1);
    return;
  }
  const bool f16 = type == int(ElemType::F16);
  const uint32_t lo = f16 ? float_to_half(v0) : float_to_bf16(v0);
  const uint32_t hi = f16 ? float_to_half(v1) : float_to_bf16(v1);
  reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(base) + i)[0] = lo | (hi << 16);
}

// One thread per packed byte. `Index` is 32-bit when every index fits (the common
// case: 64-bit division costs several times more), 64-bit otherwise.
template <typename Index>
__global__ void dequantize_kernel(const uint8_t* __restrict__ packed, const uint16_t* __restrict__ mins,
                                  const uint16_t* __restrict__ scales, Index rows, Index cols, int bits, int g,
                                  Index groups_per_row, Index packed_per_row, void* dst, int type) {
  const Index total = rows * packed_per_row;
  const Index stride = Index(gridDim.x) * blockDim.x;
  const int per_byte = 8 / bits;
  const bool paired = per_byte == 2 && cols % 2 == 0;
  for (Index idx = Index(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const Index r = idx / packed_per_row, b = idx - r * packed_per_row;
    const uint8_t byte = packed[idx];
    const Index e0 = b * per_byte;  // first element of this byte within the row
    if (e0 >= cols) continue;
    const Index k = r * groups_per_row + e0 / g;  // a byte never straddles groups (g is even)
    const float lo = half_to_float(mins[k]), scale = half_to_float(scales[k]);
    if (paired) {
      store_pair(dst, type, r * cols + e0, quant::dequantize_value(byte & 0xF, lo, scale),
                 quant::dequantize_value(byte >> 4, lo, scale));
      continue;
    }
    for (int s = 0; s < per_byte && e0 + s < cols; ++s) {
      const uint32_t q = bits == 8 ? byte : (s ? byte >> 4 : byte & 0xF);
      store_from_float(dst, type, r * cols + e0 + s, quant::dequantize_value(q, lo, scale));
    }
  }
}

unsigned grid_for(int64_t threads_needed) {
  const int64_t blocks = (threads_needed + kThreads - 1) / kThreads;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(blocks, 1 << 20)));  // grid-stride beyond
}

// Before a launch: an error already pending comes from earlier asynchronous work, not
// from this kernel, and is reported as such.
void check_no_earlier_error(const char* what) {
  const cudaError_t err = cudaGetLastError();
  TG_CHECK(err == cudaSuccess, "CUDA error from earlier work, seen before {}: {}", what, cudaGetErrorString(err));
}

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  TG_CHECK(err == cudaSuccess, "{}: CUDA launch failed: {}", what, cudaGetErrorString(err));
}

// 32-bit indexing is safe when every index, plus one grid stride, stays below 2^31.
bool fits_32_bit(int64_t elements) { return elements < (int64_t(1) << 30); }

}  // namespace

void quantize_cuda(const void* src, ElemType type, int64_t rows, int64_t cols, QuantFormat format,
                   uint8_t* packed, uint16_t* mins, uint16_t* scales, int* error_flag,
                   cudaStream_t stream) {
  const QuantizedLayout layout = quantized_layout(rows, cols, format);
  if (rows == 0 || cols == 0) return;
  TG_CHECK(src && packed && mins && scales, "quantize_cuda: null pointer argument");
  check_no_earlier_error("quantize_cuda");
  quantize_kernel<<<grid_for(layout.meta_elems() * 32), kThreads, 0, stream>>>(
      src, int(type), rows, cols, format.bits, format.group_size, layout.groups_per_row,
      layout.packed_bytes_per_row, packed, mins, scales, error_flag);
  check_launch("quantize_cuda");
}

void dequantize_cuda(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales,
                     int64_t rows, int64_t cols, QuantFormat format, void* dst, ElemType type,
                     cudaStream_t stream) {
  const QuantizedLayout layout = quantized_layout(rows, cols, format);
  if (rows == 0 || cols == 0) return;
  TG_CHECK(packed && mins && scales && dst, "dequantize_cuda: null pointer argument");
  check_no_earlier_error("dequantize_cuda");
  const unsigned grid = grid_for(layout.packed_bytes());
  if (fits_32_bit(layout.packed_bytes()) && fits_32_bit(rows * cols)) {
    dequantize_kernel<uint32_t><<<grid, kThreads, 0, stream>>>(
        packed, mins, scales, uint32_t(rows), uint32_t(cols), format.bits, format.group_size,
        uint32_t(layout.groups_per_row), uint32_t(layout.packed_bytes_per_row), dst, int(type));
  } else {
    dequantize_kernel<int64_t><<<grid, kThreads, 0, stream>>>(
        packed, mins, scales, rows, cols, format.bits, format.group_size, layout.groups_per_row,
        layout.packed_bytes_per_row, dst, int(type));
  }
  check_launch("dequantize_cuda");
}

}  // namespace tiergen::kernels
