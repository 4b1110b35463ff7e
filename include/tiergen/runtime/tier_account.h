#pragma once
// Byte accounting of one memory tier: every home tensor and staging buffer reserves
// its bytes here for as long as it lives; a reservation past the budget throws, so
// no tier can silently exceed --gpu-mem / --cpu-mem / --disk-mem.
#include <cstdint>
#include <mutex>
#include <string>

#include "tiergen/runtime/placement.h"

namespace tiergen::runtime {

class TierAccount;

// RAII: releases its bytes when destroyed. Movable, not copyable.
class Reservation {
 public:
  Reservation() = default;
  Reservation(TierAccount* account, uint64_t bytes) : account_(account), bytes_(bytes) {}
  Reservation(Reservation&& other) noexcept { *this = std::move(other); }
  Reservation& operator=(Reservation&& other) noexcept;
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation() { release(); }
  void release();
  uint64_t bytes() const { return bytes_; }

 private:
  TierAccount* account_ = nullptr;
  uint64_t bytes_ = 0;
};

class TierAccount {
 public:
  TierAccount(Tier tier, uint64_t budget) : tier_(tier), budget_(budget) {}
  // Throws tiergen::InfeasibleError naming the tier, `what`, and the shortfall.
  Reservation reserve(uint64_t bytes, const std::string& what);
  void release(uint64_t bytes);
  Tier tier() const { return tier_; }
  uint64_t budget() const { return budget_; }
  uint64_t used() const;
  uint64_t peak() const;

 private:
  Tier tier_;
  uint64_t budget_;
  mutable std::mutex mutex_;
  uint64_t used_ = 0;
  uint64_t peak_ = 0;
};

}  // namespace tiergen::runtime
