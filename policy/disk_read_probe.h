#pragma once
// Disk-tier reads timed as a run makes them (runtime::DiskTier: buffered pread, a read
// above 8 MiB split into requests of at least 8 MiB on threads of its own, up to its I/O
// thread count; the page cache dropped behind each), alone and beside compute.
//
// Alone they give the disk's read rate as runs get it, not one O_DIRECT read's (the
// probe before this one), whose pages a run never sees.
//
// Beside compute they give what the reads cost the cores that compute: a buffered read
// copies every byte from the page cache on a core, and a team of compute threads that
// loses one core waits for it at every barrier. On a 2-core Emerald Rapids guest
// standing in for the GPU, with 30% of OPT-125m's weights on disk, decode's products
// took 5.9-6.6 s over two runs with the reads beside them against 4.7-4.9 s with none on
// disk or with the reads not overlapped, and overlapping the reads gained 10% of the
// time they took alone; the cost model, which let them run free beside compute,
// predicted those plans 1.35-1.66x faster than they ran.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tiergen::policy {

struct DiskReadTimes {
  double read_bandwidth = 0;  // bytes/s of reads alone
  // Bytes read per second of compute time the reads took from `compute` running beside
  // them (the compute's own slowdown, however it arises); 0 when it did not slow down.
  double core_bandwidth = 0;
  double compute_seconds_alone = 0;   // medians of one compute, for the record
  double compute_seconds_beside = 0;
  // The samples: seconds of each read pass alone; of each compute sample alone and
  // beside the reads; the bytes read during each of the latter.
  std::vector<double> read_passes, alone, beside, bytes_beside;
};

// Times passes of reads of `read_bytes` over a file of `file_bytes` (under `dir`, gone
// after) by a DiskTier of `io_threads` threads, alone (at most 3 passes), then `compute`
// (a fixed amount of work) alone and with those reads running beside it, in `reps`
// interleaved rounds.
DiskReadTimes time_disk_reads(const std::string& dir, uint64_t file_bytes, uint64_t read_bytes, int io_threads,
                              int reps, const std::function<void()>& compute);

}  // namespace tiergen::policy
