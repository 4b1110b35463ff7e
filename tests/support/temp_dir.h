#pragma once
// Test support: fresh temporary directories, removed when the test is done. Light
// (no LibTorch) so that parser and I/O tests can include it.
#include <ftw.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace tiergen::test {

// A fresh, empty directory under the test temp dir, unique per call and process.
inline std::string unique_temp_dir(const std::string& stem) {
  static std::atomic<int> counter{0};
  const std::filesystem::path root = std::filesystem::path(::testing::TempDir());
  for (;;) {
    const std::filesystem::path dir =
        root / (stem + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::error_code ec;
    if (std::filesystem::create_directories(dir, ec)) return dir.string();
    if (ec) throw std::runtime_error("cannot create " + dir.string() + ": " + ec.message());
  }
}

// Removes `path` and everything under it; a missing path is not an error. Used instead
// of std::filesystem::remove_all: a pip wheel's libtorch.so exports its own copy of
// remove_all (from the devtoolset libstdc++ it was built with), the dynamic linker can
// bind our calls to it, and it crashed through a null pointer with torch 2.11+cu130.
inline void remove_tree(const std::string& path) {
  const auto remove_entry = [](const char* p, const struct stat*, int, struct FTW*) {
    std::remove(p);  // best effort, as remove_all with an error_code: go on with the rest
    return 0;
  };
  ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

// Removes the directory when it goes out of scope.
struct TempDir {
  explicit TempDir(const std::string& stem) : path(unique_temp_dir(stem)) {}
  ~TempDir() { remove_tree(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The path of `name` inside the directory.
  std::string file(const std::string& name) const { return (std::filesystem::path(path) / name).string(); }
  // Writes `content` to `name` inside the directory and returns its path.
  std::string write(const std::string& name, const std::string& content) const {
    const std::string p = file(name);
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

  std::string path;
};

// Names of the regular files in `dir` (empty when it does not exist).
inline std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return names;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) names.push_back(entry.path().filename().string());
  return names;
}

}  // namespace tiergen::test
