// A profile point whose repetitions disagree is timed again, and the attempt whose
// repetitions agree best is kept, within the profile's budget for it; `tiergen
// profile`'s table says how many times a number was timed.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "policy/quietest_attempt.h"

// The table's helper is compiled in (no other test file includes it).
#include "src/cli/measurements_table.cpp"

namespace tiergen::policy {
namespace {

// Hands out `script`'s attempts in order and counts them.
struct ScriptedPoint {
  std::vector<PointTiming> script;
  size_t made = 0;
  PointTiming operator()() { return script.at(made++); }
};

// An attempt of 3 runs whose median is `median` and which took 3 x `median` seconds.
PointTiming timing(double median, double spread) { return {median, spread, 3, 3 * median}; }

TEST(PolicyQuietestAttempt, AQuietPointIsTimedOnce) {
  ScriptedPoint point{{timing(1.0, 0.1), timing(2.0, 0.0)}};
  double budget = 100;
  const PointTiming kept = quietest_attempt(std::ref(point), budget);
  EXPECT_EQ(point.made, 1u);
  EXPECT_EQ(kept.attempts, 1);
  EXPECT_DOUBLE_EQ(kept.median, 1.0);
  EXPECT_DOUBLE_EQ(budget, 100);
}

TEST(PolicyQuietestAttempt, ANoisyPointIsTimedAgainAndItsQuietestAttemptKept) {
  ScriptedPoint point{{timing(1.0, 0.9), timing(1.1, 0.7), timing(1.05, 0.2), timing(9.0, 0.0)}};
  double budget = 100;
  const PointTiming kept = quietest_attempt(std::ref(point), budget);
  EXPECT_EQ(point.made, 3u);
  EXPECT_EQ(kept.attempts, 3);
  EXPECT_DOUBLE_EQ(kept.median, 1.05);
  EXPECT_DOUBLE_EQ(kept.spread, 0.2);
  // Each attempt after the first is charged at what it took.
  EXPECT_DOUBLE_EQ(budget, 100 - 3 * 1.1 - 3 * 1.05);
}

TEST(PolicyQuietestAttempt, APointNoisyInEveryAttemptKeepsTheQuietestAfterTheLast) {
  ScriptedPoint point{{timing(1.0, 0.9), timing(1.2, 0.6), timing(1.4, 0.8), timing(1.0, 0.0)}};
  double budget = 100;
  const PointTiming kept = quietest_attempt(std::ref(point), budget);
  EXPECT_EQ(point.made, size_t(kMaxPointAttempts));
  EXPECT_EQ(kept.attempts, kMaxPointAttempts);
  EXPECT_DOUBLE_EQ(kept.median, 1.2);
  EXPECT_DOUBLE_EQ(kept.spread, 0.6);
}

TEST(PolicyQuietestAttempt, TheProfilesBudgetBoundsTheAttempts) {
  // No attempt fits: the first one is kept, noisy, and the budget is left as it was.
  ScriptedPoint unaffordable{{timing(1.0, 0.9), timing(1.0, 0.0)}};
  double small = 2.9;
  EXPECT_EQ(quietest_attempt(std::ref(unaffordable), small).attempts, 1);
  EXPECT_EQ(unaffordable.made, 1u);
  EXPECT_DOUBLE_EQ(small, 2.9);
  // One fits, the next does not.
  ScriptedPoint one_more{{timing(1.0, 0.9), timing(1.0, 0.8), timing(1.0, 0.0)}};
  double budget = 4;
  const PointTiming kept = quietest_attempt(std::ref(one_more), budget);
  EXPECT_EQ(kept.attempts, 2);
  EXPECT_DOUBLE_EQ(kept.spread, 0.8);
  EXPECT_DOUBLE_EQ(budget, 1);
  // An attempt that took longer than the one before it (the host got busier) is charged
  // what it took: the budget goes below zero, and no attempt follows.
  ScriptedPoint slower{{timing(1.0, 0.9), timing(2.0, 0.8), timing(1.0, 0.0)}};
  double overspent = 4;
  EXPECT_EQ(quietest_attempt(std::ref(slower), overspent).attempts, 2);
  EXPECT_EQ(slower.made, 2u);
  EXPECT_DOUBLE_EQ(overspent, -2);
}

// A number timed more than once says how many times; one still noisy after its last
// attempt is flagged as before.
TEST(PolicyQuietestAttempt, TheProfileTableSaysHowManyTimesANumberWasTimed) {
  const std::vector<Measurement> measurements = {{"disk read", 2e9, "B/s", 3, 0.1, 1},
                                                 {"cpu matmul float32, 4 rows", 3e10, "B/s", 9, 0.2, 3},
                                                 {"cpu attention", 1e10, "B/s", 7, 0.8, 2}};
  const std::string table = cli::measurements_table(measurements);
  std::vector<std::string> lines;
  for (size_t at = 0, end; at < table.size(); at = end + 1) {
    end = table.find('\n', at);
    lines.push_back(table.substr(at, end - at));
  }
  ASSERT_EQ(lines.size(), 4u) << table;
  EXPECT_EQ(lines[1].find("timed"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[1].find("noisy"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("(timed 3 times)"), std::string::npos) << lines[2];
  EXPECT_EQ(lines[2].find("noisy"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("(timed 2 times)"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("noisy"), std::string::npos) << lines[3];
}

}  // namespace
}  // namespace tiergen::policy
