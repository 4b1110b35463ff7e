#include "tiergen/runtime/host_memory.h"

#include <malloc.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#ifdef TIERGEN_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
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

std::optional<uint64_t> cuda_free_bytes(const DeviceContext& device) {
#ifdef TIERGEN_WITH_CUDA
  if (!device.is_cuda()) return std::nullopt;
  const c10::DeviceIndex index = device.cuda_index();
  const c10::cuda::CUDAGuard guard(index);
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error state of a failed query
    return std::nullopt;
  }
  return static_cast<uint64_t>(free_bytes);
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
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) return;
  // Both: a fixed mmap threshold alone leaves the heap trimmed after every prefill
  // step, a trim threshold alone fixes the mmap threshold at its 128 KiB default.
  ::mallopt(M_MMAP_THRESHOLD, 512 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace tiergen::runtime
