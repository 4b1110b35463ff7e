// `tiergen profile`: measures this host's bandwidths and FLOP rates into a hardware
// profile (JSON, configs/hw/ format) for the cost model. Every number is the median of
// repeated runs; their spread is printed so a noisy measurement shows itself.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "policy/profiler.h"
#include "src/cli/command.h"
#include "tiergen/common/error.h"

namespace tiergen::cli {

namespace {

struct ProfileOptions {
  std::string out;
  bool cache = false;
  policy::ProfilerOptions profiler;
};

// Repetitions further apart than this are flagged: the median is then a weak estimate.
constexpr double kNoisySpread = 0.5;

std::string measurements_table(const std::vector<policy::Measurement>& measurements) {
  std::string out = fmt::format("{:<28}{:>14} {:<7}{:>6}{:>9}\n", "measurement", "median", "unit", "runs", "spread");
  for (const auto& m : measurements) {
    out += fmt::format("{:<28}{:>14.4g} {:<7}{:>6}{:>8.0f}%{}\n", m.name, m.value, m.unit, m.runs, m.spread * 100,
                       m.spread > kNoisySpread ? "  noisy: rerun on a quiet machine" : "");
  }
  return out;
}

void run_profile(const ProfileOptions& o) {
  TG_CHECK(!(o.cache && !o.out.empty()), "profile: give --out FILE or --cache, not both");
  std::vector<policy::Measurement> measurements;
  const policy::HardwareProfile profile = policy::measure_host(o.profiler, &measurements);
  std::cerr << measurements_table(measurements) << std::flush;
  std::string path = o.out;
  if (o.cache) {
    path = policy::cached_profile_path();
    TG_CHECK(!path.empty(), "profile --cache: neither $XDG_CACHE_HOME nor $HOME is set; use --out FILE");
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  }
  if (path.empty()) {
    std::cout << policy::profile_to_json(profile).dump(2) << std::endl;
  } else {
    policy::save_profile(profile, path);
    spdlog::info("hardware profile written to {}{}", path,
                 o.cache ? " (generate, bench and policy use it when no --hw is given)" : "");
  }
}

void setup_profile_command(CLI::App& app) {
  auto options = std::make_shared<ProfileOptions>();
  CLI::App* cmd = app.add_subcommand("profile", "Measure this host into a hardware profile for the cost model");
  cmd->add_option("--out", options->out, "Write the profile JSON here (default: stdout)");
  cmd->add_flag("--cache", options->cache,
                "Write it as this host's default profile ($XDG_CACHE_HOME/tiergen/hw-profile.json, else "
                "~/.cache/tiergen/hw-profile.json)");
  cmd->add_option("--offload-dir", options->profiler.offload_dir, "Directory for the disk test file")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--quick", options->profiler.quick, "Small problems and few repetitions (about 10 s)");
  cmd->callback([options] { run_profile(*options); });
}

}  // namespace

TIERGEN_REGISTER_COMMAND("profile", setup_profile_command);

}  // namespace tiergen::cli
