// No tier ever exceeds its budget, the runtime stays within plan_memory's count, and
// an infeasible policy is refused before any work (no weight read, no offload file).
#include <gtest/gtest.h>

#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/tiny_model.h"
#include "tiergen/common/error.h"
#include "tiergen/model/presets.h"
#include "tiergen/runtime/default_budgets.h"
#include "tiergen/runtime/engine.h"
#include "tiergen/runtime/host_memory.h"
#include "tiergen/runtime/placement.h"
#include "tiergen/runtime/tier_account.h"

namespace tiergen::test {
namespace {

using runtime::Tier;

struct BudgetCase {
  std::string name;
  std::string arch;
  runtime::Policy policy;
  bool copy_disk_weights = false;
};

void PrintTo(const BudgetCase& c, std::ostream* os) { *os << c.name; }

std::vector<BudgetCase> budget_cases() {
  using A = std::array<double, 6>;
  return {
      {"opt_all_gpu", "opt", make_policy(2, 2, A{100, 0, 100, 0, 100, 0}, false)},
      {"llama_all_gpu", "llama", make_policy(4, 1, A{100, 0, 100, 0, 100, 0}, false)},
      {"opt_weights_cpu_cache_cpu", "opt", make_policy(2, 2, A{0, 100, 0, 100, 100, 0}, false)},
      {"llama_cache_cpu_attention", "llama", make_policy(2, 2, A{100, 0, 0, 100, 100, 0}, true)},
      {"opt_cache_disk", "opt", make_policy(2, 2, A{100, 0, 0, 0, 100, 0}, false)},
      {"llama_cache_disk_cpu_attention", "llama", make_policy(2, 2, A{100, 0, 0, 0, 100, 0}, true)},
      {"opt_all_tiers", "opt", make_policy(2, 2, A{20, 30, 25, 25, 0, 50}, true), true},
      {"llama_all_tiers_no_overlap", "llama", make_policy(2, 2, A{20, 30, 25, 25, 0, 50}, false, false), true},
      {"llama_all_disk", "llama", make_policy(1, 2, A{0, 0, 0, 0, 0, 0}, false), true},
  };
}

class BudgetTest : public ::testing::TestWithParam<BudgetCase> {
 protected:
  void SetUp() override {
    model_ = make_tiny_model(GetParam().arch == "opt" ? tiny_opt(31) : tiny_llama(32));
    requests_ = greedy_requests(make_prompts({4, 9, 2, 6, 7, 1}, model_.spec.vocab_size, 3), {6, 4});
  }
  const model::WeightSource& source() {
    if (!GetParam().copy_disk_weights) return *model_.weights;
    if (!file_less_) file_less_ = std::make_unique<NoFileWeights>(*model_.weights);
    return *file_less_;
  }
  TinyModel model_;
  std::unique_ptr<NoFileWeights> file_less_;
  std::vector<runtime::SequenceRequest> requests_;
};

TEST_P(BudgetTest, PeaksStayWithinThePlanAndTheBudgets) {
  const auto& c = GetParam();
  const runtime::Workload workload = workload_of(requests_);
  const runtime::MemoryPlan plan = runtime::plan_memory(model_.spec, c.policy, workload, 4);
  const runtime::TierBytes planned = plan.total();
  TempDir offload("offload");

  // Generous budgets: the runtime uses at most what the plan counts.
  std::vector<std::vector<int64_t>> generous_tokens;
  {
    runtime::Engine engine(model_.spec, source(), c.policy, cpu_engine_options(offload.path), workload);
    EXPECT_EQ(engine.memory_plan().total().bytes, planned.bytes);
    generous_tokens = tokens_of(engine.generate(requests_));
    const runtime::TierBytes peak = engine.stats().peak_bytes;
    for (Tier t : {Tier::Gpu, Tier::Cpu, Tier::Disk}) {
      EXPECT_LE(peak[t], planned[t]) << runtime::tier_name(t) << " tier";
    }
    EXPECT_GT(peak[Tier::Gpu], 0u);
    if (planned[Tier::Cpu] > 0) EXPECT_GT(peak[Tier::Cpu], 0u);
    if (plan.kv_cache[Tier::Disk] + plan.activations[Tier::Disk] > 0) EXPECT_GT(peak[Tier::Disk], 0u);
  }

  // Budgets exactly the plan: the run fits, gives the same tokens, and every peak is
  // within its budget.
  runtime::EngineOptions tight = cpu_engine_options(offload.path);
  tight.budgets = runtime::Budgets{planned[Tier::Gpu], planned[Tier::Cpu], planned[Tier::Disk]};
  runtime::Engine engine(model_.spec, source(), c.policy, tight, workload);
  EXPECT_EQ(tokens_of(engine.generate(requests_)), generous_tokens);
  const runtime::Stats& stats = engine.stats();
  for (Tier t : {Tier::Gpu, Tier::Cpu, Tier::Disk}) {
    EXPECT_LE(stats.peak_bytes[t], tight.budgets.of(t)) << runtime::tier_name(t) << " tier";
    EXPECT_EQ(stats.budgets[t], tight.budgets.of(t));
  }
}

TEST_P(BudgetTest, OverBudgetPolicyIsRefusedBeforeAnyWork) {
  const auto& c = GetParam();
  const runtime::Workload workload = workload_of(requests_);
  const runtime::TierBytes planned = runtime::plan_memory(model_.spec, c.policy, workload, 4).total();
  for (Tier t : {Tier::Gpu, Tier::Cpu, Tier::Disk}) {
    if (planned[t] == 0) continue;
    SCOPED_TRACE(runtime::tier_name(t));
    TempDir offload("offload");
    const std::string dir = offload.path + "/not-yet-there";
    runtime::EngineOptions options = cpu_engine_options(dir);
    options.budgets = runtime::Budgets{planned[Tier::Gpu], planned[Tier::Cpu], planned[Tier::Disk]};
    if (t == Tier::Gpu) options.budgets.gpu -= 1;
    if (t == Tier::Cpu) options.budgets.cpu -= 1;
    if (t == Tier::Disk) options.budgets.disk -= 1;
    const CountingWeights counting(*model_.weights, "", c.copy_disk_weights);
    try {
      runtime::Engine engine(model_.spec, counting, c.policy, options, workload);
      ADD_FAILURE() << "an over-budget policy was accepted";
    } catch (const InfeasibleError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(runtime::tier_name(t) + " tier"), std::string::npos) << msg;
    }
    EXPECT_EQ(counting.reads(), 0);
    EXPECT_TRUE(files_in(dir).empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, BudgetTest, ::testing::ValuesIn(budget_cases()),
                         [](const auto& info) { return info.param.name; });

// A longer prompt than the engine was planned for cannot sneak past the budgets: the
// tier refuses the allocation with an InfeasibleError naming it.
TEST(RuntimeBudget, UnplannedWorkloadIsRefusedByTheTiers) {
  TinyModel m = make_tiny_model(tiny_llama(33));
  using A = std::array<double, 6>;
  const runtime::Policy p = make_policy(2, 1, A{100, 0, 100, 0, 100, 0}, false);
  const runtime::Workload planned_for{4, 4};
  const runtime::TierBytes planned = runtime::plan_memory(m.spec, p, planned_for, 4).total();
  TempDir offload("offload");
  runtime::EngineOptions options = cpu_engine_options(offload.path);
  options.budgets = runtime::Budgets{planned[Tier::Gpu], planned[Tier::Cpu], planned[Tier::Disk]};
  runtime::Engine engine(m.spec, *m.weights, p, options, planned_for);
  EXPECT_EQ(engine.generate(greedy_requests(make_prompts({4, 3}, m.spec.vocab_size), {4})).size(), 2u);
  EXPECT_THROW(engine.generate(greedy_requests(make_prompts({40, 3}, m.spec.vocab_size), {20})), InfeasibleError);
  EXPECT_LE(engine.stats().peak_bytes[Tier::Gpu], planned[Tier::Gpu]);
}

TEST(RuntimeTierAccount, ReservationsAreCountedReleasedAndBounded) {
  runtime::TierAccount account(Tier::Cpu, 1000);
  {
    runtime::Reservation a = account.reserve(600, "a");
    EXPECT_EQ(account.used(), 600u);
    try {
      account.reserve(401, "the next buffer");
      FAIL() << "reservation beyond the budget";
    } catch (const InfeasibleError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("cpu tier"), std::string::npos) << msg;
      EXPECT_NE(msg.find("the next buffer"), std::string::npos) << msg;
    }
    EXPECT_EQ(account.used(), 600u);
    runtime::Reservation b = account.reserve(400, "b");
    EXPECT_EQ(account.used(), 1000u);
    runtime::Reservation moved = std::move(b);
    EXPECT_EQ(moved.bytes(), 400u);
    EXPECT_EQ(b.bytes(), 0u);
    EXPECT_EQ(account.used(), 1000u);
    moved.release();
    EXPECT_EQ(account.used(), 600u);
  }
  EXPECT_EQ(account.used(), 0u);
  EXPECT_EQ(account.peak(), 1000u);
  EXPECT_EQ(account.budget(), 1000u);
}

// plan_memory's split of units and FlexGen's weight placement rule.
TEST(RuntimePlacement, SplitsAndHomesFollowThePercentages) {
  EXPECT_EQ(runtime::split_units(10, 30, 40), (std::array<int64_t, 3>{3, 4, 3}));
  EXPECT_EQ(runtime::split_units(10, 100, 0), (std::array<int64_t, 3>{10, 0, 0}));
  EXPECT_EQ(runtime::split_units(10, 0, 0), (std::array<int64_t, 3>{0, 0, 10}));
  for (int64_t units : {1, 2, 3, 7, 16}) {
    for (double g : {0.0, 12.5, 50.0, 100.0}) {
      const auto s = runtime::split_units(units, g, (100 - g) / 2);
      EXPECT_EQ(s[0] + s[1] + s[2], units);
      for (auto v : s) EXPECT_GE(v, 0);
    }
  }
  runtime::Policy p;
  p.w_gpu_percent = 20;
  p.w_cpu_percent = 30;  // disk 50: ranges disk [0, 50), cpu [50, 80), gpu [80, 100]
  EXPECT_EQ(runtime::weight_home(10, p), Tier::Disk);
  EXPECT_EQ(runtime::weight_home(60, p), Tier::Cpu);
  EXPECT_EQ(runtime::weight_home(90, p), Tier::Gpu);
}

// A tied head's matrix is the token table: one home, on the higher of the tiers
// FlexGen's rule gives the two, counted once by the memory plan. Compressed, or in a
// pipeline stage without the embedding, the head keeps a copy of its own.
TEST(RuntimePlacement, ATiedHeadKeepsOneHomeWithTheTokenTable) {
  const auto spec = model::resolve_spec("opt-1.3b");
  ASSERT_TRUE(spec.tie_word_embeddings);
  const auto layers = spec.weight_layers();
  const size_t head = layers.size() - 1, table = 0, matrix = layers[head].tensors.size() - 1;
  ASSERT_EQ(layers[0].tensors[table].name, layers[head].tensors[matrix].source_name);
  uint64_t all_bytes = 0;
  for (const auto& layer : layers) all_bytes += static_cast<uint64_t>(layer.numel()) * 2;
  const auto matrix_bytes = static_cast<uint64_t>(layers[head].tensors[matrix].numel()) * 2;
  int apart = 0;
  for (int wg = 0; wg <= 100; wg += 1) {
    for (int wc : {0, 100 - wg}) {
      runtime::Policy p;
      p.w_gpu_percent = wg;
      p.w_cpu_percent = wc;
      const auto homes = runtime::place_stage_weights(layers, p, runtime::StageLayers::whole(spec));
      const Tier own_table = runtime::place_layer_weights(layers[0], p)[table];
      const Tier own_matrix = runtime::place_layer_weights(layers[head], p)[matrix];
      apart += own_table != own_matrix;
      SCOPED_TRACE(testing::Message() << "wg " << wg << " wc " << wc);
      EXPECT_EQ(homes[0][table].tier, std::min(own_table, own_matrix));
      EXPECT_EQ(homes[head][matrix].tier, homes[0][table].tier);
      EXPECT_TRUE(homes[0][table].has_own_home());
      EXPECT_EQ(homes[head][matrix].shared_layer, 0);
      EXPECT_EQ(homes[head][matrix].shared_tensor, table);
      const auto weights = runtime::plan_memory(spec, p, {8, 8}, 2).weights;
      EXPECT_EQ(weights[Tier::Gpu] + weights[Tier::Cpu] + weights[Tier::Disk], all_bytes - matrix_bytes);
      // The whole model standing for a pipeline's stage (groups > 1) shares nothing:
      // its real stages hold one end or the other.
      const auto stage = runtime::plan_memory(spec, p, {8, 8}, 2, runtime::StageShape{{}, 2}).weights;
      EXPECT_EQ(stage[Tier::Gpu] + stage[Tier::Cpu] + stage[Tier::Disk], all_bytes);
    }
  }
  EXPECT_GT(apart, 0) << "the sweep meets policies that place the table and the head apart";

  runtime::Policy compressed;
  compressed.compress_weight = {true, 4, 64};
  EXPECT_TRUE(runtime::place_stage_weights(layers, compressed, runtime::StageLayers::whole(spec))[head][matrix]
                  .has_own_home());
  const runtime::StageLayers without_embedding{1, spec.num_weight_layers()};
  EXPECT_TRUE(runtime::place_stage_weights(layers, runtime::Policy{}, without_embedding).back()[matrix].has_own_home());
}

// ---- Default budgets (the CLI's, from what the machine has).

runtime::HostMemory host(uint64_t ram_gib, uint64_t process_mib, std::optional<uint64_t> device_free_gib = {}) {
  runtime::HostMemory h;
  h.ram = ram_gib << 30;
  h.process_overhead = process_mib << 20;
  // The warm-up took 1 GiB of the device (cuBLAS workspaces, kernels).
  if (device_free_gib) h.device_free = runtime::DeviceFreeMemory{(*device_free_gib + 1) << 30, *device_free_gib << 30};
  return h;
}

TEST(DefaultBudgets, NeverExceedRam) {
  for (uint64_t ram : {1, 4, 24, 128, 512}) {
    for (uint64_t process : {0, 300, 700}) {
      const auto h = host(ram, process, 80);
      const auto cpu = runtime::resolve_budgets({"", "", "", 1ull << 40}, false, h);
      EXPECT_LE(cpu.gpu + cpu.cpu, h.usable_ram()) << ram << " GiB, --device cpu";
      EXPECT_LE(cpu.gpu + cpu.cpu + h.process_overhead, h.ram) << ram << " GiB";
      EXPECT_GT(cpu.gpu, 0u);
      EXPECT_GT(cpu.cpu, 0u);
      EXPECT_EQ(cpu.disk, 1ull << 40);
      const auto cuda = runtime::resolve_budgets({"", "", "", 1ull << 40}, true, h);
      EXPECT_LE(cuda.cpu, h.usable_ram()) << ram << " GiB, --device cuda";
      // What the device had after the warm-up, less 2.5 GiB and 1/64: 76.25 GiB.
      EXPECT_EQ(cuda.gpu, (80ull << 30) - (2560ull << 20) - (80ull << 30) / 64);
    }
  }
  // --device cpu with an explicit gpu tier: the cpu default takes what is left.
  const auto h = host(24, 500);
  const auto b = runtime::resolve_budgets({"4GiB", "", "", 0}, false, h);
  EXPECT_EQ(b.gpu, 4ull << 30);
  EXPECT_LE(b.gpu + b.cpu, h.usable_ram());
  EXPECT_THROW(runtime::resolve_budgets({"30GiB", "", "", 0}, false, h), Error);
  // A CUDA device with nothing beyond its reserve after the warm-up: 2.5 GiB free
  // after it is refused, 4 GiB leaves 1.4375 GiB.
  runtime::HostMemory small = host(24, 500);
  small.device_free = runtime::DeviceFreeMemory{3ull << 30, 2560ull << 20};
  EXPECT_THROW(runtime::resolve_budgets({"", "", "", 0}, true, small), Error);
  small.device_free = runtime::DeviceFreeMemory{5ull << 30, 4ull << 30};
  EXPECT_EQ(runtime::resolve_budgets({"", "", "", 0}, true, small).gpu, (4ull << 30) - (2560ull << 20) - (64ull << 20));
  EXPECT_EQ(small.device_free->warmup_bytes(), 1ull << 30);
  // Without a reading of the device the default cannot be made: --gpu-mem is asked for.
  EXPECT_THROW(runtime::resolve_budgets({"", "", "", 0}, true, host(24, 500)), Error);
  EXPECT_EQ(runtime::resolve_budgets({"8GiB", "", "", 0}, true, host(24, 500)).gpu, 8ull << 30);
}

// A step's large host temporaries stay in the heap when freed, for the next step to
// reuse, rather than going back to the OS (and page-faulting in again) at every free.
TEST(HostAllocator, LargeFreedTemporariesStayInTheHeapForReuse) {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) {
    GTEST_SKIP() << "the environment sets glibc's thresholds";
  }
  runtime::keep_freed_host_memory_for_reuse();
  const size_t mapped_before = mallinfo2().hblkhd;
  void* block = std::malloc(96u << 20);  // above glibc's largest default mmap threshold (32 MB)
  ASSERT_NE(block, nullptr);
  static_cast<char*>(block)[0] = 1;
  const size_t mapped_while_held = mallinfo2().hblkhd;
  std::free(block);
  const size_t kept_after_free = mallinfo2().fordblks;
  // From the heap, not an mmap of its own; and once freed, kept for reuse (under a
  // sanitizer's allocator glibc's counters stay 0 and say nothing).
  EXPECT_EQ(mapped_while_held, mapped_before);
  if (mallinfo2().arena > 0) EXPECT_GE(kept_after_free, 96u << 20);
}

// The same for blocks allocated on another thread and freed on this one, as a copy
// queue allocates a layer's weights and the compute thread frees them: by default glibc
// gives that thread an arena of its own, whose mapped heaps (at most 64 MiB each) it
// unmaps once they are empty, so the next layer's blocks page-fault in anew. Counted
// in a fresh process (the threadsafe death test style runs the statement in a new run
// of this binary), where no thread has an arena yet; in this one, earlier tests'
// threads have theirs. A round touches 30720 pages (3 x 40 MiB). Without one arena the
// second round faults in two of its blocks again; with it, fewer than a tenth of its
// pages.
TEST(HostAllocator, BlocksAllocatedOnOtherThreadsStayInTheHeapToo) {
  if (std::getenv("MALLOC_ARENA_MAX") || std::getenv("MALLOC_MMAP_THRESHOLD_") ||
      std::getenv("MALLOC_TRIM_THRESHOLD_") || std::getenv("GLIBC_TUNABLES")) {
    GTEST_SKIP() << "the environment sets glibc's malloc settings";
  }
#if defined(TIERGEN_TEST_SANITIZED) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's allocator replaces glibc's (and keeps freed blocks in quarantine)";
#endif
  constexpr long kPagesPerRound = 3 * (40l << 20) / 4096;
  constexpr int kHugePages = 3;  // exit code: the first round faulted per huge page, nothing to count
  const std::string saved_style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        runtime::keep_freed_host_memory_for_reuse();
        auto minor_faults = [] {
          rusage usage{};
          getrusage(RUSAGE_SELF, &usage);
          return usage.ru_minflt;
        };
        auto allocate_elsewhere_free_here = [] {
          std::vector<char*> blocks;
          std::thread([&] {
            for (int i = 0; i < 3; ++i) {
              char* block = static_cast<char*>(std::malloc(40u << 20));
              if (!block) std::_Exit(2);
              for (size_t page = 0; page < (40u << 20); page += 4096) static_cast<volatile char*>(block)[page] = 1;
              blocks.push_back(block);
            }
          }).join();
          for (char* block : blocks) std::free(block);
        };
        const long start = minor_faults();
        allocate_elsewhere_free_here();
        const long first_round = minor_faults() - start;
        if (first_round < kPagesPerRound / 2) std::_Exit(kHugePages);  // transparent huge pages: always
        allocate_elsewhere_free_here();
        std::_Exit(minor_faults() - start - first_round < kPagesPerRound / 10 ? 0 : 1);
      },
      [&](int status) {
        if (WIFEXITED(status) && WEXITSTATUS(status) == kHugePages) return true;  // nothing measured
        return WIFEXITED(status) && WEXITSTATUS(status) == 0;
      },
      "");
  GTEST_FLAG_SET(death_test_style, saved_style);
}

TEST(DefaultBudgets, UnitLessSmallSizesAreRefused) {
  try {
    runtime::parse_budget("16", "--gpu-mem");
    FAIL() << "16 bytes accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--gpu-mem 16"), std::string::npos) << message;
    EXPECT_NE(message.find("16GiB"), std::string::npos) << message;
  }
  EXPECT_THROW(runtime::parse_budget("1048575", "--cpu-mem"), Error);
  EXPECT_EQ(runtime::parse_budget("1048576", "--cpu-mem"), 1048576u);
  EXPECT_EQ(runtime::parse_budget("16GiB", "--gpu-mem"), 16ull << 30);
  EXPECT_EQ(runtime::parse_budget("512 KiB", "--gpu-mem"), 512u << 10);  // small, but with a unit
  EXPECT_EQ(runtime::parse_budget("16B", "--gpu-mem"), 16u);             // bytes said explicitly
}

TEST(DefaultBudgets, RamBackedOffloadDirIsRecognised) {
  EXPECT_EQ(runtime::ram_backed_filesystem(::testing::TempDir()).value_or("none"),
            runtime::ram_backed_filesystem(::testing::TempDir() + "/not/yet/created").value_or("none"));
  if (std::filesystem::exists("/dev/shm") && runtime::ram_backed_filesystem("/dev/shm")) {
    EXPECT_EQ(*runtime::ram_backed_filesystem("/dev/shm/tiergen-offload"), "tmpfs");
  }
  EXPECT_FALSE(runtime::ram_backed_filesystem("/proc/self").has_value());
}

TEST(DefaultBudgets, ProcessMemoryIsMeasured) {
  EXPECT_GT(runtime::process_rss_bytes(), 1u << 20);
  EXPECT_GT(runtime::physical_memory_bytes(), runtime::process_rss_bytes());
}

}  // namespace
}  // namespace tiergen::test
