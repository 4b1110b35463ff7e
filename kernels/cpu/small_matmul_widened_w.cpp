// The AVX-512 fp32 kernel over 16-bit weights widened to fp32 first, a chunk of W rows at
// a time: for many rows of x, where converting each W element once per tile of eight x
// rows (four pairs) cost more than widening the chunk once.
#if defined(__x86_64__)
#include <memory>

#include "kernels/cpu/column_chunks.h"
#include "kernels/cpu/small_matmul_impl.h"
#include "tiergen/common/error.h"

namespace tiergen::kernels::detail {
namespace {

// From this many rows of x, 16-bit weights are widened (16 W rows at a time, in a buffer
// of each thread's). Widening is exact and the kernel's order the same, so the bits are
// those of the unwidened product. One TinyLlama layer of fp16 weights (bench_matmul
// --sections half, 2-core Zen 5 guest, two rounds, direct / widened ms): 128 rows 56.0 /
// 46.7 and 52.7 / 41.5, 256 rows 111.6 / 85.2 and 111.8 / 90.2, 64 rows 27.5 / 25.7 and
// 28.6 / 25.1; 32 rows alike (13.7 / 14.4, 13.5 / 13.2) and fewer rows slower widened
// (16: 7.2 / 10.4). The AVX2 kernel, which converts once per three rows, gained nothing
// (bf16 weights under TIERGEN_CPU_ISA=avx2, 64 and 128 rows: 0.85-1.0x) and keeps the
// direct form.
constexpr int64_t kWidenWMinRows = 64;

}  // namespace

bool widens_w(const SmallMatmulArgs& a) { return a.w_type != ElemType::F32 && a.rows >= kWidenWMinRows; }

void small_matmul_over_widened_w(const SmallMatmulArgs& a, const SmallMatmulShape& s) {
  const int threads = column_split(a.n, a.k, a.num_threads).threads;
  const size_t chunk_floats = size_t(kColumnsPerChunk) * size_t(a.k);
  const std::unique_ptr<float[]> widened(new float[size_t(threads) * chunk_floats]);  // not zeroed
  for_each_column_chunk(a.n, a.k, a.num_threads, [&](int64_t j0, int64_t j1) {
    // The chunk's thread in its own team: one thread when the product is not split.
    const int thread = threads > 1 ? omp_get_thread_num() : 0;
    TG_CHECK(thread < threads, "internal: thread {} of a product split {} ways", thread, threads);
    float* rows = widened.get() + size_t(thread) * chunk_floats;
    widen_w_rows_avx2(a, j0, j1, rows);
    SmallMatmulArgs chunk = a;
    chunk.w = rows;
    chunk.w_type = ElemType::F32;
    chunk.n = j1 - j0;
    chunk.bias = a.bias ? a.bias + j0 : nullptr;
    chunk.y = a.y + j0;  // s keeps y's row stride
    small_matmul_columns_avx512_f32(chunk, s, 0, chunk.n);
  });
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
