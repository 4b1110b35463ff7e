#include "policy/thread_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>

#include "policy/model_sizes.h"
#include "tiergen/common/error.h"

namespace tiergen::policy {

GraphSchedule schedule_graph(const std::vector<Operator>& ops, double speedup) {
  const int n = static_cast<int>(ops.size());
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> users(n);
  for (int i = 0; i < n; ++i) {
    for (int in : ops[i].inputs) {
      TG_CHECK(in >= 0 && in < n && in != i, "operator graph: '{}' has a bad input {}", ops[i].name, in);
      ++pending[i];
      users[in].push_back(i);
    }
  }
  // Kahn's algorithm in topological order, each operator starting when its inputs end.
  std::vector<double> start(n, 0), end(n, 0);
  std::queue<int> ready;
  for (int i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  int visited = 0;
  while (!ready.empty()) {
    const int i = ready.front();
    ready.pop();
    ++visited;
    end[i] = start[i] + ops[i].single_thread_seconds / speedup;
    for (int u : users[i]) {
      start[u] = std::max(start[u], end[i]);
      if (--pending[u] == 0) ready.push(u);
    }
  }
  TG_CHECK(visited == n, "operator graph has a cycle");
  GraphSchedule s;
  for (int i = 0; i < n; ++i) {
    s.makespan = std::max(s.makespan, end[i]);
    int running = 0;  // operators live at the moment operator i starts
    for (int j = 0; j < n; ++j) {
      if (start[j] <= start[i] && (end[j] > start[i] || j == i)) ++running;
    }
    s.max_concurrency = std::max(s.max_concurrency, running);
  }
  return s;
}

namespace {

// Splits `threads` (≥ kNumIoTasks) over the I/O tasks: one each, the rest by bytes.
std::array<int, kNumIoTasks> split_io_threads(int threads, const std::array<double, kNumIoTasks>& bytes) {
  std::array<int, kNumIoTasks> out{1, 1, 1, 1, 1};
  const int extra = threads - kNumIoTasks;
  const double total = std::accumulate(bytes.begin(), bytes.end(), 0.0);
  if (extra <= 0 || total <= 0) return out;
  std::array<double, kNumIoTasks> remainder{};
  int given = 0;
  for (int i = 0; i < kNumIoTasks; ++i) {
    const double share = extra * bytes[i] / total;
    out[i] += static_cast<int>(share);
    given += static_cast<int>(share);
    remainder[i] = share - std::floor(share);
  }
  while (given < extra) {  // largest remainders first
    const int i = static_cast<int>(std::max_element(remainder.begin(), remainder.end()) - remainder.begin());
    ++out[i];
    remainder[i] = -1;
    ++given;
  }
  return out;
}

double io_seconds(const ThreadSearchInput& in, const std::array<int, kNumIoTasks>& threads) {
  double slowest = 0;
  for (int i = 0; i < kNumIoTasks; ++i) {
    double t = in.io_link_seconds[i];
    if (in.io_bandwidth_per_thread > 0) t = std::max(t, in.io_bytes[i] / (threads[i] * in.io_bandwidth_per_thread));
    slowest = std::max(slowest, t);
  }
  return slowest;
}

}  // namespace

ThreadChoice choose_threads(const ThreadSearchInput& in, const HardwareProfile& hw) {
  ThreadChoice best;
  // Cores the load/store workers need: one each where CPU threads stream bytes; on a
  // CUDA host whose workers only queue DMA copies and wait for them, one core for all
  // of them (a worker woken late still leaves the copy engine idle, so compute never
  // takes every core), instead of five cores idling.
  const bool io_streams = std::any_of(in.io_bytes.begin(), in.io_bytes.end(), [](double b) { return b > 0; });
  const int io_cores = hw.gpu_is_host || io_streams ? kNumIoTasks : 1;
  for (int intra = 1; intra <= in.max_threads - io_cores; ++intra) {
    const GraphSchedule schedule = schedule_graph(in.compute_ops, hw.thread_speedup(intra));
    const int inter = schedule.max_concurrency;
    const int free_threads = in.max_threads - inter * intra;
    if (free_threads < io_cores) continue;
    const auto io = io_cores == kNumIoTasks ? split_io_threads(free_threads, in.io_bytes)
                                            : std::array<int, kNumIoTasks>{1, 1, 1, 1, 1};
    const double seconds = std::max(schedule.makespan + in.other_compute_seconds, io_seconds(in, io));
    // Ties go to fewer compute threads (less pressure on caches and memory bandwidth)
    // when the plan computes on the CPU. A plan that does not (everything on the GPU,
    // no CPU attention) ties at every count: the compute threads then keep every core
    // the I/O workers leave, for the host work no operator models (sampling, host-side
    // preparation of each step; a run on 1 thread was 10x slower than predicted).
    const bool no_cpu_compute = std::all_of(in.compute_ops.begin(), in.compute_ops.end(),
                                            [](const Operator& op) { return op.single_thread_seconds <= 0; });
    const bool tie = best.found && seconds <= best.layer_seconds * (1 + 1e-9);
    if (!best.found || seconds < best.layer_seconds * (1 - 1e-9) || (no_cpu_compute && tie)) {
      best = ThreadChoice{intra, inter, io, seconds, true};
    }
  }
  if (!best.found) {
    // Fewer cores than the compute task plus five I/O workers: compute keeps every
    // core (the workers mostly wait on copies), nothing is left at 0.
    best.compute_intra_op = std::max(1, in.max_threads);
    best.compute_inter_op = 1;
    best.io_threads.fill(1);
    best.layer_seconds = std::max(schedule_graph(in.compute_ops, hw.thread_speedup(best.compute_intra_op)).makespan +
                                      in.other_compute_seconds,
                                  io_seconds(in, best.io_threads));
  }
  return best;
}

ThreadSearchInput thread_input_for(const model::Spec& spec, const runtime::Policy& policy,
                                   const runtime::Workload& workload, const Prediction& prediction,
                                   const HardwareProfile& hw) {
  ThreadSearchInput in;
  in.max_threads = hw.cpu_threads;
  const auto& decode = prediction.decode;
  auto task = [&](Task t) { return decode.tasks[static_cast<int>(t)]; };
  // The profile's attention rate is at all threads; scale back to one thread.
  const double attention = task(Task::CpuAttention) * hw.thread_speedup(hw.cpu_threads);
  const double append = attention / std::max<double>(1, workload.prompt_len);
  // The graph the runtime runs: the new token's K and V appended to the CPU cache, then
  // one fused decode-attention kernel (kernels/cpu/attention.h) over the intra-op
  // threads. LM-Offload's Figure 6 splits attention into QK^T, softmax and PV operators
  // that inter-op threads overlap, which a fused kernel never does: with that graph the
  // search gave attention 2 of 16 cores, the run took 7.6x the predicted attention time.
  // (Only where attention has CPU work: the flag does nothing for a cache on the GPU.)
  if (policy.cpu_cache_compute && attention > 0) {
    in.compute_ops.push_back({"append_kv", 2 * append, {}});
    in.compute_ops.push_back({"decode_attention", attention, {0}});
  }
  if (hw.gpu_is_host) {
    // --device cpu: the layer's matmuls run on the same intra-op threads (profiled at
    // all of them), after attention.
    const auto last = static_cast<int>(in.compute_ops.size()) - 1;
    const std::vector<int> after = last < 0 ? std::vector<int>{} : std::vector<int>{last};
    in.compute_ops.push_back({"layer_matmuls", task(Task::Compute) * hw.thread_speedup(hw.cpu_threads), after});
  } else {
    in.other_compute_seconds = task(Task::Compute);
  }
  // The share of a component the load/store workers stream with CPU threads. With
  // --device cpu every move between tiers is a memcpy; on a CUDA host, copies between
  // pinned host memory and the GPU are DMA that no CPU thread streams, so only the
  // disk share costs threads.
  const auto streamed = [&](double gpu_percent, double cpu_percent) {
    return hw.gpu_is_host ? 1 - gpu_percent / 100 : std::max(0.0, 1 - (gpu_percent + cpu_percent) / 100);
  };
  const ModelSizes sizes(spec, 2);
  const double bls = double(policy.block_size());
  const double kv = bls * sizes.kv_stored_bytes_per_token(policy.compress_cache);
  const double hidden = bls * sizes.hidden_bytes_per_token() * streamed(policy.act_gpu_percent, policy.act_cpu_percent);
  const double cache = streamed(policy.cache_gpu_percent, policy.cache_cpu_percent);
  in.io_bytes = {sizes.layer_weight_bytes(policy.compress_weight) * streamed(policy.w_gpu_percent, policy.w_cpu_percent),
                 kv * (workload.prompt_len + workload.gen_len / 2.0) * cache, kv * cache, hidden, hidden};
  if (policy.cpu_cache_compute) in.io_bytes[1] = 0;
  in.io_link_seconds = {task(Task::WeightLoad), task(Task::CacheLoad), task(Task::CacheStore),
                        task(Task::ActivationLoad), task(Task::ActivationStore)};
  in.io_bandwidth_per_thread = hw.io_bandwidth_per_thread;
  return in;
}

void apply_threads(const ThreadChoice& choice, runtime::Policy& policy) {
  policy.threads.compute_intra_op = choice.compute_intra_op;
  policy.threads.compute_inter_op = choice.compute_inter_op + kNumIoTasks;
  policy.threads.io_threads = std::accumulate(choice.io_threads.begin(), choice.io_threads.end(), 0);
}

}  // namespace tiergen::policy
