// The CUDA quantizer writes the same bytes as the CPU one (CUDA builds only).
#include <gtest/gtest.h>

#ifdef TIERGEN_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/half.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cuda/quantize.cuh"

namespace tiergen::kernels {
namespace {

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << cudaGetErrorString(cudaGetLastError())

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Device buffer freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { cudaMalloc(&ptr, std::max<size_t>(bytes, 1)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  template <class T>
  T* as() const { return static_cast<T*>(ptr); }
};

std::vector<uint8_t> random_bytes(ElemType type, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<uint8_t> bytes(n * elem_size(type));
  for (int64_t i = 0; i < n; ++i) {
    // Mixed magnitudes, exact ties and constant runs exercise every rounding branch.
    float v = (i / 97) % 5 == 0 ? 1.5f : normal(rng) * std::pow(10.0f, float(i % 7) - 3.0f);
    if (type == ElemType::F32) {
      std::memcpy(&bytes[i * 4], &v, 4);
    } else {
      const uint16_t h = type == ElemType::F16 ? float_to_half(v) : float_to_bf16(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

TEST(KernelsQuantizeCuda, SameBytesAsCpu) {
  if (!have_gpu()) GTEST_SKIP() << "CUDA build but no GPU visible";
  for (ElemType type : {ElemType::F32, ElemType::F16, ElemType::BF16}) {
    for (int bits : {4, 8}) {
      for (int g : {4, 32, 64, 100}) {
        const int64_t rows = 57, cols = 333;
        SCOPED_TRACE(testing::Message() << elem_type_name(type) << " bits " << bits << " g " << g);
        const QuantFormat f{bits, g};
        const QuantizedLayout l = quantized_layout(rows, cols, f);
        const std::vector<uint8_t> src = random_bytes(type, rows * cols, uint32_t(bits * 1000 + g));
        std::vector<uint8_t> packed(l.packed_bytes());
        std::vector<uint16_t> mins(l.meta_elems()), scales(l.meta_elems());
        quantize(src.data(), type, rows, cols, f, packed.data(), mins.data(), scales.data());

        DeviceBuffer d_src(src.size()), d_packed(packed.size()), d_mins(mins.size() * 2),
            d_scales(scales.size() * 2), d_flag(sizeof(int)), d_out(src.size());
        ASSERT_CUDA(cudaMemcpy(d_src.ptr, src.data(), src.size(), cudaMemcpyHostToDevice));
        ASSERT_CUDA(cudaMemset(d_flag.ptr, 0, sizeof(int)));
        quantize_cuda(d_src.ptr, type, rows, cols, f, d_packed.as<uint8_t>(), d_mins.as<uint16_t>(),
                      d_scales.as<uint16_t>(), d_flag.as<int>(), nullptr);
        dequantize_cuda(d_packed.as<uint8_t>(), d_mins.as<uint16_t>(), d_scales.as<uint16_t>(), rows, cols, f,
                        d_out.ptr, type, nullptr);
        ASSERT_CUDA(cudaDeviceSynchronize());

        std::vector<uint8_t> g_packed(packed.size()), g_out(src.size()), c_out(src.size());
        std::vector<uint16_t> g_mins(mins.size()), g_scales(scales.size());
        int flag = -1;
        ASSERT_CUDA(cudaMemcpy(g_packed.data(), d_packed.ptr, g_packed.size(), cudaMemcpyDeviceToHost));
        ASSERT_CUDA(cudaMemcpy(g_mins.data(), d_mins.ptr, g_mins.size() * 2, cudaMemcpyDeviceToHost));
        ASSERT_CUDA(cudaMemcpy(g_scales.data(), d_scales.ptr, g_scales.size() * 2, cudaMemcpyDeviceToHost));
        ASSERT_CUDA(cudaMemcpy(g_out.data(), d_out.ptr, g_out.size(), cudaMemcpyDeviceToHost));
        ASSERT_CUDA(cudaMemcpy(&flag, d_flag.ptr, sizeof(int), cudaMemcpyDeviceToHost));
        dequantize(packed.data(), mins.data(), scales.data(), rows, cols, f, c_out.data(), type);

        EXPECT_EQ(flag, 0);
        EXPECT_EQ(g_packed, packed);
        EXPECT_EQ(g_mins, mins);
        EXPECT_EQ(g_scales, scales);
        EXPECT_EQ(g_out, c_out);
      }
    }
  }
}

TEST(KernelsQuantizeCuda, NonFiniteInputSetsTheErrorFlag) {
  if (!have_gpu()) GTEST_SKIP() << "CUDA build but no GPU visible";
  std::vector<float> x(2 * 64, 1.0f);
  x[64 + 3] = NAN;
  DeviceBuffer d_src(x.size() * 4), d_packed(64), d_mins(4), d_scales(4), d_flag(sizeof(int));
  ASSERT_CUDA(cudaMemcpy(d_src.ptr, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemset(d_flag.ptr, 0, sizeof(int)));
  quantize_cuda(d_src.ptr, ElemType::F32, 2, 64, {4, 64}, d_packed.as<uint8_t>(), d_mins.as<uint16_t>(),
                d_scales.as<uint16_t>(), d_flag.as<int>(), nullptr);
  ASSERT_CUDA(cudaDeviceSynchronize());
  int flag = 0;
  uint16_t mins[2];
  ASSERT_CUDA(cudaMemcpy(&flag, d_flag.ptr, sizeof(int), cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaMemcpy(mins, d_mins.ptr, 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(flag, 1);
  EXPECT_EQ(mins[0], float_to_half(1.0f));
  EXPECT_EQ(mins[1], 0x7E00);
}

}  // namespace
}  // namespace tiergen::kernels

#else  // !TIERGEN_WITH_CUDA

TEST(KernelsQuantizeCuda, SameBytesAsCpu) {
  GTEST_SKIP() << "CPU-only build: the CUDA quantizer is compiled (tiergen_cuda_compile_check) but "
                  "not linked; its CPU comparison runs in CUDA builds";
}

#endif  // TIERGEN_WITH_CUDA
