// With loaded_cache_attention_probe.h, the only policy/ code that uses LibTorch (ATen)
// for its measurements.
#include "policy/profiler.h"

#include "policy/disk_read_probe.h"
#include "policy/loaded_cache_attention_fit.h"
#include "policy/loaded_cache_attention_probe.h"
#include "policy/quietest_attempt.h"
#include "policy/runner_probe.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernels_revision.h"
#include "kernels/cpu/quantized_matmul.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/small_matmul.h"
#include "tiergen/common/kernel_elem_type.h"
#include "tiergen/common/torch_compat.h"
#include "tiergen/model/forward.h"
#include "tiergen/model/linear.h"
#include "tiergen/common/compute_threads.h"
#include "tiergen/common/error.h"
#include "tiergen/common/huge_pages.h"

#if defined(TIERGEN_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#endif

namespace tiergen::policy {

namespace {

using Clock = std::chrono::steady_clock;

// Repetitions, spread and attempts of the most recent timed point (timed_median) or
// probe (quietest_median_of), for record().
struct LastTiming {
  int runs = 0;
  double spread = 0;
  int attempts = 1;
};
LastTiming last_timing;

// What timing noisy points again may still cost the profile being measured (quietest_attempt.h):
// measure_host and measure_cpu_products set it.
double retime_seconds_left = 0;

// The median of a probe's samples (the runner probes measure theirs elsewhere), their
// spread, and how long the probe took.
PointTiming sample_timing(std::vector<double> samples, double seconds) {
  TG_CHECK(!samples.empty(), "profiler: no samples");
  std::sort(samples.begin(), samples.end());
  const double median = samples[samples.size() / 2];
  return {median, median > 0 ? (samples.back() - samples.front()) / median : 0, static_cast<int>(samples.size()),
          seconds};
}

// One attempt: `reps` timed calls (at least 3), no warm-up.
PointTiming repetitions(int reps, const std::function<void()>& fn, const std::function<void()>& sync) {
  reps = std::max(reps, 3);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    fn();
    sync();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  const double seconds = std::accumulate(times.begin(), times.end(), 0.0);
  PointTiming timing = sample_timing(std::move(times), seconds);
  timing.median = std::max(timing.median, 1e-9);  // a rate divides by it
  return timing;
}

// The median of `reps` timed calls (at least 3), no warm-up; the quietest of a few
// attempts where the first one's calls disagree (quietest_attempt.h).
double timed_median(int reps, const std::function<void()>& fn, const std::function<void()>& sync = [] {}) {
  const PointTiming timing = quietest_attempt([&] { return repetitions(reps, fn, sync); }, retime_seconds_left);
  last_timing = {timing.runs, timing.spread, timing.attempts};
  return timing.median;
}

// The median seconds of `reps` runs (at least 3) of `fn` after one warm-up.
double median_seconds(int reps, const std::function<void()>& fn, const std::function<void()>& sync = [] {}) {
  fn();
  sync();
  return timed_median(reps, fn, sync);
}

// median_seconds() with fewer repetitions (not under 3) where `reps` of them would take
// more than `budget` seconds, judged by the first (untimed) call: the CPU products are
// timed in three dtypes at up to 128 rows over a weight 4x the last-level cache, a
// second or more each on a 2-core guest, where nine repetitions made the full profile
// take 9.4 minutes.
double median_seconds_within(double budget, int reps, const std::function<void()>& fn) {
  const auto start = Clock::now();
  fn();
  const double first = std::chrono::duration<double>(Clock::now() - start).count();
  const int affordable = first > 0 ? int(budget / first) : reps;
  return timed_median(std::clamp(affordable, 3, std::max(reps, 3)), fn);
}

// The median of the samples `probe` returns; the quietest of a few runs of the probe
// where the first one's samples disagree (quietest_attempt.h), as timed_median does.
double quietest_median_of(const std::function<std::vector<double>()>& probe) {
  const PointTiming timing = quietest_attempt(
      [&] {
        const auto start = Clock::now();
        std::vector<double> samples = probe();
        return sample_timing(std::move(samples), std::chrono::duration<double>(Clock::now() - start).count());
      },
      retime_seconds_left);
  last_timing = {timing.runs, timing.spread, timing.attempts};
  return timing.median;
}

// Collects each measured number with the spread of its repetitions.
struct Recorder {
  std::vector<Measurement>* out = nullptr;
  double operator()(const std::string& name, double value, const std::string& unit) const {
    if (out != nullptr) out->push_back({name, value, unit, last_timing.runs, last_timing.spread, last_timing.attempts});
    return value;
  }
};

struct AlignedBuffer {
  explicit AlignedBuffer(size_t bytes) : size(bytes) {
    void* p = nullptr;
    TG_CHECK(posix_memalign(&p, 4096, bytes) == 0, "profiler: cannot allocate {} bytes", bytes);
    data.reset(static_cast<char*>(p));
    std::memset(p, 1, bytes);
  }
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data;
  size_t size;
};

double memcpy_bandwidth(size_t bytes, int reps) {
  AlignedBuffer a(bytes), b(bytes);
  return double(bytes) / median_seconds(reps, [&] { std::memcpy(b.data.get(), a.data.get(), bytes); });
}

// Sequential writes of a temp file; O_DIRECT bypasses the page cache where the
// filesystem supports it (tmpfs does not: then the number is memory speed). (Reads are
// timed as runs make them: disk_reads.)
double disk_write_bandwidth(const std::string& dir, size_t bytes, const Recorder& record) {
  const std::string path = (std::filesystem::path(dir) / ("tiergen-profile-" + std::to_string(getpid()))).string();
  int flags = O_RDWR | O_CREAT | O_TRUNC;
  int fd = ::open(path.c_str(), flags | O_DIRECT, 0600);
  const bool direct = fd >= 0;
  if (!direct) fd = ::open(path.c_str(), flags, 0600);
  TG_CHECK(fd >= 0, "profiler: cannot create a test file in --offload-dir {}: {}", dir, std::strerror(errno));
  AlignedBuffer buffer(bytes);
  auto write_all = [&] {
    ::lseek(fd, 0, SEEK_SET);
    size_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::write(fd, buffer.data.get() + done, bytes - done);
      TG_CHECK(n > 0, "profiler: disk test in {} failed: {}", dir, std::strerror(errno));
      done += size_t(n);
    }
    ::fsync(fd);
  };
  const double write_bw = record("disk write", double(bytes) / median_seconds(3, write_all), "B/s");
  ::close(fd);
  std::filesystem::remove(path);
  spdlog::info("disk write ({}): {:.2f} GB/s", direct ? "O_DIRECT" : "page cache", write_bw / 1e9);
  return write_bw;
}

// The last-level cache of the whole machine (sysfs): one instance's size times the
// instances (distinct shared_cpu_list) among the CPUs, 0 where unknown. A server with
// one L3 per core complex or socket holds that much across its cores, and a probe's
// column chunks stay with the same thread from one repetition to the next. glibc's
// _SC_LEVEL3_CACHE_SIZE is not used: it reads 10x the sysfs size on some AMD guests.
uint64_t last_level_cache_bytes() {
  uint64_t bytes = 0;
  int level = 0;
  std::set<std::string> instances;
  std::error_code ec;
  const std::filesystem::path cpus("/sys/devices/system/cpu");
  for (auto cpu = std::filesystem::directory_iterator(cpus, ec); !ec && cpu != std::filesystem::directory_iterator();
       cpu.increment(ec)) {
    const std::string name = cpu->path().filename().string();
    if (name.size() < 4 || name.rfind("cpu", 0) != 0 || !std::isdigit(static_cast<unsigned char>(name[3]))) continue;
    std::error_code cache_ec;
    for (auto index = std::filesystem::directory_iterator(cpu->path() / "cache", cache_ec);
         !cache_ec && index != std::filesystem::directory_iterator(); index.increment(cache_ec)) {
      if (index->path().filename().string().rfind("index", 0) != 0) continue;
      std::ifstream level_file(index->path() / "level"), size_file(index->path() / "size"),
          shared_file(index->path() / "shared_cpu_list");
      int l = 0;
      std::string size, shared;
      if (!(level_file >> l) || !(size_file >> size) || size.empty() || l < level) continue;
      if (!(shared_file >> shared)) shared = name;
      char* end = nullptr;
      uint64_t value = std::strtoull(size.c_str(), &end, 10);
      if (*end == 'K') value <<= 10;
      if (*end == 'M') value <<= 20;
      if (l > level) instances.clear();
      level = l;
      bytes = std::max(bytes, value);
      instances.insert(shared);
    }
  }
  return bytes * instances.size();
}

// Whether this build checks every load it makes (AddressSanitizer or ThreadSanitizer).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizedBuild = true;
#else
constexpr bool kSanitizedBuild = false;
#endif
#else
constexpr bool kSanitizedBuild = false;
#endif

// A sanitized build's timings mean nothing, and its profiles only have to take the code
// through every probe: its working sets sized against the last-level cache are a
// sixteenth of `bytes`, with no floor at the cache (its profile's source says so). At full
// size one quick profile (which a test run of `tiergen generate` without --hw measures)
// took 13-15 minutes under ASan on a 2-core AMX guest, whose 300 MiB L3 made each probe's
// weight 1.2 GB.
constexpr uint64_t kSanitizedWorkingSetDivisor = 16;

// At least `bytes`, and at least 4x the last-level cache: a working set the cache
// serves in part would time the cache, not the memory the tiers live in. (In a sanitized
// build, a sixteenth of `bytes`, which the caches may hold.)
uint64_t beyond_caches(uint64_t bytes) {
  if (kSanitizedBuild) return bytes / kSanitizedWorkingSetDivisor;
  static const uint64_t cache = last_level_cache_bytes();  // read from sysfs once
  return std::max(bytes, 4 * cache);
}

struct Device {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;  // CPU matmuls in fp32 (fp16 CPU GEMM is slow)
  std::function<void()> sync = [] {};
  // Products per timed sample: one GPU product of these shapes takes microseconds, less
  // than a launch and a stream synchronization, which one product per sample would time.
  int products_per_sample = 1;
};

// `out`, a probe's large operand, filled with normal samples: one 16 MiB draw repeated
// over it. The kernels timed do not depend on the values, and drawing gigabytes of them
// took seconds of a quick profile on a host whose last-level cache makes its probes
// 1.9 GB each.
at::Tensor repeated_randn(at::Tensor out) {
  at::Tensor flat = out.view(-1);
  const int64_t block = std::min<int64_t>(flat.numel(), int64_t(1) << 22);
  const at::Tensor pattern = at::randn({block}).to(out.scalar_type());
  for (int64_t at = 0; at < flat.numel(); at += block) {
    const int64_t count = std::min(block, flat.numel() - at);
    flat.narrow(0, at, count).copy_(pattern.narrow(0, 0, count));
  }
  return out;
}

double matmul_flops(const Device& d, int64_t m, int64_t k, int64_t n, int reps) {
  const auto opts = at::TensorOptions().device(d.device).dtype(d.dtype);
  const at::Tensor a = at::randn({m, k}, opts), b = at::randn({k, n}, opts);
  const int inner = d.products_per_sample;
  const double seconds = median_seconds(reps, [&] { for (int i = 0; i < inner; ++i) (void)at::matmul(a, b); }, d.sync);
  return 2.0 * m * k * n * inner / seconds;
}

double bmm_flops(const Device& d, int64_t batch, int64_t m, int64_t k, int64_t n, int reps) {
  const auto opts = at::TensorOptions().device(d.device).dtype(d.dtype);
  const at::Tensor a = at::randn({batch, m, k}, opts), b = at::randn({batch, k, n}, opts);
  const int inner = d.products_per_sample;
  const double seconds = median_seconds(reps, [&] { for (int i = 0; i < inner; ++i) (void)at::bmm(a, b); }, d.sync);
  return 2.0 * batch * m * k * n * inner / seconds;
}

// Decode attention over a CPU-resident fp16 cache, through the engine's own kernel
// (kernels/cpu/attention.h): bytes of K and V read per second. Positions of 32 heads of
// 128 make 16 KiB each; `context` positions per sequence and enough sequences for
// `bytes` (at least 4x the last-level cache): more than the cache holds, as a real
// decode's cache is (a cache-resident measurement overstated the rate 7x on one host).
// Built once, timed at each thread count.
class CpuAttentionProbe {
 public:
  struct Sequences {
    int64_t count;
  };
  // Enough sequences of `context` positions for `bytes` beyond the caches.
  CpuAttentionProbe(uint64_t bytes, int64_t context)
      : CpuAttentionProbe(Sequences{sequences_for(bytes, context)}, context) {}
  // `sequences.count` sequences of `context` positions each.
  CpuAttentionProbe(Sequences sequences, int64_t context)
      : batch_(sequences.count),
        k_(repeated_randn(at::empty({batch_, kHeads, context, kHeadDim}, at::kHalf))),
        v_(repeated_randn(at::empty({batch_, kHeads, context, kHeadDim}, at::kHalf))),
        q_(at::randn({batch_, kHeads, kHeadDim})),
        out_(at::empty({batch_, kHeads, kHeadDim})) {
    args_.q = q_.data_ptr<float>();
    args_.out = out_.data_ptr<float>();
    args_.batch = batch_;
    args_.num_heads = args_.num_kv_heads = kHeads;
    args_.head_dim = kHeadDim;
    args_.max_len = args_.seq_len = context;
    args_.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    args_.k = kernels::KvView::dense(k_.data_ptr(), kernels::ElemType::F16);
    args_.v = kernels::KvView::dense(v_.data_ptr(), kernels::ElemType::F16);
  }

  // At the calling thread's current LibTorch thread count.
  double bandwidth(int reps) const { return static_cast<double>(bytes()) / seconds(reps); }
  double seconds(int reps) const {
    kernels::DecodeAttentionArgs args = args_;
    args.num_threads = at::get_num_threads();
    return median_seconds(reps, [&] { kernels::decode_attention(args); });
  }
  int64_t bytes() const { return kernels::decode_attention_kv_bytes(args_); }
  int64_t tasks() const { return batch_ * kHeads; }  // sequences x kv heads (here every head has its own)

 private:
  static constexpr int64_t kHeads = 32, kHeadDim = 128;
  static int64_t sequences_for(uint64_t bytes, int64_t context) {
    const uint64_t per_sequence = uint64_t(context) * kHeads * kHeadDim * 2 /* K and V */ * 2 /* fp16 */;
    return int64_t((beyond_caches(bytes) + per_sequence - 1) / per_sequence);
  }
  int64_t batch_;
  at::Tensor k_, v_, q_, out_;
  kernels::DecodeAttentionArgs args_;
};

// Decode attention's costs beside its bytes (HardwareProfile::cpu_attention_call_seconds
// and _task_seconds), at the process's thread count: calls of one position per sequence,
// whose bytes are a small part, over few and over many sequences; the two times give the
// cost per call and per task. The bytes are taken out at `bandwidth`, a rate over a
// cache beyond the caches: these few KiB and MiB read faster, so the task's cost comes
// out a little low (a tenth, on a 2-core Zen 4), never above what it is.
void attention_costs_beside_bytes(HardwareProfile& p, int reps, const Recorder& record) {
  using Sequences = CpuAttentionProbe::Sequences;
  const CpuAttentionProbe few(Sequences{1}, 1), many(Sequences{256}, 1);
  const int calls = std::max(reps, 3) * 10;  // tens of microseconds each: many, for a steady median
  const double few_seconds = few.seconds(calls) - double(few.bytes()) / p.cpu_attention_bandwidth;
  const double many_seconds = many.seconds(calls) - double(many.bytes()) / p.cpu_attention_bandwidth;
  const double per_task = std::max(0.0, (many_seconds - few_seconds) / double(many.tasks() - few.tasks()));
  p.cpu_attention_task_seconds = record("cpu attention, per task (a sequence's kv head)", per_task, "s");
  p.cpu_attention_call_seconds =
      record("cpu attention, per call", std::max(0.0, few_seconds - per_task * double(few.tasks())), "s");
}

// A call of CPU attention as the runtime makes it costs more than the kernel's call
// (on a 2-core Zen 4: 13 us through the runner, 1.1-1.4 us in the kernel): its views
// of the cache's homes, its output. Timed through the runner over a cache of a few
// positions, less what the kernel's per-task and per-byte prices already hold.
void attention_call_through_the_runner(HardwareProfile& p, const std::string& device, int reps,
                                       const Recorder& record) {
  const double kernel_call = p.cpu_attention_call_seconds;
  const double beside_median = quietest_median_of([&] {
    std::vector<double> beside;
    for (const AttentionCallSample& c : measure_cpu_attention_calls(device, reps)) {
      beside.push_back(std::max(0.0, c.seconds_per_call - c.tasks_per_call * p.cpu_attention_task_seconds -
                                         c.kv_bytes_per_call / p.cpu_attention_bandwidth));
    }
    return beside;
  });
  p.cpu_attention_call_seconds = record("cpu attention through the runner, per call", beside_median, "s");
  spdlog::info("cpu attention per call: {:.1f} us through the runner, {:.1f} us in the kernel alone",
               p.cpu_attention_call_seconds * 1e6, kernel_call * 1e6);
}

// The stand-in's decode attention over a loaded cache in `dtype` (LoadedCacheAttention),
// at the process's thread count: the shapes of loaded_cache_attention_fit.h (caches of
// the size a layer's gpu batch loads in the stand-in's sweeps, 7 to 28 MB in fp32),
// timed in interleaved rounds (a host's speed drifts by the minute), the median of each
// fitted. Not timed (all zero) where this LibTorch cannot attend in `dtype` on the CPU,
// or where the fit finds no rate for the bytes.
LoadedCacheAttention loaded_cache_attention(at::ScalarType dtype, int reps, const Recorder& record) {
  const std::string name = compat::dtype_name(dtype);
  try {
    std::vector<LoadedCacheAttentionProbe> probes;
    for (const AttentionProbeShape& shape : kLoadedCacheAttentionShapes) probes.emplace_back(dtype, shape);
    for (const auto& p : probes) p.run();  // warm
    // One attempt: every shape once a round; its spread the largest of the shapes', as
    // every cost is a difference of their medians. Timed again while noisy, as a point is
    // (quietest_attempt), the quietest attempt's medians kept.
    const int rounds = std::max(reps, 3) * 3;
    std::vector<std::pair<double, std::array<double, 5>>> attempts;  // (spread, medians)
    const PointTiming kept = quietest_attempt(
        [&] {
          std::vector<std::vector<double>> samples(probes.size());
          const auto start = Clock::now();
          for (int r = 0; r < rounds; ++r) {
            for (size_t i = 0; i < probes.size(); ++i) {
              const auto begin = Clock::now();
              probes[i].run();
              samples[i].push_back(std::chrono::duration<double>(Clock::now() - begin).count());
            }
          }
          const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
          PointTiming attempt{0, 0, rounds, seconds};
          std::array<double, 5> medians{};
          for (size_t i = 0; i < samples.size(); ++i) {
            const PointTiming timing = sample_timing(std::move(samples[i]), seconds);
            medians[i] = timing.median;
            attempt.spread = std::max(attempt.spread, timing.spread);
          }
          attempts.emplace_back(attempt.spread, medians);
          return attempt;
        },
        retime_seconds_left);
    last_timing = {kept.runs, kept.spread, kept.attempts};
    const auto quietest = std::min_element(attempts.begin(), attempts.end(),
                                           [](const auto& a, const auto& b) { return a.first < b.first; });
    const std::optional<LoadedCacheAttention> fitted =
        fit_loaded_cache_attention(quietest->second, int64_t(at::elementSize(dtype)));
    if (!fitted) {
      spdlog::warn("profiler: the stand-in's attention over a loaded cache in {} took no longer over wider heads "
                   "(a noisy host); it is priced as its FLOPs",
                   name);
      return {};
    }
    const std::string what = "loaded-cache attention " + name;
    record(what, fitted->kv_bandwidth, "B/s");
    record(what + ", per call", fitted->call_seconds, "s");
    record(what + ", per unit", fitted->unit_seconds, "s");
    record(what + ", per position", fitted->position_seconds, "s");
    record(what + ", per score", fitted->score_seconds, "s");
    return *fitted;
  } catch (const c10::Error& e) {
    spdlog::warn("profiler: this LibTorch cannot attend in {} on the CPU ({}); the stand-in's attention over a loaded "
                 "cache in {} is priced as its FLOPs",
                 name, e.what_without_backtrace(), name);
    return {};
  }
}

std::vector<std::pair<int, double>> thread_scaling(const CpuAttentionProbe& probe, int max_threads, bool quick,
                                                   const Recorder& record) {
  std::vector<std::pair<int, double>> scaling;
  const int previous = at::get_num_threads();
  double single = 0;
  for (int t = 1; t <= max_threads; t = quick || (t < max_threads && t * 2 > max_threads) ? max_threads : t * 2) {
    at::set_num_threads(t);
    const double rate = probe.bandwidth(quick ? 3 : 7);
    if (t == 1) single = rate;
    scaling.emplace_back(t, rate / single);
    record(fmt::format("cpu attention, {} thread{}", t, t == 1 ? "" : "s"), rate, "B/s");
    if (t == max_threads) break;
  }
  at::set_num_threads(previous);
  return scaling;
}

// The thread scaling, measured again (up to twice) while it is implausible.
std::vector<std::pair<int, double>> plausible_thread_scaling(const CpuAttentionProbe& probe, int max_threads, bool quick,
                                                             const Recorder& record) {
  std::string why;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto scaling = thread_scaling(probe, max_threads, quick, record);
    why = implausible_thread_scaling(scaling);
    if (why.empty()) return scaling;
    spdlog::warn("profiler: {}; measuring again", why);
  }
  TG_THROW("profiler: implausible measurement, refused: {} (three times). Another process was probably using the "
           "cores; rerun `tiergen profile` on a quiet machine", why);
}

// Group-wise (de)quantization rates, bytes of dense fp16 data per second, on the calling
// thread's compute threads.
std::pair<double, double> quantize_and_dequantize_rates(bool quick, const std::string& label, const Recorder& record) {
  const int64_t rows = quick ? 512 : 8192, cols = 4096;
  const kernels::QuantFormat format{4, 64};
  const auto layout = kernels::quantized_layout(rows, cols, format);
  std::vector<uint16_t> dense(size_t(rows * cols), 0x3c00);  // fp16 ones
  std::vector<uint8_t> packed(size_t(layout.packed_bytes()));
  std::vector<uint16_t> mins(size_t(layout.meta_elems())), scales(size_t(layout.meta_elems()));
  const double bytes = double(rows * cols) * 2;
  const double quantize = record("quantize" + label, bytes / median_seconds(quick ? 3 : 7, [&] {
    kernels::quantize(dense.data(), kernels::ElemType::F16, rows, cols, format, packed.data(), mins.data(),
                      scales.data());
  }), "B/s");
  const double dequantize = record("dequantize" + label, bytes / median_seconds(quick ? 3 : 7, [&] {
    kernels::dequantize(packed.data(), mins.data(), scales.data(), rows, cols, format, dense.data(),
                        kernels::ElemType::F16);
  }), "B/s");
  return {quantize, dequantize};
}

// Dequantizing as a layer load's first prefill product of a compressed weight does
// (model::for_each_dequantized_tile): a tile of W rows at a time into a bf16 buffer per
// compute thread, which stays in cache, while the packed rows come from memory (a matrix
// beyond the caches); bytes of dense 16-bit data per second. On a 2-core Zen 5, 1.4-3x
// the rate of dequantize() into a dense copy, whose writes go to memory.
double dequantize_tiles_rate(bool quick, const Recorder& record) {
  model::QuantizedWeight q;
  q.cols = 4096;
  q.rows = int64_t(beyond_caches(quick ? (32ull << 20) : (128ull << 20))) / (q.cols / 2);
  const auto layout = kernels::quantized_layout(q.rows, q.cols, {q.bits, q.group_size});
  q.packed = at::full({layout.rows, layout.packed_bytes_per_row}, 0x5A, at::kByte);
  q.mins = at::full({layout.rows, layout.groups_per_row}, int16_t(0xBC00), at::kShort);   // fp16 -1
  q.scales = at::full({layout.rows, layout.groups_per_row}, int16_t(0x2C00), at::kShort);  // fp16 1/16
  const double seconds = median_seconds(quick ? 3 : 7, [&] {
    model::for_each_dequantized_tile(q, at::kBFloat16, [](const void*, int64_t, int64_t) {});
  });
  return record("dequantize in tiles", double(q.rows * q.cols) * 2 / seconds, "B/s");
}

// The CPU's (de)quantization on every compute thread; on a host standing in for the GPU,
// the device's too, which the runtime's copy queues run on one thread each (the KV
// cache's, compressed as it is stored and loaded: runtime/worker.h).
void compression_rates(HardwareProfile& p, bool quick, const Recorder& record) {
  std::tie(p.cpu_quantize, p.cpu_dequantize) = quantize_and_dequantize_rates(quick, "", record);
  p.cpu_dequantize_tiles = dequantize_tiles_rate(quick, record);
  if (p.gpu_is_host) {
    const ComputeThreadsScope restore_threads;
    at::set_num_threads(1);
    std::tie(p.gpu_quantize, p.gpu_dequantize) = quantize_and_dequantize_rates(quick, ", one thread", record);
  }
}

// The row counts of one gpu batch's decode product the profile times the CPU at: where
// the runtime's product changes kernels (model::linear_product's small-row limit, 16 and
// 17 rows by default) and the gpu batch sizes plans use.
std::vector<int64_t> product_row_counts(bool quick) {
  if (quick) return {1, 4, 16, 17, 32, 64};
  return {1, 2, 4, 8, 16, 17, 24, 32, 48, 64, 128};
}

// The products' rates are of one product over a weight larger than the caches, its rows
// kProductRowLength elements long, and again over the same bytes in rows of
// kShortRowLength (CpuProductTable::short_row_rates: a short row costs more per byte;
// 768 is OPT-125m's and LLaMA-shaped small models' hidden size; a shorter row, such as
// OPT-350m's 512-wide head, is priced at its rate, and costs more still). What a
// product call costs beside its bytes (CpuProductTable::call_seconds) is timed at these
// of the row counts (and at the many-row count) over the same weight cut into matrices
// of kCallMatrixRows rows of kShortRowLength, one call each, front to back: the size of a
// small model's matrices, whose layers make several calls of a few MB, against the
// short rows' one product (at the many-row count, against the one many-row product). The
// cost model interpolates it in rows between the counts timed.
constexpr int64_t kProductRowLength = 4096;
constexpr int64_t kShortRowLength = 768;
constexpr int64_t kCallMatrixRows = 1024;
// The product calls are timed over matrices of kCallMatrixRows x kShortRowLength carved
// from the quick profile's fp32 weight (64 MiB): a sanitized build's sixteenth of it must
// still hold one.
static_assert((64ull << 20) / kSanitizedWorkingSetDivisor >= uint64_t(kCallMatrixRows * kShortRowLength * 4),
              "a sanitized quick profile's fp32 weight holds no product-call matrix");
bool times_call_cost_at(int64_t rows, bool quick) {
  return quick ? (rows == 1 || rows == 16 || rows == 64) : (rows == 1 || rows == 8 || rows == 32 || rows == 128);
}

// Where the runtime's product changes kernels for `type`'s weights: up to its default
// small-row limit the small-row kernel (kernels::small_matmul), beyond it the GEMM.
// Above the default the profile times both and moves the limit up while the small-row
// kernel wins (on a 2-core AMD EPYC guest, fp32 products of 17 and 32 rows ran 1.7x and
// 1.3x faster on it than on OpenBLAS's GEMM, 64 rows 0.93x; the default of 16 was
// measured on an Intel host). Nothing is compared where the default has no limit, nor
// under TIERGEN_SMALL_MATMUL_MAX_ROWS, whose limit every product is then timed with.
// Seconds of timed repetitions one CPU product point may take (beyond 3 repetitions).
constexpr double kProductSecondsPerPoint = 3.0;

struct SmallRowLimitSearch {
  int64_t default_limit = 0;
  int64_t limit = 0;      // products are timed with it: the default, or the most rows the kernel won at
  bool open = false;      // still comparing: the kernel won at every count timed above the default
  bool measured = false;  // whether the profile records `limit`
  int64_t profile_value() const { return measured ? limit : 0; }
};

// A profile timed under TIERGEN_SMALL_MATMUL_ONE_ROW_SEQUENTIAL records one-row rates
// that runs on this host's default form would not get.
void warn_of_one_row_form_override() {
  const char* set = std::getenv("TIERGEN_SMALL_MATMUL_ONE_ROW_SEQUENTIAL");
  if (!set || !*set) return;
  spdlog::warn("profiler: TIERGEN_SMALL_MATMUL_ONE_ROW_SEQUENTIAL={} is set: one-row fp32 products are timed in that "
               "form, which runs without the variable may not take",
               set);
}

SmallRowLimitSearch start_small_row_limit_search(kernels::ElemType type) {
  SmallRowLimitSearch search;
  const int64_t set = kernels::small_matmul_max_rows_setting();
  if (set >= 0) {
    spdlog::warn("profiler: TIERGEN_SMALL_MATMUL_MAX_ROWS={} is set: CPU products are timed with that limit and no "
                 "small-row limit is measured",
                 set);
    search.default_limit = search.limit = set;
    return search;
  }
  if (kernels::small_matmul_for_every_row_count()) {
    // Batch-invariant products (the default): the runs multiply every row count with
    // the small-row kernel, so that is what is timed, and no limit is measured.
    search.default_limit = search.limit = std::numeric_limits<int64_t>::max();
    return search;
  }
  search.default_limit = search.limit = kernels::default_small_matmul_max_rows(type);
  search.open = search.measured = search.limit < std::numeric_limits<int64_t>::max();
  return search;
}

// Seconds of one product of `rows` rows: the runtime's kernel for them under `search`'s
// limit, and above the default, while the search is open, the faster of the GEMM and the
// small-row kernel (which moves the limit up when it wins). The recorded spread is the
// faster one's.
double product_seconds(SmallRowLimitSearch& search, int64_t rows, int reps, const std::function<void()>& product,
                       const Recorder& record) {
  const auto timed = [&](int64_t limit) {
    const kernels::SmallMatmulMaxRowsScope scope(limit);
    return median_seconds_within(kProductSecondsPerPoint, reps, product);
  };
  const double runtime = timed(search.limit);
  if (!search.open || rows <= search.limit) return runtime;
  const LastTiming runtime_timing = last_timing;
  const double small = timed(rows);
  // The GEMM's seconds over the small-row kernel's: above 1, the kernel is faster.
  record(fmt::format("small-row gain, {} rows", rows), runtime / small, "x");
  if (small < runtime) {
    search.limit = rows;
    return small;
  }
  search.open = false;
  last_timing = runtime_timing;
  return runtime;
}

// `weight` quantized as the weight store keeps a compressed weight on the host.
model::QuantizedWeight quantized_weight(const at::Tensor& weight, kernels::QuantFormat format) {
  const auto layout = kernels::quantized_layout(weight.size(0), weight.size(1), format);
  model::QuantizedWeight q;
  q.rows = weight.size(0);
  q.cols = weight.size(1);
  q.bits = format.bits;
  q.group_size = format.group_size;
  q.packed = at::empty({layout.rows, layout.packed_bytes_per_row}, at::kByte);
  q.mins = at::empty({layout.rows, layout.groups_per_row}, at::kShort);
  q.scales = at::empty({layout.rows, layout.groups_per_row}, at::kShort);
  kernels::quantize(weight.data_ptr(), kernel_elem_type(weight.scalar_type()), layout.rows, layout.cols, format,
                    q.packed.data_ptr<uint8_t>(), reinterpret_cast<uint16_t*>(q.mins.data_ptr<int16_t>()),
                    reinterpret_cast<uint16_t*>(q.scales.data_ptr<int16_t>()));
  return q;
}

// Products over `weight` compressed to 4 and 8 bits (groups of 64, the default), read in
// place with activations of its dtype: at one row, at the in-place limit of --cpu-gemm
// runs (kernels::quantized_in_place_max_rows), and at 64 rows, for the large decode
// batches that default runs multiply in place (model::quantized_product_in_place), as
// bytes of stored weight per second.
// They are compute-bound on the levels' lookups, not on the bytes: on a 2-core Xeon
// with AMX, 4-bit decode ran 1.8x bf16's, where the bytes alone say 3.5x.
constexpr int64_t kLargeDecodeRows = 64;

// `q`'s values as the views `packed`, `mins` and `scales` of its tensors, `rows` x `cols`,
// as a fresh layer load (no dense copy made yet).
model::QuantizedWeight quantized_view(const model::QuantizedWeight& q, at::Tensor packed, at::Tensor mins,
                                      at::Tensor scales, int64_t rows, int64_t cols) {
  model::QuantizedWeight view = q;
  view.packed = std::move(packed);
  view.mins = std::move(mins);
  view.scales = std::move(scales);
  view.rows = rows;
  view.cols = cols;
  view.dense = std::make_shared<at::Tensor>();
  view.dense_products = std::make_shared<int64_t>(0);
  return view;
}

// Rows [first, first + count) of `q`.
model::QuantizedWeight quantized_rows(const model::QuantizedWeight& q, int64_t first, int64_t count) {
  return quantized_view(q, q.packed.narrow(0, first, count), q.mins.narrow(0, first, count),
                        q.scales.narrow(0, first, count), count, q.cols);
}

// The same compressed values as `q` in rows of `row_length` elements, as many whole rows
// as q holds: whole groups, and a row's packed bytes in proportion to its elements (no
// padding), so the levels, mins and scales read in order are q's.
model::QuantizedWeight in_rows_of(const model::QuantizedWeight& q, int64_t row_length) {
  const kernels::QuantFormat format{q.bits, q.group_size};
  const int64_t rows = q.rows * q.cols / row_length;
  const kernels::QuantizedLayout whole = kernels::quantized_layout(q.rows, q.cols, format);
  const kernels::QuantizedLayout layout = kernels::quantized_layout(rows, row_length, format);
  TG_CHECK(row_length % q.group_size == 0 && q.cols % q.group_size == 0 &&
               whole.packed_bytes_per_row * row_length == layout.packed_bytes_per_row * q.cols,
           "internal: rows of {} and {} elements are not whole unpadded groups of {}", row_length, q.cols,
           q.group_size);
  const auto reshaped = [&](const at::Tensor& t, int64_t per_row) {
    return t.view({-1}).narrow(0, 0, rows * per_row).view({rows, per_row});
  };
  return quantized_view(q, reshaped(q.packed, layout.packed_bytes_per_row), reshaped(q.mins, layout.groups_per_row),
                        reshaped(q.scales, layout.groups_per_row), rows, row_length);
}

// What each in-place product call over compressed weights costs beside its bytes, at
// `rows` rows of x in `dtype`: `short_q` (rows of kShortRowLength) multiplied as one
// product, then in calls over its kCallMatrixRows-row slices, as the dense calls are
// timed (cpu_product_table's time_call_cost).
double quantized_call_seconds(const model::QuantizedWeight& short_q, at::ScalarType dtype, int64_t rows, int reps) {
  const int64_t calls = short_q.rows / kCallMatrixRows;
  TG_CHECK(calls > 0, "internal: {} rows hold no {}-row matrix", short_q.rows, kCallMatrixRows);
  std::vector<model::QuantizedWeight> slices;
  for (int64_t i = 0; i < calls; ++i) slices.push_back(quantized_rows(short_q, i * kCallMatrixRows, kCallMatrixRows));
  const at::Tensor x = at::randn({rows, short_q.cols}).to(dtype);
  const double whole = median_seconds_within(kProductSecondsPerPoint, reps,
                                             [&] { (void)model::quantized_linear_product(x, short_q); });
  const double in_calls = median_seconds_within(kProductSecondsPerPoint, reps, [&] {
    for (const model::QuantizedWeight& slice : slices) (void)model::quantized_linear_product(x, slice);
  });
  const double share = double(calls * kCallMatrixRows) / double(short_q.rows);
  return std::max(0.0, (in_calls - share * whole) / double(calls));
}

std::vector<QuantizedProductRates> quantized_product_rates(const at::Tensor& weight, int reps, const Recorder& record) {
  std::vector<QuantizedProductRates> out;
  const std::string dtype = compat::dtype_name(weight.scalar_type());
  for (const int bits : {4, 8}) {
    const kernels::QuantFormat format{bits, 64};
    const model::QuantizedWeight q = quantized_weight(weight, format);
    const model::QuantizedWeight short_q = in_rows_of(q, kShortRowLength);
    const double stored = double(kernels::quantized_layout(q.rows, q.cols, format).total_bytes());
    QuantizedProductRates rates{bits, format.group_size, {}, {}};
    const int64_t limit = kernels::quantized_in_place_max_rows(weight.scalar_type() == at::kBFloat16, format);
    std::vector<int64_t> row_counts{1, limit};
    if (limit < kLargeDecodeRows) row_counts.push_back(kLargeDecodeRows);
    // Products of a decode step under batch invariance: in place at every row count
    // (model::quantized_product_in_place), also past the limit.
    const kernels::SmallMatmulEveryRowCountScope invariant(true);
    const model::ProductPhaseScope decode(model::ProductPhase::Decode);
    for (const int64_t rows : row_counts) {
      const at::Tensor x = at::randn({rows, q.cols}).to(weight.scalar_type());
      const double seconds = median_seconds_within(kProductSecondsPerPoint, reps,
                                                   [&] { (void)model::quantized_linear_product(x, q); });
      rates.rates.emplace_back(
          rows, record(fmt::format("cpu {}-bit matmul {}, {} row{}", bits, dtype, rows, rows == 1 ? "" : "s"),
                       stored / seconds, "B/s"));
      // The calls' own cost at one row, where it weighs most beside the bytes (decode at
      // batch 1: seven calls a layer); at more rows the cost timed there stands in.
      if (rows == 1) {
        const double per_call = quantized_call_seconds(short_q, weight.scalar_type(), rows, reps);
        rates.call_seconds.emplace_back(
            rows, record(fmt::format("cpu {}-bit product call {}, 1 row", bits, dtype), per_call * 1e6, "us") / 1e6);
      }
    }
    // A dense copy would mean the rates above are a dense product's, not the in-place one.
    TG_CHECK(!q.dense->defined() && !short_q.dense->defined(),
             "internal: the in-place {}-bit products were timed through a dense copy", bits);
    out.push_back(rates);
  }
  return out;
}

// The CPU's own products over host-resident weights in `dtype` (the dtypes a plan's
// host weights can live in), through the runtime's product (model::linear_product):
// decode-sized products of each of product_row_counts() rows over a weight larger than
// the caches, as bytes of weight per second (4 rows: the few-row rate), with the
// small-row limit for `dtype` measured on the way (SmallRowLimitSearch); and a
// prefill-sized one (256 rows over 64 MiB of it with --quick, else 1024 over 256 MiB)
// as FLOP/s; the kernel path those products took (model::linear_product_paths); and the
// in-place products over it compressed (quantized_product_rates); and, where the host
// stands in for the GPU (`stand_in`), its decode attention over a loaded cache in `dtype`
// (loaded_cache_attention).
// Without rates (not priced: the search then never computes on the CPU in `dtype`)
// where this LibTorch cannot multiply in that dtype on the CPU.
CpuProductTable cpu_product_table(at::ScalarType dtype, bool quick, int reps, bool stand_in, const Recorder& record) {
  CpuProductTable table;
  table.dtype = compat::dtype_name(dtype);
  const auto opts = at::TensorOptions().dtype(dtype);
  const int64_t k = kProductRowLength, elem = int64_t(at::elementSize(dtype));
  const int64_t n = int64_t(beyond_caches(quick ? (64ull << 20) : (256ull << 20))) / (k * elem);
  SmallRowLimitSearch search = start_small_row_limit_search(kernel_elem_type(dtype));
  try {
    // Placed as a run places its dense weight homes (huge_pages.h).
    const at::Tensor weight = repeated_randn(empty_on_huge_pages({n, k}, dtype));
    // The same bytes in rows of kShortRowLength elements.
    const int64_t short_n = weight.numel() / kShortRowLength;
    const at::Tensor short_weight =
        weight.view({-1}).narrow(0, 0, short_n * kShortRowLength).view({short_n, kShortRowLength});
    table.row_length = k;
    table.short_row_length = kShortRowLength;
    auto& timed = table.rates;
    // The same bytes in calls over matrices of kCallMatrixRows x kShortRowLength, timed
    // right after the one product (a host's speed drifts by the minute), at the kernel it
    // took: each call's time beyond its share of `seconds` (never below zero, whatever
    // the noise).
    const auto time_call_cost = [&](int64_t rows, double seconds, const at::Tensor& whole) {
      const int64_t n_rows = kCallMatrixRows, row = kShortRowLength, calls = whole.numel() / (n_rows * row);
      TG_CHECK(calls > 0, "internal: a {}-element weight holds no {}x{} matrix", whole.numel(), n_rows, row);
      const at::Tensor all = whole.view({-1}).narrow(0, 0, calls * n_rows * row).view({calls, n_rows, row});
      std::vector<at::Tensor> matrices;  // the views made before timing, not in it
      for (int64_t i = 0; i < calls; ++i) matrices.push_back(all[i]);
      const double share = double(calls * n_rows * row) / double(whole.numel());  // of `seconds`
      const at::Tensor x = at::randn({rows, row}, opts);
      const kernels::SmallMatmulMaxRowsScope scope(search.limit);
      const double in_calls = median_seconds_within(kProductSecondsPerPoint, reps, [&] {
        for (const at::Tensor& matrix : matrices) (void)model::linear_product(x, matrix);
      });
      const double per_call = std::max(0.0, (in_calls - share * seconds) / double(calls));
      record(fmt::format("cpu product call {}, {} row{}", table.dtype, rows, rows == 1 ? "" : "s"), per_call * 1e6,
             "us");
      table.call_seconds.emplace_back(rows, per_call);
    };
    const auto time_rows = [&](int64_t rows) {
      const at::Tensor x = at::randn({rows, k}, opts);
      const double seconds =
          product_seconds(search, rows, reps, [&] { (void)model::linear_product(x, weight); }, record);
      const std::string name = fmt::format("cpu matmul {}, {} row{}", table.dtype, rows, rows == 1 ? "" : "s");
      const double rate = record(name, double(weight.nbytes()) / seconds, "B/s");
      timed.insert(std::lower_bound(timed.begin(), timed.end(), std::pair<int64_t, double>{rows, 0.0}), {rows, rate});
      if (rows == 4) table.gemv_bandwidth = rate;
      // The short rows right after, on the kernel the long ones took at this count.
      const at::Tensor short_x = at::randn({rows, kShortRowLength}, opts);
      const kernels::SmallMatmulMaxRowsScope scope(search.limit);
      const double short_seconds = median_seconds_within(
          kProductSecondsPerPoint, reps, [&] { (void)model::linear_product(short_x, short_weight); });
      const double short_rate = record(fmt::format("{}, rows of {}", name, kShortRowLength),
                                       double(short_weight.nbytes()) / short_seconds, "B/s");
      auto& short_timed = table.short_row_rates;
      short_timed.insert(std::lower_bound(short_timed.begin(), short_timed.end(), std::pair<int64_t, double>{rows, 0.0}),
                         {rows, short_rate});
      if (times_call_cost_at(rows, quick)) time_call_cost(rows, short_seconds, short_weight);
    };
    for (int64_t rows : product_row_counts(quick)) time_rows(rows);
    // The rows just past a raised limit run on the GEMM: timed (the search closed), so
    // that the table does not price them between the kernel's rate and the GEMM's.
    search.open = false;
    // (Only a raised limit is finite here: the default one may be "every row count".)
    if (search.limit > search.default_limit) {
      const int64_t past = search.limit + 1;
      if (std::none_of(timed.begin(), timed.end(), [&](const auto& r) { return r.first == past; })) time_rows(past);
    }
    // The many-row rate over the same weight: a cache-resident one overstates it. It
    // multiplies its first 64 MiB (256 MiB without --quick) only: the product is
    // compute-bound, and on a 2-core Xeon guest whose sysfs names a 480 MiB L3 (a 1.9 GB
    // weight here), 256 rows over 64 MiB ran 2.7% faster than over the whole weight,
    // with 1/30 of the work (the whole weight took 4 of the full profile's 9.4 minutes).
    const int64_t rows = quick ? 256 : 1024;
    const int64_t many_rows_n = std::min(n, (int64_t(quick ? 64 : 256) << 20) / (k * elem));
    const at::Tensor many_row_weight = weight.narrow(0, 0, many_rows_n);
    const at::Tensor a = at::randn({rows, k}, opts);
    const kernels::SmallMatmulMaxRowsScope scope(search.limit);
    const double many_row_seconds =
        median_seconds_within(kProductSecondsPerPoint, reps, [&] { (void)model::linear_product(a, many_row_weight); });
    table.matmul_flops = record(fmt::format("cpu many-row matmul {}", table.dtype),
                                2.0 * double(rows * many_row_weight.size(0) * k) / many_row_seconds, "FLOP/s");
    time_call_cost(rows, many_row_seconds, many_row_weight);
    table.kernel_path = model::linear_product_paths(dtype);
    table.kernel_level = kernels::cpu_isa_name(kernels::cpu_isa_in_use());
    table.kernels_revision = kernels::kCpuProductKernelsRevision;
    table.quantized = quantized_product_rates(weight, reps, record);
    table.small_matmul_max_rows = search.profile_value();
  } catch (const c10::Error& e) {
    const std::string dtype_name = table.dtype;
    table = CpuProductTable();
    table.dtype = dtype_name;
    spdlog::warn("profiler: this LibTorch cannot multiply {} on the CPU ({}); CPU products in {} are not priced",
                 table.dtype, e.what_without_backtrace(), table.dtype);
  }
  if (stand_in && !table.rates.empty()) table.loaded_cache_attention = loaded_cache_attention(dtype, reps, record);
  return table;
}

// Disk-tier reads as runs make them (disk_read_probe.h: the run's default 4 I/O threads;
// reads of 16 MiB, which the tier splits into two 8 MiB requests read side by side, as
// it splits OPT-125m's 9.4 MB fp32 fc1, while tensors of 32 MiB and more go on all four
// threads), alone and beside decode-shaped compute: products of 8 rows over fp32
// matrices, through the runtime's own product.
void disk_reads(HardwareProfile& p, const std::string& dir, bool quick, int reps, const Recorder& record) {
  // Call-sized matrices (kShortRowLength x 4 kShortRowLength, an FFN's): the runtime's
  // decode is many such calls, each a parallel region whose team waits at its barrier
  // for a thread that lost its core. (On a 2-core Emerald Rapids guest: beside 16 MiB
  // reads these ran 1.5-2.3x slower, beside 8 MiB reads, which the tier serves on one
  // thread, 1.2-1.6x; one 8-row product over a weight beyond the caches 1.2x.)
  const int64_t k = kShortRowLength, n = 4 * kShortRowLength;
  std::vector<at::Tensor> matrices;
  for (int i = 0; i < 8; ++i) matrices.push_back(repeated_randn(empty_on_huge_pages({n, k}, at::kFloat)));
  const at::Tensor x = at::randn({8, k});
  const DiskReadTimes t =
      time_disk_reads(dir, quick ? (64ull << 20) : (1024ull << 20), 16ull << 20, 4, reps, [&] {
        for (const at::Tensor& matrix : matrices) (void)model::linear_product(x, matrix);
      });
  const auto take_spread_of = [](const std::vector<double>& samples) {
    const PointTiming timing = sample_timing(samples, 0);
    last_timing = {timing.runs, timing.spread, 1};
  };
  take_spread_of(t.read_passes);
  p.disk_to_cpu = p.disk_to_cpu_cache = record("disk read", t.read_bandwidth, "B/s");
  take_spread_of(t.alone);
  record("decode product, alone", t.compute_seconds_alone * 1e3, "ms");
  take_spread_of(t.beside);
  record("decode product, disk reads beside it", t.compute_seconds_beside * 1e3, "ms");
  p.disk_read_core_bandwidth = record("disk reads per second of compute they take", t.core_bandwidth, "B/s");
  spdlog::info("disk read (the runtime's buffered reads): {:.2f} GB/s; beside them a decode product took {:.2f}x "
               "as long{}",
               t.read_bandwidth / 1e9, t.compute_seconds_beside / t.compute_seconds_alone,
               t.core_bandwidth > 0 ? fmt::format(" ({:.2f} GB read per second of compute lost)", t.core_bandwidth / 1e9)
                                    : std::string(" (priced as free)"));
}

// The dtypes host weights can live in: a plan's compute dtype.
std::vector<std::string> all_product_dtypes() { return {"float32", "float16", "bfloat16"}; }

uint64_t physical_memory() { return uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE)); }

uint64_t free_disk(const std::string& dir) {
  struct statvfs s {};
  TG_CHECK(statvfs(dir.c_str(), &s) == 0, "profiler: cannot stat --offload-dir {}", dir);
  return uint64_t(s.f_bavail) * uint64_t(s.f_frsize);
}

}  // namespace

std::string implausible_thread_scaling(const std::vector<std::pair<int, double>>& scaling) {
  for (const auto& [threads, speedup] : scaling) {
    if (speedup < 0.5 || speedup > 1.5 * threads) {
      return fmt::format("a {}-thread speedup of {:.2f} over one thread", threads, speedup);
    }
  }
  return "";
}

CpuProductTable measure_cpu_products(const std::string& dtype, bool quick, bool stand_in,
                                     std::vector<Measurement>* measurements) {
  const Recorder record{measurements};
  warn_of_one_row_form_override();
  const ComputeThreadsScope restore_threads;
  set_compute_threads();
  retime_seconds_left = quick ? kRetimeSecondsPerQuickProfile : kRetimeSecondsPerProfile;
  return cpu_product_table(compat::parse_dtype(dtype), quick, quick ? 3 : 9, stand_in, record);
}

HardwareProfile measure_host(const ProfilerOptions& o, std::vector<Measurement>* measurements) {
  const Recorder record{measurements};
  TG_CHECK(std::filesystem::is_directory(o.offload_dir), "profiler: --offload-dir {} is not a directory", o.offload_dir);
  warn_of_one_row_form_override();
  // The threads a run computes with (the engine's rule): LibTorch's default can be
  // fewer (1 on some virtual machines), which timed the CPU kernels on one core while
  // the BLAS used every core.
  const ComputeThreadsScope restore_threads;
  set_compute_threads();
  retime_seconds_left = o.quick ? kRetimeSecondsPerQuickProfile : kRetimeSecondsPerProfile;
  HardwareProfile p;
  const int reps = o.quick ? 3 : 9;
  // Copies well beyond a server's last-level cache (over 100 MB on some): a smaller one
  // times the cache, not the memory the tiers live in.
  const size_t copy_bytes = beyond_caches(o.quick ? (256u << 20) : (512u << 20));
  p.cpu_threads = usable_cores();
  p.cpu_memory_bandwidth = record("memcpy", memcpy_bandwidth(copy_bytes, reps), "B/s");
  p.io_bandwidth_per_thread = p.cpu_memory_bandwidth / std::max(1, std::min(p.cpu_threads, 4));
  spdlog::info("memcpy: {:.2f} GB/s", p.cpu_memory_bandwidth / 1e9);

  Device device;
  p.gpu_is_host = true;
#if defined(TIERGEN_WITH_CUDA)
  if (at::hasCUDA()) {
    device = Device{at::Device(at::kCUDA, 0), at::kHalf, [] { at::cuda::getCurrentCUDAStream().synchronize(); }, 20};
    p.gpu_is_host = false;
  }
#endif
  if (p.gpu_is_host) {
    // --device cpu: the "gpu" tier is host memory, its copies are memcpy.
    p.cpu_to_gpu = p.cpu_to_gpu_cache = p.gpu_to_cpu_cache = p.gpu_to_cpu_hidden = p.cpu_memory_bandwidth;
    p.gpu_memory_bandwidth = p.cpu_memory_bandwidth;
    p.gpu_memory = physical_memory() / 4;
  } else {
#if defined(TIERGEN_WITH_CUDA)
    const int64_t n = int64_t(copy_bytes / 2);
    const at::Tensor host = at::empty({n}, at::TensorOptions().dtype(at::kHalf).pinned_memory(true));
    const at::Tensor dev = at::empty({n}, at::TensorOptions().dtype(at::kHalf).device(device.device));
    p.cpu_to_gpu = double(copy_bytes) / median_seconds(reps, [&] { dev.copy_(host, true); }, device.sync);
    p.gpu_to_cpu_hidden = double(copy_bytes) / median_seconds(reps, [&] { host.copy_(dev, true); }, device.sync);
    p.cpu_to_gpu_cache = p.cpu_to_gpu;
    p.gpu_to_cpu_cache = p.gpu_to_cpu_hidden;
    const at::Tensor other = at::empty_like(dev);
    p.gpu_memory_bandwidth = 2.0 * double(copy_bytes) / median_seconds(reps, [&] { other.copy_(dev); }, device.sync);
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    p.gpu_memory = total_bytes;
#endif
  }
  p.cpu_to_disk_decode = disk_write_bandwidth(o.offload_dir, o.quick ? (32u << 20) : (1024u << 20), record);
  disk_reads(p, o.offload_dir, o.quick, reps, record);
  p.cpu_to_disk_cache_prefill = p.cpu_to_disk_hidden_prefill = p.cpu_to_disk_decode;

  // A GPU runs the full shapes in milliseconds; small ones would time launch latency.
  const bool small = o.quick && p.gpu_is_host;
  const int64_t h = small ? 1024 : 4096;
  p.mm_flops_prefill = record("matmul, prefill shape", matmul_flops(device, small ? 256 : 2048, h, h, reps), "FLOP/s");
  p.mm_flops_decode = record("matmul, decode shape", matmul_flops(device, 32, h, h, reps), "FLOP/s");
  p.bmm_flops_prefill = record("bmm, prefill shape", bmm_flops(device, small ? 8 : 32, small ? 128 : 512, 128, small ? 128 : 512, reps), "FLOP/s");
  p.bmm_flops_decode = record("bmm, decode shape", bmm_flops(device, small ? 64 : 256, 1, 128, small ? 256 : 2048, reps), "FLOP/s");
  {
    const CpuAttentionProbe attention(o.quick ? (128u << 20) : (512u << 20), o.quick ? 1024 : 2048);
    p.cpu_attention_bandwidth = record("cpu attention", attention.bandwidth(reps), "B/s");
    attention_costs_beside_bytes(p, reps, record);
    const int scaling_threads = o.max_threads > 0 ? std::min(o.max_threads, p.cpu_threads) : p.cpu_threads;
    p.cpu_thread_scaling = plausible_thread_scaling(attention, scaling_threads, o.quick, record);
  }
  compression_rates(p, o.quick, record);
  // Every dtype host weights can live in (the compute dtype), each through the kernel
  // path its products take on this CPU; the default compute dtype's table priced.
  const at::ScalarType primary = p.gpu_is_host ? at::kFloat : at::kHalf;
  for (const std::string& dtype : o.product_dtypes.empty() ? all_product_dtypes() : o.product_dtypes) {
    const CpuProductTable table = cpu_product_table(compat::parse_dtype(dtype), o.quick, reps, p.gpu_is_host, record);
    if (!table.rates.empty()) p.add_cpu_product_table(table);
    if (dtype == compat::dtype_name(primary)) {
      // A dtype this LibTorch could not multiply (no rates) names no priced dtype.
      p.price_cpu_products_with(table.rates.empty() ? CpuProductTable{} : table);
    }
  }
  // Through the real runner on the compute device: the schedule's fixed cost per step,
  // the rate its weight loads reach (its own copies from its own homes, while it works),
  // which is the host-to-device rate runs get, not an idle copy's, and what a CPU
  // attention call costs as the runtime makes it.
  const std::string compute_device = p.gpu_is_host ? "cpu" : "cuda";
  try {
    p.step_seconds =
        record("schedule step", quietest_median_of([&] { return measure_step_seconds(compute_device, reps); }), "s");
    spdlog::info("schedule step: {:.1f} us", p.step_seconds * 1e6);
    const double idle_link = p.cpu_to_gpu;
    const double streamed = quietest_median_of([&] { return measure_weight_stream_rate(compute_device, reps); });
    p.cpu_to_gpu = p.cpu_to_gpu_cache = record("weights streamed by the runner", streamed, "B/s");
    spdlog::info("weights streamed by the runner: {:.2f} GB/s (an idle copy: {:.2f} GB/s)", streamed / 1e9,
                 idle_link / 1e9);
    if (streamed > 1.1 * idle_link) {
      spdlog::warn("profile: the runner's weight loads ({:.2f} GB/s) beat an idle copy ({:.2f} GB/s); the machine "
                   "was likely busy during the copy",
                   streamed / 1e9, idle_link / 1e9);
    }
    attention_call_through_the_runner(p, compute_device, reps, record);
  } catch (const std::exception& e) {
    // The rest of the profile stands: without the probes the model prices no fixed
    // step cost, the idle copy's link rate and the attention kernel's own call cost.
    spdlog::warn("profile: could not time the block runner ({}); what it did not measure is left as the idle "
                 "benchmarks give it (no fixed step cost, the idle copy's link rate, the attention kernel's own "
                 "cost per call)",
                 e.what());
  }
  // Device (de)quantization with CUDA, until the CUDA kernels are measured: a
  // memory-bound estimate (reads 0.28 B, writes 2 B per element) from the device
  // bandwidth. (A host standing in for the GPU timed its own in compression_rates.)
  if (!p.gpu_is_host) {
    p.gpu_quantize = p.gpu_memory_bandwidth / 2;
    p.gpu_dequantize = p.gpu_memory_bandwidth / 1.2;
  }

  p.cpu_memory = physical_memory();
  p.disk_memory = free_disk(o.offload_dir);
  p.name = "measured";
  p.source = std::string("measured by `tiergen profile`") + (o.quick ? " --quick" : "") +
             (p.gpu_is_host ? "; no CUDA device: the gpu numbers describe the host standing in for the GPU "
                              "(--device cpu), its capacity a quarter of physical memory"
                            : "; gpu quantize/dequantize estimated from device memory bandwidth") +
             "; schedule.step_seconds through the real block runner on a model whose layers do almost no work"
             "; bandwidth.cpu_to_gpu and cpu_to_gpu_cache the rate the runner's own weight loads from the cpu tier "
             "reached (hidden size 1024, every weight streamed each token), not an idle copy's"
             "; matmul rates in fp32 on the CPU, fp16 on CUDA; cpu matmul rates (product_rates by rows of one "
             "product, over a weight at least 4x the last-level cache) per dtype of host weights in "
             "cpu.product_tables, with the kernel path each took; the cpu fields outside them are the default "
             "compute dtype's (fp32 standing in, fp16 with CUDA); cpu.attention_bandwidth is the engine's decode "
             "attention kernel over an fp16 cache at least 4x the last-level cache, its cost per task (a "
             "sequence's kv head) from calls of one position per sequence (1 and 256 sequences of 32 heads), its "
             "cost per call through the real block runner (cache of a few positions on the cpu tier); cache-slice "
             "link rates equal the bulk rates; disk reads through the runtime's disk tier (buffered, reads "
             "of 16 MiB as two 8 MiB requests side by side, the page cache dropped behind), "
             "cpu.disk_read_core_bandwidth from how much slower 8-row fp32 products over eight 768x3072 "
             "matrices ran with those reads beside them" +
             (p.gpu_is_host ? "; each product table's loaded_cache_attention the host's decode attention as it "
                              "stands in for the GPU over a cache loaded from its cpu or disk tier (model::attend in "
                              "that dtype), its costs per call, unit, position and score and its bytes' rate fitted to "
                              "five shapes of 48-192 units, 48-144 positions, head dims 64 and 128, 1 and 8 query "
                              "heads a unit, timed in interleaved rounds over caches of 7-28 MB (fp32)"
                            : std::string()) +
             fmt::format("; CPU kernels timed on {} compute threads (every usable core unless OMP_NUM_THREADS says "
                         "otherwise, as runs compute)",
                         at::get_num_threads()) +
             (kSanitizedBuild ? "; SANITIZED BUILD: working sets a sixteenth of the usual and within the caches, "
                                "timed through instrumented code: not this host's speeds"
                              : "");
  p.validate("measured profile");
  return p;
}

}  // namespace tiergen::policy
