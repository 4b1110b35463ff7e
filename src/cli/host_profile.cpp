#include "src/cli/host_profile.h"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <filesystem>

#include "kernels/cpu/small_matmul.h"
#include "policy/profiler.h"
#include "tiergen/common/error.h"

namespace tiergen::cli {

namespace {

// Measures a quick profile of this host and caches it; nullopt (after a warning) when
// the measurement is refused or the cache cannot be written.
std::optional<policy::HardwareProfile> measure_and_cache() {
  const std::string path = policy::cached_profile_path();
  if (path.empty()) {
    spdlog::warn("no hardware profile of this host and nowhere to cache one ($XDG_CACHE_HOME and $HOME unset)");
    return std::nullopt;
  }
  spdlog::info("no hardware profile of this host: measuring a quick one (a few seconds, once) into {}", path);
  try {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    policy::ProfilerOptions options;
    options.offload_dir = std::filesystem::temp_directory_path().string();
    options.quick = true;
    // Timed as default runs multiply (batch-invariant), whatever this run's --cpu-gemm:
    // the cached profile serves every later run.
    const kernels::SmallMatmulEveryRowCountScope as_default_runs(true);
    policy::HardwareProfile profile = policy::measure_host(options);
    // Written next to the target and renamed: a concurrent reader never sees half a file.
    const std::string partial = path + ".partial-" + std::to_string(::getpid());
    policy::save_profile(profile, partial);
    std::filesystem::rename(partial, path);
    profile.path = path;
    return profile;
  } catch (const std::exception& e) {
    spdlog::warn("measuring this host failed: {}", e.what());
    return std::nullopt;
  }
}

}  // namespace

policy::HardwareProfile profile_for_planning(const std::string& hw_option) {
  policy::ResolvedProfile resolved = policy::resolve_profile_with_origin(hw_option);
  if (resolved.describes_this_host()) return resolved.profile;
  if (auto measured = measure_and_cache()) return *measured;
  spdlog::warn("planning with the built-in profile ({}), which describes another machine; run `tiergen profile "
               "--cache` for plans that fit this one", resolved.profile.name);
  return resolved.profile;
}

std::optional<policy::HardwareProfile> profile_for_prediction(const std::string& hw_option, bool may_measure) {
  try {
    policy::ResolvedProfile resolved = policy::resolve_profile_with_origin(hw_option);
    if (resolved.describes_this_host()) return resolved.profile;
    if (!may_measure) {
      spdlog::info("predicted vs measured: skipped (no hardware profile of this host; `tiergen profile --cache` makes one)");
      return std::nullopt;
    }
    if (auto measured = measure_and_cache()) return measured;
    spdlog::info("predicted vs measured: skipped (no hardware profile of this host; `tiergen profile --cache` makes one)");
  } catch (const std::exception& e) {
    spdlog::info("predicted vs measured: skipped ({})", e.what());
  }
  return std::nullopt;
}

}  // namespace tiergen::cli
