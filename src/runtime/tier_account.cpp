#include "tiergen/runtime/tier_account.h"

#include "tiergen/common/bytes.h"
#include "tiergen/common/error.h"

namespace tiergen::runtime {

Reservation& Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    release();
    account_ = other.account_;
    bytes_ = other.bytes_;
    other.account_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Reservation::release() {
  if (account_ && bytes_) account_->release(bytes_);
  account_ = nullptr;
  bytes_ = 0;
}

Reservation TierAccount::reserve(uint64_t bytes, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (used_ + bytes > budget_) {
    throw InfeasibleError(fmt::format("{} tier budget exceeded by {} while allocating {} ({}); in use {} of {}",
                                      tier_name(tier_), format_bytes(used_ + bytes - budget_), what,
                                      format_bytes(bytes), format_bytes(used_), format_bytes(budget_)));
  }
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  return Reservation(this, bytes);
}

void TierAccount::release(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  used_ -= std::min(bytes, used_);
}

uint64_t TierAccount::used() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return used_;
}

uint64_t TierAccount::peak() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

}  // namespace tiergen::runtime
