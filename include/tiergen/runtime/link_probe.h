#pragma once
// Measures the links between consecutive pipeline stages (rank r to rank r + 1) over
// the job's own transport (StageLink), so `tiergen policy --stages` predicts the hops
// of hidden states from this cluster's numbers. Per hop, the lower rank times round
// trips of a one-value ping (twice the latency), then of a payload answered by a
// one-value reply (the payload's transfer plus the same two latencies); the fastest
// of each (noise only adds time) give latency = ping / 2 and bandwidth = payload bytes
// / (payload - ping). Hops are measured one after another, so no two share the network.
#include <cstdint>
#include <vector>

#include "tiergen/runtime/stage_link.h"

namespace tiergen::runtime {

struct LinkHop {
  int from = 0, to = 0;
  double latency_seconds = 0;
  double bytes_per_second = 0;
};

struct LinkProbeOptions {
  int64_t payload_bytes = int64_t(64) << 20;
  int rounds = 5;  // timed round trips per hop (after one untimed)
};

// Every rank of the job calls it; every rank gets every hop (world_size - 1 of them).
std::vector<LinkHop> probe_stage_links(StageLink& link, const LinkProbeOptions& options);

// The slowest hop's bandwidth and the largest latency: what one link rate in the
// pipeline prediction must assume.
LinkHop slowest_hop(const std::vector<LinkHop>& hops);

}  // namespace tiergen::runtime
