#pragma once
// A file rendezvous store (--dist-init file:PATH) outlives a job whose ranks were all
// killed: c10d removes it only when every rank signs off. The next job at that path
// would then read the dead job's rank addresses (and fail, or wait out several
// timeouts), and a file that is not a store at all makes c10d spin on a garbage
// length. So every rank, before opening the store, holds a shared lock on PATH.lock
// for as long as it lives; the first rank to find no lock held by any live rank
// removes a store file left at PATH, or refuses a file that is not a store, naming it;
// the last rank to let go of the lock removes the store of its own job.
#include <string>

namespace tiergen::dist {

class FileStoreGuard {
 public:
  explicit FileStoreGuard(const std::string& store_path);
  ~FileStoreGuard();
  FileStoreGuard(const FileStoreGuard&) = delete;
  FileStoreGuard& operator=(const FileStoreGuard&) = delete;

 private:
  std::string store_path_;
  int lock_fd_ = -1;
};

// Whether `bytes` is a c10d file store: (key, value) records, each part an unsigned
// 32-bit length (host order) and that many bytes, ending at a record's end.
bool is_file_store_content(const std::string& bytes);

}  // namespace tiergen::dist
