#pragma once
// Planning a pipeline of W processes (flexgen.txt section 4.4): the model split into
// contiguous stages (runtime::split_stages), each stage's policy found by the
// single-process search for its slice under its own budgets, with W blocks resident
// at once (one per group in flight). All stages share one block shape, since hidden
// states pass gpu batch by gpu batch: the stage with the most weight bytes chooses it
// and the others search their placements for it.
//
// The predicted throughput of the ring: W groups of one block each circulate through
// the stages. A decode token of every group takes one cycle, the longer of W tokens
// through the slowest stage and one group's way round the ring (every stage plus the
// hops between them: hidden states on the link, in both phases); the prefill adds the
// pipeline's fill, W - 1 blocks through the slowest stage after the first went round.
//
// Each group loads the stage's streamed weights for its own token, as FlexGen's ring
// does; sharing one load among the groups in flight buys nothing. The groups reach a
// stage one after another, so a layer loaded for group g and kept for group g + 1
// stays on the device for a whole turn: every streamed layer is held at once, which is
// the memory of keeping them resident, and the search already makes weights resident
// when that memory is there. Otherwise sharing a load means fewer, larger groups:
// with G groups of batch / G rows in flight, and a stage taking max(load, rows x
// compute) per group, a token of the whole batch takes max(W, G) x max(load,
// (batch / G) x compute) = W x max(load, batch x compute / G) for G <= W and
// max(G x load, batch x compute) for G >= W, both least at G = W, the runtime's choice.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "policy/search.h"
#include "tiergen/runtime/stage.h"

namespace tiergen::policy {

struct StagePlan {
  runtime::StageLayers layers;
  SearchResult search;  // of the stage's slice (stage_slice), with W groups resident
};

// The link between consecutive stages: given (--link-bandwidth) or measured
// (`tiergen profile --link`, the profile's stage_link).
struct StageLinkRate {
  double bytes_per_second = 0;
  double latency_seconds = 0;  // per message; a hop sends one per gpu batch
  std::string origin = "given";
};

struct PipelinePrediction {
  StageLinkRate link;
  double prefill_hop_seconds = 0, decode_hop_seconds = 0;  // one group's hidden states, one hop
  double prefill_seconds = 0;     // a wave of W blocks through the prefill, fill included
  double decode_cycle_seconds = 0;  // one decode token of all W groups
  double wave_seconds = 0;        // prefill plus n - 1 decode cycles
  int bottleneck_stage = 0;       // the stage with the longest decode token
  int64_t sequences_per_wave = 0; // W blocks
  // FlexGen's definitions over the wave's sequences: decode N·(n−1)/t_decode, total N·n/t.
  double decode_throughput = 0, total_throughput = 0;
};

struct PipelinePlan {
  std::vector<StagePlan> stages;
  PipelinePrediction prediction;
};

// The model a stage searches as if it were whole: its decoder layers, with the
// embedding and head counted too (an upper bound for a middle stage's memory).
model::Spec stage_slice(const model::Spec& spec, const runtime::StageLayers& layers);

// The block shape all stages run: gpu batch size and number of gpu batches.
struct BlockShape {
  int64_t gpu_batch_size = 0, num_gpu_batches = 0;
};

// The stage with the most weight bytes: it chooses the block shape.
size_t heaviest_stage(const model::Spec& spec, const std::vector<runtime::StageLayers>& stages);

// The search for stage `stage` of `stages` alone (what each rank of `generate --policy
// auto` runs for itself): its slice, one block resident per stage, the job's sequences
// shared by the groups; with `shape`, only that block shape (the heaviest stage's).
SearchResult search_stage(const model::Spec& spec, const std::vector<runtime::StageLayers>& stages, size_t stage,
                          const runtime::Workload& workload, const runtime::Budgets& budgets, const HardwareProfile& hw,
                          const SearchOptions& options, const std::optional<BlockShape>& shape);

// `budgets`: each process's own. `workload.num_sequences` is the job's; the groups
// share it, so a block never holds more than its group's share.
// `link`: between consecutive stages.
PipelinePlan plan_pipeline(const model::Spec& spec, const runtime::Workload& workload, const runtime::Budgets& budgets,
                           const HardwareProfile& hw, const SearchOptions& options, int64_t stages,
                           const StageLinkRate& link);

// The ring's throughput for stage predictions already made (exposed for tests).
PipelinePrediction predict_pipeline(const std::vector<Prediction>& stages, const runtime::Policy& block,
                                    const runtime::Workload& workload, double hidden_bytes_per_token,
                                    const StageLinkRate& link);

}  // namespace tiergen::policy
