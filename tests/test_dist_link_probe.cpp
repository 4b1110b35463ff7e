// The stage-link probe (runtime/link_probe) over a real Gloo group of 3 ranks (threads
// of this process, a file store): every rank gets every hop, in order, with a latency
// and a bandwidth; a single rank is refused; the profile's optional stage_link group
// round-trips through JSON. Timings are not asserted beyond being measured at all.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>

#include "policy/hardware_profile.h"
#include "tests/support/error_of.h"
#include "tests/support/temp_dir.h"
#include "tiergen/common/error.h"
#include "tiergen/dist/launch.h"
#include "tiergen/runtime/link_probe.h"

namespace tiergen {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::TempDir;

std::vector<runtime::LinkHop> probe_on_rank(const std::string& store, int rank, int world) {
  dist::LaunchFlags flags;
  flags.rank = rank;
  flags.world_size = world;
  flags.init = store;
  flags.timeout_seconds = 60;
  const auto link = dist::connect(dist::resolve_launch(flags, [](const char*) -> const char* { return nullptr; }));
  return runtime::probe_stage_links(*link, {1 << 20, 2});
}

TEST(LinkProbe, ThreeRanksOverGlooMeasureEveryHopInOrder) {
  if (!dist::have_c10d()) GTEST_SKIP() << "built without c10d/Gloo";
  TempDir dir("link-probe");
  const std::string store = "file:" + (fs::path(dir.path) / "store").string();
  std::vector<std::future<std::vector<runtime::LinkHop>>> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(std::async(std::launch::async, [&, r] { return probe_on_rank(store, r, 3); }));
  std::vector<std::vector<runtime::LinkHop>> got;
  for (auto& r : ranks) got.push_back(r.get());
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(got[r].size(), 2u) << "rank " << r;
    for (int h = 0; h < 2; ++h) {
      const runtime::LinkHop& hop = got[r][h];
      EXPECT_EQ(hop.from, h);
      EXPECT_EQ(hop.to, h + 1);
      EXPECT_GT(hop.latency_seconds, 0.0);
      EXPECT_TRUE(std::isfinite(hop.bytes_per_second) && hop.bytes_per_second > 0) << hop.bytes_per_second;
      // Every rank read the same published numbers.
      EXPECT_EQ(hop.latency_seconds, got[0][h].latency_seconds);
      EXPECT_EQ(hop.bytes_per_second, got[0][h].bytes_per_second);
    }
  }
}

// A link of one rank: nothing to measure.
class SoloLink final : public runtime::StageLink {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void set(const std::string&, const std::string&) override {}
  std::string get(const std::string&) override { return {}; }
  void abort(const std::string&) override {}

 protected:
  std::function<void()> send_raw(const at::Tensor&, int, int) override { return [] {}; }
  void recv_raw(at::Tensor&, int, int) override {}
};

TEST(LinkProbe, OneRankIsRefused) {
  SoloLink solo;
  const std::string e = error_of([&] { runtime::probe_stage_links(solo, {}); });
  EXPECT_NE(e.find("needs 2 or more ranks, this job has 1"), std::string::npos) << e;
}

TEST(LinkProbe, TheSlowestHopHasTheLowestBandwidthAndTheLargestLatency) {
  const std::vector<runtime::LinkHop> hops = {{0, 1, 2e-5, 9e9}, {1, 2, 5e-5, 1e9}, {2, 3, 9e-5, 4e9}};
  const runtime::LinkHop slowest = runtime::slowest_hop(hops);
  EXPECT_EQ(slowest.from, 1);
  EXPECT_EQ(slowest.to, 2);
  EXPECT_DOUBLE_EQ(slowest.bytes_per_second, 1e9);
  EXPECT_DOUBLE_EQ(slowest.latency_seconds, 9e-5);
}

TEST(HardwareProfileStageLink, IsOptionalAndRoundTripsThroughJson) {
  policy::HardwareProfile p = *policy::builtin_profile("t4-flexgen");
  EXPECT_EQ(p.stage_link_bandwidth, 0.0);
  nlohmann::json j = policy::profile_to_json(p);
  EXPECT_FALSE(j.contains("stage_link")) << "an unmeasured link was written";
  p.stage_link_bandwidth = 2.5e9;
  p.stage_link_latency = 4e-5;
  j = policy::profile_to_json(p);
  const policy::HardwareProfile back = policy::profile_from_json(j, "test.json");
  EXPECT_DOUBLE_EQ(back.stage_link_bandwidth, 2.5e9);
  EXPECT_DOUBLE_EQ(back.stage_link_latency, 4e-5);

  nlohmann::json bad = j;
  bad["stage_link"]["bandwidth"] = -1.0;
  std::string e = error_of([&] { policy::profile_from_json(bad, "test.json"); });
  EXPECT_NE(e.find("test.json"), std::string::npos) << e;
  EXPECT_NE(e.find("stage_link.bandwidth"), std::string::npos) << e;
  bad = j;
  bad["stage_link"]["speed"] = 1.0;
  e = error_of([&] { policy::profile_from_json(bad, "test.json"); });
  EXPECT_NE(e.find("stage_link.speed"), std::string::npos) << e;
}

}  // namespace
}  // namespace tiergen
