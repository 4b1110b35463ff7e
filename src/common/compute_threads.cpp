#include "tiergen/common/compute_threads.h"

#include <ATen/Parallel.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace tiergen {

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void set_compute_threads(int requested) {
  const int cores = usable_cores();
  if (requested > 0) {
    at::set_num_threads(std::min(requested, cores));
  } else if (const char* env = std::getenv("OMP_NUM_THREADS"); env == nullptr || *env == '\0') {
    at::set_num_threads(cores);
  }
}

void compute_serially_on_this_thread() {
  // LibTorch gives a thread, on its first use of the count, the count last passed to
  // at::set_num_threads (else its default). What marks that first use is an inline
  // function's thread_local: LibTorch's own copy (behind at::get_num_threads) and, where
  // LibTorch 2.x does not export it, this program's copy (behind the at::parallel_for
  // instantiated here) are two flags. Both first, then this thread's own count.
  (void)at::get_num_threads();
  at::internal::lazy_init_num_threads();
  omp_set_num_threads(1);
}

ComputeThreadsScope::ComputeThreadsScope() : saved_(at::get_num_threads()) {}

ComputeThreadsScope::~ComputeThreadsScope() { at::set_num_threads(saved_); }

}  // namespace tiergen
