#pragma once
// A profile point whose repetitions disagree was timed while something else ran (a
// 2-core guest's neighbours, the page cache written back): its median may be off by as
// much, and the cost model prices every plan with it. Such a point is timed again, a
// few attempts in all, and the attempt whose repetitions agree best is kept; within a
// budget of seconds per profile, so that a machine noisy throughout does not make the
// profile take several times as long.
#include <functional>

namespace tiergen::policy {

// One attempt at timing a point: the median of its repetitions (or of the samples a
// probe returns), their spread ((largest - smallest) / median), how many there were, and
// the seconds the attempt took in all.
struct PointTiming {
  double median = 0;
  double spread = 0;
  int runs = 0;
  double seconds = 0;
  int attempts = 1;  // at the point in all (quietest_attempt sets it)
};

// Above this spread a point's repetitions disagree: `tiergen profile` flags it noisy.
constexpr double kNoisySpread = 0.5;
// Attempts at one point, the first included.
constexpr int kMaxPointAttempts = 3;
// What timing points again may cost one profile in all (give or take one attempt): a
// full one takes minutes, a quick one (measured by a job that found no profile of its
// host) a few seconds.
constexpr double kRetimeSecondsPerProfile = 60;
constexpr double kRetimeSecondsPerQuickProfile = 5;

// Times a point with `attempt` and, while the quietest attempt so far is noisy, again,
// up to kMaxPointAttempts attempts, each only where what the last attempt took still
// fits in `retime_seconds_left`; what each one does take is taken from it (it may go
// below zero by the last attempt's excess: a profile overspends by one attempt at most).
// Returns the attempt with the smallest spread, and how many attempts were made.
inline PointTiming quietest_attempt(const std::function<PointTiming()>& attempt, double& retime_seconds_left) {
  PointTiming quietest = attempt();
  PointTiming last = quietest;
  int attempts = 1;
  while (quietest.spread > kNoisySpread && attempts < kMaxPointAttempts) {
    if (last.seconds > retime_seconds_left) break;
    last = attempt();
    retime_seconds_left -= last.seconds;
    ++attempts;
    if (last.spread < quietest.spread) quietest = last;
  }
  quietest.attempts = attempts;
  return quietest;
}

}  // namespace tiergen::policy
