#pragma once
// When the CPU kernels multiply one W row at a time.
#include <cstdint>

namespace tiergen::kernels::detail {

// Up to this many rows of x (decode at batch 1), the AVX-512 BF16 kernels multiply one
// W row at a time, reading W front to back. Their tiles of several W rows read those rows
// side by side: a few stream positions a row's length apart, which the cores' hardware
// prefetchers follow at about half the rate of one stream. On a 2-core Zen 4 guest, one
// core read 64 MB at 20 GB/s front to back and at 9 GB/s as four interleaved 1 KiB
// rows, and the AVX-512 BF16 4-bit kernel's decode loop ran 1.7x as fast from memory one
// W row at a time (13.6 against 22.6 GB/s on both cores). A W row's sums keep their
// order whatever the tile, so this never changes a result's bits. (bf16 weights, one
// row: 1.32x; 4-bit: 1.49x; bench_matmul, the same host.) The AVX2 kernels keep their
// tiles: one W row is one chain of 8-lane FMAs there, bound by the FMA's latency (fp32
// and 4-bit decode products ran 0.93-0.95x one W row at a time on that Zen 4), except
// fp32 weights where small_matmul_one_row_sequential() says (on by default on Zen 5,
// whose fp32 batch-1 decode ran 1.07-1.21x one W row at a time, prefetched 4 KiB ahead).
constexpr int64_t kRowSequentialMaxRows = 1;

}  // namespace tiergen::kernels::detail
