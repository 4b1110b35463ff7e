#include "src/cli/suggest.h"

#include <algorithm>
#include <cctype>
#include <tuple>

namespace tiergen::cli {

namespace {

std::string folded_name(const std::string& s) {
  std::string out = s.substr(std::min(s.find_first_not_of('-'), s.size()));
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

size_t edit_distance(const std::string& a_in, const std::string& b_in) {
  std::string a = a_in, b = b_in;
  for (char& c : a) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (char& c : b) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // Optimal string alignment: the Levenshtein table plus adjacent swaps.
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::vector<std::string> closest_names(const std::string& typed, const std::vector<std::string>& candidates,
                                       size_t limit) {
  const std::string t = folded_name(typed);
  if (t.empty()) return {};
  const size_t allowed = std::clamp<size_t>(t.size() / 3, 1, 3);
  // (rank, name): a name that starts with what was typed ranks 0, else its distance.
  // Only the best rank is offered: "opt-30" suggests opt-30b, not opt-13b too.
  std::vector<std::tuple<size_t, std::string>> scored;
  for (const auto& c : candidates) {
    const std::string n = folded_name(c);
    if (n.empty() || n == t) continue;
    const size_t dist = edit_distance(t, n);
    const bool prefix = t.size() >= 3 && n.rfind(t, 0) == 0;
    if (dist <= allowed || prefix) scored.emplace_back(prefix ? 0 : dist, c);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (const auto& [rank, name] : scored) {
    if (rank != std::get<0>(scored.front())) break;
    if (std::find(out.begin(), out.end(), name) != out.end()) continue;
    out.push_back(name);
    if (out.size() == limit) break;
  }
  return out;
}

std::string did_you_mean(const std::string& typed, const std::vector<std::string>& candidates) {
  const auto names = closest_names(typed, candidates);
  if (names.empty()) return "";
  std::string out = " (did you mean ";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += "'" + names[i] + "'";
  }
  return out + "?)";
}

}  // namespace tiergen::cli
