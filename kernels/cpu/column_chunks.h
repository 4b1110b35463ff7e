#pragma once
// The split of a matrix product's output columns (rows of W) between OpenMP threads,
// shared by the small-row kernels: long contiguous runs of chunks, so each thread
// streams its own part of W, and one thread when W is too small to repay waking the
// others. Which thread computes a column never changes the column's result.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace tiergen::kernels::detail {

// Columns per scheduling unit: a multiple of the kernels' tiles, so only the last
// chunk has a tail.
constexpr int64_t kColumnsPerChunk = 16;
// Below this many weight elements one thread is faster than waking the others.
constexpr int64_t kParallelMinWeights = 1 << 15;

// How [0, n) splits: chunks, and the threads (1 when waking others does not pay).
struct ColumnSplit {
  int64_t chunks = 0;
  int threads = 1;
  bool parallel() const { return threads > 1; }
};

inline ColumnSplit column_split(int64_t n, int64_t k, int num_threads) {
  ColumnSplit s;
  s.chunks = (n + kColumnsPerChunk - 1) / kColumnsPerChunk;
  const int threads = num_threads > 0 ? num_threads : omp_get_max_threads();
  if (threads > 1 && s.chunks > 1 && n * k >= kParallelMinWeights) s.threads = threads;
  return s;
}

// Calls columns(j0, j1) over [0, n) in chunks; num_threads 0 means the OpenMP default.
// Guided: each thread first takes a long contiguous run (a share of the chunks, then a
// share of what is left, shrinking), so it still streams its own part of W, and the
// last short runs go to whichever thread is free. A static split made the faster
// thread wait at the product's end whenever the two cores ran at different speeds (a
// virtual machine's vCPUs often do): on a 2-core Zen 4 guest, one TinyLlama layer's
// seven bf16 products at 128 rows took 3-5% less on average (four runs, interleaved
// layer by layer against the static split), and 1, 4 and 16 rows took as long or less.
template <class Columns>
void for_each_column_chunk(int64_t n, int64_t k, int num_threads, const Columns& columns) {
  const ColumnSplit split = column_split(n, k, num_threads);
  const int64_t chunks = split.chunks;
  const int threads = split.threads;
  const bool parallel = split.parallel();
#pragma omp parallel for schedule(guided) num_threads(threads) if (parallel)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t j0 = c * kColumnsPerChunk;
    columns(j0, std::min(n, j0 + kColumnsPerChunk));
  }
}

// The same columns in a few calls per thread, each a contiguous run of whole chunks: for
// a kernel whose per-call setup (AMX's tile configuration, a level table, a buffer of
// scales) should be paid once per run, not once per chunk. Guided like
// for_each_column_chunk: a thread takes 1/threads of the chunks left, then comes back
// for a share of what is left then, so the runs shrink to single chunks and a faster
// thread takes the last ones. A static split, one run per thread, made the faster
// thread wait at each product's end: on a 2-core Zen 5 guest, 4-bit decode at batch 1
// spent 8% of its products' time in the end barrier (perf, both threads).
template <class Columns>
void for_each_thread_columns(int64_t n, int64_t k, int num_threads, const Columns& columns) {
  const ColumnSplit split = column_split(n, k, num_threads);
  if (!split.parallel()) {
    columns(0, n);
    return;
  }
  const int64_t chunks = split.chunks;
  const int threads = split.threads;
  std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(threads)
  for (;;) {
    int64_t first = next.load(std::memory_order_relaxed), count = 0;
    do {
      count = (chunks - first + threads - 1) / threads;
    } while (count > 0 && !next.compare_exchange_weak(first, first + count, std::memory_order_relaxed));
    if (count <= 0) break;
    columns(first * kColumnsPerChunk, std::min(n, (first + count) * kColumnsPerChunk));
  }
}

}  // namespace tiergen::kernels::detail
