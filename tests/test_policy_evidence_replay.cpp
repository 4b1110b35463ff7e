// The evidence replay: every GPU run of bench/gpu-evidence/side-by-side.csv whose
// machine has a built-in profile and whose policy the row spells out in full is
// predicted by the cost model within its plan class's error band (plan_class.h). Every
// later change of the model must keep passing it; a GPU run that adds a row with a
// whole policy adds a case.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "policy/cost_model.h"
#include "policy/hardware_profile.h"
#include "policy/plan_class.h"
#include "tiergen/model/presets.h"

namespace tiergen::policy {
namespace {

struct Row {
  std::map<std::string, std::string> field;
  int line = 0;
};

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, by)) parts.push_back(part);
  return parts;
}

std::vector<Row> read_rows(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::string line;
  std::getline(in, line);
  const auto header = split(line, ',');
  std::vector<Row> rows;
  for (int number = 2; std::getline(in, line); ++number) {
    const auto cells = split(line, ',');
    Row row;
    row.line = number;
    for (size_t i = 0; i < header.size(); ++i) row.field[header[i]] = i < cells.size() ? cells[i] : "";
    rows.push_back(row);
  }
  return rows;
}

// "24x2 w40/60 c0/100 a0/100 cpu-attention": the whole policy, or nothing where the row
// leaves part of it out (activations unnamed, a thread count, CPU weight compute).
std::optional<runtime::Policy> parse_policy(const std::string& text) {
  runtime::Policy p;
  bool weights = false, cache = false, act = false;
  for (const std::string& word : split(text, ' ')) {
    double a = 0, b = 0;
    long long gbs = 0, ngb = 0;
    if (std::sscanf(word.c_str(), "%lldx%lld", &gbs, &ngb) == 2) {
      p.gpu_batch_size = gbs;
      p.num_gpu_batches = ngb;
    } else if (std::sscanf(word.c_str(), "w%lf/%lf", &a, &b) == 2) {
      p.w_gpu_percent = a, p.w_cpu_percent = b, weights = true;
    } else if (std::sscanf(word.c_str(), "c%lf/%lf", &a, &b) == 2) {
      p.cache_gpu_percent = a, p.cache_cpu_percent = b, cache = true;
    } else if (std::sscanf(word.c_str(), "a%lf/%lf", &a, &b) == 2) {
      p.act_gpu_percent = a, p.act_cpu_percent = b, act = true;
    } else if (word == "cpu-attention") {
      p.cpu_cache_compute = true;
    } else if (word == "overlap-off") {
      // FlexGen's flag; tiergen ran its own schedule with the same placement.
    } else {
      return std::nullopt;
    }
  }
  if (!weights || !cache || !act) return std::nullopt;
  return p;
}

std::optional<std::string> profile_for(const std::string& gpu) {
  if (gpu.rfind("H100", 0) == 0) return "h100-spr";
  return std::nullopt;  // no built-in profile describes that machine
}

TEST(EvidenceReplay, EveryReplayableGpuRunIsPredictedWithinItsBand) {
  const auto rows = read_rows(TIERGEN_SOURCE_DIR "/bench/gpu-evidence/side-by-side.csv");
  int replayed = 0;
  for (const Row& row : rows) {
    const auto& f = row.field;
    if (f.at("system") != "tiergen") continue;
    const auto profile_name = profile_for(f.at("gpu"));
    const auto policy = parse_policy(f.at("policy"));
    if (!profile_name || !policy) continue;
    const HardwareProfile hw = *builtin_profile(*profile_name);
    const auto spec = model::resolve_spec(f.at("model"));
    const runtime::Workload workload{std::stoll(f.at("prompt_len")), std::stoll(f.at("gen_len"))};
    const Prediction predicted = predict(spec, *policy, workload, hw);
    const double measured = std::stod(f.at("total_tok_s"));
    const double ratio = measured / predicted.total_throughput;
    const double band = plan_class_band(plan_class(*policy));
    EXPECT_NEAR(ratio, 1.0, band) << "side-by-side.csv line " << row.line << ": " << f.at("model") << " "
                                  << f.at("policy") << " measured " << measured << " token/s, predicted "
                                  << predicted.total_throughput << " under " << *profile_name;
    ++replayed;
  }
  // The H100 runs with whole policies: OPT-6.7B 2x1 and 24x1, OPT-13B and OPT-30B 24x2.
  EXPECT_GE(replayed, 4);
}

}  // namespace
}  // namespace tiergen::policy
