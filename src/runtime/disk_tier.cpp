#include "tiergen/runtime/disk_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <future>
#include <vector>

#include "tiergen/common/error.h"

namespace tiergen::runtime {

namespace {

char g_interrupt_message[1024];

// The offload directories this process created, deepest first, for the signal
// handler to remove (rmdir is async-signal-safe and removes only an empty directory).
constexpr int kMaxCreatedDirs = 16;
char g_created_dirs[kMaxCreatedDirs][1024];
std::atomic<int> g_created_dir_count{0};

void remember_for_signals(const std::vector<std::string>& dirs) {
  for (const auto& dir : dirs) {
    const int slot = g_created_dir_count.load();
    if (slot >= kMaxCreatedDirs || dir.size() >= sizeof(g_created_dirs[0])) return;
    std::strncpy(g_created_dirs[slot], dir.c_str(), sizeof(g_created_dirs[0]) - 1);
    g_created_dir_count.store(slot + 1);
  }
}

void on_signal(int signal) {
  const size_t n = std::strlen(g_interrupt_message);
  if (n > 0) {
    [[maybe_unused]] ssize_t written = ::write(STDERR_FILENO, g_interrupt_message, n);
  }
  for (int i = 0; i < g_created_dir_count.load(); ++i) ::rmdir(g_created_dirs[i]);
  _exit(128 + signal);
}

// The directories that creating `dir` makes, deepest first (none when it exists).
std::vector<std::string> missing_directories(const std::filesystem::path& dir) {
  std::vector<std::string> missing;
  std::error_code ec;
  for (auto p = std::filesystem::absolute(dir, ec); !ec && !p.empty() && !std::filesystem::exists(p, ec);
       p = p.parent_path()) {
    missing.push_back(p.string());
    if (p == p.parent_path()) break;
  }
  return missing;
}

constexpr uint64_t kRequestBytes = 8ull << 20;  // one I/O request of the pool

// A write past RLIMIT_FSIZE raises SIGXFSZ, whose default action kills the process
// without a message and without removing the offload file. Ignored, the write fails
// with EFBIG instead and becomes an error naming the file.
void ignore_file_size_signal() { std::signal(SIGXFSZ, SIG_IGN); }

}  // namespace

void install_interrupt_handlers(const std::string& message) {
  std::strncpy(g_interrupt_message, message.c_str(), sizeof(g_interrupt_message) - 1);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  ignore_file_size_signal();  // results and offload writes past a file size limit fail, not kill
}

DiskTier::DiskTier(const std::string& offload_dir, uint64_t budget, int io_threads)
    : account_(Tier::Disk, budget), io_threads_(std::max(1, io_threads)) {
  ignore_file_size_signal();
  try {
    open_offload_file(offload_dir);
  } catch (...) {
    remove_created_dirs();  // the destructor of a half-made tier does not run
    throw;
  }
}

void DiskTier::open_offload_file(const std::string& offload_dir) {
  namespace fs = std::filesystem;
  // A directory the run created is removed after it, when empty (another run that put
  // its offload file there meanwhile keeps working: that file has no name). Another
  // run may remove one this run found between its creation and the file's: then it
  // is made again.
  std::string pattern;
  for (int attempt = 0; attempt < 3 && fd_ < 0; ++attempt) {
    const auto missing = missing_directories(offload_dir);
    std::error_code ec;
    fs::create_directories(offload_dir, ec);
    created_dirs_.insert(created_dirs_.end(), missing.begin(), missing.end());
    remember_for_signals(missing);
    TG_CHECK(!ec && fs::is_directory(offload_dir), "offload directory '{}' cannot be created: {}", offload_dir,
             ec.message());
    pattern = (fs::path(offload_dir) / "tiergen-offload-XXXXXX").string();
    fd_ = ::mkstemp(pattern.data());
    if (fd_ < 0 && errno != ENOENT) break;
  }
  TG_CHECK(fd_ >= 0, "offload directory '{}' is not writable: {}", offload_dir, std::strerror(errno));
  path_ = pattern;
  // The file has no name from here on: the kernel frees its blocks when the last
  // descriptor closes, however the process ends (SIGKILL and the OOM killer included),
  // so no run leaves an offload file behind.
  if (::unlink(path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd_);
    fd_ = -1;
    TG_THROW("offload file '{}' cannot be unlinked after creation: {}", path_, why);
  }
  path_ += " (unlinked)";
}

void DiskTier::remove_created_dirs() {
  for (const auto& dir : created_dirs_) ::rmdir(dir.c_str());  // only if empty; deepest first
}

DiskTier::~DiskTier() {
  for (auto& [path, fd] : checkpoint_fds_) ::close(fd);
  if (fd_ >= 0) ::close(fd_);
  remove_created_dirs();
}

DiskExtent DiskTier::allocate(uint64_t bytes, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  reservations_.push_back(account_.reserve(bytes, what));
  DiskExtent extent{fd_, end_, bytes};
  end_ += (bytes + 4095) / 4096 * 4096;  // page-aligned extents
  return extent;
}

void DiskTier::reset_to(uint64_t mark) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Extents are released in reverse allocation order (a stack), as blocks do.
  while (!reservations_.empty() && end_ > mark) {
    const uint64_t bytes = reservations_.back().bytes();
    end_ -= std::min(end_, (bytes + 4095) / 4096 * 4096);
    reservations_.pop_back();
  }
  end_ = std::min(end_, mark);
  if (::ftruncate(fd_, static_cast<off_t>(end_)) != 0) {
    TG_THROW("offload file '{}': cannot truncate: {}", path_, std::strerror(errno));
  }
}

void DiskTier::io(bool is_write, int fd, uint64_t offset, void* buffer, uint64_t bytes) const {
  auto* bytes_ptr = static_cast<uint8_t*>(buffer);
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t n = is_write ? ::pwrite(fd, bytes_ptr + done, bytes - done, static_cast<off_t>(offset + done))
                               : ::pread(fd, bytes_ptr + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    TG_CHECK(n > 0, "{} {} bytes at offset {} of {}: {}", is_write ? "writing" : "reading", bytes - done,
             offset + done, file_name(fd), n == 0 ? "unexpected end of file" : std::strerror(errno));
    done += static_cast<uint64_t>(n);
  }
  // Drop what we just moved from the page cache: disk-homed data must not occupy
  // host memory behind the budget's back.
  ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(bytes), POSIX_FADV_DONTNEED);
}

void DiskTier::read(const DiskExtent& extent, uint64_t offset_in_extent, void* dst, uint64_t bytes) const {
  TG_CHECK(offset_in_extent + bytes <= extent.bytes, "disk read outside its extent");
  const uint64_t base = extent.offset + offset_in_extent;
  if (bytes <= kRequestBytes || io_threads_ == 1) {
    io(false, extent.fd, base, dst, bytes);
    return;
  }
  // Large reads are split into requests served in parallel.
  std::vector<std::future<void>> parts;
  const uint64_t chunk = std::max(kRequestBytes, (bytes / io_threads_ + 4095) / 4096 * 4096);
  for (uint64_t off = 0; off < bytes; off += chunk) {
    const uint64_t n = std::min(chunk, bytes - off);
    parts.push_back(std::async(std::launch::async, [=] { io(false, extent.fd, base + off, static_cast<uint8_t*>(dst) + off, n); }));
  }
  for (auto& p : parts) p.get();
}

void DiskTier::write(const DiskExtent& extent, uint64_t offset_in_extent, const void* src, uint64_t bytes) const {
  TG_CHECK(offset_in_extent + bytes <= extent.bytes, "disk write outside its extent");
  io(true, extent.fd, extent.offset + offset_in_extent, const_cast<void*>(src), bytes);
}

std::string DiskTier::file_name(int fd) const {
  if (fd == fd_) return path_;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [p, checkpoint_fd] : checkpoint_fds_) {
    if (checkpoint_fd == fd) return "the checkpoint file " + p;
  }
  return "a checkpoint file";
}

int DiskTier::open_checkpoint_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [p, fd] : checkpoint_fds_) {
    if (p == path) return fd;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TG_CHECK(fd >= 0, "{}: cannot open for reading: {}", path, std::strerror(errno));
  checkpoint_fds_.emplace_back(path, fd);
  return fd;
}

}  // namespace tiergen::runtime
