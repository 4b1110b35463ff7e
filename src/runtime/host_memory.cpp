#include "tiergen/runtime/host_memory.h"

#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#ifdef TIERGEN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include "tiergen/common/torch_compat.h"
#include "tiergen/runtime/compressed_tensor.h"
#endif

namespace tiergen::runtime {

namespace {

// statfs f_type values (linux/magic.h).
constexpr uint32_t kTmpfsMagic = 0x01021994u;
constexpr uint32_t kRamfsMagic = 0x858458f6u;

}  // namespace

uint64_t physical_memory_bytes() {
  return static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGE_SIZE));
}

uint64_t process_rss_bytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGE_SIZE));
}

#ifdef TIERGEN_WITH_CUDA
namespace {

std::optional<uint64_t> cuda_free_now() {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error state of a failed query
    return std::nullopt;
  }
  return static_cast<uint64_t>(free_bytes);
}

// One of each kind of device work a decoder layer issues, small: what it loads and
// allocates for good (handles, workspaces, kernel modules) is what is measured.
void warm_up_cuda(const DeviceContext& device) {
  // Fixed values, not random ones: the warm-up must not advance the device's generator.
  const at::TensorOptions options = device.compute_options();
  const at::Tensor x = at::linspace(-1.0, 1.0, 16 * 256, options).view({16, 256});
  const at::Tensor w = at::linspace(-0.5, 0.5, 256 * 256, options).view({256, 256});
  const at::Tensor bias = at::full({256}, 0.25, options);
  const at::Tensor linear = at::linear(x, w, bias);  // cuBLASLt with a bias epilogue
  const at::Tensor product = at::matmul(x, w);       // cuBLAS
  const at::Tensor batched = at::bmm(x.view({4, 4, 256}), w.view({4, 64, 256}).transpose(1, 2));
  const at::Tensor normed = at::layer_norm(linear + product, {256}, w[0], bias);
  const at::Tensor activated = at::silu(normed) * at::relu(normed) + at::gelu(normed);
  const at::Tensor probs = at::softmax(activated.to(at::kFloat), -1);
  (void)at::argmax(probs, -1);
  (void)at::topk(probs, 8, 1, true, true);
#if TIERGEN_HAS_SDPA
  const at::Tensor q = batched.view({1, 4, 4, 64});
  const at::Tensor mask = at::ones({1, 1, 4, 4}, options.dtype(at::kBool)).tril();
  (void)at::scaled_dot_product_attention(q, q, q, mask);
#endif
  const CompressedTensor compressed = compress(activated, CompressionConfig{true, 4, 64});
  (void)decompress(compressed, device.dtype);  // tiergen's own kernels
  device.synchronize();
}

}  // namespace
#endif

std::optional<DeviceFreeMemory> measure_cuda_free_memory(const DeviceContext& device) {
#ifdef TIERGEN_WITH_CUDA
  if (!device.is_cuda()) return std::nullopt;
  const c10::cuda::CUDAGuard guard(device.cuda_index());
  const std::optional<uint64_t> at_start = cuda_free_now();
  if (!at_start) return std::nullopt;
  try {
    warm_up_cuda(device);
  } catch (const c10::Error& e) {
    spdlog::warn("CUDA warm-up for the default gpu budget failed: {}", e.what_without_backtrace());
    c10::cuda::CUDACachingAllocator::emptyCache();
    return std::nullopt;
  }
  c10::cuda::CUDACachingAllocator::emptyCache();
  const std::optional<uint64_t> after_warmup = cuda_free_now();
  if (!after_warmup) return std::nullopt;
  return DeviceFreeMemory{*at_start, *after_warmup};
#else
  (void)device;
  return std::nullopt;
#endif
}

std::optional<uint64_t> cuda_peak_reserved_bytes(const DeviceContext& device) {
#ifdef TIERGEN_WITH_CUDA
  if (!device.is_cuda()) return std::nullopt;
  constexpr size_t kAggregate = 0;  // StatType::AGGREGATE: all pools together
  return static_cast<uint64_t>(
      c10::cuda::CUDACachingAllocator::getDeviceStats(device.cuda_index()).reserved_bytes[kAggregate].peak);
#else
  (void)device;
  return std::nullopt;
#endif
}

std::optional<std::string> ram_backed_filesystem(const std::string& dir) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(dir, ec);
  while (!p.empty() && !std::filesystem::exists(p, ec)) p = p.parent_path();
  struct statfs s {};
  if (p.empty() || ::statfs(p.c_str(), &s) != 0) return std::nullopt;
  const auto type = static_cast<uint32_t>(s.f_type);
  if (type == kTmpfsMagic) return "tmpfs";
  if (type == kRamfsMagic) return "ramfs";
  return std::nullopt;
}

void keep_freed_host_memory_for_reuse() {
  // One arena: glibc gives each thread that allocates an arena of its own, made of
  // mapped heaps of at most 64 MiB that it unmaps once empty, and maps a block too large
  // for such a heap afresh at every allocation. The runtime's copy queues allocate on
  // their threads (the stand-in's device copies, disk staging) what the compute thread
  // frees: on opt-125m with its weights streamed from the cpu tier (--device cpu, 32x1)
  // every layer's weights page-faulted in anew, 3.2 million faults in a 16-token run,
  // and decode ran at half the rate it does from one arena (bench/RESULTS.md: 2.02x).
  // Small blocks come from each thread's own cache (tcache) before the arena's lock, and
  // plans that stream nothing ran at the same rate either way.
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const bool arena_set_outside =
      std::getenv("MALLOC_ARENA_MAX") || (tunables && std::strstr(tunables, "glibc.malloc.arena_max"));
  if (!arena_set_outside) ::mallopt(M_ARENA_MAX, 1);
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) return;
  // Both: a fixed mmap threshold alone leaves the heap trimmed after every prefill
  // step, a trim threshold alone fixes the mmap threshold at its 128 KiB default.
  ::mallopt(M_MMAP_THRESHOLD, 512 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace tiergen::runtime
