#pragma once
// Timing and bandwidth helpers shared by the kernel benchmarks: interleaved rounds
// (a kernel and its baselines see the same background load on a shared machine) and
// streaming copy/read baselines over buffers of a given size.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

namespace tiergen::bench {

// Median wall times in seconds of each function over reps rounds, after a warm-up.
// Each round runs every function once, so on a shared machine a kernel and its
// baseline see the same background load.
inline std::vector<double> interleaved_medians(int reps, const std::vector<std::function<void()>>& fns) {
  std::vector<std::vector<double>> t(fns.size());
  for (const auto& fn : fns) fn();
  for (int i = 0; i < reps; ++i) {
    for (size_t f = 0; f < fns.size(); ++f) {
      const auto t0 = std::chrono::steady_clock::now();
      fns[f]();
      t[f].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::vector<double> medians;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    medians.push_back(v[v.size() / 2]);
  }
  return medians;
}

// Parallel memcpy in per-thread contiguous chunks (how the kernels split work too).
inline void parallel_copy(void* dst, const void* src, size_t bytes) {
#pragma omp parallel
  {
    const size_t n = size_t(omp_get_num_threads()), i = size_t(omp_get_thread_num());
    const size_t chunk = (bytes / n + 63) & ~size_t(63);
    const size_t begin = std::min(bytes, i * chunk), end = std::min(bytes, begin + chunk);
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, end - begin);
  }
}

// Integer sum: vectorises without reassociation concerns, so it runs at memory speed.
inline uint64_t parallel_read(const uint64_t* p, size_t n) {
  uint64_t total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (size_t i = 0; i < n; ++i) total += p[i];
  return total;
}

inline double gbs(double bytes, double seconds) { return bytes / seconds / 1e9; }

// Bandwidth baselines over buffers as large as the fp16 K+V cache, timed in the same
// rounds as the kernels.
struct Streams {
  std::vector<char> src, dst;
  volatile uint64_t sink = 0;
  explicit Streams(size_t bytes) : src(bytes, 1), dst(bytes, 0) {}
  void copy() { parallel_copy(dst.data(), src.data(), src.size()); }
  void read() { sink = sink + parallel_read(reinterpret_cast<const uint64_t*>(src.data()), src.size() / 8); }
};

}  // namespace tiergen::bench
