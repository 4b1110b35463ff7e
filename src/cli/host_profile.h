#pragma once
// The hardware profile a command plans and predicts with. A profile of this host (--hw,
// $TIERGEN_HW_PROFILE, or the one cached by `tiergen profile --cache`) is used as is.
// Without one, `generate` and `bench` measure a quick profile once and cache it; when
// that is not possible they go on without (planning with the built-in profile,
// skipping the prediction) and say so in one line, never failing the run.
#include <optional>
#include <string>

#include "policy/hardware_profile.h"

namespace tiergen::cli {

// Both functions return the profile pricing CPU products in the job's compute `dtype`
// ("float32", "float16", "bfloat16"; HardwareProfile::with_cpu_products_of). Where the
// profile timed other dtypes only, this host's cached profile gains `dtype`'s products,
// timed then (a few seconds) and saved; another profile prices none in `dtype`, with a
// warning.
//
// For `--policy auto`: this host's profile, measured and cached when there is none;
// the built-in default (with a warning) when measuring fails. Errors in a profile the
// user named (--hw, $TIERGEN_HW_PROFILE) are thrown: the run has not started yet.
policy::HardwareProfile profile_for_planning(const std::string& hw_option, const std::string& dtype);

// A resolved profile priced in `dtype` by the rule above (`may_time` false: this host's
// cached profile is not timed either, as after a job's results).
policy::HardwareProfile profile_priced_in(policy::ResolvedProfile resolved, const std::string& dtype,
                                          bool may_time = true);

// For the predicted-vs-measured report after a run: never throws. nullopt, after one
// line saying why, when no profile of this host can be had. `may_measure`: measure and
// cache one when there is none (bench, whose report this is); generate never does
// after its results are written.
std::optional<policy::HardwareProfile> profile_for_prediction(const std::string& hw_option, const std::string& dtype,
                                                              bool may_measure = true);

}  // namespace tiergen::cli
