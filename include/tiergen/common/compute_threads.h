#pragma once
// How many threads LibTorch and the CPU kernels compute with. LibTorch's own default is
// its count of physical cores, which on some virtual machines is 1 (Debian's LibTorch
// 1.13 on a 2-core KVM guest), leaving decode matmuls and CPU attention on one core
// while a BLAS with its own pool uses them all. The engine's runs and `tiergen
// profile`'s measurements apply the same rule here, so a profile times what runs use.

namespace tiergen {

// Cores this process may run on (its CPU affinity), at least 1.
int usable_cores();

// Sets LibTorch's intra-op threads: `requested` (capped at the usable cores) when
// positive, else every usable core unless OMP_NUM_THREADS says otherwise (then
// LibTorch keeps what it read from it).
void set_compute_threads(int requested = 0);

// Runs the parallel regions of LibTorch and of the CPU kernels that the calling thread
// opens on that thread alone (OpenMP's thread count of this thread; other threads keep
// theirs). For the threads that copy beside the compute (runtime/worker.h): a thread
// that opens OpenMP teams of its own adds threads to libgomp's count, and once that count
// exceeds the cores libgomp cuts every thread's spin before it sleeps to 100 pauses, so
// the compute team's threads sleep and are woken between consecutive products (decode
// 1.04-1.34x faster without, on a 2-core KVM guest).
void compute_serially_on_this_thread();

// Restores LibTorch's intra-op thread count of its construction when it goes.
class ComputeThreadsScope {
 public:
  ComputeThreadsScope();
  ~ComputeThreadsScope();
  ComputeThreadsScope(const ComputeThreadsScope&) = delete;
  ComputeThreadsScope& operator=(const ComputeThreadsScope&) = delete;

 private:
  int saved_;
};

}  // namespace tiergen
