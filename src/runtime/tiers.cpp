#include "tiergen/runtime/tiers.h"

#include "tiergen/common/error.h"

namespace tiergen::runtime {

Tiers::Tiers(const Budgets& budgets, const std::string& offload_dir, bool use_disk, int io_threads)
    : gpu(Tier::Gpu, budgets.gpu), cpu(Tier::Cpu, budgets.cpu) {
  if (use_disk) disk = std::make_unique<DiskTier>(offload_dir, budgets.disk, io_threads);
}

TierAccount& Tiers::account(Tier tier) {
  if (tier == Tier::Gpu) return gpu;
  if (tier == Tier::Cpu) return cpu;
  return disk ? disk->account() : unused_disk;
}

DiskTier& Tiers::disk_tier() {
  TG_CHECK(disk != nullptr, "internal: the disk tier was not opened for this policy");
  return *disk;
}

TierBytes Tiers::peaks() const {
  TierBytes p;
  p[Tier::Gpu] = gpu.peak();
  p[Tier::Cpu] = cpu.peak();
  p[Tier::Disk] = disk ? disk->account().peak() : 0;
  return p;
}

}  // namespace tiergen::runtime
