#pragma once
// The disk tier: one offload file per run under --offload-dir, carved into extents.
// Reads and writes are positional (pread/pwrite), split into large requests served by
// an I/O thread pool, and drop the page cache behind them so disk-homed data does not
// quietly live in host memory. The file is unlinked as soon as it is created and
// opened, so it never outlives the process, however that ends. Directories the run
// created for it are removed when the run ends (or is interrupted), if still empty.
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tiergen/runtime/tier_account.h"

namespace tiergen::runtime {

struct DiskExtent {
  int fd = -1;              // offload file or a checkpoint file
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

class DiskTier {
 public:
  DiskTier(const std::string& offload_dir, uint64_t budget, int io_threads);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Carves a new extent out of the offload file (charged to the disk budget).
  DiskExtent allocate(uint64_t bytes, const std::string& what);
  // Releases every extent (between blocks, the KV cache and activations are remade).
  void reset_to(uint64_t mark);
  uint64_t mark() const { return end_; }

  void read(const DiskExtent& extent, uint64_t offset_in_extent, void* dst, uint64_t bytes) const;
  void write(const DiskExtent& extent, uint64_t offset_in_extent, const void* src, uint64_t bytes) const;

  // Opens a checkpoint file for direct reads of disk-homed weights (kept open).
  int open_checkpoint_file(const std::string& path);

  TierAccount& account() { return account_; }
  const std::string& path() const { return path_; }

 private:
  void open_offload_file(const std::string& offload_dir);
  void remove_created_dirs();
  void io(bool is_write, int fd, uint64_t offset, void* buffer, uint64_t bytes) const;
  // The file behind `fd`, for messages: the offload file or a checkpoint's path.
  std::string file_name(int fd) const;

  TierAccount account_;
  std::string path_;
  int fd_ = -1;
  int io_threads_;
  uint64_t end_ = 0;
  std::vector<Reservation> reservations_;
  std::vector<std::pair<std::string, int>> checkpoint_fds_;
  std::vector<std::string> created_dirs_;  // made for the offload file, deepest first: removed after
  mutable std::mutex mutex_;  // file_name() reads checkpoint_fds_ from const readers
};

// Installs SIGINT/SIGTERM handlers that print `message` (e.g. how to resume) and exit
// with 128 + signal (offload files are already nameless). Results already written stay intact
// because every result line is written and synced as soon as it is final.
void install_interrupt_handlers(const std::string& message);

}  // namespace tiergen::runtime
