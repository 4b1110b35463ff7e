// The messages of a pipeline stage within one run's schedule (block_runner.h): per
// pass, each running gpu batch's hidden states [gbs, t, h] pass from stage to stage
// (t: the batch's prefill window, then 1), and the last stage sends every other stage
// the tokens it sampled and which sequences finished. Shapes are derived on both
// sides from the batches and the schedule, never sent; StageLink checks the labels.
#include "src/runtime/block_state.h"
#include "tiergen/common/error.h"

namespace tiergen::runtime {

// Into each running batch's activation home, where the stage's first layer reads its
// input as any layer does.
void BlockRunner::receive_hidden(BlockRun& run) {
  Pending& p = run.pending;
  for (const int64_t k : p.order) {
    BatchState& b = run.batches[static_cast<size_t>(k)];
    at::Tensor hidden = at::empty({policy_.gpu_batch_size, b.prefilling() ? b.prefill_len : 1, spec_.hidden_size},
                                  device_.host_options());
    {
      ScopedTimer timer(stats_, Task::StageWait, p.pass_prefill);
      stage_.link->recv(hidden, stage_.link->rank() - 1,
                        MessageLabel{MessageLabel::Hidden, run.feed.group, run.pass, k});
    }
    ScopedTimer timer(stats_, Task::StoreHidden, b.prefilling());
    b.hidden->write(hidden, 0);
    device_.synchronize();
    p.hidden_stored[static_cast<size_t>(k)] = {};
  }
}

// The stage's last layer stored each batch's output in its home; from there to the
// next stage. The sends complete while the stage computes its next block.
void BlockRunner::send_hidden(BlockRun& run) {
  Pending& p = run.pending;
  for (const int64_t k : p.order) {
    BatchState& b = run.batches[static_cast<size_t>(k)];
    wait_for_store(p.hidden_stored[static_cast<size_t>(k)]);
    at::Tensor host;
    {
      ScopedTimer timer(stats_, Task::LoadHidden, b.prefilling());
      const Staged out = b.hidden->gather_to_compute(b.prefilling() ? b.prefill_len : 1);
      out.ready.make_current_stream_wait(device_);
      host = copy_to_host_now(out.tensor).contiguous();
      if (host.data_ptr() == out.tensor.data_ptr()) host = host.clone();  // the home is reused next token
    }
    run.sends.push_back(
        stage_.link->send(host, stage_.link->rank() + 1, MessageLabel{MessageLabel::Hidden, run.feed.group, run.pass, k}));
  }
}

// Per row of the run's batch slots: the token sampled (the first stage embeds it
// next), then whether the row's sequence is done (padding rows and free slots always are).
void BlockRunner::send_feedback(BlockRun& run) {
  const int64_t gbs = policy_.gpu_batch_size, rows = gbs * policy_.num_gpu_batches;
  at::Tensor feedback = at::ones({2, rows}, at::kLong);
  int64_t* ids = feedback.data_ptr<int64_t>();
  int64_t* done = ids + rows;
  for (size_t k = 0; k < run.batches.size(); ++k) {
    const BatchState& b = run.batches[k];
    if (!b.holds()) continue;
    const int64_t* next = b.next_ids.data_ptr<int64_t>();  // [gbs, 1] host
    for (size_t r = 0; r < b.slots.size(); ++r) {
      const size_t row = k * static_cast<size_t>(gbs) + r;
      ids[row] = next[r];
      done[row] = b.slots[r] < 0 || run.finished[static_cast<size_t>(b.slots[r])] ? 1 : 0;
    }
  }
  for (int peer = 0; peer < stage_.link->world_size() - 1; ++peer) {
    run.sends.push_back(
        stage_.link->send(feedback, peer, MessageLabel{MessageLabel::Feedback, run.feed.group, run.pass, 0}));
  }
}

void BlockRunner::receive_feedback(BlockRun& run) {
  const int64_t gbs = policy_.gpu_batch_size, rows = gbs * policy_.num_gpu_batches;
  at::Tensor feedback = at::empty({2, rows}, at::kLong);
  {
    ScopedTimer timer(stats_, Task::StageWait, run.pending.pass_prefill);
    stage_.link->recv(feedback, stage_.link->world_size() - 1,
                      MessageLabel{MessageLabel::Feedback, run.feed.group, run.pass - 1, 0});
  }
  const int64_t* ids = feedback.data_ptr<int64_t>();
  const int64_t* done = ids + rows;
  for (size_t k = 0; k < run.batches.size(); ++k) {
    BatchState& b = run.batches[k];
    if (!b.holds()) continue;
    int64_t* next = b.next_ids.data_ptr<int64_t>();
    for (size_t r = 0; r < b.slots.size(); ++r) {
      const size_t row = k * static_cast<size_t>(gbs) + r;
      next[r] = ids[row];
      if (b.slots[r] >= 0) run.finished[static_cast<size_t>(b.slots[r])] = done[row] != 0;
    }
  }
}

}  // namespace tiergen::runtime
