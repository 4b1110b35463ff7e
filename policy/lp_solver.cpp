#include "policy/lp_solver.h"

#include <glpk.h>

#include <cmath>

#include "tiergen/common/error.h"

namespace tiergen::policy {

const char* lp_status_name(LpStatus status) {
  switch (status) {
    case LpStatus::Optimal: return "optimal";
    case LpStatus::Infeasible: return "infeasible";
    case LpStatus::Unbounded: return "unbounded";
  }
  return "?";
}

LinearProgram::LinearProgram(const std::string& name) : problem_(glp_create_prob()), name_(name) {
  glp_term_out(GLP_OFF);
  glp_set_prob_name(problem_, name.c_str());
  glp_set_obj_dir(problem_, GLP_MIN);
}

LinearProgram::~LinearProgram() { glp_delete_prob(problem_); }

int LinearProgram::add_column(const std::string& name, double lower, double upper, double objective_coef) {
  TG_CHECK(std::isfinite(lower) && !(upper < lower) && std::isfinite(objective_coef),
           "LP '{}': column '{}' has bad bounds [{}, {}] or objective {}", name_, name, lower, upper, objective_coef);
  const int j = glp_add_cols(problem_, 1);
  glp_set_col_name(problem_, j, name.c_str());
  if (std::isinf(upper)) {
    glp_set_col_bnds(problem_, j, GLP_LO, lower, 0.0);
  } else if (upper == lower) {
    glp_set_col_bnds(problem_, j, GLP_FX, lower, upper);
  } else {
    glp_set_col_bnds(problem_, j, GLP_DB, lower, upper);
  }
  glp_set_obj_coef(problem_, j, objective_coef);
  return columns_++;
}

void LinearProgram::set_integer(int column) {
  TG_CHECK(column >= 0 && column < columns_, "LP '{}': no column {}", name_, column);
  glp_set_col_kind(problem_, column + 1, GLP_IV);
  has_integer_ = true;
}

void LinearProgram::add_row(const std::string& name, const std::vector<std::pair<int, double>>& coefs,
                            RowSense sense, double rhs) {
  TG_CHECK(std::isfinite(rhs), "LP '{}': row '{}' has a non-finite bound", name_, name);
  std::vector<int> index{0};
  std::vector<double> value{0.0};
  for (const auto& [column, coef] : coefs) {
    TG_CHECK(column >= 0 && column < columns_, "LP '{}': row '{}' names no column {}", name_, name, column);
    TG_CHECK(std::isfinite(coef), "LP '{}': row '{}' has a non-finite coefficient", name_, name);
    if (coef == 0) continue;
    index.push_back(column + 1);
    value.push_back(coef);
  }
  const int i = glp_add_rows(problem_, 1);
  glp_set_row_name(problem_, i, name.c_str());
  const int type = sense == RowSense::AtMost ? GLP_UP : sense == RowSense::AtLeast ? GLP_LO : GLP_FX;
  glp_set_row_bnds(problem_, i, type, rhs, rhs);
  glp_set_mat_row(problem_, i, static_cast<int>(index.size()) - 1, index.data(), value.data());
}

LpSolution LinearProgram::minimize() {
  LpSolution solution;
  glp_smcp simplex;
  glp_init_smcp(&simplex);
  simplex.msg_lev = GLP_MSG_OFF;
  simplex.presolve = GLP_ON;
  const int rc = glp_simplex(problem_, &simplex);
  if (rc == GLP_ENOPFS) return solution;  // presolver: no primal feasible solution
  if (rc == GLP_ENODFS) {
    solution.status = LpStatus::Unbounded;
    return solution;
  }
  TG_CHECK(rc == 0, "LP '{}': glp_simplex failed with code {}", name_, rc);
  int status = glp_get_status(problem_);
  if (status == GLP_NOFEAS || status == GLP_INFEAS) return solution;
  if (status == GLP_UNBND) {
    solution.status = LpStatus::Unbounded;
    return solution;
  }
  TG_CHECK(status == GLP_OPT, "LP '{}': simplex ended without an optimum (status {})", name_, status);
  if (has_integer_) {
    glp_iocp integer;
    glp_init_iocp(&integer);
    integer.msg_lev = GLP_MSG_OFF;
    const int irc = glp_intopt(problem_, &integer);
    if (irc == GLP_ENOPFS) return solution;
    TG_CHECK(irc == 0, "LP '{}': glp_intopt failed with code {}", name_, irc);
    status = glp_mip_status(problem_);
    if (status == GLP_NOFEAS) return solution;
    TG_CHECK(status == GLP_OPT, "LP '{}': branch and bound ended without an optimum (status {})", name_, status);
  }
  solution.status = LpStatus::Optimal;
  solution.objective = has_integer_ ? glp_mip_obj_val(problem_) : glp_get_obj_val(problem_);
  solution.values.resize(columns_);
  for (int j = 0; j < columns_; ++j) {
    solution.values[j] = has_integer_ ? glp_mip_col_val(problem_, j + 1) : glp_get_col_prim(problem_, j + 1);
  }
  return solution;
}

}  // namespace tiergen::policy
