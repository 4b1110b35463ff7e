#pragma once
// The revision of the CPU product kernels (small_matmul, quantized_matmul) whose speed a
// hardware profile's CPU product tables record. Bump it with any change that moves
// their speed: a table timed at another revision, or at another kernel level
// (cpu_features.h), prices products the run will not make at those rates, and this
// host's cached profile re-times it (src/cli/host_profile.cpp).
//   1: tables timed before revisions were recorded (a kernel path, no revision)
//   2: the AVX2 small-row kernel in tiles of 4 x 3, cache-blocked from 8 rows of x
//   3: the AVX2 in-place quantized kernel converts a tile's levels once for up to 32
//      rows of x (from 8 rows on)
//   4: fp32 x on AVX-512 runs sixteen lanes a step (small_matmul_avx512_f32.cpp), and
//      the AVX2 kernel's k tail is explicit FMAs (a k not a multiple of 8 may change
//      last bits against revision 3); the AVX-512 BF16 4-bit kernel prefetches the W
//      rows' scales and mins; the AVX-512 BF16 kernel takes 6 W rows per tile from 4
//      rows of x on
//   5: product weights timed on huge pages, as the runs' dense weight homes now are
//      (common/huge_pages.h); 4-bit rows dequantized 32 levels a step on AVX-512 BF16
//   6: the AVX-512 fp32 kernel blocks from 80 rows of x (was 8)
//   7: the kernels that set up per call (AVX-512 BF16 4-bit, AMX) take columns in
//      guided runs (column_chunks.h), not one static share per thread; the AVX-512
//      BF16 4-bit kernel widens 16 W rows' scales at once; quantized_matmul prepares
//      x without a per-element index and sums 8 groups side by side (same bits)
//   8: the AVX-512 BF16 small-row kernel is cache-blocked from 32 rows of x where its
//      W tiles span more than 24 KiB (k past 2048; same bits)
//   9: AVX-512 BF16 4-bit rows dequantized by table lookup with the packed bytes
//      prefetched (same bits)
//  10: the AVX-512 BF16 small-row kernel blocks x in up to 512 KiB, spans of 2048
//      elements (was the fp32 kernels' 256 KiB and 1024; same bits)
//  11: AVX2 4-bit rows dequantized into 16-bit types by table lookup (same bits)
//  12: the fp32-x kernels (AVX2, AVX-512 fp32) prefetch W rows 2 KiB ahead where a
//      product streams them (w_stream_prefetch.h; same bits)
//  13: compressed prefill products multiply dequantized tiles on every kernel (x made
//      ready once per product: SmallMatmulX), and the tables time the in-place
//      compressed products' call cost (QuantizedProductRates::call_seconds)
//  14: one row of fp32 x multiplies one W row at a time, 4 KiB ahead, where
//      small_matmul_one_row_sequential() (Zen 5 by default; same bits)
//  15: the AVX-512 fp32 kernel multiplies 16-bit weights widened to fp32 a chunk of W
//      rows at a time from 64 rows of x (same bits)
//  16: one W row at a time (14) for fp32 weights only: 16-bit weights at one row are in
//      tiles again (same bits)
//  17: the AVX-512 BF16 4-bit kernel multiplies four W rows by tiles of four x rows laid
//      out group by group (PreparedX::tiles_bf16), from four rows of x (same bits)
namespace tiergen::kernels {

constexpr int kCpuProductKernelsRevision = 17;

}  // namespace tiergen::kernels
