// Hardware profiles: the shipped files load, save/load round-trips, errors name the
// file and the field, thread scaling interpolates, and Algorithm 3's pieces.
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <unistd.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/cpu/small_matmul.h"
#include "policy/hardware_profile.h"
#include "policy/profiler.h"
#include "kernels/cpu/quantized_matmul.h"
#include "policy/thread_search.h"
#include "tiergen/common/compute_threads.h"
#include "tiergen/common/error.h"
#include "tiergen/common/kernel_elem_type.h"
#include "tiergen/common/torch_compat.h"
#include "tiergen/model/linear.h"
#include "tests/support/temp_dir.h"

namespace tiergen::policy {
namespace {

const std::string kT4 = TIERGEN_SOURCE_DIR "/configs/hw/t4-flexgen.json";

TEST(PolicyProfile, ShippedProfilesLoad) {
  const auto t4 = load_profile(kT4);
  EXPECT_EQ(t4.name, "t4-flexgen");
  EXPECT_NEAR(t4.cpu_to_gpu, 12.89 * (1ull << 30), 1);  // FlexGen's GB is 2^30 bytes
  EXPECT_NEAR(t4.bmm_flops_decode, 0.079e12, 1);
  EXPECT_NEAR(t4.cpu_attention_bandwidth, 0.0123e12, 1);
  EXPECT_FALSE(t4.source.empty());
  const auto a100 = load_profile(TIERGEN_SOURCE_DIR "/configs/hw/a100-40gb-pcie4.json");
  EXPECT_GT(a100.mm_flops_prefill, t4.mm_flops_prefill);
  EXPECT_EQ(a100.gpu_memory, 40ull << 30);
}

TEST(PolicyProfile, SaveLoadRoundTrip) {
  auto p = load_profile(kT4);
  const std::string path = ::testing::TempDir() + "/tiergen_profile_roundtrip.json";
  save_profile(p, path);
  const auto back = load_profile(path);
  EXPECT_EQ(profile_to_json(back).dump(), profile_to_json(p).dump());
  std::remove(path.c_str());
  // An optional rate: left out while unmeasured, kept when measured.
  EXPECT_FALSE(profile_to_json(p)["cpu"].contains("dequantize_tiles"));
  p.cpu_dequantize_tiles = 9e10;
  EXPECT_EQ(profile_from_json(profile_to_json(p), "round trip").cpu_dequantize_tiles, 9e10);
}

std::string error_for(nlohmann::json j) {
  try {
    profile_from_json(j, "some/file.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PolicyProfile, ErrorsNameFileAndField) {
  nlohmann::json j = profile_to_json(load_profile(kT4));
  auto missing = j;
  missing["bandwidth"].erase("disk_to_cpu");
  std::string e = error_for(missing);
  EXPECT_NE(e.find("some/file.json"), std::string::npos);
  EXPECT_NE(e.find("bandwidth.disk_to_cpu"), std::string::npos);

  auto negative = j;
  negative["gpu_flops"]["mm_decode"] = -1;
  EXPECT_NE(error_for(negative).find("gpu_flops.mm_decode"), std::string::npos);

  auto typo = j;
  typo["cpu"]["atention_bandwidth"] = 1;
  EXPECT_NE(error_for(typo).find("cpu.atention_bandwidth"), std::string::npos);

  auto slow_call = j;  // seconds, not microseconds
  slow_call["cpu"]["attention_call_seconds"] = 15;
  EXPECT_NE(error_for(slow_call).find("cpu.attention_call_seconds"), std::string::npos);
  auto negative_task_cost = j;
  negative_task_cost["cpu"]["attention_task_seconds"] = -1e-6;
  EXPECT_NE(error_for(negative_task_cost).find("cpu.attention_task_seconds"), std::string::npos);

  auto zero_tiles = j;  // optional, but a rate when given
  zero_tiles["cpu"]["dequantize_tiles"] = 0;
  EXPECT_NE(error_for(zero_tiles).find("'cpu.dequantize_tiles' must be positive"), std::string::npos);

  auto text = j;
  text["capacity"]["gpu"] = "16GB";
  EXPECT_NE(error_for(text).find("capacity.gpu"), std::string::npos);

  EXPECT_THROW(load_profile("/nonexistent/profile.json"), Error);
}

TEST(PolicyProfile, ThreadSpeedupInterpolates) {
  HardwareProfile p;
  EXPECT_EQ(p.thread_speedup(8), 1.0);
  p.cpu_thread_scaling = {{1, 1.0}, {4, 3.0}, {8, 4.0}};
  EXPECT_DOUBLE_EQ(p.thread_speedup(1), 1.0);
  EXPECT_DOUBLE_EQ(p.thread_speedup(2), 1.0 + 2.0 / 3);
  EXPECT_DOUBLE_EQ(p.thread_speedup(6), 3.5);
  EXPECT_DOUBLE_EQ(p.thread_speedup(64), 4.0);
}

// Sets environment variables for one test and restores them afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

TEST(PolicyProfile, BuiltInProfilesAreTheShippedFiles) {
  const auto names = builtin_profile_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "t4-flexgen"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "a100-40gb-pcie4"), names.end());
  const auto t4 = builtin_profile("t4-flexgen");
  ASSERT_TRUE(t4.has_value());
  EXPECT_EQ(t4->path, "built-in:t4-flexgen");
  auto from_file = load_profile(kT4);
  from_file.path = t4->path;
  EXPECT_EQ(profile_to_json(*t4).dump(), profile_to_json(from_file).dump());
  EXPECT_FALSE(builtin_profile("no-such-machine").has_value());
}

TEST(PolicyProfile, ResolutionOrder) {
  const std::string cache = ::testing::TempDir() + "/tiergen_xdg_cache_" + std::to_string(::getpid());
  tiergen::test::remove_tree(cache);
  ScopedEnv xdg("XDG_CACHE_HOME", cache.c_str());
  ScopedEnv env("TIERGEN_HW_PROFILE", nullptr);
  EXPECT_EQ(cached_profile_path(), cache + "/tiergen/hw-profile.json");
  // Nothing of this host: the built-in default, which does not describe it.
  auto r = resolve_profile_with_origin("");
  EXPECT_EQ(r.origin, ProfileOrigin::BuiltIn);
  EXPECT_EQ(r.profile.path, "built-in:t4-flexgen");
  EXPECT_FALSE(r.describes_this_host());
  // A cached profile of this host wins over the built-in one.
  std::filesystem::create_directories(cache + "/tiergen");
  auto host = load_profile(kT4);
  host.name = "this-host";
  save_profile(host, cached_profile_path());
  r = resolve_profile_with_origin("");
  EXPECT_EQ(r.origin, ProfileOrigin::HostCache);
  EXPECT_EQ(r.profile.name, "this-host");
  EXPECT_TRUE(r.describes_this_host());
  // A broken cache file is skipped, not fatal.
  std::ofstream(cached_profile_path()) << "{ not json";
  EXPECT_EQ(resolve_profile_with_origin("").origin, ProfileOrigin::BuiltIn);
  // The environment, then --hw (a file or a built-in name) come first.
  {
    ScopedEnv named("TIERGEN_HW_PROFILE", "a100-40gb-pcie4");
    EXPECT_EQ(resolve_profile_with_origin("").origin, ProfileOrigin::Environment);
    EXPECT_EQ(resolve_profile_with_origin("").profile.name, load_profile(TIERGEN_SOURCE_DIR "/configs/hw/a100-40gb-pcie4.json").name);
    EXPECT_EQ(resolve_profile_with_origin(kT4).origin, ProfileOrigin::Option);
  }
  EXPECT_EQ(resolve_profile_with_origin("t4-flexgen").profile.path, "built-in:t4-flexgen");
  EXPECT_THROW(resolve_profile_with_origin("/nonexistent/profile.json"), Error);
  tiergen::test::remove_tree(cache);
}

TEST(PolicyThreads, GraphConcurrencyFromKahnSchedule) {
  // a and b run together, c waits for both: two at once, makespan 3.
  const std::vector<Operator> ops = {{"a", 1, {}}, {"b", 2, {}}, {"c", 1, {0, 1}}};
  const auto s = schedule_graph(ops, 1.0);
  EXPECT_EQ(s.max_concurrency, 2);
  EXPECT_DOUBLE_EQ(s.makespan, 3);
  EXPECT_DOUBLE_EQ(schedule_graph(ops, 2.0).makespan, 1.5);
  EXPECT_THROW(schedule_graph({{"x", 1, {1}}, {"y", 1, {0}}}, 1.0), Error);
}

TEST(PolicyThreads, AlgorithmThreeLeavesFiveForLoadsAndStores) {
  HardwareProfile hw;
  hw.cpu_thread_scaling = {{1, 1.0}, {8, 6.0}, {16, 6.5}};
  ThreadSearchInput in;
  in.max_threads = 32;
  in.compute_ops = {{"k", 0.1, {}}, {"v", 0.1, {}}, {"qk", 1.0, {0}}, {"pv", 1.0, {1, 2}}};
  in.io_bytes = {8e9, 0, 1e8, 1e8, 1e8};
  in.io_link_seconds = {0.05, 0, 0.01, 0.01, 0.01};
  in.io_bandwidth_per_thread = 4e9;
  const auto c = choose_threads(in, hw);
  ASSERT_TRUE(c.found);
  int io = 0;
  for (int t : c.io_threads) io += t;
  EXPECT_GE(io, 5);
  EXPECT_LE(c.compute_intra_op * c.compute_inter_op + io, 32);
  EXPECT_EQ(c.compute_inter_op, 2);
  // The weight load moves the most bytes and gets the most threads.
  EXPECT_EQ(*std::max_element(c.io_threads.begin(), c.io_threads.end()), c.io_threads[0]);
  // Too few threads for Algorithm 3's bound: compute gets them all, each I/O task one.
  in.max_threads = 5;
  const auto few = choose_threads(in, hw);
  EXPECT_FALSE(few.found);
  EXPECT_EQ(few.compute_intra_op, 5);
  for (int t : few.io_threads) EXPECT_EQ(t, 1);
}

}  // namespace
}  // namespace tiergen::policy

namespace tiergen::policy {
namespace {

// `tiergen profile --quick` on this host: a complete, valid profile the search can use.
TEST(PolicyProfile, QuickMeasurementIsAUsableProfile) {
  ProfilerOptions options;
  options.offload_dir = ::testing::TempDir();
  options.quick = true;
  options.max_threads = 1;  // ctest runs tests side by side: no thread-scaling verdict here
  std::vector<Measurement> measurements;
  // Products as --cpu-gemm runs them, so that the small-row limit is searched (batch-
  // invariant products, the default, take every row count on the small-row kernel).
  const kernels::SmallMatmulEveryRowCountScope gemm_beyond_the_limit(false);
  const HardwareProfile measured = measure_host(options, &measurements);
  EXPECT_NO_THROW(measured.validate("measured"));
  // The host-to-device rate is the one the runner's own weight loads reached.
  const auto streamed = std::find_if(measurements.begin(), measurements.end(),
                                     [](const Measurement& m) { return m.name == "weights streamed by the runner"; });
  ASSERT_NE(streamed, measurements.end());
  EXPECT_EQ(measured.cpu_to_gpu, streamed->value);
  EXPECT_GE(streamed->runs, 1);
  EXPECT_FALSE(measured.source.empty());
  EXPECT_FALSE(measured.cpu_thread_scaling.empty());
  // A host standing in for the GPU (de)quantizes the device's KV cache on a copy queue's
  // one thread (runtime/worker.h): timed so, the CPU's own on every compute thread.
  const auto value_of = [&](const std::string& name) {
    const auto m = std::find_if(measurements.begin(), measurements.end(),
                                [&](const Measurement& x) { return x.name == name; });
    return m == measurements.end() ? -1.0 : m->value;
  };
  EXPECT_EQ(measured.cpu_quantize, value_of("quantize"));
  EXPECT_EQ(measured.cpu_dequantize, value_of("dequantize"));
  // Dequantized into tiles that stay in cache, as a prefill's first product of a compressed
  // weight does: written with the profile and read back.
  EXPECT_GT(measured.cpu_dequantize_tiles, 0);
  EXPECT_EQ(measured.cpu_dequantize_tiles, value_of("dequantize in tiles"));
  EXPECT_EQ(profile_from_json(profile_to_json(measured), "round trip").cpu_dequantize_tiles,
            measured.cpu_dequantize_tiles);
  // Disk reads as the disk tier makes them, and what they took from compute beside them:
  // the profile's fields are the recorded measurements, and both survive the JSON.
  EXPECT_GT(measured.disk_to_cpu, 0);
  EXPECT_EQ(measured.disk_to_cpu, value_of("disk read"));
  EXPECT_EQ(measured.disk_to_cpu_cache, measured.disk_to_cpu);
  EXPECT_GT(value_of("decode product, alone"), 0);
  EXPECT_GT(value_of("decode product, disk reads beside it"), 0);
  EXPECT_EQ(measured.disk_read_core_bandwidth, value_of("disk reads per second of compute they take"));
  EXPECT_EQ(profile_from_json(profile_to_json(measured), "round trip").disk_read_core_bandwidth,
            measured.disk_read_core_bandwidth);
  if (measured.gpu_is_host) {
    EXPECT_EQ(measured.gpu_quantize, value_of("quantize, one thread"));
    EXPECT_EQ(measured.gpu_dequantize, value_of("dequantize, one thread"));
  }
  // The CPU's products timed at the row counts plans use, the few-row rate at 4 rows.
  std::vector<int64_t> rows;
  for (const auto& [r, rate] : measured.cpu_product_rates) {
    rows.push_back(r);
    if (r == 4) EXPECT_EQ(rate, measured.cpu_gemv_bandwidth);
  }
  EXPECT_TRUE(measured.prices_cpu_matmuls());
  // The schedule's fixed cost per step, measured through the real runner, survives the
  // profile's JSON (the cost model charges it to every step).
  EXPECT_GT(measured.step_seconds, 0);
  EXPECT_EQ(profile_from_json(profile_to_json(measured), "round trip").step_seconds, measured.step_seconds);
  // Decode attention's costs beside its bytes: per task through the engine's kernel (not
  // below zero however the bytes taken out ran), per call through the real runner (its
  // views and output around the kernel's own call: microseconds, against a fraction of
  // one per task).
  EXPECT_GE(measured.cpu_attention_task_seconds, 0);
  EXPECT_GE(value_of("cpu attention, per call"), 0);
  EXPECT_GT(measured.cpu_attention_call_seconds, 0);
  EXPECT_LT(measured.cpu_attention_task_seconds, measured.cpu_attention_call_seconds);
  EXPECT_EQ(measured.cpu_attention_call_seconds, value_of("cpu attention through the runner, per call"));
  EXPECT_EQ(measured.cpu_attention_task_seconds, value_of("cpu attention, per task (a sequence's kv head)"));
  const HardwareProfile back = profile_from_json(profile_to_json(measured), "round trip");
  EXPECT_EQ(back.cpu_attention_call_seconds, measured.cpu_attention_call_seconds);
  EXPECT_EQ(back.cpu_attention_task_seconds, measured.cpu_attention_task_seconds);
  // The small-row limit for the products' dtype (fp32 on the CPU, fp16 with CUDA): not
  // measured where the default has no limit; else the default, or one of the timed row
  // counts above it where the kernel won, and then the row just past it is timed too.
  const at::ScalarType dtype = measured.gpu_is_host ? at::kFloat : at::kHalf;
  EXPECT_EQ(measured.cpu_product_dtype, compat::dtype_name(dtype));
  const int64_t default_limit = kernels::default_small_matmul_max_rows(kernel_elem_type(dtype));
  const int64_t limit = measured.cpu_small_matmul_max_rows;
  std::vector<int64_t> expected = {1, 4, 16, 17, 32, 64};
  if (default_limit == std::numeric_limits<int64_t>::max()) {
    EXPECT_EQ(limit, 0);
  } else {
    EXPECT_TRUE(limit == default_limit || limit == 17 || limit == 32 || limit == 64) << limit;
    if (limit > default_limit) expected.insert(std::upper_bound(expected.begin(), expected.end(), limit), limit + 1);
  }
  EXPECT_EQ(rows, expected) << "both sides of the small-row limit";
  // Every dtype a plan computes in is timed through the path its products take on this
  // CPU, and the profile names that path; the fields above are the default dtype's.
  for (const at::ScalarType type : {at::kFloat, at::kHalf, at::kBFloat16}) {
    const CpuProductTable* table = measured.cpu_product_table(compat::dtype_name(type));
    if (table == nullptr) {
      // Only where this LibTorch cannot multiply in it on the CPU (fp16 above the
      // small-row limit in 1.13, on a CPU with native fp16 products).
      EXPECT_EQ(type, at::kHalf) << compat::dtype_name(type) << " was not timed";
      continue;
    }
    {
      // (As a plan carrying the measured limit runs them.)
      const kernels::SmallMatmulMaxRowsScope as_planned(table->small_matmul_max_rows > 0 ? table->small_matmul_max_rows
                                                                                         : -1);
      EXPECT_EQ(table->kernel_path, model::linear_product_paths(type));
    }
    // The row counts above, and, where this dtype's kernel won past the default limit
    // (each dtype searches its own), the row just past its limit.
    std::vector<int64_t> table_rows;
    for (const auto& [r, rate] : table->rates) table_rows.push_back(r);
    for (const int64_t r : {1, 4, 16, 17, 32, 64})
      EXPECT_TRUE(std::count(table_rows.begin(), table_rows.end(), r)) << compat::dtype_name(type) << " " << r;
    if (table->small_matmul_max_rows > kernels::default_small_matmul_max_rows(kernel_elem_type(type)))
      EXPECT_TRUE(std::count(table_rows.begin(), table_rows.end(), table->small_matmul_max_rows + 1))
          << compat::dtype_name(type) << " " << table->small_matmul_max_rows;
    EXPECT_GT(table->matmul_flops, 0);
    EXPECT_GT(table->gemv_bandwidth, 0);
    // What a product call costs beside its bytes, at 1, 16 and 64 rows and the many-row
    // count (never below zero, whatever the noise), each recorded.
    std::vector<int64_t> call_rows;
    for (const auto& [r, seconds] : table->call_seconds) {
      call_rows.push_back(r);
      EXPECT_GE(seconds, 0) << compat::dtype_name(type) << " " << r;
      EXPECT_NEAR(value_of(fmt::format("cpu product call {}, {} row{}", compat::dtype_name(type), r, r == 1 ? "" : "s")),
                  seconds * 1e6, 1e-9);
    }
    EXPECT_EQ(call_rows, (std::vector<int64_t>{1, 16, 64, 256})) << compat::dtype_name(type);
    // The same products over short rows, at every row count of the main rates, each
    // recorded; the table says both row lengths and is not stale.
    EXPECT_EQ(table->row_length, 4096);
    EXPECT_EQ(table->short_row_length, 768);
    std::vector<int64_t> short_rows;
    for (const auto& [r, rate] : table->short_row_rates) {
      short_rows.push_back(r);
      EXPECT_NEAR(value_of(fmt::format("cpu matmul {}, {} row{}, rows of 768", compat::dtype_name(type), r,
                                       r == 1 ? "" : "s")),
                  rate, rate * 1e-12);
    }
    EXPECT_EQ(short_rows, table_rows) << compat::dtype_name(type);
    EXPECT_EQ(stale_cpu_products(*table), "") << compat::dtype_name(type);
    // Compressed products in place at one row, at --cpu-gemm's in-place limit, and at 64
    // rows (the large decode batches default runs multiply in place), and their calls'
    // cost at one row.
    EXPECT_EQ(table->quantized.size(), 2u) << compat::dtype_name(type) << ": 4 and 8 bits";
    for (const auto& q : table->quantized) {
      std::vector<int64_t> quantized_rows;
      for (const auto& [r, rate] : q.rates) quantized_rows.push_back(r);
      const int64_t limit = kernels::quantized_in_place_max_rows(type == at::kBFloat16, {q.bits, q.group_size});
      EXPECT_EQ(quantized_rows, (limit < 64 ? std::vector<int64_t>{1, limit, 64} : std::vector<int64_t>{1, limit}))
          << compat::dtype_name(type) << " " << q.bits << "-bit";
      // Each call's own cost at one row (what the in-place kernel sets up per call).
      ASSERT_EQ(q.call_seconds.size(), 1u) << compat::dtype_name(type) << " " << q.bits << "-bit";
      EXPECT_EQ(q.call_seconds[0].first, 1);
      EXPECT_GE(q.call_seconds[0].second, 0.0);
    }
    // A host standing in for the GPU times its attention over a loaded cache in each
    // dtype, each part recorded (the fit's clamping at zero is
    // LoadedCacheAttention.TheFitRecoversTheCostsThatMadeTheTimes'); in any dtype, float32
    // too, a noisy host may find no rate for its bytes (wider heads timed no slower: the
    // profiler warns, and the table and the record then hold nothing; seen under ASan's
    // small working sets); a CUDA host has no such attention.
    const LoadedCacheAttention& loaded = table->loaded_cache_attention;
    const std::string name = compat::dtype_name(type);
    if (measured.gpu_is_host && value_of("loaded-cache attention " + name) >= 0) {
      EXPECT_TRUE(loaded.timed()) << name;
      EXPECT_EQ(loaded.kv_bandwidth, value_of("loaded-cache attention " + name));
      EXPECT_EQ(loaded.call_seconds, value_of("loaded-cache attention " + name + ", per call"));
      EXPECT_EQ(loaded.unit_seconds, value_of("loaded-cache attention " + name + ", per unit"));
      EXPECT_EQ(loaded.position_seconds, value_of("loaded-cache attention " + name + ", per position"));
      EXPECT_EQ(loaded.score_seconds, value_of("loaded-cache attention " + name + ", per score"));
    } else {
      EXPECT_FALSE(loaded.timed()) << name;
      EXPECT_EQ(value_of("loaded-cache attention " + name), -1) << name;
    }
    const auto named = std::find_if(measurements.begin(), measurements.end(), [&](const Measurement& m) {
      return m.name == fmt::format("cpu matmul {}, 1 row", compat::dtype_name(type));
    });
    ASSERT_NE(named, measurements.end());
    EXPECT_EQ(table->rates.front().second, named->value);
  }
  const CpuProductTable* priced = measured.cpu_product_table(compat::dtype_name(dtype));
  ASSERT_NE(priced, nullptr);
  EXPECT_EQ(priced->rates, measured.cpu_product_rates);
  EXPECT_EQ(priced->call_seconds, measured.cpu_call_seconds);
  EXPECT_EQ(priced->loaded_cache_attention, measured.cpu_loaded_cache_attention);
  EXPECT_EQ(measured.with_cpu_products_of(compat::dtype_name(dtype)).cpu_product_rates, measured.cpu_product_rates);
  const std::string path = ::testing::TempDir() + "/tiergen_measured.json";
  save_profile(measured, path);
  EXPECT_EQ(profile_to_json(load_profile(path)).dump(), profile_to_json(measured).dump());
  std::remove(path.c_str());
  EXPECT_THROW(measure_host(ProfilerOptions{"/nonexistent-dir", true}), Error);
}

// The CPU kernels are timed on the threads a run computes with (every usable core
// unless OMP_NUM_THREADS says otherwise), not on LibTorch's default, which is 1 on
// some virtual machines; the caller's count is left as it was.
TEST(PolicyProfile, CpuKernelsAreTimedOnTheThreadsRunsUse) {
  ScopedEnv no_omp("OMP_NUM_THREADS", nullptr);
  const ComputeThreadsScope restore;
  at::set_num_threads(1);
  ProfilerOptions options;
  options.offload_dir = ::testing::TempDir();
  options.quick = true;
  options.max_threads = 1;
  options.product_dtypes = {"float32"};
  const HardwareProfile measured = measure_host(options);
  EXPECT_EQ(at::get_num_threads(), 1) << "the caller's thread count is restored";
  EXPECT_NE(measured.source.find(fmt::format("CPU kernels timed on {} compute threads", usable_cores())),
            std::string::npos)
      << measured.source;
}

}  // namespace
}  // namespace tiergen::policy
