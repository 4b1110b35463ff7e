#include "policy/disk_read_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "tiergen/common/error.h"
#include "tiergen/runtime/disk_tier.h"

namespace tiergen::policy {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_of(const std::function<void()>& fn) {
  const auto start = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Compute of at least this long per timed sample: the reads beside it are counted in
// whole reads (12 ms each at 1.3 GB/s: about 3% of a sample).
constexpr double kComputeSecondsPerSample = 0.4;

// A buffer of one read (its bytes set: the probe writes the file from it). Buffered
// reads need no alignment.
std::vector<char> read_buffer(uint64_t bytes) { return std::vector<char>(bytes, 1); }

// Reads the file round and round while reading is on, counting the bytes of every read
// that completed. Turning it off waits for the read in flight, so that compute timed
// alone has no read beside it; an idle reader sleeps on a condition variable, taking
// no core from that compute.
class BackgroundReader {
 public:
  BackgroundReader(const runtime::DiskTier& tier, const runtime::DiskExtent& extent, uint64_t read_bytes)
      : tier_(tier), extent_(extent), read_bytes_(read_bytes), buffer_(read_buffer(read_bytes)) {
    thread_ = std::thread([this] { run(); });
  }
  ~BackgroundReader() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      quit_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  BackgroundReader(const BackgroundReader&) = delete;
  BackgroundReader& operator=(const BackgroundReader&) = delete;

  void start() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      reading_ = true;
    }
    wake_.notify_all();
  }
  // Stops after the read in flight and rethrows the first read error here.
  void stop() {
    std::unique_lock<std::mutex> lock(mutex_);
    reading_ = false;
    idle_.wait(lock, [&] { return !busy_; });
    if (error_) std::rethrow_exception(error_);
  }
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  void run() {
    uint64_t offset = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        busy_ = false;
        idle_.notify_all();
        wake_.wait(lock, [&] { return quit_ || (reading_ && !error_); });
        if (quit_) return;
        busy_ = true;
      }
      const uint64_t n = std::min(read_bytes_, extent_.bytes - offset);
      try {
        tier_.read(extent_, offset, buffer_.data(), n);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
        continue;
      }
      bytes_read_ += n;
      offset = offset + n >= extent_.bytes ? 0 : offset + n;
    }
  }
  const runtime::DiskTier& tier_;
  runtime::DiskExtent extent_;
  uint64_t read_bytes_;
  std::vector<char> buffer_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  bool reading_ = false, busy_ = true, quit_ = false;  // under mutex_
  std::exception_ptr error_;                          // under mutex_
  std::atomic<uint64_t> bytes_read_{0};
  std::thread thread_;
};

}  // namespace

DiskReadTimes time_disk_reads(const std::string& dir, uint64_t file_bytes, uint64_t read_bytes, int io_threads,
                              int reps, const std::function<void()>& compute) {
  TG_CHECK(file_bytes >= read_bytes && read_bytes > 0 && reps > 0,
           "internal: disk read probe of {} bytes in reads of {}", file_bytes, read_bytes);
  runtime::DiskTier tier(dir, file_bytes, io_threads);  // its file is unlinked already
  const runtime::DiskExtent extent = tier.allocate(file_bytes, "the profile's disk read probe");
  {
    const std::vector<char> source = read_buffer(read_bytes);
    for (uint64_t off = 0; off < file_bytes; off += read_bytes) {
      tier.write(extent, off, source.data(), std::min(read_bytes, file_bytes - off));
    }
    // Written back and out of the page cache, so that the reads below come from the disk
    // (the tier drops only clean pages behind a write). On tmpfs nothing leaves memory:
    // the reads are memory's speed there, as a run's would be.
    TG_CHECK(::fdatasync(extent.fd) == 0, "profiler: cannot sync the disk probe's file in {}: {}", dir,
             std::strerror(errno));
    (void)::posix_fadvise(extent.fd, off_t(extent.offset), off_t(file_bytes), POSIX_FADV_DONTNEED);
  }
  DiskReadTimes times;
  {
    // Whole passes over the file: three are enough for a rate (a full profile's file is
    // 1 GiB).
    const int read_passes = std::min(reps, 3);
    std::vector<char> destination = read_buffer(read_bytes);
    std::vector<double>& passes = times.read_passes;
    for (int r = 0; r < read_passes; ++r) {
      passes.push_back(seconds_of([&] {
        for (uint64_t off = 0; off < file_bytes; off += read_bytes) {
          tier.read(extent, off, destination.data(), std::min(read_bytes, file_bytes - off));
        }
      }));
    }
    times.read_bandwidth = double(file_bytes) / median_of(passes);
  }

  // Enough repetitions of `compute` for a sample of kComputeSecondsPerSample.
  const double once = seconds_of(compute);
  const int repeats = std::max(1, int(std::ceil(kComputeSecondsPerSample / std::max(once, 1e-6))));
  const auto sample = [&] {
    return seconds_of([&] {
      for (int i = 0; i < repeats; ++i) compute();
    });
  };
  BackgroundReader reader(tier, extent, read_bytes);
  std::vector<double>&alone = times.alone, &beside = times.beside, &bytes = times.bytes_beside;
  for (int r = 0; r < reps; ++r) {
    alone.push_back(sample());
    const uint64_t before = reader.bytes_read();
    reader.start();
    beside.push_back(sample());
    bytes.push_back(double(reader.bytes_read() - before));
    reader.stop();
  }
  times.compute_seconds_alone = median_of(alone) / repeats;
  times.compute_seconds_beside = median_of(beside) / repeats;
  // Less than 2% slower: within the noise of a quiet host, and priced as free.
  const double lost = median_of(beside) - median_of(alone);
  if (lost > 0.02 * median_of(alone)) times.core_bandwidth = median_of(bytes) / lost;
  return times;
}

}  // namespace tiergen::policy
