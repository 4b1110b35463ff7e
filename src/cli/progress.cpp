#include "src/cli/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tiergen::cli {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

ProgressBar::ProgressBar(int64_t total, bool enabled)
    : total_(total), enabled_(enabled && total > 0), start_(std::chrono::steady_clock::now()), last_draw_(start_) {
  draw(true);  // 0/total at once, so a long first block does not look like a hang
}

ProgressBar::~ProgressBar() { finish(); }

bool ProgressBar::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

std::string ProgressBar::render(int64_t done, int64_t total, int64_t tokens, double elapsed, int width) {
  const double fraction = total > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0) : 1.0;
  const int filled = static_cast<int>(fraction * width);
  const std::string bar = std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(width - filled), '.');
  const double rate = elapsed > 0 ? tokens / elapsed : 0.0;
  std::string eta = "?";
  if (done >= total) eta = "0s";
  else if (done > 0 && elapsed > 0) eta = format_duration(elapsed / static_cast<double>(done) * static_cast<double>(total - done));
  return fmt::format("[{}] {}/{} prompts  {:.1f} tok/s  elapsed {}  ETA {}", bar, done, total, rate,
                     format_duration(elapsed), eta);
}

void ProgressBar::update(int64_t done, int64_t tokens) {
  done_ = done;
  tokens_ = tokens;
  draw(false);
}

void ProgressBar::draw(bool force) {
  if (!enabled_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  // At most a few redraws a second; the first and the last always.
  if (!force && drawn_ && now - last_draw_ < std::chrono::milliseconds(200) && done_ < total_) return;
  last_draw_ = now;
  drawn_ = true;
  drawn_done_ = done_;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  // \r, the line, then clear to the end of the line (a shorter line leaves no tail).
  std::fprintf(stderr, "\r%s\033[K", render(done_, total_, tokens_, elapsed).c_str());
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (!enabled_ || finished_) return;
  if (drawn_done_ != done_) draw(true);  // the final count, unless already on screen
  finished_ = true;
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace tiergen::cli
