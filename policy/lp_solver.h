#pragma once
// LinearProgram: a small RAII wrapper over GLPK (glp_prob). Columns and rows are added
// by name, the problem is minimised with glp_simplex (glp_intopt when a column is
// integer) and the answer is read back; GLPK's terminal output is off.
#include <limits>
#include <string>
#include <utility>
#include <vector>

struct glp_prob;

namespace tiergen::policy {

enum class LpStatus { Optimal, Infeasible, Unbounded };
const char* lp_status_name(LpStatus status);

struct LpSolution {
  LpStatus status = LpStatus::Infeasible;
  double objective = 0;
  std::vector<double> values;  // by column index
  bool optimal() const { return status == LpStatus::Optimal; }
};

enum class RowSense { AtMost, AtLeast, Equal };

class LinearProgram {
 public:
  static constexpr double kInfinity = std::numeric_limits<double>::infinity();

  explicit LinearProgram(const std::string& name);
  ~LinearProgram();
  LinearProgram(const LinearProgram&) = delete;
  LinearProgram& operator=(const LinearProgram&) = delete;

  // Returns the column's index (0-based). `upper` may be kInfinity.
  int add_column(const std::string& name, double lower, double upper, double objective_coef);
  void set_integer(int column);
  // sum(coef · column) <sense> rhs; zero coefficients are dropped.
  void add_row(const std::string& name, const std::vector<std::pair<int, double>>& coefs, RowSense sense,
               double rhs);
  int num_columns() const { return columns_; }

  // Minimises. Infeasible or unbounded problems are reported in the status; GLPK
  // failures (numerical trouble, bad input) throw tiergen::Error naming the problem.
  LpSolution minimize();

 private:
  glp_prob* problem_;
  std::string name_;
  int columns_ = 0;
  bool has_integer_ = false;
};

}  // namespace tiergen::policy
