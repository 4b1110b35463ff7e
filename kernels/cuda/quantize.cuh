#pragma once
// Group-wise quantization on the GPU, in the format of kernels/cpu/quantize.h and
// byte-identical to the CPU kernels for the same input: both evaluate the shared
// group arithmetic of kernels/cpu/quant_group.h with the same IEEE operations.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cpu/quantize.h"

namespace tiergen::kernels {

// Device pointers throughout; the work is enqueued on `stream` and runs asynchronously.
// Argument errors and launch failures throw tiergen::Error. A device kernel cannot
// throw, so a group holding a value the CPU version refuses (NaN, Inf, |x| > 65504)
// gets NaN min and scale (0x7E00), zero levels, and sets *error_flag (a device int,
// may be null) to 1; callers that need the check read the flag after synchronising.
void quantize_cuda(const void* src, ElemType type, int64_t rows, int64_t cols, QuantFormat format,
                   uint8_t* packed, uint16_t* mins, uint16_t* scales, int* error_flag,
                   cudaStream_t stream);

void dequantize_cuda(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales,
                     int64_t rows, int64_t cols, QuantFormat format, void* dst, ElemType type,
                     cudaStream_t stream);

}  // namespace tiergen::kernels
