#pragma once
// The zig-zag block schedule (block_runner.h) as one set of facts: which queue runs
// each task, when the schedule waits for it, and which steps a token takes. The
// runtime dispatches by these facts (block_runner.cpp, block_compute.cpp) and the
// cost model prices them (policy/cost_model.cpp), so the two cannot describe
// different schedules: a change to the schedule is made here, and both follow it.
//
// The schedule in brief: a token runs every weight layer (embedding, decoder layers,
// head), each as one step per gpu batch. At a layer's first step the next layer's
// weights are issued on their own queue and taken at the next layer's first step, so
// they overlap every step of the layer (weights that move nothing are taken in line:
// weights_prefetched). Within a step the compute queue computes batch k while the
// cache loader brings batch k+1's KV cache and hidden state and the storer writes
// batch k-1's; the step ends when all three are done (FlexGen's sync()).
#include <cstdint>

#include "tiergen/runtime/stats.h"

namespace tiergen::runtime::schedule {

// Who runs a task. The tasks of one queue run one after another; the queues run at
// the same time (the loaders and the storer are worker threads with streams of their
// own, the compute queue is the calling thread on the compute stream).
enum class Queue { WeightLoader, CacheLoader, Storer, Compute };
constexpr int kNumQueues = 4;
const char* queue_name(Queue queue);

// When the schedule waits for a queue's work: at the end of the step that issued it,
// or (the next layer's weights) at the first step of the next layer.
enum class Await { StepEnd, NextLayer };
Await await_of(Queue queue);

// Whether the next layer's weights are issued on the weight loader's queue. A layer
// whose load moves nothing (each tensor used where it lives: resident on the compute
// device, or multiplied at a cpu home) is taken in line by the compute queue at its
// first step instead: a loader task would only hand references across threads, and
// its hand-off and event cost host time in every layer (weights all on the GPU).
inline bool weights_prefetched(bool load_moves_nothing) { return !load_moves_nothing; }

// Whether a step's hidden state is loaded ahead, during the step before it. With one
// gpu batch in the pass the next step's input is this step's own output: it is
// stored, then loaded back on the compute queue, then computed, one after another.
bool hidden_prefetched(int64_t batches_in_pass);

// The queue that runs `task` in a pass of `batches_in_pass` gpu batches. CPU
// attention runs on the compute queue with its copies (q to the host, the new K and V
// into a home it reads in place, the output back).
Queue queue_of(Task task, int64_t batches_in_pass);

// Whether the compute queue waits for `task` in line, so that its time adds to the
// compute queue's even where another queue runs it: a hidden state that is not
// prefetched is stored by the storer and then loaded by the compute queue itself.
bool on_compute_path(Task task, int64_t batches_in_pass);

// Whether a copy the compute queue makes to the device in line (CPU attention's
// output, a hidden state loaded in line) waits for the weight loader's copies of the
// next layer on a device with its own memory: they cross the same host-to-device
// engine, so the step that makes it ends after the weights have arrived, with the rest
// of its work still to do (measured on an H100 and an H200: bench/RESULTS.md; the
// stand-in has no copy engine).
inline bool inline_copies_wait_for_weights() { return true; }

// Whether the queues run at the same time. With the policy's overlap off (FlexGen's
// --overlap false, for comparison) every queue's task runs in line on the calling
// thread (worker.h), so a layer takes the sum of its queues' work.
inline bool queues_run_concurrently(bool overlap) { return overlap; }

// Steps of one token: one per weight layer and gpu batch.
inline int64_t steps_per_token(int64_t weight_layers, int64_t batches) { return weight_layers * batches; }

}  // namespace tiergen::runtime::schedule
