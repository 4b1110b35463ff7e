// Pipeline parallelism (tiergen/runtime/stage.h, stage_link.h, tiergen/dist): the
// model split into contiguous stages, one rank each, hidden states passed from stage
// to stage and the sampled tokens back, as many blocks in flight as there are stages.
// The ranks here are threads of this process joined by a real c10d Gloo process
// group over a file store; their tokens must be the single-process engine's, for
// every placement of each stage's slice, ragged prompts and end-of-sequence stops.
#include <gtest/gtest.h>

#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "tests/support/error_of.h"
#include "tests/support/tiny_model.h"
#include "policy/pipeline.h"
#include "tiergen/common/bytes.h"
#include "tiergen/dist/launch.h"
#include "tiergen/model/presets.h"
#include "tiergen/runtime/engine.h"
#include "tiergen/runtime/stage.h"

namespace tiergen::test {
namespace {

// ---- Stages.

TEST(StageSplit, ContiguousStagesEachWithADecoderLayerAndBalancedBytesAndCompute) {
  const model::Spec spec = *model::find_preset("opt-1.3b");
  const auto shares = runtime::stage_balance_weights(spec);
  const double largest_share = *std::max_element(shares.begin(), shares.end());
  for (int64_t w : std::vector<int64_t>{1, 2, 3, 4, 8, spec.num_layers}) {
    const auto stages = runtime::split_stages(spec, w);
    ASSERT_EQ(static_cast<int64_t>(stages.size()), w);
    EXPECT_EQ(stages.front().first, 0);
    EXPECT_TRUE(stages.front().embeds());
    EXPECT_TRUE(stages.back().samples(spec));
    EXPECT_EQ(stages.back().end, spec.num_weight_layers());
    double largest = 0;
    for (size_t s = 0; s < stages.size(); ++s) {
      EXPECT_GE(stages[s].decoder_count(spec), 1) << "stage " << s << " of " << w;
      if (s > 0) EXPECT_EQ(stages[s].first, stages[s - 1].end) << "stage " << s << " of " << w;
      double share = 0;
      for (int64_t l = stages[s].first; l < stages[s].end; ++l) share += shares[static_cast<size_t>(l)];
      largest = std::max(largest, share);
    }
    // No stage is more than one layer's share above an even split.
    EXPECT_LE(largest, 1.0 / static_cast<double>(w) + largest_share) << w << " stages";
  }
  // Two stages: the head's matmul weighs more than the embedding's lookup, so the
  // first stage takes more decoder layers than the second.
  const auto two = runtime::split_stages(spec, 2);
  EXPECT_GT(two[0].decoder_count(spec), two[1].decoder_count(spec));
  EXPECT_EQ(two[0].decoder_count(spec) + two[1].decoder_count(spec), spec.num_layers);
  EXPECT_EQ(two[0].describe(spec), fmt::format("embedding, decoder layers 0-{}", two[0].decoder_count(spec) - 1));
}

TEST(StageSplit, RefusesMoreStagesThanDecoderLayers) {
  const model::Spec spec = *model::find_preset("opt-125m");
  const std::string e = error_of([&] { runtime::split_stages(spec, spec.num_layers + 1); });
  EXPECT_NE(e.find("13 pipeline stages for a model of 12 decoder layers"), std::string::npos) << e;
}

// ---- Planning a pipeline.

TEST(PipelinePlanning, TheRingIsBoundByItsSlowestStageOrByOneGroupsWayRound) {
  runtime::Policy block;
  block.gpu_batch_size = 4;
  block.num_gpu_batches = 2;
  const runtime::Workload w{100, 11};  // 10 decode tokens
  std::vector<policy::Prediction> stages(2);
  stages[0].prefill_seconds = 2.0;
  stages[0].decode_seconds = 10 * 0.5;
  stages[1].prefill_seconds = 3.0;
  stages[1].decode_seconds = 10 * 1.0;
  // 8 sequences x 10 bytes per token at 80 bytes/s: 1 s a decode hop, 100 s a prefill hop.
  auto p = policy::predict_pipeline(stages, block, w, 10.0, {80.0});
  EXPECT_DOUBLE_EQ(p.decode_hop_seconds, 1.0);
  EXPECT_DOUBLE_EQ(p.prefill_hop_seconds, 100.0);
  EXPECT_EQ(p.bottleneck_stage, 1);
  // Round trip 0.5 + 1 + 1 + 1 = 3.5 s beats 2 groups x 1 s through stage 1.
  EXPECT_DOUBLE_EQ(p.decode_cycle_seconds, 3.5);
  // Fill: 2 + 100 + 3 + 100, then the second block through the slowest prefill (3 s).
  EXPECT_DOUBLE_EQ(p.prefill_seconds, 208.0);
  EXPECT_DOUBLE_EQ(p.decode_throughput, 16.0 * 10 / 35.0);
  EXPECT_DOUBLE_EQ(p.total_throughput, 16.0 * 11 / (208.0 + 35.0));
  // A fast link: the slowest stage, twice per cycle (one token of each group).
  p = policy::predict_pipeline(stages, block, w, 10.0, {1e12});
  EXPECT_NEAR(p.decode_cycle_seconds, 2.0, 1e-9);
}

TEST(PipelinePlanning, EachMessageOfAHopPaysTheLinksLatency) {
  runtime::Policy block;
  block.gpu_batch_size = 4;
  block.num_gpu_batches = 2;  // two messages per hop
  const runtime::Workload w{100, 11};
  std::vector<policy::Prediction> stages(2);
  stages[0].prefill_seconds = stages[1].prefill_seconds = 1.0;
  stages[0].decode_seconds = stages[1].decode_seconds = 10 * 0.5;
  const auto p = policy::predict_pipeline(stages, block, w, 10.0, {80.0, 0.25, "measured"});
  EXPECT_DOUBLE_EQ(p.decode_hop_seconds, 2 * 0.25 + 1.0);
  EXPECT_DOUBLE_EQ(p.prefill_hop_seconds, 2 * 0.25 + 100.0);
  EXPECT_EQ(p.link.origin, "measured");
}

// FlexGen's Table 3 setting: OPT-30B over 4 machines, each a T4 (16 GB) with 208 GB of
// DRAM. Every stage's plan runs one block shape and fits its machine as the runtime
// counts a stage (its own layers, 4 blocks resident); the pipeline decodes faster
// than one machine.
TEST(PipelinePlanning, Opt30bOnFourT4MachinesFitsEveryStageAndBeatsOneMachine) {
  const auto spec = model::resolve_spec("opt-30b");
  const runtime::Workload w{512, 32};
  const runtime::Budgets b{parse_bytes("16GiB"), parse_bytes("208GiB"), parse_bytes("1536GiB")};
  const auto hw = policy::load_profile(TIERGEN_SOURCE_DIR "/configs/hw/t4-flexgen.json");
  const auto plan = policy::plan_pipeline(spec, w, b, hw, {}, 4, {1.25e9});
  ASSERT_EQ(plan.stages.size(), 4u);
  const runtime::Policy& shape = plan.stages[0].search.policy;
  for (size_t s = 0; s < 4; ++s) {
    const runtime::Policy& p = plan.stages[s].search.policy;
    EXPECT_EQ(p.gpu_batch_size, shape.gpu_batch_size) << "stage " << s;
    EXPECT_EQ(p.num_gpu_batches, shape.num_gpu_batches) << "stage " << s;
    EXPECT_TRUE(p.exact()) << "stage " << s;
    const auto memory = runtime::plan_memory(spec, p, w, 2, runtime::StageShape{plan.stages[s].layers, 4});
    EXPECT_EQ(memory.over_budget(b), "") << "stage " << s << ": " << p.describe();
  }
  const auto single = policy::search_policy(spec, w, b, hw);
  EXPECT_GT(plan.prediction.decode_throughput, 2 * single.prediction.decode_throughput);
  EXPECT_GT(plan.prediction.total_throughput, single.prediction.total_throughput);
}

// ---- Launch.

dist::GetEnv env_of(const std::map<std::string, std::string>& vars) {
  auto copy = std::make_shared<std::map<std::string, std::string>>(vars);
  return [copy](const char* name) -> const char* {
    auto it = copy->find(name);
    return it == copy->end() ? nullptr : it->second.c_str();
  };
}

TEST(Launch, ReadsTorchrunMpirunAndFlagsInThatPrecedence) {
  const auto torchrun = dist::resolve_launch({}, env_of({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"},
                                                          {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
                                                          {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  EXPECT_EQ(torchrun.rank, 2);
  EXPECT_EQ(torchrun.world_size, 4);
  EXPECT_EQ(torchrun.init, "tcp://10.0.0.1:29500");
  EXPECT_TRUE(torchrun.agent_store);
  EXPECT_EQ(torchrun.restart_count, 0);
  EXPECT_EQ(dist::resolve_launch({}, env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                                             {"MASTER_PORT", "1"}, {"TORCHELASTIC_RESTART_COUNT", "3"}})).restart_count, 3);
  EXPECT_EQ(torchrun.launcher, "torchrun environment");

  const auto mpirun = dist::resolve_launch({}, env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                        {"MASTER_ADDR", "h"}, {"MASTER_PORT", "7"}}));
  EXPECT_EQ(mpirun.rank, 1);
  EXPECT_EQ(mpirun.local_rank, 1);
  EXPECT_FALSE(mpirun.agent_store);
  EXPECT_EQ(mpirun.launcher, "mpirun environment");

  dist::LaunchFlags flags;
  flags.rank = 1;
  flags.world_size = 3;
  flags.init = "file:/tmp/x";
  const auto by_flags = dist::resolve_launch(flags, env_of({{"RANK", "2"}, {"WORLD_SIZE", "4"}}));
  EXPECT_EQ(by_flags.rank, 1);
  EXPECT_EQ(by_flags.local_rank, 1);  // one host: each rank its own GPU
  EXPECT_EQ(by_flags.world_size, 3);
  EXPECT_EQ(by_flags.init, "file:/tmp/x");
  EXPECT_EQ(by_flags.local_world_size, 3);  // a file store: one host
  EXPECT_EQ(torchrun.local_world_size, 1);
  EXPECT_EQ(dist::resolve_launch({}, env_of({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"},
                                             {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}})).local_world_size, 2);

  const auto single = dist::resolve_launch({}, env_of({}));
  EXPECT_FALSE(single.distributed());
  // torchrun with one process is not a pipeline and needs no rendezvous.
  EXPECT_FALSE(dist::resolve_launch({}, env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}})).distributed());
}

TEST(Launch, RefusesIncompleteSettingsNamingWhatIsMissing) {
  const auto error = [](const dist::LaunchFlags& f, const std::map<std::string, std::string>& env) {
    return error_of([&] { dist::resolve_launch(f, env_of(env)); });
  };
  EXPECT_NE(error({}, {{"RANK", "1"}}).find("RANK and WORLD_SIZE go together"), std::string::npos);
  EXPECT_NE(error({}, {{"RANK", "1"}, {"WORLD_SIZE", "2"}}).find("no rendezvous"), std::string::npos);
  EXPECT_NE(error({}, {{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}})
                .find("rank 2 is not below the world size 2"), std::string::npos);
  EXPECT_NE(error({}, {{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x'"), std::string::npos);
  EXPECT_NE(error({}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}).find("MASTER_PORT"), std::string::npos);
  dist::LaunchFlags only_rank;
  only_rank.rank = 1;
  EXPECT_NE(error(only_rank, {}).find("--rank and --world-size go together"), std::string::npos);
  dist::LaunchFlags bad_init;
  bad_init.rank = 0;
  bad_init.world_size = 2;
  bad_init.init = "/tmp/store";
  EXPECT_NE(error(bad_init, {}).find("expected file:PATH"), std::string::npos);
}

// ---- Message labels.

// Two ranks in one process over queues: the transport StageLink's checks run on.
struct Mailboxes {
  std::mutex mutex;
  std::condition_variable arrived;
  std::map<std::tuple<int, int, int>, std::deque<at::Tensor>> queues;  // (from, to, tag)
};

class QueueLink final : public runtime::StageLink {
 public:
  QueueLink(int rank, int world, std::shared_ptr<Mailboxes> boxes) : rank_(rank), world_(world), boxes_(std::move(boxes)) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  void set(const std::string&, const std::string&) override {}
  std::string get(const std::string&) override { return {}; }
  void abort(const std::string&) override {}
  void lose_peers() { peer_gone_ = true; }

 protected:
  std::function<void()> send_raw(const at::Tensor& tensor, int peer, int tag) override {
    // As Gloo does once it has seen the peer's connection close: the send is refused
    // when it is queued, before any wait.
    if (peer_gone_) throw std::runtime_error("Connection closed by peer");
    std::lock_guard<std::mutex> lock(boxes_->mutex);
    boxes_->queues[{rank_, peer, tag}].push_back(tensor.clone());
    boxes_->arrived.notify_all();
    return [] {};
  }
  void recv_raw(at::Tensor& tensor, int peer, int tag) override {
    std::unique_lock<std::mutex> lock(boxes_->mutex);
    auto& q = boxes_->queues[{peer, rank_, tag}];
    boxes_->arrived.wait(lock, [&] { return !q.empty(); });
    // As Gloo does: a shorter message fills the start of a longer buffer.
    const at::Tensor got = q.front();
    q.pop_front();
    tensor.view(-1).narrow(0, 0, std::min(tensor.numel(), got.numel())).copy_(got.view(-1).narrow(0, 0, std::min(tensor.numel(), got.numel())));
  }

 private:
  int rank_, world_;
  std::shared_ptr<Mailboxes> boxes_;
  bool peer_gone_ = false;
};

TEST(StageLinkLabels, AMessageThatIsNotTheExpectedOneIsRefusedBeforeItsPayloadIsRead) {
  auto boxes = std::make_shared<Mailboxes>();
  QueueLink sender(0, 2, boxes), receiver(1, 2, boxes);
  using L = runtime::MessageLabel;
  const at::Tensor hidden = at::arange(12, at::kFloat).reshape({2, 2, 3});
  sender.send(hidden, 1, L{L::Hidden, 0, 3, 1})();
  at::Tensor into = at::zeros({2, 2, 3});
  receiver.recv(into, 0, L{L::Hidden, 0, 3, 1});
  EXPECT_TRUE(at::equal(into, hidden));

  // The sender is a token ahead: named, with both labels.
  sender.send(hidden, 1, L{L::Hidden, 0, 4, 1})();
  at::Tensor untouched = at::full({2, 2, 3}, -1.0);
  std::string e = error_of([&] { receiver.recv(untouched, 0, L{L::Hidden, 0, 3, 1}); });
  EXPECT_NE(e.find("expected hidden states of group 0 token 3 batch 1 (12 values) from rank 0, but it sent hidden "
                   "states of group 0 token 4 batch 1"), std::string::npos) << e;
  EXPECT_TRUE(at::equal(untouched, at::full({2, 2, 3}, -1.0)));

  // A shorter message than the buffer (which Gloo would complete silently). After a
  // refusal the link is out of step (the payload is still queued): fresh ones.
  auto boxes2 = std::make_shared<Mailboxes>();
  QueueLink sender2(0, 2, boxes2), receiver2(1, 2, boxes2);
  sender2.send(hidden.narrow(1, 0, 1).contiguous(), 1, L{L::Hidden, 0, 5, 0})();
  e = error_of([&] { receiver2.recv(untouched, 0, L{L::Hidden, 0, 5, 0}); });
  EXPECT_NE(e.find("(12 values) from rank 0, but it sent hidden states of group 0 token 5 batch 0 (6 values"),
            std::string::npos) << e;
}

// A send the transport refuses as it is queued (its peer already gone) names the peer
// and the message, as one that fails while completing does.
TEST(StageLinkLabels, ASendRefusedAtOnceNamesThePeerAndTheMessage) {
  auto boxes = std::make_shared<Mailboxes>();
  QueueLink sender(0, 2, boxes);
  sender.lose_peers();
  using L = runtime::MessageLabel;
  const std::string e = error_of([&] { sender.send(at::zeros({2, 3}), 1, L{L::Hidden, 1, 2, 0}); });
  EXPECT_NE(e.find("rank 0: sending hidden states of group 1 token 2 batch 0 to rank 1 failed (did rank 1 exit?): "
                   "Connection closed by peer"), std::string::npos) << e;
}

// ---- The pipeline engine, ranks as threads over Gloo.

struct PipelineCase {
  std::string name;
  std::array<double, 6> percent;
  bool cpu_attention = false;
  int64_t gbs = 2, ngb = 2;
};

// Runs `requests` on `world` ranks (threads), each with its own Engine and tiers;
// returns the last rank's results. Any rank's failure fails the call.
std::vector<runtime::SequenceResult> pipeline_results(const TinyModel& m, const runtime::Policy& policy, int world,
                                                      const std::vector<runtime::SequenceRequest>& requests) {
  TempDir scratch("pipeline");
  const std::string store = "file:" + (fs::path(scratch.path) / "store").string();
  std::vector<std::future<std::vector<runtime::SequenceResult>>> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      dist::LaunchFlags flags;
      flags.rank = r;
      flags.world_size = world;
      flags.init = store;
      flags.timeout_seconds = 60;
      const auto launch = dist::resolve_launch(flags, env_of({}));
      TempDir offload("offload-rank" + std::to_string(r));
      runtime::EngineOptions options = cpu_engine_options(offload.path);
      options.link = dist::connect(launch);
      runtime::Engine engine(m.spec, *m.weights, policy, options, workload_of(requests));
      return engine.generate(requests);
    }));
  }
  std::vector<std::vector<runtime::SequenceResult>> results;
  for (auto& r : ranks) results.push_back(r.get());
  return results.back();
}

class PipelineEngine : public ::testing::TestWithParam<PipelineCase> {
 protected:
  void SetUp() override {
    if (!dist::have_c10d()) GTEST_SKIP() << "built without c10d/Gloo";
  }
};

// Ragged prompts, different max_tokens, an end-of-sequence token and a stop token met
// on the way, and more blocks than stages (the last one partial).
void expect_pipeline_matches_single_process(const TinyModelOptions& model_options, const PipelineCase& c, int world) {
  auto requests = greedy_requests(make_prompts({3, 9, 5, 12, 4, 7, 6, 10, 2, 8, 11}, 128, 17), {6, 3, 9, 1, 7, 5});
  const runtime::Policy policy = make_policy(c.gbs, c.ngb, c.percent, c.cpu_attention);
  // The model's end-of-sequence token: request 5's second token (the same seed gives
  // the same weights with and without it).
  std::vector<std::vector<int64_t>> plain;
  {
    const TinyModel probe = make_tiny_model(model_options);
    TempDir offload("offload-probe");
    plain = engine_tokens(probe.spec, *probe.weights, policy, cpu_engine_options(offload.path), requests);
  }
  TinyModelOptions with_eos = model_options;
  with_eos.eos = plain[5][1];
  const TinyModel m = make_tiny_model(with_eos);
  ASSERT_EQ(m.spec.vocab_size, 128);
  // Request 2 stops at its second token: its row leaves every stage's batch.
  requests[2].stop_token_ids = {plain[2][1]};
  TempDir offload("offload-single");
  const auto expected = runtime::Engine(m.spec, *m.weights, policy, cpu_engine_options(offload.path),
                                        workload_of(requests)).generate(requests);
  ASSERT_EQ(expected[2].finish_reason, "stop");
  ASSERT_EQ(expected[5].finish_reason, "stop");
  const auto got = pipeline_results(m, policy, world, requests);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t r = 0; r < got.size(); ++r) {
    EXPECT_EQ(got[r].tokens, expected[r].tokens) << c.name << ", " << world << " ranks, request " << r;
    EXPECT_EQ(got[r].finish_reason, expected[r].finish_reason) << c.name << ", request " << r;
  }
}

TinyModelOptions with_layers(TinyModelOptions o, int64_t layers) {
  o.layers = layers;
  return o;
}

TEST_P(PipelineEngine, TwoRanksGiveTheSingleProcessTokens) {
  expect_pipeline_matches_single_process(with_layers(tiny_opt(71), 2), GetParam(), 2);
  expect_pipeline_matches_single_process(with_layers(tiny_llama(72), 3), GetParam(), 2);
}

// Five LLaMA layers over four stages (one stage holds two), with a tied head.
TEST_P(PipelineEngine, FourRanksGiveTheSingleProcessTokens) {
  expect_pipeline_matches_single_process(with_layers(tiny_opt(73), 4), GetParam(), 4);
  TinyModelOptions llama = with_layers(tiny_llama(74), 5);
  llama.tie = true;
  expect_pipeline_matches_single_process(llama, GetParam(), 4);
}

INSTANTIATE_TEST_SUITE_P(
    Placements, PipelineEngine,
    ::testing::Values(PipelineCase{"all on the compute device", {100, 0, 100, 0, 100, 0}},
                      PipelineCase{"weights on cpu and disk, cpu attention", {30, 40, 100, 0, 100, 0}, true},
                      PipelineCase{"cache on cpu and disk, cpu attention", {100, 0, 20, 40, 100, 0}, true, 3, 1},
                      PipelineCase{"cache and activations on cpu and disk", {50, 50, 30, 30, 30, 40}, false, 1, 3}),
    [](const auto& info) {
      std::string s;
      for (char ch : info.param.name) s += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
      return s;
    });

}  // namespace
}  // namespace tiergen::test
