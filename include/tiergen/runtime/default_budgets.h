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

// A CUDA device's free memory, read twice: once its context exists, and again after
// one of each kind of work the engine issues has run (cuBLAS handles and workspaces,
// lazily loaded kernels) and the allocator's cached blocks went back to the device.
// What the warm-up took stays taken for the whole run (measure_cuda_free_memory).
struct DeviceFreeMemory {
  uint64_t at_start = 0;
  uint64_t after_warmup = 0;
  uint64_t warmup_bytes() const { return at_start > after_warmup ? at_start - after_warmup : 0; }
};

// What the default budgets are carved from.
struct HostMemory {
  uint64_t ram = 0;                              // physical memory
  uint64_t process_overhead = 0;                 // this process's resident memory at start
  std::optional<DeviceFreeMemory> device_free;   // the CUDA device's; nullopt on the CPU
  uint64_t usable_ram() const { return ram > process_overhead ? ram - process_overhead : 0; }
};

// The budget flags as given ("" when not given).
struct BudgetRequest {
  std::string gpu, cpu, disk;
  uint64_t disk_free = 0;  // free space under the offload directory (the disk default)
};

// Share of usable RAM the default host tiers take together (gpu stand-in + cpu with
// --device cpu, of which the gpu tier a quarter; cpu alone with CUDA).
constexpr double kDefaultHostShare = 0.8;

// What the default gpu tier leaves of a CUDA device's memory after the warm-up (the
// context and the warm-up's own cost are already out of `after_warmup`): what the
// caching allocator holds beyond the tier's own accounting. Measured on an H200
// (bench/RESULTS.md, 2026-11-26): 0.34 GiB beyond an all-GPU OPT-6.7B plan, 1.08 GiB
// beyond an all-GPU OPT-30B plan of 103 GiB, 1.65 and 2.38 GiB beyond offloaded
// OPT-30B plans of 5.8 and 9.5 GiB (weights copied in per layer on their own stream:
// the allocator keeps a free pool per stream, and the worker streams' cuBLAS handles
// and kernels load on first use). A fixed part above the largest of those, plus 1/64
// of the memory for block rounding, which grows with the tier: 3.75 GiB of an 80 GiB
// device left free after warm-up, 2.7 GiB of a 15 GiB one.
constexpr uint64_t kCudaUntrackedReserveBytes = 2560ull << 20;
constexpr uint64_t kCudaAllocatorReserveDivisor = 64;
uint64_t cuda_reserve_bytes(uint64_t free_after_warmup);

// Throws tiergen::Error for bad sizes, or when no default fits (a CUDA device with
// no more free memory than its reserve, or a --device cpu gpu tier leaving no RAM).
// Warns when the user's own sizes put more in RAM than the machine has.
Budgets resolve_budgets(const BudgetRequest& request, bool device_is_cuda, const HostMemory& host);

}  // namespace tiergen::runtime
