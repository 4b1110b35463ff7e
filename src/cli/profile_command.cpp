// `tiergen profile`: measures this host's bandwidths and FLOP rates into a hardware
// profile (JSON, configs/hw/ format) for the cost model. Every number is the median of
// repeated runs; their spread is printed so a noisy measurement shows itself.
// `tiergen profile --link`, launched as a pipeline job is, measures the links between
// its ranks instead (the profile's stage_link, for `tiergen policy --stages`).
// `tiergen profile --calibrate-from RECORD...` measures nothing: it rescales a profile's
// decode rates until the cost model predicts the recorded runs (policy/calibration.h).
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu_features.h"
#include "policy/calibration.h"
#include "policy/profiler.h"
#include "src/cli/number_checks.h"
#include "src/cli/command.h"
#include "src/cli/engine_flags.h"
#include "src/cli/measurements_table.h"
#include "tiergen/common/error.h"
#include "tiergen/dist/launch.h"
#include "tiergen/runtime/link_probe.h"

namespace tiergen::cli {

namespace {

struct ProfileOptions {
  std::string out;
  bool cache = false;
  policy::ProfilerOptions profiler;
  bool link = false;
  runtime::LinkProbeOptions link_probe;
  dist::LaunchFlags launch;
  std::vector<std::string> calibrate_from;  // bench records
  std::string hw;                           // the profile they calibrate
};

std::string hops_table(const std::vector<runtime::LinkHop>& hops) {
  std::string out = fmt::format("{:<14}{:>14}{:>16}\n", "stage link", "GB/s", "latency us");
  for (const auto& h : hops) {
    out += fmt::format("{:<14}{:>14.3f}{:>16.1f}\n", fmt::format("rank {} -> {}", h.from, h.to),
                       h.bytes_per_second / 1e9, h.latency_seconds * 1e6);
  }
  return out;
}

// --link: every rank probes; rank 0 reports and writes the slowest hop into the
// profile named by --out (or --cache), which must exist: the link is one part of a
// host's profile, measured in a job of its own.
void run_link_profile(const ProfileOptions& o, const std::string& path) {
  const dist::Launch launch = dist::resolve_launch(o.launch);
  TG_CHECK(launch.distributed(), "profile --link measures the links between the ranks of a pipeline job: start 2 or "
           "more ranks as for `generate` (--world-size/--rank/--dist-init, torchrun or mpirun)");
  spdlog::set_pattern(fmt::format("[%H:%M:%S.%e] [rank {}/{}] [%^%l%$] %v", launch.rank, launch.world_size));
  const auto link = dist::connect(launch);
  // Checked once connected: the others then see this rank leave rather than wait for it
  // until --dist-timeout.
  if (!path.empty() && launch.rank == 0) {
    TG_CHECK(std::filesystem::exists(path), "{}: profile --link updates an existing hardware profile; write one "
             "first with `tiergen profile --out {}`", path, path);
  }
  const auto hops = runtime::probe_stage_links(*link, o.link_probe);
  if (launch.rank != 0) return;
  std::cerr << hops_table(hops) << std::flush;
  const runtime::LinkHop slowest = runtime::slowest_hop(hops);
  if (path.empty()) {
    std::cout << nlohmann::json{{"stage_link", {{"bandwidth", slowest.bytes_per_second},
                                                {"latency", slowest.latency_seconds}}}}.dump(2) << std::endl;
    return;
  }
  policy::HardwareProfile profile = policy::load_profile(path);
  profile.stage_link_bandwidth = slowest.bytes_per_second;
  profile.stage_link_latency = slowest.latency_seconds;
  policy::save_profile(profile, path);
  spdlog::info("stage link ({:.3f} GB/s, {:.1f} us per message: the slowest of {} hops) written to {}",
               slowest.bytes_per_second / 1e9, slowest.latency_seconds * 1e6, hops.size(), path);
}

nlohmann::json read_record(const std::string& path) {
  std::ifstream in(path);
  TG_CHECK(in.good(), "{}: cannot read this bench record", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("{}: not JSON (a `tiergen bench --json` record is expected): {}", path, e.what()));
  }
}

policy::HardwareProfile calibrated_profile(const ProfileOptions& o) {
  const policy::ResolvedProfile base = policy::resolve_profile_with_origin(o.hw);
  std::vector<policy::CalibrationRun> runs;
  for (const std::string& path : o.calibrate_from) runs.push_back(policy::calibration_run_from_record(read_record(path), path));
  const policy::Calibration fit = policy::calibrate(base.profile, runs);
  std::cerr << fmt::format("calibrating '{}' on {} run{}:\n", base.profile.name, runs.size(), runs.size() == 1 ? "" : "s")
            << policy::calibration_table(fit) << std::flush;
  return fit.profile;
}

// Which kernel path the CPU's products take in each dtype timed, and their rates at
// one row, at the largest row count timed and with many rows.
std::string cpu_product_paths(const policy::HardwareProfile& p) {
  std::string out = fmt::format("CPU products over host weights (kernel level {}):\n",
                                kernels::cpu_isa_name(kernels::cpu_isa_in_use()));
  for (const policy::CpuProductTable& t : p.cpu_product_tables) {
    if (t.rates.empty()) continue;  // (measure_host keeps only tables with rates)
    out += fmt::format("  {:<9} {}: 1 row {:.1f} GB/s, {} rows {:.1f} GB/s, many rows {:.1f} GFLOP/s\n", t.dtype,
                       t.kernel_path, t.rates.front().second / 1e9, t.rates.back().first, t.rates.back().second / 1e9,
                       t.matmul_flops / 1e9);
  }
  if (p.cpu_product_tables.empty()) out += "  none: this LibTorch multiplies none of float32, float16, bfloat16 on the CPU\n";
  return out;
}

void run_profile(const ProfileOptions& o) {
  TG_CHECK(!(o.cache && !o.out.empty()), "profile: give --out FILE or --cache, not both");
  TG_CHECK(o.hw.empty() || !o.calibrate_from.empty(), "profile --hw names the profile that --calibrate-from rescales");
  TG_CHECK(o.calibrate_from.empty() || (!o.link && !o.profiler.quick),
           "profile --calibrate-from measures nothing: it takes neither --link nor --quick");
  if (o.link) {
    const std::string path = o.cache ? policy::cached_profile_path() : o.out;
    TG_CHECK(!o.cache || !path.empty(), "profile --cache: neither $XDG_CACHE_HOME nor $HOME is set; use --out FILE");
    return run_link_profile(o, path);
  }
  policy::HardwareProfile profile;
  if (o.calibrate_from.empty()) {
    std::vector<policy::Measurement> measurements;
    profile = policy::measure_host(o.profiler, &measurements);
    std::cerr << measurements_table(measurements) << cpu_product_paths(profile) << std::flush;
  } else {
    profile = calibrated_profile(o);
  }
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
  cmd->add_flag("--quick", options->profiler.quick,
                "Small problems and few repetitions (seconds; longer where the last-level cache is hundreds of MB, "
                "as each memory probe spans 4x it)");
  cmd->add_flag("--link", options->link, "Measure the links between the ranks of a pipeline job instead (launched as "
                "`generate` is: --world-size/--rank/--dist-init, torchrun or mpirun); rank 0 writes the slowest hop "
                "into the profile given by --out or --cache, which must exist");
  cmd->add_option("--link-bytes", options->link_probe.payload_bytes, "Bytes of each timed --link message")
      ->capture_default_str()->check(positive());
  cmd->add_option("--link-rounds", options->link_probe.rounds, "Timed round trips per hop for --link")
      ->capture_default_str()->check(positive());
  cmd->add_option("--calibrate-from", options->calibrate_from,
                  "Measure nothing: rescale the profile's decode rates (weight link, CPU attention, GPU decode "
                  "products, or the CPU's products on a host standing in for the GPU) until the cost model predicts these `tiergen bench --json` records' per-task seconds")
      ->check(CLI::ExistingFile);
  cmd->add_option("--hw", options->hw, "With --calibrate-from: the profile to rescale (a file or a built-in name; "
                  "default: this host's cached profile, else the built-in default)");
  add_launch_flags(cmd, options->launch);
  cmd->callback([options] { run_profile(*options); });
}

}  // namespace

TIERGEN_REGISTER_COMMAND("profile", setup_profile_command);

}  // namespace tiergen::cli
