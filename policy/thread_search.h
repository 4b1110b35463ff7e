#pragma once
// LM-Offload's Algorithm 3: thread-level parallelism for the compute task and the five
// load/store tasks. For each intra-op count of the compute task, its inter-op count is
// the maximum concurrency of its operator graph (ASAP schedule of the graph with the
// profiled operator times, Kahn's topological order); the threads left (at least five)
// go to the load/store tasks in proportion to the bytes they move; the setting with
// the best estimated layer time wins.
#include <array>
#include <string>
#include <vector>

#include "policy/cost_model.h"
#include "policy/hardware_profile.h"
#include "tiergen/runtime/policy.h"

namespace tiergen::policy {

struct Operator {
  std::string name;
  double single_thread_seconds = 0;
  std::vector<int> inputs;  // indices of operators it waits for (earlier in the list)
};

constexpr int kNumIoTasks = 5;  // weight load, cache load, cache store, activation load/store

struct ThreadSearchInput {
  int max_threads = 1;
  std::vector<Operator> compute_ops;  // the compute task's operator graph
  double other_compute_seconds = 0;   // compute-task time on the gpu (threads don't matter)
  std::array<double, kNumIoTasks> io_bytes{};         // per layer
  std::array<double, kNumIoTasks> io_link_seconds{};  // the links' own limit, per layer
  double io_bandwidth_per_thread = 0;                 // bytes/s one worker moves
};

struct ThreadChoice {
  int compute_intra_op = 1;
  int compute_inter_op = 1;  // the compute task's own concurrency
  std::array<int, kNumIoTasks> io_threads{1, 1, 1, 1, 1};
  double layer_seconds = 0;  // estimated
  // false when max_threads < 6: then compute gets every core and each I/O task one
  // worker (never 0 threads anywhere).
  bool found = false;
};

// Max number of operators running at once in the ASAP schedule, and its makespan.
struct GraphSchedule {
  int max_concurrency = 1;
  double makespan = 0;
};
GraphSchedule schedule_graph(const std::vector<Operator>& ops, double speedup);

ThreadChoice choose_threads(const ThreadSearchInput& input, const HardwareProfile& hw);

// The decode-layer input for `policy` from its prediction: CPU attention as the engine
// runs it (append K and V, then the fused decode-attention kernel on the intra-op
// threads), not LM-Offload's Figure 6 split into separately scheduled operators.
ThreadSearchInput thread_input_for(const model::Spec& spec, const runtime::Policy& policy,
                                   const runtime::Workload& workload, const Prediction& prediction,
                                   const HardwareProfile& hw);

// Writes the choice into policy.threads (inter-op = compute's + the five I/O tasks).
void apply_threads(const ThreadChoice& choice, runtime::Policy& policy);

}  // namespace tiergen::policy
