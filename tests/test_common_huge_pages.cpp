// Host tensors on transparent huge pages (common/huge_pages.h): what the kernel is asked
// for, and that the tensor behaves as any other CPU tensor.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "tiergen/common/huge_pages.h"

namespace tiergen {
namespace {

// The VmFlags of the mapping holding `address` in /proc/self/smaps ("" when none does).
std::string vm_flags_at(const void* address) {
  const auto at = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= at && at < end;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

bool mapped(const void* address) { return !vm_flags_at(address).empty(); }

TEST(HugePages, ALargeTensorStartsOnAHugePageBoundaryAndAsksForHugePages) {
  // 5 MiB and a little: two whole huge pages and a partial third.
  at::Tensor t = empty_on_huge_pages({5 * (1 << 20) / 4 + 3}, at::kFloat);
  ASSERT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.scalar_type(), at::kFloat);
  EXPECT_EQ(t.numel(), 5 * (1 << 20) / 4 + 3);
  if (!on_huge_pages(t)) GTEST_SKIP() << "this kernel refuses MADV_HUGEPAGE (no transparent huge pages)";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % kHugePageBytes, 0u);
  // "hg": the mapping's first huge pages carry the advice.
  EXPECT_NE(vm_flags_at(t.data_ptr()).find(" hg"), std::string::npos) << vm_flags_at(t.data_ptr());
  // It holds values as any tensor does, over its whole length.
  t.copy_(at::arange(t.numel(), at::kFloat));
  EXPECT_EQ(t[t.numel() - 1].item<float>(), static_cast<float>(t.numel() - 1));
  EXPECT_TRUE(at::equal(t.slice(0, 1000, 1010), at::arange(1000, 1010, at::kFloat)));
}

TEST(HugePages, TheMappingGoesWithTheLastReference) {
  at::Tensor t = empty_on_huge_pages({3, 1 << 20}, at::kFloat);
  if (!on_huge_pages(t)) GTEST_SKIP() << "this kernel refuses MADV_HUGEPAGE (no transparent huge pages)";
  const void* data = t.data_ptr();
  at::Tensor view = t.select(0, 2);  // shares the storage
  t.reset();
  EXPECT_TRUE(mapped(data)) << "a view keeps the memory";
  view.reset();
  EXPECT_FALSE(mapped(data)) << "the last reference unmaps it";
}

TEST(HugePages, SmallTensorsArePlainOnes) {
  const at::Tensor t = empty_on_huge_pages({kHugePageBytes / 2 - 1}, at::kShort);
  EXPECT_FALSE(on_huge_pages(t));
  EXPECT_EQ(t.numel(), static_cast<int64_t>(kHugePageBytes / 2 - 1));
  EXPECT_FALSE(on_huge_pages(at::empty({4})));
  EXPECT_FALSE(on_huge_pages(at::Tensor()));
}

}  // namespace
}  // namespace tiergen
