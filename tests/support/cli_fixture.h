#pragma once
// Running the built `tiergen` and `make-tiny-model` as child processes for CLI tests:
// Child (fork/execv with output to files, rusage, a time limit), shared tiny models
// built once per suite, and the CliReliability fixture with its helpers.
#include <fcntl.h>
#include <algorithm>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;

// The engine runs of the tests plan with one fixed hardware profile, a file (so never
// measured): the placements `generate` searches by default then depend neither on this
// machine's cached profile nor on two test processes measuring it at once. A test of
// the profile cache sets its children's environment itself; a profile already named in
// the environment is kept.
inline const bool kFixedHardwareProfile =
    (::setenv("TIERGEN_HW_PROFILE", TIERGEN_SOURCE_DIR "/configs/hw/t4-flexgen.json", /*overwrite=*/0), true);

// Under ASan/TSan the binaries' RSS is mostly the sanitizer's (shadow, quarantine).
// CMake defines TIERGEN_TEST_SANITIZED for a sanitized build, also where the test
// sources themselves are left uninstrumented (TIERGEN_SANITIZE_TESTS=OFF).
#if defined(TIERGEN_TEST_SANITIZED)
#elif defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TIERGEN_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TIERGEN_TEST_SANITIZED 1
#endif
#endif

namespace {

const std::string kTiergen = TIERGEN_BINARY_DIR "/tiergen";
const std::string kMakeTinyModel = TIERGEN_BINARY_DIR "/make-tiny-model";
const std::string kTokenizer = TIERGEN_TEST_FIXTURES "/tokenizers/byte_level";

// How a child ended.
struct Exit {
  bool exited = false;  // normal exit (else killed by `signal`)
  int code = -1;
  int signal = 0;
  long maxrss_kib = 0;  // ru_maxrss: the child's peak resident set (VmHWM), KiB
  std::string out, err;
  bool timed_out = false;

  bool clean_failure() const { return exited && code != 0; }
  std::string describe() const {
    std::ostringstream s;
    if (timed_out) s << "timed out; ";
    if (exited) s << "exit code " << code;
    else s << "killed by signal " << signal << " (" << strsignal(signal) << ")";
    s << "\n--- stderr (last 3000 bytes) ---\n" << (err.size() > 3000 ? err.substr(err.size() - 3000) : err);
    return s.str();
  }
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const fs::path& p, const std::string& content) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << content;
  ASSERT_TRUE(out.good()) << p;
}

// Result lines: the job record a results file starts with is not one.
int64_t count_lines(const fs::path& p) {
  const std::string s = read_file(p);
  const bool job_line = s.rfind("{\"tiergen_job\"", 0) == 0;
  return std::count(s.begin(), s.end(), '\n') - (job_line ? 1 : 0);
}

struct SpawnOptions {
  std::optional<rlim_t> file_size_limit;  // RLIMIT_FSIZE in the child
  std::vector<std::string> env;           // NAME=VALUE entries added to (or replacing) this process's environment
};

class Child {
 public:
  // Starts `args` (args[0] is the program) with stdout/stderr to files in `log_dir`.
  Child(const std::vector<std::string>& args, const fs::path& log_dir, const SpawnOptions& options = {}) {
    static int counter = 0;
    const std::string stem = "child-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
    out_path_ = log_dir / (stem + ".out");
    err_path_ = log_dir / (stem + ".err");
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    // The child's environment, built before fork (nothing but async-signal-safe calls after).
    std::vector<std::string> env_entries = options.env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const std::string name = entry.substr(0, entry.find('=') + 1);
      const bool replaced = std::any_of(options.env.begin(), options.env.end(),
                                        [&](const std::string& x) { return x.rfind(name, 0) == 0; });
      if (!replaced) env_entries.push_back(entry);
    }
    std::vector<char*> envp;
    for (auto& e : env_entries) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string out = out_path_.string(), err = err_path_.string();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec.
      const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (o < 0 || e < 0) ::_exit(126);
      ::dup2(o, STDOUT_FILENO);
      ::dup2(e, STDERR_FILENO);
      if (options.file_size_limit) {
        struct rlimit limit {*options.file_size_limit, *options.file_size_limit};
        ::setrlimit(RLIMIT_FSIZE, &limit);
      }
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    start_ = std::chrono::steady_clock::now();
  }

  pid_t pid() const { return pid_; }

  // Waits (at most `limit`, then SIGKILL) and collects the exit, rusage and output.
  Exit wait(std::chrono::seconds limit = std::chrono::seconds(300)) {
    Exit r;
    if (pid_ <= 0) {
      r.err = "fork failed";
      return r;
    }
    int status = 0;
    struct rusage usage {};
    for (;;) {
      const pid_t got = ::wait4(pid_, &status, WNOHANG, &usage);
      if (got == pid_) break;
      if (got < 0 && errno != EINTR) {
        r.err = std::string("wait4: ") + std::strerror(errno);
        return r;
      }
      if (std::chrono::steady_clock::now() - start_ > limit) {
        r.timed_out = true;
        ::kill(pid_, SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
    r.exited = WIFEXITED(status);
    r.code = r.exited ? WEXITSTATUS(status) : -1;
    r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    r.maxrss_kib = usage.ru_maxrss;
    r.out = read_file(out_path_);
    r.err = read_file(err_path_);
    return r;
  }

  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_ = -1;
  fs::path out_path_, err_path_;
  std::chrono::steady_clock::time_point start_;
};

// A model made by make-tiny-model with `flags`, shared by every test process (ctest
// runs each test in a process of its own): built once into a temporary name and
// renamed into place, so a directory that exists is complete. The key includes the
// tool's modification time, so a rebuilt tool makes fresh models.
fs::path shared_tiny_model(const std::string& name, const std::vector<std::string>& flags,
                           bool drop_tokenizer = false) {
  const auto stamp = fs::last_write_time(kMakeTinyModel).time_since_epoch().count();
  const fs::path root = fs::path(::testing::TempDir()) / "tiergen_cli_reliability_models";
  const fs::path dest = root / (name + "-" + std::to_string(stamp));
  if (fs::exists(dest / "model.safetensors")) return dest;
  fs::create_directories(root);
  const fs::path tmp = root / (name + ".tmp-" + std::to_string(::getpid()));
  tiergen::test::remove_tree(tmp);
  std::vector<std::string> args = {kMakeTinyModel, "--out", tmp.string()};
  args.insert(args.end(), flags.begin(), flags.end());
  Child make(args, root);
  const Exit e = make.wait();
  EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
  if (drop_tokenizer) {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"}) fs::remove(tmp / f);
  }
  std::error_code ec;
  fs::rename(tmp, dest, ec);  // fails when another process was first: use theirs
  if (ec) tiergen::test::remove_tree(tmp);
  return dest;
}

class CliReliability : public ::testing::Test {
 protected:
  // One directory per test process for the tests' files.
  static fs::path& suite_dir() {
    static fs::path dir;
    return dir;
  }
  static fs::path& model() {
    static fs::path dir;
    return dir;
  }
  static fs::path& model_without_tokenizer() {
    static fs::path dir;
    return dir;
  }

  static void SetUpTestSuite() {
    suite_dir() = fs::path(::testing::TempDir()) / ("tiergen_cli_reliability_" + std::to_string(::getpid()));
    tiergen::test::remove_tree(suite_dir());
    fs::create_directories(suite_dir());
    // OPT, 2 layers, hidden 64, max_positions 256, the byte-level fixture's vocabulary:
    // about 0.5 MB.
    const std::vector<std::string> flags = {"--arch", "opt", "--seed", "7", "--tokenizer", kTokenizer};
    model() = shared_tiny_model("tiny-opt", flags);
    model_without_tokenizer() = shared_tiny_model("tiny-opt-no-tokenizer", flags, /*drop_tokenizer=*/true);
  }

  static void TearDownTestSuite() {
    std::error_code ec;
    tiergen::test::remove_tree(suite_dir());
  }

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = suite_dir() / info->name();
    fs::create_directories(dir_);
  }

  // `tiergen generate` on the tiny model, CPU device, plus `extra` flags.
  std::vector<std::string> generate_args(const fs::path& prompts, const fs::path& out,
                                         const std::vector<std::string>& extra = {},
                                         const fs::path& model_dir = model()) const {
    std::vector<std::string> a = {kTiergen, "generate", "--model", model_dir.string(), "--device", "cpu",
                                  "--prompts", prompts.string(), "--out", out.string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  Exit run(const std::vector<std::string>& args, const SpawnOptions& options = {}) {
    Child child(args, dir_, options);
    return child.wait();
  }

  // A prompt file of `n` lines of varied length (2..30 words).
  fs::path prompt_file(const std::string& name, int n) const {
    static const char* words[] = {"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while",
                                  "cat", "sat", "on", "mat", "and", "slept"};
    std::string s;
    uint32_t x = 12345;
    for (int i = 0; i < n; ++i) {
      x = x * 1103515245u + 12345u;
      const int len = 2 + static_cast<int>((x >> 16) % 29);
      for (int w = 0; w < len; ++w) {
        x = x * 1103515245u + 12345u;
        s += (w ? " " : "") + std::string(words[(x >> 16) % 16]);
      }
      s += "\n";
    }
    const fs::path p = dir_ / name;
    write_file(p, s);
    return p;
  }

  // A failed run must not leave a results file that looks complete: none at all, or
  // fewer lines than prompts.
  static void expect_results_not_complete(const fs::path& out, int64_t prompts) {
    if (!fs::exists(out)) return;
    EXPECT_LT(count_lines(out), prompts) << out << " looks complete after a failed run";
  }

  static void expect_clear_failure(const Exit& e, const std::vector<std::string>& needles) {
    EXPECT_TRUE(e.clean_failure()) << "expected a non-zero exit, not a crash: " << e.describe();
    EXPECT_EQ(e.err.find("runtime error:"), std::string::npos) << "sanitizer report: " << e.describe();
    EXPECT_EQ(e.err.find("internal error"), std::string::npos) << "not a tiergen::Error: " << e.describe();
    for (const auto& n : needles) EXPECT_NE(e.err.find(n), std::string::npos) << "no '" << n << "' in: " << e.describe();
  }

  fs::path dir_;
};

}  // namespace
