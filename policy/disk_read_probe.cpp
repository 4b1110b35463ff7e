#include "policy/disk_read_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
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
// whole requests, a few milliseconds each.
constexpr double kComputeSecondsPerSample = 0.2;

// A page-aligned buffer of one request, as the runtime's staging buffers are aligned.
struct RequestBuffer {
  explicit RequestBuffer(uint64_t bytes) {
    void* p = nullptr;
    TG_CHECK(posix_memalign(&p, 4096, bytes) == 0, "profiler: cannot allocate {} bytes", bytes);
    data.reset(static_cast<char*>(p));
    std::memset(p, 1, bytes);
  }
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data;
};

// Reads the file round and round while `reading` is set, counting the bytes of every
// request that completed; stops for good when the object goes.
class BackgroundReader {
 public:
  BackgroundReader(const runtime::DiskTier& tier, const runtime::DiskExtent& extent, uint64_t request_bytes)
      : tier_(tier), extent_(extent), request_(request_bytes), buffer_(request_bytes) {
    thread_ = std::thread([this] { run(); });
  }
  ~BackgroundReader() {
    quit_ = true;
    thread_.join();
  }
  void set_reading(bool on) { reading_ = on; }
  uint64_t bytes_read() const { return bytes_read_; }
  // The first read error, rethrown on the caller's thread.
  void rethrow_error() const {
    if (failed_) std::rethrow_exception(error_);
  }

 private:
  void run() {
    uint64_t offset = 0;
    while (!quit_) {
      if (!reading_ || failed_) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      const uint64_t n = std::min(request_, extent_.bytes - offset);
      try {
        tier_.read(extent_, offset, buffer_.data.get(), n);
      } catch (...) {
        error_ = std::current_exception();
        failed_ = true;  // after error_: the caller reads it once it sees this
        continue;
      }
      bytes_read_ += n;
      offset = offset + n >= extent_.bytes ? 0 : offset + n;
    }
  }
  const runtime::DiskTier& tier_;
  runtime::DiskExtent extent_;
  uint64_t request_;
  RequestBuffer buffer_;
  std::atomic<bool> reading_{false}, quit_{false};
  std::atomic<uint64_t> bytes_read_{0};
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
  std::thread thread_;
};

}  // namespace

DiskReadTimes time_disk_reads(const std::string& dir, uint64_t file_bytes, uint64_t request_bytes, int io_threads,
                              int reps, const std::function<void()>& compute) {
  TG_CHECK(file_bytes >= request_bytes && request_bytes > 0 && reps > 0,
           "internal: disk read probe of {} bytes in requests of {}", file_bytes, request_bytes);
  runtime::DiskTier tier(dir, file_bytes, io_threads);  // its file is unlinked already
  const runtime::DiskExtent extent = tier.allocate(file_bytes, "the profile's disk read probe");
  {
    const RequestBuffer source(request_bytes);
    for (uint64_t off = 0; off < file_bytes; off += request_bytes) {
      tier.write(extent, off, source.data.get(), std::min(request_bytes, file_bytes - off));
    }
    // Written back and out of the page cache, so that the reads below come from the disk
    // (the tier drops only clean pages behind a write).
    ::fdatasync(extent.fd);
    ::posix_fadvise(extent.fd, off_t(extent.offset), off_t(file_bytes), POSIX_FADV_DONTNEED);
  }
  DiskReadTimes times;
  {
    const RequestBuffer destination(request_bytes);
    std::vector<double>& passes = times.read_passes;
    for (int r = 0; r < reps; ++r) {
      passes.push_back(seconds_of([&] {
        for (uint64_t off = 0; off < file_bytes; off += request_bytes) {
          tier.read(extent, off, destination.data.get(), std::min(request_bytes, file_bytes - off));
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
  BackgroundReader reader(tier, extent, request_bytes);
  std::vector<double>&alone = times.alone, &beside = times.beside, &bytes = times.bytes_beside;
  for (int r = 0; r < reps; ++r) {
    alone.push_back(sample());
    reader.set_reading(true);
    const uint64_t before = reader.bytes_read();
    beside.push_back(sample());
    bytes.push_back(double(reader.bytes_read() - before));
    reader.set_reading(false);
    reader.rethrow_error();
  }
  times.compute_seconds_alone = median_of(alone) / repeats;
  times.compute_seconds_beside = median_of(beside) / repeats;
  // Less than 2% slower: within the noise of a quiet host, and priced as free.
  const double lost = median_of(beside) - median_of(alone);
  if (lost > 0.02 * median_of(alone)) times.core_bandwidth = median_of(bytes) / lost;
  return times;
}

}  // namespace tiergen::policy
