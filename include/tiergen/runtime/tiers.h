#pragma once
// The three memory tiers of a run with their budgets.
#include <memory>
#include <string>

#include "tiergen/runtime/disk_tier.h"
#include "tiergen/runtime/placement.h"
#include "tiergen/runtime/tier_account.h"

namespace tiergen::runtime {

struct Tiers {
  // The offload file is only created when the policy puts something on disk.
  Tiers(const Budgets& budgets, const std::string& offload_dir, bool use_disk, int io_threads);

  TierAccount& account(Tier tier);
  DiskTier& disk_tier();
  TierBytes peaks() const;

  TierAccount gpu;
  TierAccount cpu;
  std::unique_ptr<DiskTier> disk;
  TierAccount unused_disk{Tier::Disk, 0};
};

}  // namespace tiergen::runtime
