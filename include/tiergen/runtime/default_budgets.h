#pragma once
// The tier budgets a run gets: the user's sizes (a unit required below 1 MiB), and
// defaults carved from what the machine has so that, together, they never exceed
// physical RAM: with --device cpu the gpu tier is host memory too, and the memory the
// process already uses (LibTorch, the allocator) lies outside every tier.
#include <cstdint>
#include <optional>
#include <string>

#include "tiergen/runtime/placement.h"

namespace tiergen::runtime {

// A budget flag's value. A plain number is bytes, but a number below 1 MiB without a
// unit is refused ("--gpu-mem 16" meaning 16 bytes is a typo for 16GiB).
uint64_t parse_budget(const std::string& text, const std::string& flag);

// What the default budgets are carved from.
struct HostMemory {
  uint64_t ram = 0;                     // physical memory
  uint64_t process_overhead = 0;        // this process's resident memory at start
  std::optional<uint64_t> device_free;  // free memory of the CUDA device; nullopt on the CPU
  uint64_t usable_ram() const { return ram > process_overhead ? ram - process_overhead : 0; }
};

// The budget flags as given ("" when not given).
struct BudgetRequest {
  std::string gpu, cpu, disk;
  uint64_t disk_free = 0;  // free space under the offload directory (the disk default)
};

// Share of usable RAM the default host tiers take together (gpu stand-in + cpu with
// --device cpu, of which the gpu tier a quarter; cpu alone with CUDA), and what a CUDA
// device keeps free beyond the gpu tier (CUDA context, cuBLAS workspaces per stream,
// allocator fragmentation).
constexpr double kDefaultHostShare = 0.8;
constexpr uint64_t kCudaHeadroomBytes = 4ull << 30;

// Throws tiergen::Error for bad sizes, or when no default fits (a CUDA device with
// less free memory than the headroom, or a --device cpu gpu tier leaving no RAM).
// Warns when the user's own sizes put more in RAM than the machine has.
Budgets resolve_budgets(const BudgetRequest& request, bool device_is_cuda, const HostMemory& host);

}  // namespace tiergen::runtime
