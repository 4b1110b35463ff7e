#pragma once
// A one-line progress bar on stderr for long `generate` jobs: prompts done, generated
// tokens per second and the estimated time left. It draws only when stderr is a
// terminal (never into a log file or a pipe) and not --quiet.
#include <chrono>
#include <cstdint>
#include <string>

namespace tiergen::cli {

class ProgressBar {
 public:
  // `total` prompts to do in this run; `enabled` false draws nothing.
  ProgressBar(int64_t total, bool enabled);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // `done` prompts finished and `tokens` generated so far in this run.
  void update(int64_t done, int64_t tokens);
  // Draws the final state and ends the line (also done by the destructor).
  void finish();
  bool enabled() const { return enabled_; }

  // The line as drawn (without the leading carriage return), for tests.
  static std::string render(int64_t done, int64_t total, int64_t tokens, double elapsed_seconds, int width = 24);
  static bool stderr_is_terminal();

 private:
  void draw(bool force);

  int64_t total_;
  bool enabled_;
  bool drawn_ = false, finished_ = false;
  int64_t done_ = 0, tokens_ = 0;
  int64_t drawn_done_ = -1;  // `done` at the last draw
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1h02m", "3m05s", "42s".
std::string format_duration(double seconds);

}  // namespace tiergen::cli
