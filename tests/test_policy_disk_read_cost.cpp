// Disk-tier reads as the runtime makes them, and what they cost the cores computing
// beside them on a host standing in for the GPU (policy/disk_read_probe.h,
// HardwareProfile::disk_read_core_bandwidth).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "policy/cost_model.h"
#include "policy/disk_read_probe.h"
#include "policy/model_sizes.h"
#include "tiergen/common/error.h"
#include "tiergen/model/presets.h"

namespace tiergen::policy {
namespace {

HardwareProfile stand_in() {
  HardwareProfile p = load_profile(TIERGEN_SOURCE_DIR "/configs/hw/t4-flexgen.json");
  p.gpu_is_host = true;
  p.disk_to_cpu = 2e9;
  p.disk_to_cpu_cache = 1e9;
  return p;
}

// 30% of the weights on disk, the cache on the cpu tier or on disk, computed where the
// weights and the cache live.
runtime::Policy disk_policy(bool cache_on_disk) {
  runtime::Policy p;
  p.gpu_batch_size = 8;
  p.num_gpu_batches = 4;
  p.w_gpu_percent = 0;
  p.w_cpu_percent = 70;
  p.cache_gpu_percent = 0;
  p.cache_cpu_percent = cache_on_disk ? 0 : 100;
  p.act_gpu_percent = 0;
  p.act_cpu_percent = 100;
  p.cpu_cache_compute = true;
  return p;
}

double lane_at(const PhaseModel& phase, Lane lane, const Fractions& f) {
  return phase.lanes[static_cast<int>(lane)].at(f);
}

TEST(DiskReadCost, AStandInsCoresPayForItsDiskReadsBesideCompute) {
  const auto spec = model::resolve_spec("opt-125m");
  const ModelSizes sizes(spec, 4);
  const runtime::Workload w{32, 16};
  for (const bool cache_on_disk : {false, true}) {
    const runtime::Policy policy = disk_policy(cache_on_disk);
    const Fractions f = effective_fractions(sizes, policy);
    HardwareProfile free_reads = stand_in();
    HardwareProfile costly_reads = free_reads;
    costly_reads.disk_read_core_bandwidth = 4e9;  // 2 s of compute lost per second of weight reads at 2e9
    const CostModel before = build_cost_model(sizes, policy, w, free_reads);
    const CostModel after = build_cost_model(sizes, policy, w, costly_reads);
    for (const bool decode : {true, false}) {
      const PhaseModel* b = decode ? &before.decode : &before.prefill;
      const PhaseModel* a = decode ? &after.decode : &after.prefill;
      // The reads' own lane is unchanged; the cores gain each byte read over the core rate.
      EXPECT_DOUBLE_EQ(lane_at(*a, Lane::DiskToCpu, f), lane_at(*b, Lane::DiskToCpu, f));
      // (The disk lane: the weights' share on disk, and with the cache there, CPU
      // attention's reads of it at the cache's own rate.)
      const double cache_reads = a->tasks[static_cast<int>(Task::CacheLoad)].at(f);
      const double weight_reads = lane_at(*a, Lane::DiskToCpu, f) - (cache_on_disk ? cache_reads : 0.0);
      ASSERT_GT(weight_reads, 0);
      const double read_bytes = weight_reads * 2e9 + (cache_on_disk ? cache_reads * 1e9 : 0.0);
      EXPECT_NEAR(a->host_cores.at(f) - b->host_cores.at(f), read_bytes / 4e9, 1e-12 * read_bytes / 4e9 + 1e-15)
          << (cache_on_disk ? "cache on disk" : "cache on the cpu tier");
      if (cache_on_disk && decode) EXPECT_GT(cache_reads, 0) << "CPU attention reads the cache from disk";
    }
    // So the plan is priced slower, unless its disk reads bound it anyway.
    const Prediction p_free = predict(spec, policy, w, free_reads, 4);
    const Prediction p_costly = predict(spec, policy, w, costly_reads, 4);
    EXPECT_GE(p_costly.decode_seconds, p_free.decode_seconds);
  }
  // Reads dominated by compute: the charge sets the layer's time.
  HardwareProfile fast_disk = stand_in();
  fast_disk.disk_to_cpu = fast_disk.disk_to_cpu_cache = 50e9;
  HardwareProfile fast_disk_costly = fast_disk;
  fast_disk_costly.disk_read_core_bandwidth = 1e9;
  EXPECT_GT(predict(spec, disk_policy(false), w, fast_disk_costly, 4).decode_seconds,
            1.05 * predict(spec, disk_policy(false), w, fast_disk, 4).decode_seconds);
}

TEST(DiskReadCost, AGpuHostAndAPlanWithoutDiskReadsAreUntouched) {
  const auto spec = model::resolve_spec("opt-125m");
  const runtime::Workload w{32, 16};
  HardwareProfile gpu = load_profile(TIERGEN_SOURCE_DIR "/configs/hw/t4-flexgen.json");
  HardwareProfile gpu_costly = gpu;
  gpu_costly.disk_read_core_bandwidth = 1e8;
  EXPECT_DOUBLE_EQ(predict(spec, disk_policy(true), w, gpu_costly, 4).total_seconds,
                   predict(spec, disk_policy(true), w, gpu, 4).total_seconds);
  runtime::Policy no_disk = disk_policy(false);
  no_disk.w_cpu_percent = 100;
  HardwareProfile host = stand_in();
  HardwareProfile host_costly = host;
  host_costly.disk_read_core_bandwidth = 1e8;
  EXPECT_DOUBLE_EQ(predict(spec, no_disk, w, host_costly, 4).total_seconds,
                   predict(spec, no_disk, w, host, 4).total_seconds);
}

TEST(DiskReadCost, TheProfileFieldRoundTripsAndIsRefusedNegative) {
  HardwareProfile p = stand_in();
  EXPECT_FALSE(profile_to_json(p)["cpu"].contains("disk_read_core_bandwidth")) << "0: not measured, not written";
  p.disk_read_core_bandwidth = 3.5e9;
  const auto j = profile_to_json(p);
  EXPECT_DOUBLE_EQ(profile_from_json(j, "round trip").disk_read_core_bandwidth, 3.5e9);
  auto negative = j;
  negative["cpu"]["disk_read_core_bandwidth"] = -1;
  try {
    (void)profile_from_json(negative, "bad.json");
    FAIL() << "a negative rate was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu.disk_read_core_bandwidth"), std::string::npos) << e.what();
  }
}

// The probe itself: reads through the runtime's disk tier at a positive rate, runs them
// beside the compute samples it is asked to, leaves no file behind, charges what the
// compute lost (nothing under 2%) and fails with the tier's error where the tier cannot
// make its file.
TEST(DiskReadCost, TheProbeReadsThroughTheDiskTierAndLeavesNothing) {
  const auto dir = std::filesystem::temp_directory_path() / ("tiergen-disk-probe-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  struct RemoveAfter {
    std::filesystem::path path;
    ~RemoveAfter() { std::filesystem::remove_all(path); }
  } remove_after{dir};
  const DiskReadTimes t =
      time_disk_reads(dir.string(), 8ull << 20, 1ull << 20, 2, 3,
                      [] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); });
  EXPECT_GT(t.read_bandwidth, 0);
  EXPECT_EQ(t.read_passes.size(), 3u);
  EXPECT_EQ(t.alone.size(), 3u);
  EXPECT_EQ(t.beside.size(), 3u);
  for (double bytes : t.bytes_beside) EXPECT_GT(bytes, 0) << "the reads ran beside the compute";
  // The charge is the bytes read beside the compute over the time it lost, and nothing
  // where it lost under 2% (a sleeping compute on a quiet machine).
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double lost = median(t.beside) - median(t.alone);
  if (lost > 0.02 * median(t.alone)) {
    EXPECT_NEAR(t.core_bandwidth, median(t.bytes_beside) / lost, 1e-9 * t.core_bandwidth);
  } else {
    EXPECT_EQ(t.core_bandwidth, 0);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "the tier's file is unlinked";
  // A directory that cannot be made (under a file): the tier's error, not a crash.
  const auto file = dir.string() + "-file";
  std::ofstream(file) << "x";
  const RemoveAfter remove_file{file};
  EXPECT_THROW((void)time_disk_reads(file + "/sub", 8ull << 20, 1ull << 20, 2, 3, [] {}), Error);
}

}  // namespace
}  // namespace tiergen::policy
