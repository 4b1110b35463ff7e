// The cost model against the papers' structure: A.3's terms, LM-Offload's compression
// observations, CPU attention by bandwidth, and the memory model against plan_memory.
#include <gtest/gtest.h>

#include "policy/cost_model.h"

#include <algorithm>
#include "policy/memory_model.h"
#include "tests/support/memory_model_check.h"
#include "tiergen/model/presets.h"

namespace tiergen::policy {
namespace {

HardwareProfile hw(const std::string& name) { return load_profile(TIERGEN_SOURCE_DIR "/configs/hw/" + name + ".json"); }

runtime::Policy offload_policy(int64_t gbs, int64_t ngb, double w_gpu, bool cpu_attention) {
  runtime::Policy p;
  p.gpu_batch_size = gbs;
  p.num_gpu_batches = ngb;
  p.w_gpu_percent = w_gpu;
  p.w_cpu_percent = 100 - w_gpu;
  p.cache_gpu_percent = 0;
  p.cache_cpu_percent = 100;
  p.act_gpu_percent = 0;
  p.act_cpu_percent = 100;
  p.cpu_cache_compute = cpu_attention;
  return p;
}

TEST(PolicyCostModel, ThroughputFollowsFlexGenDefinitions) {
  const auto spec = model::resolve_spec("opt-30b");
  const runtime::Workload w{512, 32};
  const auto r = predict(spec, offload_policy(32, 4, 0, true), w, hw("t4-flexgen"));
  const double n = 128;  // block size
  EXPECT_NEAR(r.prefill_throughput, n * 512 / r.prefill_seconds, 1e-9);
  EXPECT_NEAR(r.decode_throughput, n * 31 / r.decode_seconds, 1e-9);
  EXPECT_NEAR(r.total_throughput, n * 32 / (r.prefill_seconds + r.decode_seconds), 1e-9);
  // The decoder layers, then the embedding and the head: the runtime steps through them too.
  EXPECT_NEAR(r.prefill_seconds, r.prefill.layer_seconds * 48 + r.prefill_edges.layer_seconds, 1e-9);
  EXPECT_NEAR(r.decode_seconds, (r.decode.layer_seconds * 48 + r.decode_edges.layer_seconds) * 31, 1e-9);
}

using runtime::schedule::Queue;
double queue(const PhaseTimes& t, Queue q) { return t.queues[static_cast<int>(q)]; }
double lane(const PhaseTimes& t, Lane l) { return t.lanes[static_cast<int>(l)]; }
double task(const PhaseTimes& t, Task k) { return t.tasks[static_cast<int>(k)]; }

TEST(PolicyCostModel, OneGpuBatchIsTheMaxOfTheQueuesAndLinks) {
  // With one gpu batch (and no fixed cost) a layer is as long as its busiest queue or
  // link; its hidden state comes back in line over the weights' link, so the step also
  // waits for the weights and then computes (schedule::inline_copies_wait_for_weights).
  const auto spec = model::resolve_spec("opt-6.7b");
  const auto r = predict(spec, offload_policy(8, 1, 50, false), {256, 16}, hw("t4-flexgen"));
  for (const auto* phase : {&r.prefill, &r.decode}) {
    double slowest = queue(*phase, Queue::WeightLoader) + queue(*phase, Queue::Compute);
    for (double s : phase->queues) slowest = std::max(slowest, s);
    for (Lane l : {Lane::CpuToGpu, Lane::GpuToCpu, Lane::DiskToCpu, Lane::CpuToDisk}) {
      slowest = std::max(slowest, lane(*phase, l));
    }
    EXPECT_NEAR(phase->layer_seconds, slowest, 1e-12);
    EXPECT_NEAR(queue(*phase, Queue::WeightLoader), task(*phase, Task::WeightLoad), 1e-12);
  }
}

// The runtime takes the next layer's weights only at that layer's first step, so they
// overlap every gpu batch's step (before, the model charged them to the first step).
TEST(PolicyCostModel, NextLayersWeightsOverlapEveryGpuBatchStep) {
  const auto spec = model::resolve_spec("opt-6.7b");
  runtime::Policy p = offload_policy(8, 4, 0, false);
  p.cache_gpu_percent = p.act_gpu_percent = 100;
  p.cache_cpu_percent = p.act_cpu_percent = 0;
  const auto r = predict(spec, p, {256, 16}, hw("t4-flexgen"));
  const double weights = queue(r.decode, Queue::WeightLoader);
  const double compute = queue(r.decode, Queue::Compute);
  ASSERT_GT(weights, compute);  // weight-bound: the layer is the weight load, no more
  EXPECT_NEAR(r.decode.layer_seconds, std::max(weights, lane(r.decode, Lane::CpuToGpu)), 1e-12);
  EXPECT_EQ(r.decode.bottleneck, Bound::WeightLoader);
}

// With one gpu batch the next step's input is this step's output: its store and load
// lie on the compute queue's path. With two they run on the storer and cache loader.
TEST(PolicyCostModel, OneGpuBatchPutsTheHiddenStatesRoundTripOnTheComputePath) {
  const auto spec = model::resolve_spec("opt-6.7b");
  const HardwareProfile profile = hw("t4-flexgen");
  const auto one = predict(spec, offload_policy(16, 1, 100, false), {256, 16}, profile);
  const auto two = predict(spec, offload_policy(8, 2, 100, false), {256, 16}, profile);
  const double round_trip = task(one.decode, Task::ActivationLoad) + task(one.decode, Task::ActivationStore);
  ASSERT_GT(round_trip, 0);
  EXPECT_NEAR(queue(one.decode, Queue::Compute), task(one.decode, Task::Compute) + round_trip, 1e-12);
  EXPECT_NEAR(queue(two.decode, Queue::Compute), task(two.decode, Task::Compute), 1e-12);
  EXPECT_NEAR(queue(two.decode, Queue::CacheLoader),
              task(two.decode, Task::ActivationLoad) + task(two.decode, Task::CacheLoad), 1e-12);
  EXPECT_NEAR(queue(two.decode, Queue::Storer),
              task(two.decode, Task::ActivationStore) + task(two.decode, Task::CacheStore), 1e-12);
}

// With overlap off every queue's task runs in line (schedule::queues_run_concurrently):
// a layer takes the sum of its queues' work and its steps' fixed costs, and the report
// names that as its bound; with overlap on the same work overlaps.
TEST(PolicyCostModel, OverlapOffRunsEveryQueueInTurn) {
  const auto spec = model::resolve_spec("opt-6.7b");
  runtime::Policy p = offload_policy(8, 4, 50, false);
  const auto overlapped = predict(spec, p, {256, 16}, hw("t4-flexgen"));
  p.overlap = false;
  const auto in_turn = predict(spec, p, {256, 16}, hw("t4-flexgen"));
  for (const auto* phase : {&in_turn.prefill, &in_turn.decode, &in_turn.decode_edges}) {
    double sum = phase->fixed_seconds;
    for (double q : phase->queues) sum += q;
    EXPECT_NEAR(phase->layer_seconds, sum, 1e-12);
    EXPECT_EQ(phase->bottleneck, Bound::InTurn);
  }
  EXPECT_NEAR(queue(in_turn.decode, Queue::WeightLoader), queue(overlapped.decode, Queue::WeightLoader), 1e-12);
  EXPECT_LT(overlapped.decode.layer_seconds, in_turn.decode.layer_seconds);
  EXPECT_GT(overlapped.total_throughput, in_turn.total_throughput);
}

// Every step (weight layer x gpu batch) costs the profile's fixed seconds on the compute
// queue: an all-GPU compute-bound plan pays it (L + 2) x batches times per token.
TEST(PolicyCostModel, EveryStepPaysTheFixedCost) {
  const auto spec = model::resolve_spec("opt-1.3b");
  runtime::Policy p = offload_policy(8, 3, 100, false);
  p.cache_gpu_percent = p.act_gpu_percent = 100;
  p.cache_cpu_percent = p.act_cpu_percent = 0;
  HardwareProfile profile = hw("h100-spr");
  profile.step_seconds = 0;
  const auto bare = predict(spec, p, {64, 9}, profile);
  profile.step_seconds = 1e-3;
  const auto fixed = predict(spec, p, {64, 9}, profile);
  const double steps_per_token = double(spec.num_layers + 2) * 3;
  EXPECT_NEAR(fixed.decode_seconds - bare.decode_seconds, 8 * steps_per_token * 1e-3, 1e-9);
  EXPECT_NEAR(fixed.decode.fixed_seconds, 3e-3, 1e-12);
  EXPECT_NEAR(fixed.decode_edges.fixed_seconds, 6e-3, 1e-12);
}

// The embedding and the head stream like a decoder layer: weights off the gpu make the
// edges' weight load (in decode the head's alone: the runtime looks the embedding's
// tables up where they live), and the head's product is priced on every gpu batch.
TEST(PolicyCostModel, EmbeddingAndHeadArePricedAsLayers) {
  const auto spec = model::resolve_spec("opt-30b");
  const ModelSizes sizes(spec, 2);
  const HardwareProfile profile = hw("h100-spr");
  const auto r = predict(spec, offload_policy(24, 2, 0, true), {512, 32}, profile);
  EXPECT_NEAR(queue(r.prefill_edges, Queue::WeightLoader), sizes.edge_weight_bytes({}) / profile.cpu_to_gpu, 1e-9);
  // Tokens 50272 x 7168 and positions 2050 x 7168, fp16.
  EXPECT_NEAR(sizes.embedding_table_bytes(), (50272.0 + 2050.0) * 7168 * 2, 1);
  EXPECT_NEAR(queue(r.decode_edges, Queue::WeightLoader),
              (sizes.edge_weight_bytes({}) - sizes.embedding_table_bytes()) / profile.cpu_to_gpu, 1e-9);
  EXPECT_GT(task(r.decode_edges, Task::Compute), 0);
  EXPECT_GE(r.decode_edges.layer_seconds, queue(r.decode_edges, Queue::WeightLoader));
  // The token embedding and the head's copy of it, 7168 x 50272 fp16 each (0.72 GB),
  // with the position embedding and final norm.
  EXPECT_NEAR(sizes.edge_weight_bytes({}) / 1e9, 1.47, 0.01);
  // At home the tied head is the token table: counted once, except in a model standing
  // for a pipeline's stage, whose real stages hold one end or the other.
  EXPECT_NEAR(ModelSizes(spec, 2, 2).total_weight_bytes({}) - sizes.total_weight_bytes({}), 50272.0 * 7168 * 2, 1);
  // Weights on disk: prefill reads the tables whole, decode only its rows of them (on
  // the compute queue, where the lookup reads them).
  runtime::Policy on_disk = offload_policy(24, 2, 0, true);
  on_disk.w_cpu_percent = 0;
  const auto d = predict(spec, on_disk, {512, 32}, profile);
  EXPECT_NEAR(lane(d.prefill_edges, Lane::DiskToCpu), sizes.edge_weight_bytes({}) / profile.disk_to_cpu, 1e-9);
  EXPECT_NEAR(lane(d.decode_edges, Lane::DiskToCpu),
              (sizes.edge_weight_bytes({}) - sizes.embedding_table_bytes()) / profile.disk_to_cpu, 1e-9);
  EXPECT_NEAR(task(d.decode_edges, Task::Compute) - task(r.decode_edges, Task::Compute),
              48 * sizes.embedding_output_bytes_per_token() / profile.disk_to_cpu, 1e-9);
}

TEST(PolicyCostModel, CpuAttentionIsPricedByBandwidth) {
  const auto spec = model::resolve_spec("opt-30b");
  const runtime::Workload w{512, 32};
  auto profile = hw("t4-flexgen");
  const auto slow = predict(spec, offload_policy(32, 4, 0, true), w, profile);
  profile.cpu_attention_bandwidth *= 2;
  const auto fast = predict(spec, offload_policy(32, 4, 0, true), w, profile);
  const int attention = static_cast<int>(Task::CpuAttention);
  // bls·(s + n/2)·(2·kv_dim·2 bytes) over the bandwidth.
  const double bytes = 128.0 * (512 + 16) * 2 * 7168 * 2;
  EXPECT_NEAR(slow.decode.tasks[attention], bytes / hw("t4-flexgen").cpu_attention_bandwidth, 1e-9);
  EXPECT_NEAR(fast.decode.tasks[attention] * 2, slow.decode.tasks[attention], 1e-12);
  // No KV cache crosses PCIe with CPU attention.
  EXPECT_EQ(slow.decode.tasks[static_cast<int>(Task::CacheLoad)], 0);
}

// Short contexts are mostly what the kernel costs beside its bytes: a call per gpu batch
// and a task per sequence and kv head, as the profile timed them.
TEST(PolicyCostModel, CpuAttentionPaysItsCallsAndTasksBesideItsBytes) {
  const auto spec = model::resolve_spec("opt-125m");
  const runtime::Workload w{8, 32};
  auto profile = hw("t4-flexgen");
  const int attention = static_cast<int>(Task::CpuAttention);
  const double bytes_only = predict(spec, offload_policy(16, 4, 0, true), w, profile).decode.tasks[attention];
  profile.cpu_attention_call_seconds = 20e-6;
  profile.cpu_attention_task_seconds = 0.3e-6;
  const auto four_batches = predict(spec, offload_policy(16, 4, 0, true), w, profile);
  // 4 calls, 64 sequences x 12 kv heads.
  EXPECT_NEAR(four_batches.decode.tasks[attention], bytes_only + 4 * 20e-6 + 64 * 12 * 0.3e-6, 1e-12);
  // The same block in one gpu batch: one call.
  const auto one_batch = predict(spec, offload_policy(64, 1, 0, true), w, profile);
  EXPECT_NEAR(four_batches.decode.tasks[attention] - one_batch.decode.tasks[attention], 3 * 20e-6, 1e-12);
  // A task is a sequence's kv head: LLaMA-2-70B's 64 query heads share 8.
  const auto gqa = model::resolve_spec("llama-2-70b");
  auto bytes_priced = profile;
  bytes_priced.cpu_attention_call_seconds = bytes_priced.cpu_attention_task_seconds = 0;
  EXPECT_NEAR(predict(gqa, offload_policy(16, 4, 0, true), w, profile).decode.tasks[attention] -
                  predict(gqa, offload_policy(16, 4, 0, true), w, bytes_priced).decode.tasks[attention],
              4 * 20e-6 + 64 * 8 * 0.3e-6, 1e-12);
  // The whole cache on the gpu: no CPU attention call, however the flag is set.
  runtime::Policy on_gpu = offload_policy(16, 4, 0, true);
  on_gpu.cache_gpu_percent = 100;
  on_gpu.cache_cpu_percent = 0;
  EXPECT_EQ(predict(spec, on_gpu, w, profile).decode.tasks[attention], 0);
  // Calibration scales them with the bytes' rate.
  HardwareProfile twice_as_fast = profile;
  twice_as_fast.cpu_attention_bandwidth *= 2;
  twice_as_fast.cpu_attention_call_seconds /= 2;
  twice_as_fast.cpu_attention_task_seconds /= 2;
  EXPECT_NEAR(predict(spec, offload_policy(16, 4, 0, true), w, twice_as_fast).decode.tasks[attention] * 2,
              four_batches.decode.tasks[attention], 1e-12);
}

// Decode attention over the cache on the gpu tier: a GPU's batched products, priced at
// the profile's bmm rate; a host standing in for the GPU runs the engine's CPU
// attention kernel over that cache, priced as CPU attention is (bytes at its rate, plus
// its calls and tasks), whatever LibTorch's bmm measured there.
TEST(PolicyCostModel, TheStandInsGpuTierAttentionIsTheCpuAttentionKernel) {
  const auto spec = model::resolve_spec("opt-125m");
  const runtime::Workload w{128, 32};
  runtime::Policy resident = offload_policy(16, 1, 100, false);
  resident.cache_gpu_percent = 100;
  resident.cache_cpu_percent = 0;
  resident.act_gpu_percent = 100;
  resident.act_cpu_percent = 0;
  const int compute = static_cast<int>(Task::Compute);
  const auto decode_compute = [&](const HardwareProfile& p) {
    return predict(spec, resident, w, p).decode.tasks[compute];
  };
  HardwareProfile gpu = hw("t4-flexgen");
  HardwareProfile slow_bmm = gpu;
  slow_bmm.bmm_flops_decode /= 10;
  EXPECT_GT(decode_compute(slow_bmm), decode_compute(gpu)) << "a GPU: the bmm rate prices it";

  HardwareProfile host = gpu;
  host.gpu_is_host = true;
  host.cpu_attention_call_seconds = 20e-6;
  host.cpu_attention_task_seconds = 0.3e-6;
  HardwareProfile host_slow_bmm = host;
  host_slow_bmm.bmm_flops_decode /= 10;
  EXPECT_DOUBLE_EQ(decode_compute(host_slow_bmm), decode_compute(host)) << "the stand-in never runs LibTorch's bmm";
  // Twice the kernel's rate (and half its costs beside the bytes) takes exactly the
  // kernel's seconds off: bytes 16 x (128 + 16) positions x K and V of 768 fp16, a call,
  // 16 x 12 tasks.
  HardwareProfile host_fast_kernel = host;
  host_fast_kernel.cpu_attention_bandwidth *= 2;
  host_fast_kernel.cpu_attention_call_seconds /= 2;
  host_fast_kernel.cpu_attention_task_seconds /= 2;
  const double kernel = 16.0 * (128 + 16) * 2 * 768 * 2 / host.cpu_attention_bandwidth + 20e-6 + 16 * 12 * 0.3e-6;
  EXPECT_NEAR(decode_compute(host) - decode_compute(host_fast_kernel), kernel / 2, 1e-12);

  // The share of the cache the stand-in loads from its cpu tier (no CPU attention) is
  // attended by LibTorch's products on the host: there the bmm rate prices it.
  runtime::Policy split = resident;
  split.cache_gpu_percent = 50;
  split.cache_cpu_percent = 50;
  const auto split_compute = [&](const HardwareProfile& p) { return predict(spec, split, w, p).decode.tasks[compute]; };
  EXPECT_GT(split_compute(host_slow_bmm), split_compute(host));
  // With CPU attention, the stand-in's gpu share goes to the same kernel: never the bmm rate.
  runtime::Policy cpu_attention = split;
  cpu_attention.cpu_cache_compute = true;
  EXPECT_DOUBLE_EQ(predict(spec, cpu_attention, w, host_slow_bmm).decode.tasks[compute],
                   predict(spec, cpu_attention, w, host).decode.tasks[compute]);

  // A compressed cache on the stand-in's gpu tier: the kernel reads it in place, its
  // dequantization fused in (at the CPU's rate, as for a cache at home), never a
  // separate pass at the "gpu" dequantize rate.
  runtime::Policy compressed = resident;
  compressed.compress_cache = {true, 4, 64};
  const int dequantize = static_cast<int>(Task::Dequantize);
  HardwareProfile slow_gpu_dequantize = host, slow_cpu_dequantize = host;
  slow_gpu_dequantize.gpu_dequantize /= 10;
  slow_cpu_dequantize.cpu_dequantize /= 10;
  const double fused = predict(spec, compressed, w, host).decode.tasks[dequantize];
  EXPECT_GT(fused, 0);
  EXPECT_DOUBLE_EQ(predict(spec, compressed, w, slow_gpu_dequantize).decode.tasks[dequantize], fused);
  EXPECT_NEAR(predict(spec, compressed, w, slow_cpu_dequantize).decode.tasks[dequantize], 10 * fused, 1e-12);
}

TEST(PolicyCostModel, GroupedQueryAttentionShrinksTheCache) {
  // LLaMA-2-70B has 8 KV heads for 64 query heads: 1/8 of the KV bytes of full MHA.
  auto spec = model::resolve_spec("llama-2-70b");
  const ModelSizes gqa(spec, 2);
  spec.num_kv_heads = spec.num_heads;
  const ModelSizes mha(spec, 2);
  EXPECT_DOUBLE_EQ(gqa.kv_bytes_per_token() * 8, mha.kv_bytes_per_token());
  // Three MLP matrices: 2·(4h² + 3·h·h2 − 2·h·(h − kv_dim)) FLOPs per token.
  const auto s = model::resolve_spec("llama-2-70b");
  const double h = double(s.hidden_size), kv = double(s.kv_dim()), h2 = double(s.intermediate_size);
  EXPECT_DOUBLE_EQ(gqa.linear_flops_per_token(), 2 * (2 * h * h + 2 * h * kv + 3 * h * h2));
}

TEST(PolicyCostModel, KvCompressionPaysOnlyWithoutCpuAttention) {
  // LM-Offload observation 1 (A100, OPT-30B, prompt 64, gen 128, block 640).
  const auto spec = model::resolve_spec("opt-30b");
  const runtime::Workload w{64, 128};
  const auto a100 = hw("a100-40gb-pcie4");
  for (bool cpu_attention : {true, false}) {
    auto plain = offload_policy(64, 10, 55, cpu_attention);
    auto compressed = plain;
    compressed.compress_cache.enabled = true;
    const double gain = predict(spec, compressed, w, a100).total_throughput /
                        predict(spec, plain, w, a100).total_throughput;
    if (cpu_attention) {
      EXPECT_LE(gain, 1.0);
    } else {
      EXPECT_GT(gain, 1.3);
    }
  }
}

TEST(PolicyCostModel, WeightCompressionCutsTheWeightLoadAndAddsDequantization) {
  const auto spec = model::resolve_spec("opt-30b");
  const runtime::Workload w{64, 8};
  auto plain = offload_policy(64, 4, 30, true);
  auto compressed = plain;
  compressed.compress_weight.enabled = true;
  const auto a = predict(spec, plain, w, hw("a100-40gb-pcie4"));
  const auto b = predict(spec, compressed, w, hw("a100-40gb-pcie4"));
  const int load = static_cast<int>(Task::WeightLoad), deq = static_cast<int>(Task::Dequantize);
  EXPECT_LT(b.decode.tasks[load], a.decode.tasks[load] * 0.35);
  EXPECT_GT(b.decode.tasks[deq], 0);
  EXPECT_EQ(a.decode.tasks[deq], 0);
  EXPECT_GT(b.init_seconds, 0);  // quantized once at load (eq. 3), outside throughput
}

TEST(PolicyCostModel, DiskPlacementAddsDiskReads) {
  const auto spec = model::resolve_spec("opt-175b");
  auto p = offload_policy(8, 4, 0, true);
  p.w_cpu_percent = 50;  // the rest on disk
  const auto r = predict(spec, p, {512, 32}, hw("t4-flexgen"));
  EXPECT_GT(r.decode.lanes[static_cast<int>(Lane::DiskToCpu)], 0);
  EXPECT_GT(r.decode.tasks[static_cast<int>(Task::WeightLoad)], r.decode.lanes[static_cast<int>(Lane::DiskToCpu)]);
}

TEST(PolicyCostModel, MemoryModelTracksTheRuntimeAccounting) {
  // At pure placements the LP's linear memory model is close to plan_memory's bytes.
  test::expect_memory_model_tracks_plan(model::resolve_spec("opt-30b"), offload_policy(16, 4, 0, true), {512, 32});
}

TEST(PolicyCostModel, EffectiveFractionsFollowTheMidpointRule) {
  const auto spec = model::resolve_spec("opt-30b");
  const ModelSizes sizes(spec, 2);
  auto p = offload_policy(8, 1, 20, true);
  const Fractions f = effective_fractions(sizes, p);
  EXPECT_NEAR(f[kWg] + f[kWc] + f[kWn], 1.0, 1e-12);
  EXPECT_NEAR(f[kCc], 1.0, 1e-12);
  EXPECT_NEAR(f[kHc], 1.0, 1e-12);
  // With sep_layer (FlexGen's default) attention and MLP halves are placed separately:
  // only out_proj (a quarter of the attention half, 1/12 of the layer) has its
  // midpoint in the top 20% of its half.
  EXPECT_NEAR(f[kWg], 1.0 / 12, 0.01);
  // As one layer, fc2 (a third of it) is the only large tensor in the top 20%.
  p.sep_layer = false;
  EXPECT_NEAR(effective_fractions(sizes, p)[kWg], 1.0 / 3, 0.01);
}

}  // namespace
}  // namespace tiergen::policy
