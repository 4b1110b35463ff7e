#include "tiergen/runtime/block_schedule.h"

namespace tiergen::runtime::schedule {

const char* queue_name(Queue queue) {
  static const char* names[] = {"weight_loader", "cache_loader", "storer", "compute"};
  return names[static_cast<int>(queue)];
}

Await await_of(Queue queue) { return queue == Queue::WeightLoader ? Await::NextLayer : Await::StepEnd; }

bool hidden_prefetched(int64_t batches_in_pass) { return batches_in_pass > 1; }

Queue queue_of(Task task, int64_t batches_in_pass) {
  switch (task) {
    case Task::LoadWeight: return Queue::WeightLoader;
    case Task::LoadCache: return Queue::CacheLoader;
    case Task::LoadHidden: return hidden_prefetched(batches_in_pass) ? Queue::CacheLoader : Queue::Compute;
    case Task::StoreCache:
    case Task::StoreHidden: return Queue::Storer;
    case Task::Compute:
    case Task::CpuAttention:
    case Task::Sample:
    case Task::StageWait: return Queue::Compute;
  }
  return Queue::Compute;
}

bool on_compute_path(Task task, int64_t batches_in_pass) {
  if (queue_of(task, batches_in_pass) == Queue::Compute) return true;
  return task == Task::StoreHidden && !hidden_prefetched(batches_in_pass);
}

}  // namespace tiergen::runtime::schedule
