#pragma once
// "Did you mean": the known names closest to a mistyped one (an unknown flag, preset
// or subcommand), by edit distance with adjacent transpositions counted as one edit.
#include <string>
#include <vector>

namespace tiergen::cli {

// Edits (insert, delete, substitute, swap two adjacent characters) turning a into b,
// compared case-insensitively.
size_t edit_distance(const std::string& a, const std::string& b);

// The candidates closest to `typed`, if close enough to be what was meant (at most
// `limit`, ties alphabetically): names that start with what was typed (3
// characters or more), else those the fewest edits away, when that is within a third
// of the typed length (at least 1, at most 3). Leading dashes are ignored on both
// sides, so "--gpu-bach-size" finds "--gpu-batch-size".
std::vector<std::string> closest_names(const std::string& typed, const std::vector<std::string>& candidates,
                                       size_t limit = 3);

// " (did you mean 'a' or 'b'?)", or "" when nothing is close.
std::string did_you_mean(const std::string& typed, const std::vector<std::string>& candidates);

}  // namespace tiergen::cli
