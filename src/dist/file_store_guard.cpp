#include "src/dist/file_store_guard.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tiergen/common/error.h"

namespace tiergen::dist {

namespace {

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// flock, retried when a signal interrupts it.
int flock_retrying(int fd, int operation) {
  int rc = 0;
  do {
    rc = ::flock(fd, operation);
  } while (rc != 0 && errno == EINTR);
  return rc;
}

}  // namespace

bool is_file_store_content(const std::string& bytes) {
  size_t at = 0;
  int parts = 0;
  while (at < bytes.size()) {
    uint32_t length = 0;
    if (bytes.size() - at < sizeof length) return false;
    std::memcpy(&length, bytes.data() + at, sizeof length);
    at += sizeof length;
    if (length > bytes.size() - at) return false;
    at += static_cast<size_t>(length);
    ++parts;
  }
  return parts % 2 == 0;  // every key has its value
}

FileStoreGuard::FileStoreGuard(const std::string& store_path) : store_path_(store_path) {
  const std::string lock_path = store_path + ".lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  TG_CHECK(lock_fd_ >= 0, "--dist-init file:{}: cannot open its lock file {}: {}", store_path, lock_path,
           std::strerror(errno));
  // Exclusive: no live rank (of this job or another) holds the store.
  if (flock_retrying(lock_fd_, LOCK_EX | LOCK_NB) == 0) {
    std::error_code ec;
    if (std::filesystem::exists(store_path, ec)) {
      const std::string bytes = read_whole(store_path);
      if (!std::filesystem::is_regular_file(store_path, ec) || !is_file_store_content(bytes)) {
        ::close(lock_fd_);
        lock_fd_ = -1;
        TG_THROW("--dist-init file:{}: the file exists and is not a rendezvous store ({} bytes); the store's file "
                 "must not exist before the job: remove it, or choose another path", store_path, bytes.size());
      }
      TG_CHECK(::unlink(store_path.c_str()) == 0 || errno == ENOENT, "--dist-init file:{}: cannot remove the store "
               "left by an earlier job: {}", store_path, std::strerror(errno));
      spdlog::warn("--dist-init file:{}: removed the rendezvous store of an earlier job whose ranks all ended "
                   "without removing it (killed?)", store_path);
    }
  }
  // Shared for the rest of this rank's life (from exclusive, or waiting for a rank
  // that holds it exclusively while it checks).
  TG_CHECK(flock_retrying(lock_fd_, LOCK_SH) == 0, "--dist-init file:{}: cannot lock {}: {}", store_path, lock_path,
           std::strerror(errno));
}

// The last rank out removes the store. c10d's FileStore does so too, when its count
// of exits reaches the world size, but that count is not sure to: a rank's store can
// be released after the rank's guard (by a thread the process group keeps), and a
// store removed while one rank still writes is created again. A rank that gets the
// lock exclusively here has no live rank beside it, the lock released first so that
// whichever rank lets go last finds the others gone.
FileStoreGuard::~FileStoreGuard() {
  if (lock_fd_ < 0) return;
  if (flock_retrying(lock_fd_, LOCK_UN) == 0 && flock_retrying(lock_fd_, LOCK_EX | LOCK_NB) == 0) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(store_path_, ec) && is_file_store_content(read_whole(store_path_))) {
      ::unlink(store_path_.c_str());
    }
  }
  ::close(lock_fd_);
}

}  // namespace tiergen::dist
