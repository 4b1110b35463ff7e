#include "tiergen/runtime/link_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "tiergen/common/error.h"

namespace tiergen::runtime {

namespace {

constexpr int64_t kPing = 0, kPayload = 1;  // MessageLabel::batch of a probe message

MessageLabel probe_label(int hop, int round, int64_t what) { return {MessageLabel::Probe, hop, round, what}; }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The fastest round trip: noise (other processes, the scheduler) only ever adds time.
double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

std::string hop_key(int hop) { return fmt::format("link_probe/hop{}", hop); }

// Round trips of `message` answered by one value, the first untimed (it may set the
// connection up): their durations.
std::vector<double> timed_round_trips(StageLink& link, int hop, const at::Tensor& message, int64_t what, int rounds) {
  const int peer = hop + 1;
  at::Tensor reply = at::zeros({1}, at::kFloat);
  std::vector<double> trips;
  for (int round = 0; round <= rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    link.send(message, peer, probe_label(hop, round, what))();
    link.recv(reply, peer, probe_label(hop, round, what));
    if (round > 0) trips.push_back(seconds_since(start));
  }
  return trips;
}

// The lower rank of hop `hop`: all pings first, on a quiet connection (a ping right
// after a large payload would time the payload's aftermath), then the payloads; it
// publishes the result.
void measure_hop(StageLink& link, int hop, const LinkProbeOptions& o) {
  const double ping = fastest(timed_round_trips(link, hop, at::zeros({1}, at::kFloat), kPing, o.rounds));
  const double payload_trip =
      fastest(timed_round_trips(link, hop, at::zeros({o.payload_bytes}, at::kByte), kPayload, o.rounds));
  // A payload too small to stand out from the latency still bounds the bandwidth below.
  const double transfer = payload_trip - ping > 0 ? payload_trip - ping : payload_trip;
  link.set(hop_key(hop), fmt::format("{:.9e} {:.9e}", ping / 2, double(o.payload_bytes) / transfer));
}

// Answers `rounds` + 1 messages received into `message` with one value each.
void answer_round_trips(StageLink& link, int hop, at::Tensor& message, int64_t what, int rounds) {
  at::Tensor reply = at::zeros({1}, at::kFloat);
  for (int round = 0; round <= rounds; ++round) {
    link.recv(message, hop, probe_label(hop, round, what));
    link.send(reply, hop, probe_label(hop, round, what))();
  }
}

// The upper rank of hop `hop`: answers the lower rank's pings, then its payloads.
void answer_hop(StageLink& link, int hop, const LinkProbeOptions& o) {
  at::Tensor ping = at::zeros({1}, at::kFloat);
  answer_round_trips(link, hop, ping, kPing, o.rounds);
  at::Tensor payload = at::empty({o.payload_bytes}, at::kByte);
  answer_round_trips(link, hop, payload, kPayload, o.rounds);
}

LinkHop read_hop(StageLink& link, int hop) {
  std::istringstream in(link.get(hop_key(hop)));
  LinkHop h;
  h.from = hop;
  h.to = hop + 1;
  in >> h.latency_seconds >> h.bytes_per_second;
  TG_CHECK(!in.fail(), "internal: link probe result of hop {} unreadable", hop);
  return h;
}

}  // namespace

std::vector<LinkHop> probe_stage_links(StageLink& link, const LinkProbeOptions& options) {
  TG_CHECK(link.world_size() >= 2, "measuring the links between stages needs 2 or more ranks, this job has {}",
           link.world_size());
  TG_CHECK(options.payload_bytes >= 1 && options.rounds >= 1, "link probe: payload bytes and rounds must be positive");
  // Hop h waits for hop h - 1 (its lower rank answered or measured it first), so the
  // hops run one at a time.
  if (link.rank() > 0) answer_hop(link, link.rank() - 1, options);
  if (!link.is_last()) measure_hop(link, link.rank(), options);
  std::vector<LinkHop> hops;
  for (int hop = 0; hop + 1 < link.world_size(); ++hop) hops.push_back(read_hop(link, hop));
  return hops;
}

LinkHop slowest_hop(const std::vector<LinkHop>& hops) {
  TG_CHECK(!hops.empty(), "internal: no link hops");
  LinkHop slowest = hops.front();
  for (const LinkHop& h : hops) {
    slowest.latency_seconds = std::max(slowest.latency_seconds, h.latency_seconds);
    if (h.bytes_per_second < slowest.bytes_per_second) {
      slowest.bytes_per_second = h.bytes_per_second;
      slowest.from = h.from;
      slowest.to = h.to;
    }
  }
  return slowest;
}

}  // namespace tiergen::runtime
