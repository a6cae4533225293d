// A GoogleTest binary for SuiteResult's test (process_test): its cases pass, skip or fail
// as PROBE_MODE says, and it ends through lockstep_gtest_main like every test binary.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

std::string mode() {
  const char* m = std::getenv("PROBE_MODE");
  return m ? m : "";
}

TEST(Probe, First) {
  if (mode() == "skip" || mode() == "some-skip") GTEST_SKIP() << "PROBE_MODE=" << mode();
  EXPECT_NE(mode(), "fail");
}

TEST(Probe, Second) {
  if (mode() == "skip") GTEST_SKIP() << "PROBE_MODE=" << mode();
}

}  // namespace
