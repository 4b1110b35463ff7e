#include "src/cli/host_profile.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <filesystem>

#include "kernels/cpu/small_matmul.h"
#include "policy/profiler.h"
#include "tiergen/common/error.h"

namespace tiergen::cli {

namespace {

// Written next to the target and renamed: a concurrent reader never sees half a file.
void save_atomically(const policy::HardwareProfile& profile, const std::string& path) {
  const std::string partial = path + ".partial-" + std::to_string(::getpid());
  policy::save_profile(profile, partial);
  std::filesystem::rename(partial, path);
}

// Measures a quick profile of this host, its CPU products in `dtype` (the job's; others
// are timed into it when a job needs them), and caches it; nullopt (after a warning)
// when the measurement is refused or the cache cannot be written.
std::optional<policy::HardwareProfile> measure_and_cache(const std::string& dtype) {
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
    options.product_dtypes = {dtype};
    // Timed as default runs multiply (batch-invariant), whatever this run's --cpu-gemm:
    // the cached profile serves every later run.
    const kernels::SmallMatmulEveryRowCountScope as_default_runs(true);
    policy::HardwareProfile profile = policy::measure_host(options);
    save_atomically(profile, path);
    profile.path = path;
    return profile;
  } catch (const std::exception& e) {
    spdlog::warn("measuring this host failed: {}", e.what());
    return std::nullopt;
  }
}

// This host's cached profile, which timed other dtypes' CPU products than `dtype`
// (`why`: how its table of `dtype` missed), gains `dtype`'s: timed now (quick) and saved
// into the cache. False (after a warning) when that fails.
bool add_products_to_host_cache(policy::HardwareProfile& profile, const std::string& dtype, const std::string& why) {
  spdlog::info("this host's profile {}: timing them (a few seconds, once) into {}", why, profile.path);
  try {
    const kernels::SmallMatmulEveryRowCountScope as_default_runs(true);
    const policy::CpuProductTable table = policy::measure_cpu_products(dtype, /*quick=*/true, profile.gpu_is_host);
    if (table.rates.empty()) return false;
    policy::HardwareProfile timed = profile;  // `profile` unchanged unless saved
    timed.add_cpu_product_table(table);
    save_atomically(timed, timed.path);
    profile = std::move(timed);
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("timing {} CPU products failed: {}", dtype, e.what());
    return false;
  }
}

}  // namespace

policy::HardwareProfile profile_priced_in(policy::ResolvedProfile resolved, const std::string& dtype, bool may_time) {
  policy::HardwareProfile& profile = resolved.profile;
  const policy::CpuProductTable* table = profile.cpu_product_table(dtype);
  const bool lacks = profile.times_cpu_products_per_dtype() && table == nullptr;
  const std::string stale = table ? policy::stale_cpu_products(*table) : "";
  const bool ours = resolved.origin == policy::ProfileOrigin::HostCache && may_time;
  if (!stale.empty() &&
      !(ours && add_products_to_host_cache(profile, dtype, fmt::format("timed {} CPU products {}", dtype, stale)))) {
    spdlog::warn("hardware profile {} timed {} CPU products {}: they are priced as timed; `tiergen profile` re-times "
                 "them",
                 profile.path, dtype, stale);
  }
  if (lacks && !(ours && add_products_to_host_cache(profile, dtype, fmt::format("did not time {} CPU products", dtype)))) {
    spdlog::warn("hardware profile {} did not time CPU products in {}: no CPU products are priced in {} (computing "
                 "weights on the CPU is not planned{}); `tiergen profile` times every dtype",
                 profile.path, dtype, dtype,
                 profile.gpu_is_host ? ", and the host's own products are priced at its LibTorch matmul rates" : "");
  }
  // A stand-in's measured table from before its loaded-cache attention was timed (or
  // where this LibTorch cannot attend in the dtype): not timed again for it, but said. A
  // hand-written table (no kernel path) is not judged, as stale_cpu_products does not.
  const policy::CpuProductTable* priced = profile.cpu_product_table(dtype);
  if (profile.gpu_is_host && priced != nullptr && !priced->kernel_path.empty() && !priced->rates.empty() &&
      !priced->loaded_cache_attention.timed()) {
    spdlog::warn("hardware profile {} prices the stand-in's attention over a loaded cache in {} as its FLOPs at the "
                 "bmm rate (its {} table has no timing of it); on one host its time was 0.2x to 5x that price; "
                 "`tiergen profile` times it",
                 profile.path, dtype, dtype);
  }
  return profile.with_cpu_products_of(dtype);
}

policy::HardwareProfile profile_for_planning(const std::string& hw_option, const std::string& dtype) {
  policy::ResolvedProfile resolved = policy::resolve_profile_with_origin(hw_option);
  if (resolved.describes_this_host()) return profile_priced_in(resolved, dtype);
  if (auto measured = measure_and_cache(dtype)) return measured->with_cpu_products_of(dtype);
  spdlog::warn("planning with the built-in profile ({}), which describes another machine; run `tiergen profile "
               "--cache` for plans that fit this one", resolved.profile.name);
  return resolved.profile.with_cpu_products_of(dtype);
}

std::optional<policy::HardwareProfile> profile_for_prediction(const std::string& hw_option, const std::string& dtype,
                                                              bool may_measure) {
  try {
    policy::ResolvedProfile resolved = policy::resolve_profile_with_origin(hw_option);
    if (resolved.describes_this_host()) return profile_priced_in(resolved, dtype, may_measure);
    if (!may_measure) {
      spdlog::info("predicted vs measured: skipped (no hardware profile of this host; `tiergen profile --cache` makes one)");
      return std::nullopt;
    }
    if (auto measured = measure_and_cache(dtype)) return measured->with_cpu_products_of(dtype);
    spdlog::info("predicted vs measured: skipped (no hardware profile of this host; `tiergen profile --cache` makes one)");
  } catch (const std::exception& e) {
    spdlog::info("predicted vs measured: skipped ({})", e.what());
  }
  return std::nullopt;
}

}  // namespace tiergen::cli
