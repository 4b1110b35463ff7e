#pragma once
// What the machine has, for the default tier budgets: physical RAM, the process's own
// resident memory (LibTorch, the allocator: outside every tier), the CUDA device's free
// memory, and whether a directory lives in RAM (tmpfs, ramfs).
#include <cstdint>
#include <optional>
#include <string>

#include "tiergen/runtime/default_budgets.h"
#include "tiergen/runtime/device.h"

namespace tiergen::runtime {

uint64_t physical_memory_bytes();
// Resident set of this process now (/proc/self/statm); 0 when it cannot be read.
uint64_t process_rss_bytes();
// The free memory of the CUDA device `device` computes on, before and after a warm-up
// on the calling thread's stream in the run's dtype: matmuls with and without bias
// (cuBLAS and cuBLASLt handles and their workspaces), the elementwise, normalisation,
// softmax and argmax kernels of a decoder layer, and tiergen's quantization kernels.
// The warm-up's tensors are freed and the allocator's cache emptied before the second
// reading, so what it keeps (handles, workspaces, kernel modules) is what the compute
// stream keeps for the run; the worker streams' own handles come later and are left to
// the reserve (cuda_reserve_bytes). nullopt on the CPU, in a build without CUDA, when
// the device cannot be queried, or when the warm-up fails (a device already full).
std::optional<DeviceFreeMemory> measure_cuda_free_memory(const DeviceContext& device);
// The most device memory LibTorch's caching allocator has held at once on the CUDA
// device `device` computes on (reserved, cached blocks included), set against the gpu
// tier to see what the tier's accounting misses; nullopt on the CPU.
std::optional<uint64_t> cuda_peak_reserved_bytes(const DeviceContext& device);
// "tmpfs" or "ramfs" when `dir` (or its nearest existing parent) is on a RAM-backed
// filesystem; nullopt otherwise.
std::optional<std::string> ram_backed_filesystem(const std::string& dir);

// A step's host temporaries (a prefill's attention scores and activations: tens to
// hundreds of MB) are freed and allocated again at every layer. By default glibc
// returns blocks above its mmap threshold (adjusted as blocks are freed, at most 32 MB)
// to the OS at each free and trims the heap's free top beyond its trim threshold, so
// each step page-faults and zeroes them anew (on a small OPT's ragged prefill on the
// CPU, 40-60% of its compute time). Keeps blocks of up to 512 MiB in the heap and up to
// 1 GiB of free heap top for the next step; the peak resident memory stays about the
// same. Every thread allocates from the one (main) arena, so this holds for the blocks
// the copy queues allocate too; call it before any other thread allocates (a thread
// with an arena of its own keeps it). For the whole process; where MALLOC_ARENA_MAX (or
// the glibc.malloc.arena_max tunable), MALLOC_MMAP_THRESHOLD_ or
// MALLOC_TRIM_THRESHOLD_ is set, glibc's settings from the environment stay.
void keep_freed_host_memory_for_reuse();

}  // namespace tiergen::runtime
