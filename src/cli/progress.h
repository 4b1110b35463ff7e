#pragma once
// A one-line progress bar on stderr for `generate` and `bench`: it moves with every
// generated token (the engine reports each one), not only when a block finishes. The
// bar measures a token budget: each sequence counts for its max_new_tokens, and one
// that ends early (EOS, a stop) is credited the tokens it did not need, so the bar
// only moves forward and is full exactly when the last sequence ends. The line also
// shows items done (prompts, or bench runs), tokens, tokens/s and the time left.
// It draws only when enabled: callers pass stderr_is_terminal() && !--quiet, so it
// never goes into a log file or a pipe. Log lines written while a bar is on screen go
// above it (bar_aware_sink), so the two never share a line.
#include <spdlog/sinks/sink.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace tiergen::cli {

// What the bar shows at one moment.
struct ProgressState {
  int64_t items_done = 0, items_total = 0;    // prompts, or bench runs
  int64_t budget_done = 0, budget_total = 0;  // token budget (see above)
  int64_t tokens = 0;                         // tokens generated so far
};

struct ProgressOptions {
  std::string item_name = "prompts";
  std::FILE* sink = stderr;
  // At most one redraw per interval (the first and the last draw always happen).
  std::chrono::milliseconds min_interval{200};
  int width = 24;
};

class ProgressBar {
 public:
  // `items` to do and their whole `token_budget`; `enabled` false draws nothing.
  ProgressBar(int64_t items, int64_t token_budget, bool enabled, ProgressOptions options = {});
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // One token was generated.
  void add_token();
  // A sequence ended after `generated` of its `budget` tokens: credits the rest.
  void end_sequence(int64_t generated, int64_t budget);
  // One more item (a prompt with all its samples, a bench run) is done.
  void end_item();
  // Draws the final state and ends the line (also done by the destructor).
  void finish();

  bool enabled() const { return enabled_; }
  const ProgressState& state() const { return state_; }
  int64_t draws() const { return draws_; }

  // The line as drawn (without the leading carriage return).
  static std::string render(const ProgressState& state, double elapsed_seconds, const std::string& item_name = "prompts",
                            int width = 24);
  static bool stderr_is_terminal();

 private:
  friend class BarAwareSink;
  void draw(bool force);
  // With the screen lock held: the line itself, and clearing it for a log line.
  void write_line_locked();
  void clear_line_locked();

  ProgressState state_;
  bool enabled_;
  ProgressOptions options_;
  bool finished_ = false;
  int64_t draws_ = 0;
  ProgressState drawn_;  // the state at the last draw
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// A log sink around `inner` (main() wraps the stderr sink in it): while a bar is on
// screen, a log line first clears the bar's line, is written by `inner`, and the bar is
// drawn again below it.
std::shared_ptr<spdlog::sinks::sink> bar_aware_sink(std::shared_ptr<spdlog::sinks::sink> inner);

// "1h02m", "3m05s", "42s".
std::string format_duration(double seconds);

}  // namespace tiergen::cli
