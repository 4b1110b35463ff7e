// `tiergen profile`: measures this host's bandwidths and FLOP rates into a hardware
// profile (JSON, configs/hw/ format) for the cost model.
#include <spdlog/spdlog.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "policy/profiler.h"
#include "src/cli/command.h"

namespace tiergen::cli {

namespace {

struct ProfileOptions {
  std::string out;
  policy::ProfilerOptions profiler;
};

void run_profile(const ProfileOptions& o) {
  const policy::HardwareProfile profile = policy::measure_host(o.profiler);
  if (o.out.empty()) {
    std::cout << policy::profile_to_json(profile).dump(2) << std::endl;
  } else {
    policy::save_profile(profile, o.out);
    spdlog::info("hardware profile written to {}", o.out);
  }
}

void setup_profile_command(CLI::App& app) {
  auto options = std::make_shared<ProfileOptions>();
  CLI::App* cmd = app.add_subcommand("profile", "Measure this host into a hardware profile for the cost model");
  cmd->add_option("--out", options->out, "Write the profile JSON here (default: stdout)");
  cmd->add_option("--offload-dir", options->profiler.offload_dir, "Directory for the disk test file")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--quick", options->profiler.quick, "Small problems and few repetitions (about 10 s)");
  cmd->callback([options] { run_profile(*options); });
}

}  // namespace

TIERGEN_REGISTER_COMMAND("profile", setup_profile_command);

}  // namespace tiergen::cli
