// The file rendezvous store's guard: a store left by a job whose ranks all died is
// removed by the next job's first rank, a store a live rank holds is left alone, the
// last rank out removes its own job's store, and a file that is no store is refused
// naming it (c10d would spin on its garbage).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "src/dist/file_store_guard.h"
#include "tests/support/error_of.h"
#include "tests/support/temp_dir.h"

namespace tiergen::dist {
namespace {

namespace fs = std::filesystem;

// c10d's record: a 32-bit length, then the bytes.
std::string part(const std::string& bytes) {
  const auto n = static_cast<uint32_t>(bytes.size());
  return std::string(reinterpret_cast<const char*>(&n), sizeof n) + bytes;
}

std::string a_store() { return part("refcount/") + part("2") + part("/tiergen/attempt_0/rank_0") + part("addr"); }

void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(FileStoreGuard, TellsAStoreFromGarbage) {
  EXPECT_TRUE(is_file_store_content(""));
  EXPECT_TRUE(is_file_store_content(a_store()));
  EXPECT_FALSE(is_file_store_content("stale\n"));
  EXPECT_FALSE(is_file_store_content(a_store() + part("key-without-value")));
  EXPECT_FALSE(is_file_store_content(a_store().substr(0, a_store().size() - 1)));
  EXPECT_FALSE(is_file_store_content(std::string(4, '\xff') + "x"));
}

TEST(FileStoreGuard, RemovesAStoreNoLiveRankHoldsAndRefusesGarbage) {
  test::TempDir dir("tiergen-store-guard");
  const std::string store = dir.file("job.store");
  write(store, a_store());
  { FileStoreGuard guard(store); }
  EXPECT_FALSE(fs::exists(store)) << "a dead job's store was left for the next job to trip on";

  write(store, "stale\n");
  const std::string message = test::error_of([&] { FileStoreGuard guard(store); });
  EXPECT_NE(message.find(store), std::string::npos) << message;
  EXPECT_NE(message.find("is not a rendezvous store"), std::string::npos) << message;
  EXPECT_EQ(read(store), "stale\n") << "someone's file was removed";
}

// The job's own store goes with its last rank's guard, whatever c10d's count of exits
// did; while another rank holds the lock it stays, and a file that is no store stays.
TEST(FileStoreGuard, TheLastRankOutRemovesItsJobsStore) {
  test::TempDir dir("tiergen-store-guard");
  const std::string store = dir.file("job.store");
  {
    FileStoreGuard last(store);
    {
      FileStoreGuard first(store);
      write(store, a_store());  // the ranks' store, written once both are in
    }
    EXPECT_EQ(read(store), a_store()) << "removed while a rank still held it";
  }
  EXPECT_FALSE(fs::exists(store)) << "the job's store outlived its last rank";

  { FileStoreGuard guard(store); write(store, "someone's file\n"); }
  EXPECT_EQ(read(store), "someone's file\n") << "a file that is no store was removed";
}

TEST(FileStoreGuard, LeavesAStoreThatALiveRankHolds) {
  test::TempDir dir("tiergen-store-guard");
  const std::string store = dir.file("job.store");
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  write(store, a_store());
  const std::string lock = store + ".lock";
  // The job's first rank, alive: a shared lock on the store's lock file, as a guard
  // holds it (only async-signal-safe calls between fork and _exit: this process has
  // threads).
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    char byte = 1;
    const bool ok = fd >= 0 && ::flock(fd, LOCK_SH) == 0 && ::write(ready[1], &byte, 1) == 1 &&
                    ::read(release[0], &byte, 1) == 1;
    ::_exit(ok ? 0 : 2);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  { FileStoreGuard second_rank(store); }
  EXPECT_EQ(read(store), a_store()) << "a live job's store was removed";
  ASSERT_EQ(::write(release[1], &byte, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  for (int fd : {ready[0], ready[1], release[0], release[1]}) ::close(fd);
}

}  // namespace
}  // namespace tiergen::dist
