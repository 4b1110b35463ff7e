// The evidence replay: every GPU run of bench/gpu-evidence/side-by-side.csv whose
// machine has a profile (the one its window measured, kept in its digest folder, else a
// built-in one of that GPU) and whose policy the row spells out in full is predicted by
// the cost model within its plan class's error band (plan_class.h); so is every bench
// record a window's digest keeps, with its whole policy (threads included) under that
// window's profile. Every later change of the model must keep passing it; a GPU run
// that adds a row or a digest adds a case.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
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
#include "tiergen/runtime/policy.h"

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
    } else if (word.find('/') != word.rfind('/')) {
      return std::nullopt;  // a share on disk: the rows' runs had none, so no case reads it yet
    } else if (std::sscanf(word.c_str(), "w%lf/%lf", &a, &b) == 2) {
      p.w_gpu_percent = a, p.w_cpu_percent = b, weights = true;
    } else if (std::sscanf(word.c_str(), "c%lf/%lf", &a, &b) == 2) {
      p.cache_gpu_percent = a, p.cache_cpu_percent = b, cache = true;
    } else if (std::sscanf(word.c_str(), "a%lf/%lf", &a, &b) == 2) {
      p.act_gpu_percent = a, p.act_cpu_percent = b, act = true;
    } else if (word == "cpu-attention") {
      p.cpu_cache_compute = true;
    } else if (word == "overlap-off") {
      p.overlap = false;  // both systems ran it so (bench/compare/compare.py passes --overlap off)
    } else {
      return std::nullopt;
    }
  }
  if (!weights || !cache || !act) return std::nullopt;
  return p;
}

const std::filesystem::path kEvidence = TIERGEN_SOURCE_DIR "/bench/gpu-evidence";

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

// The digest folders of GPU windows: MACHINE_RUN-CASE/ holding the profile the window
// measured (hw-profile.json) beside its bench records.
std::vector<std::filesystem::path> window_digests() {
  std::vector<std::filesystem::path> folders;
  for (const auto& entry : std::filesystem::directory_iterator(kEvidence))
    if (entry.is_directory() && std::filesystem::exists(entry.path() / "hw-profile.json")) folders.push_back(entry.path());
  std::sort(folders.begin(), folders.end());
  return folders;
}

struct NamedProfile {
  HardwareProfile hw;
  std::string name;
};

// The profile a row's machine run measured, else the built-in profile of its GPU.
std::optional<NamedProfile> profile_for(const std::map<std::string, std::string>& row) {
  for (const auto& folder : window_digests()) {
    if (folder.filename().string().rfind(row.at("machine_run") + "-", 0) == 0) {
      const auto file = folder / "hw-profile.json";
      return NamedProfile{profile_from_json(read_json(file), file.string()), file.string()};
    }
  }
  if (row.at("gpu").rfind("H100", 0) == 0) return NamedProfile{*builtin_profile("h100-spr"), "h100-spr"};
  return std::nullopt;  // no profile describes that machine
}

TEST(EvidenceReplay, EveryReplayableGpuRunIsPredictedWithinItsBand) {
  const auto rows = read_rows(TIERGEN_SOURCE_DIR "/bench/gpu-evidence/side-by-side.csv");
  int replayed = 0;
  for (const Row& row : rows) {
    const auto& f = row.field;
    if (f.at("system") != "tiergen") continue;
    const auto profile = profile_for(f);
    const auto policy = parse_policy(f.at("policy"));
    if (!profile || !policy) continue;
    const HardwareProfile& hw = profile->hw;
    const auto spec = model::resolve_spec(f.at("model"));
    const runtime::Workload workload{std::stoll(f.at("prompt_len")), std::stoll(f.at("gen_len"))};
    const Prediction predicted = predict(spec, *policy, workload, hw);
    const double measured = std::stod(f.at("total_tok_s"));
    const double ratio = measured / predicted.total_throughput;
    const double band = plan_class_band(plan_class(*policy));
    EXPECT_NEAR(ratio, 1.0, band) << "side-by-side.csv line " << row.line << ": " << f.at("model") << " "
                                  << f.at("policy") << " measured " << measured << " token/s, predicted "
                                  << predicted.total_throughput << " under " << profile->name;
    ++replayed;
  }
  // The H100 runs with whole policies: OPT-6.7B 2x1 and 24x1, OPT-13B and OPT-30B 24x2
  // (2026-11-23, the built-in profile); OPT-13B 24x2 and 96x2 (2026-11-27, its own).
  EXPECT_GE(replayed, 6);
}

TEST(EvidenceReplay, EveryWindowRecordIsPredictedWithinItsBandUnderItsWindowsProfile) {
  int replayed = 0;
  for (const auto& folder : window_digests()) {
    const HardwareProfile hw = profile_from_json(read_json(folder / "hw-profile.json"), folder.string());
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("tiergen-", 0) != 0 || entry.path().extension() != ".json") continue;
      const nlohmann::json record = read_json(entry.path());
      const runtime::Policy policy = runtime::policy_from_json(record.at("policy"), entry.path().string());
      const auto spec = model::resolve_spec(record.at("model").get<std::string>());
      const runtime::Workload workload{record.at("prompt_len").get<int64_t>(), record.at("gen_len").get<int64_t>()};
      const Prediction predicted = predict(spec, policy, workload, hw);
      const double measured = record.at("total_throughput").get<double>();
      const double band = plan_class_band(plan_class(policy));
      EXPECT_NEAR(measured / predicted.total_throughput, 1.0, band)
          << entry.path() << ": measured " << measured << " token/s, predicted " << predicted.total_throughput;
      ++replayed;
    }
  }
  // 2026-11-27 (H100): OPT-13B at 24 GiB with FlexGen's policy and with --policy auto.
  EXPECT_GE(replayed, 2);
}

}  // namespace
}  // namespace tiergen::policy
