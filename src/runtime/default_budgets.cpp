#include "tiergen/runtime/default_budgets.h"

#include <spdlog/spdlog.h>

#include <cctype>

#include "tiergen/common/bytes.h"
#include "tiergen/common/error.h"

namespace tiergen::runtime {

namespace {

bool all_digits(const std::string& text) {
  size_t digits = 0;
  for (char c : text) {
    if (std::isdigit(static_cast<unsigned char>(c))) ++digits;
    else if (!std::isspace(static_cast<unsigned char>(c))) return false;
  }
  return digits > 0;
}

}  // namespace

uint64_t parse_budget(const std::string& text, const std::string& flag) {
  const uint64_t bytes = parse_bytes(text, flag);
  TG_CHECK(!all_digits(text) || bytes >= (1ull << 20),
           "{} {}: a size needs a unit (e.g. {}GiB or {}MiB); a plain number is bytes and must be at least 1 MiB",
           flag, text, bytes, bytes);
  return bytes;
}

uint64_t cuda_reserve_bytes(uint64_t free_after_warmup) {
  return kCudaUntrackedReserveBytes + free_after_warmup / kCudaAllocatorReserveDivisor;
}

Budgets resolve_budgets(const BudgetRequest& f, bool device_is_cuda, const HostMemory& host) {
  Budgets b;
  const auto host_share = static_cast<uint64_t>(static_cast<double>(host.usable_ram()) * kDefaultHostShare);
  if (!f.gpu.empty()) {
    b.gpu = parse_budget(f.gpu, "--gpu-mem");
  } else if (device_is_cuda) {
    TG_CHECK(host.device_free.has_value(), "--gpu-mem not given and the CUDA device's free memory is unknown; "
             "give --gpu-mem");
    const uint64_t free = host.device_free->after_warmup;
    const uint64_t reserve = cuda_reserve_bytes(free);
    TG_CHECK(free > reserve, "the CUDA device has only {} free after start-up, no more than the {} kept for the "
             "allocator and lazily loaded kernels; free the device or give --gpu-mem", format_bytes(free),
             format_bytes(reserve));
    b.gpu = free - reserve;
  } else {
    b.gpu = host_share / 4;  // host memory standing in for the gpu: a quarter of the host share
  }
  // With --device cpu the gpu tier is host memory too: both come out of the same RAM.
  const uint64_t host_gpu = device_is_cuda ? 0 : b.gpu;
  if (!f.cpu.empty()) {
    b.cpu = parse_budget(f.cpu, "--cpu-mem");
  } else {
    b.cpu = host_share > host_gpu ? host_share - host_gpu : 0;
    TG_CHECK(b.cpu > 0, "--gpu-mem {} leaves no RAM for the cpu tier on --device cpu ({} usable); give --cpu-mem or a "
             "smaller --gpu-mem", f.gpu, format_bytes(host.usable_ram()));
  }
  b.disk = f.disk.empty() ? f.disk_free : parse_budget(f.disk, "--disk-mem");
  if (host_gpu + b.cpu > host.usable_ram()) {
    spdlog::warn("the host tiers ({}{}) exceed this machine's RAM ({}) less this process's own {}: the run may swap or "
                 "be killed", format_bytes(host_gpu + b.cpu), device_is_cuda ? "" : ", gpu stand-in and cpu together",
                 format_bytes(host.ram), format_bytes(host.process_overhead));
  }
  return b;
}

}  // namespace tiergen::runtime
