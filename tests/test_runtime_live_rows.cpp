// LiveRows, the map from a gpu batch's rows to the rows actually computed: gather picks
// the computed rows (in row order, or by an order key), scatter puts each result back
// in every row that takes it, with zeros where none does.
#include <gtest/gtest.h>

#include "tiergen/common/error.h"
#include "tiergen/runtime/live_rows.h"

namespace tiergen::runtime {
namespace {

// Row r of a [rows, 2] tensor holds (r, 10 r).
at::Tensor numbered(int64_t rows) {
  return at::stack({at::arange(rows, at::kFloat), at::arange(rows, at::kFloat) * 10}, 1);
}

std::vector<float> column0(const at::Tensor& t) {
  const at::Tensor c = t.select(1, 0).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

TEST(LiveRows, EveryRowLiveIsTheFullLayoutWithoutCopies) {
  LiveRows live;
  live.update(std::vector<bool>{true, true, true}, at::kCPU);
  EXPECT_TRUE(live.all());
  const at::Tensor full = numbered(3);
  EXPECT_TRUE(live.gather(full).is_same(full));
  EXPECT_TRUE(live.scatter(full).is_same(full));
}

TEST(LiveRows, FinishedRowsAreLeftOutAndComeBackAsZeros) {
  LiveRows live;
  live.update(std::vector<bool>{false, true, false, true}, at::kCPU);
  EXPECT_EQ(live.count(), 2);
  EXPECT_EQ(live.indices(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(column0(live.gather(numbered(4))), (std::vector<float>{1, 3}));
  const at::Tensor back = live.scatter(live.gather(numbered(4)));
  EXPECT_EQ(column0(back), (std::vector<float>{0, 1, 0, 3}));
}

TEST(LiveRows, SharedRowsAreComputedOnceAndCopiedToEveryRowThatTakesThem) {
  LiveRows live;
  // Rows 1 and 3 take row 0's result, row 4 is padding (none).
  live.update(std::vector<int64_t>{0, 0, 2, 0, -1}, at::kCPU);
  EXPECT_FALSE(live.all());
  EXPECT_EQ(live.indices(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(live.source(3), 0);
  EXPECT_EQ(live.source(4), -1);
  const at::Tensor computed = live.gather(numbered(5)) + 100;  // rows 0 and 2, changed
  const at::Tensor back = live.scatter(computed);
  EXPECT_EQ(column0(back), (std::vector<float>{100, 100, 102, 100, 0}));
  EXPECT_EQ(back.select(1, 1)[2].item<float>(), 120);
}

TEST(LiveRows, AnOrderKeyGathersByKeyAndScatterPutsRowsBack) {
  LiveRows live;
  const std::vector<int64_t> length{9, 2, 5, 2};
  live.update(std::vector<int64_t>{0, 1, 2, 3}, at::kCPU, &length);
  EXPECT_FALSE(live.all()) << "rows out of row order need a gather";
  EXPECT_EQ(live.indices(), (std::vector<int64_t>{1, 3, 2, 0}));  // shortest first, ties in row order
  EXPECT_EQ(column0(live.gather(numbered(4))), (std::vector<float>{1, 3, 2, 0}));
  EXPECT_EQ(column0(live.scatter(live.gather(numbered(4)))), (std::vector<float>{0, 1, 2, 3}));

  // Keys already in row order: the full layout, no copies.
  const std::vector<int64_t> sorted{1, 2, 2, 7};
  live.update(std::vector<int64_t>{0, 1, 2, 3}, at::kCPU, &sorted);
  EXPECT_TRUE(live.all());
}

TEST(LiveRows, SharedRowsWithAnOrderKey) {
  LiveRows live;
  const std::vector<int64_t> length{8, 8, 3, 8};
  live.update(std::vector<int64_t>{0, 0, 2, 0}, at::kCPU, &length);
  EXPECT_EQ(live.indices(), (std::vector<int64_t>{2, 0}));
  const at::Tensor back = live.scatter(live.gather(numbered(4) + 1));
  EXPECT_EQ(column0(back), (std::vector<float>{1, 1, 3, 1}));
}

TEST(LiveRows, ASourceThatIsNotComputedIsRefused) {
  LiveRows live;
  EXPECT_THROW(live.update(std::vector<int64_t>{1, 1}, at::kCPU), tiergen::Error) << "row 0 takes a later row";
  EXPECT_THROW(live.update(std::vector<int64_t>{-1, 0}, at::kCPU), tiergen::Error) << "row 1 takes row 0, not computed";
}

}  // namespace
}  // namespace tiergen::runtime
