// The GLPK wrapper: optimal answers, infeasible and unbounded problems, integers.
#include <gtest/gtest.h>

#include "policy/lp_solver.h"

#include <cmath>

#include "tiergen/common/error.h"

namespace tiergen::policy {
namespace {

TEST(PolicyLp, SolvesASmallProblem) {
  // min -x - 2y  s.t. x + y <= 4, x <= 3, y <= 2.5  ->  x = 1.5, y = 2.5
  LinearProgram lp("small");
  const int x = lp.add_column("x", 0, 3, -1);
  const int y = lp.add_column("y", 0, 2.5, -2);
  lp.add_row("sum", {{x, 1}, {y, 1}}, RowSense::AtMost, 4);
  const LpSolution s = lp.minimize();
  ASSERT_TRUE(s.optimal());
  EXPECT_NEAR(s.values[x], 1.5, 1e-9);
  EXPECT_NEAR(s.values[y], 2.5, 1e-9);
  EXPECT_NEAR(s.objective, -6.5, 1e-9);
}

TEST(PolicyLp, EqualityAndAtLeastRows) {
  // min t  s.t. t >= 2a, t >= 3b, a + b = 1  ->  a = 0.6, b = 0.4, t = 1.2
  LinearProgram lp("max");
  const int a = lp.add_column("a", 0, 1, 0);
  const int b = lp.add_column("b", 0, 1, 0);
  const int t = lp.add_column("t", 0, LinearProgram::kInfinity, 1);
  lp.add_row("ta", {{t, 1}, {a, -2}}, RowSense::AtLeast, 0);
  lp.add_row("tb", {{t, 1}, {b, -3}}, RowSense::AtLeast, 0);
  lp.add_row("sum", {{a, 1}, {b, 1}}, RowSense::Equal, 1);
  const LpSolution s = lp.minimize();
  ASSERT_TRUE(s.optimal());
  EXPECT_NEAR(s.values[a], 0.6, 1e-9);
  EXPECT_NEAR(s.values[t], 1.2, 1e-9);
}

TEST(PolicyLp, ReportsInfeasible) {
  LinearProgram lp("infeasible");
  const int x = lp.add_column("x", 0, 1, 1);
  lp.add_row("too_much", {{x, 1}}, RowSense::AtLeast, 2);
  const LpSolution s = lp.minimize();
  EXPECT_EQ(s.status, LpStatus::Infeasible);
  EXPECT_FALSE(s.optimal());
  EXPECT_TRUE(s.values.empty());
}

TEST(PolicyLp, ReportsUnbounded) {
  LinearProgram lp("unbounded");
  const int x = lp.add_column("x", 0, LinearProgram::kInfinity, -1);
  lp.add_row("floor", {{x, 1}}, RowSense::AtLeast, 1);
  EXPECT_EQ(lp.minimize().status, LpStatus::Unbounded);
}

TEST(PolicyLp, IntegerColumnsUseBranchAndBound) {
  // max x + y  s.t. 2x + 2y <= 5 with x, y integer  ->  x + y = 2 (LP relaxation 2.5)
  LinearProgram lp("integer");
  const int x = lp.add_column("x", 0, 10, -1);
  const int y = lp.add_column("y", 0, 10, -1);
  lp.set_integer(x);
  lp.set_integer(y);
  lp.add_row("cap", {{x, 2}, {y, 2}}, RowSense::AtMost, 5);
  const LpSolution s = lp.minimize();
  ASSERT_TRUE(s.optimal());
  EXPECT_NEAR(s.objective, -2, 1e-9);
  EXPECT_NEAR(s.values[x] + s.values[y], 2, 1e-9);
  EXPECT_NEAR(s.values[x], std::round(s.values[x]), 1e-9);
}

TEST(PolicyLp, RejectsBadInput) {
  LinearProgram lp("bad");
  EXPECT_THROW(lp.add_column("x", 1, 0, 0), Error);
  const int x = lp.add_column("x", 0, 1, 0);
  EXPECT_THROW(lp.add_row("r", {{x + 5, 1}}, RowSense::AtMost, 1), Error);
  EXPECT_THROW(lp.set_integer(7), Error);
}

}  // namespace
}  // namespace tiergen::policy
