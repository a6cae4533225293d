// How a test binary tells ctest that it tested nothing. GoogleTest exits 0 when every case
// was skipped (GTEST_SKIP), so ctest would report "Passed" for a suite whose prerequisites
// (a control plane, a GPU) were missing. Every test binary ends through suite_exit_code():
// when cases ran and all of them were skipped it prints why and exits kSkippedExitCode, which
// tests/CMakeLists.txt declares as each test's SKIP_RETURN_CODE, so ctest shows "Skipped".
// With LOCKSTEP_REQUIRE_ALL=1 the suites FAIL instead of skipping, so this never hides a
// missing prerequisite there.
#pragma once

#include <gtest/gtest.h>

#include <iostream>

namespace lockstep::test {

constexpr int kSkippedExitCode = 77;  // the automake convention ctest's SKIP_RETURN_CODE uses

inline int suite_exit_code(int gtest_result) {
  const auto* u = ::testing::UnitTest::GetInstance();
  if (gtest_result == 0 && u->test_to_run_count() > 0 && u->skipped_test_count() == u->test_to_run_count()) {
    std::cout << "SKIPPED: all " << u->skipped_test_count()
              << " test(s) of this binary were skipped (their reasons are above); exit " << kSkippedExitCode
              << " so ctest reports Skipped, not Passed\n";
    return kSkippedExitCode;
  }
  return gtest_result;
}

}  // namespace lockstep::test
