#pragma once
// Linear functions of FlexGen's nine placement fractions p = (wg, wc, wn, cg, cc, cn,
// hg, hc, hn). For fixed batch shape, compression and attention placement every task
// time and every peak-memory term of the cost model is linear in p, which is what
// makes the placement search a linear program.
#include <array>
#include <string>

namespace tiergen::policy {

enum Var { kWg, kWc, kWn, kCg, kCc, kCn, kHg, kHc, kHn, kNumVars };
const char* var_name(int var);

using Fractions = std::array<double, kNumVars>;

struct Linear {
  double constant = 0;
  std::array<double, kNumVars> coef{};

  static Linear of(double constant) { return Linear{constant, {}}; }
  // `scale` times the sum of the given fractions.
  static Linear sum(double scale, std::initializer_list<Var> vars) {
    Linear l;
    for (Var v : vars) l.coef[v] += scale;
    return l;
  }
  double at(const Fractions& p) const {
    double value = constant;
    for (int i = 0; i < kNumVars; ++i) value += coef[i] * p[i];
    return value;
  }
  Linear& operator+=(const Linear& o) {
    constant += o.constant;
    for (int i = 0; i < kNumVars; ++i) coef[i] += o.coef[i];
    return *this;
  }
  Linear operator+(const Linear& o) const { return Linear(*this) += o; }
  Linear operator*(double s) const {
    Linear l = *this;
    l.constant *= s;
    for (auto& c : l.coef) c *= s;
    return l;
  }
  Linear operator/(double s) const { return *this * (1.0 / s); }
};

}  // namespace tiergen::policy
