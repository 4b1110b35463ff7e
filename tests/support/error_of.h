#pragma once
// Test support: the message of the tiergen::Error a callable throws (a test failure,
// and "", when it throws none).
#include <gtest/gtest.h>

#include <string>

#include "tiergen/common/error.h"

namespace tiergen::test {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected tiergen::Error";
  return "";
}

}  // namespace tiergen::test
