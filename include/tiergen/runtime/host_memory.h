#pragma once
// What the machine has, for the default tier budgets: physical RAM, the process's own
// resident memory (LibTorch, the allocator: outside every tier), the CUDA device's free
// memory, and whether a directory lives in RAM (tmpfs, ramfs).
#include <cstdint>
#include <optional>
#include <string>

#include "tiergen/runtime/device.h"

namespace tiergen::runtime {

uint64_t physical_memory_bytes();
// Resident set of this process now (/proc/self/statm); 0 when it cannot be read.
uint64_t process_rss_bytes();
// Free bytes of the CUDA device `device` computes on; nullopt on the CPU or in a build
// without CUDA.
std::optional<uint64_t> cuda_free_bytes(const DeviceContext& device);
// "tmpfs" or "ramfs" when `dir` (or its nearest existing parent) is on a RAM-backed
// filesystem; nullopt otherwise.
std::optional<std::string> ram_backed_filesystem(const std::string& dir);

}  // namespace tiergen::runtime
