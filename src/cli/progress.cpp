#include "src/cli/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <mutex>

namespace tiergen::cli {

namespace {

// One terminal: bars and the log lines around them take turns under this lock.
std::mutex& screen_mutex() {
  static std::mutex m;
  return m;
}

ProgressBar*& bar_on_screen() {
  static ProgressBar* bar = nullptr;
  return bar;
}

}  // namespace

class BarAwareSink final : public spdlog::sinks::sink {
 public:
  explicit BarAwareSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}
  void log(const spdlog::details::log_msg& msg) override {
    std::lock_guard<std::mutex> lock(screen_mutex());
    ProgressBar* bar = bar_on_screen();
    if (bar) bar->clear_line_locked();
    inner_->log(msg);
    if (bar) {
      inner_->flush();
      bar->write_line_locked();
    }
  }
  void flush() override {
    std::lock_guard<std::mutex> lock(screen_mutex());
    inner_->flush();
  }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
};

std::shared_ptr<spdlog::sinks::sink> bar_aware_sink(std::shared_ptr<spdlog::sinks::sink> inner) {
  return std::make_shared<BarAwareSink>(std::move(inner));
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

ProgressBar::ProgressBar(int64_t items, int64_t token_budget, bool enabled, ProgressOptions options)
    : enabled_(enabled && items > 0),
      options_(std::move(options)),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
  state_.items_total = items;
  state_.budget_total = token_budget;
  draw(true);  // 0/total at once, so a long first block does not look like a hang
}

ProgressBar::~ProgressBar() { finish(); }

bool ProgressBar::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

std::string ProgressBar::render(const ProgressState& s, double elapsed, const std::string& item_name, int width) {
  double fraction = 1.0;
  if (s.budget_total > 0) fraction = static_cast<double>(s.budget_done) / static_cast<double>(s.budget_total);
  else if (s.items_total > 0) fraction = static_cast<double>(s.items_done) / static_cast<double>(s.items_total);
  fraction = std::clamp(fraction, 0.0, 1.0);
  const int filled = static_cast<int>(fraction * width);
  const std::string bar = std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(width - filled), '.');
  const double rate = elapsed > 0 ? s.tokens / elapsed : 0.0;
  std::string eta = "?";
  if (fraction >= 1.0) eta = "0s";
  else if (fraction > 0 && elapsed > 0) eta = format_duration(elapsed / fraction * (1.0 - fraction));
  return fmt::format("[{}] {}/{} {}  {} tokens  {:.1f} tok/s  elapsed {}  ETA {}", bar, s.items_done, s.items_total,
                     item_name, s.tokens, rate, format_duration(elapsed), eta);
}

void ProgressBar::add_token() {
  ++state_.tokens;
  ++state_.budget_done;
  draw(false);
}

void ProgressBar::end_sequence(int64_t generated, int64_t budget) {
  state_.budget_done += std::max<int64_t>(0, budget - generated);
  draw(false);
}

void ProgressBar::end_item() {
  ++state_.items_done;
  draw(false);
}

void ProgressBar::draw(bool force) {
  if (!enabled_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && draws_ > 0 && now - last_draw_ < options_.min_interval) return;
  std::lock_guard<std::mutex> lock(screen_mutex());
  bar_on_screen() = this;
  write_line_locked();
}

void ProgressBar::write_line_locked() {
  const auto now = std::chrono::steady_clock::now();
  last_draw_ = now;
  ++draws_;
  drawn_ = state_;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  // \r, the line, then clear to the end of the line (a shorter line leaves no tail).
  std::fprintf(options_.sink, "\r%s\033[K", render(state_, elapsed, options_.item_name, options_.width).c_str());
  std::fflush(options_.sink);
}

void ProgressBar::clear_line_locked() {
  std::fputs("\r\033[K", options_.sink);
  std::fflush(options_.sink);
}

void ProgressBar::finish() {
  if (!enabled_ || finished_) return;
  const bool changed = drawn_.items_done != state_.items_done || drawn_.budget_done != state_.budget_done ||
                       drawn_.tokens != state_.tokens;
  if (changed) draw(true);  // the final count, unless already on screen
  std::lock_guard<std::mutex> lock(screen_mutex());
  finished_ = true;
  if (bar_on_screen() == this) bar_on_screen() = nullptr;
  std::fputc('\n', options_.sink);
  std::fflush(options_.sink);
}

}  // namespace tiergen::cli
