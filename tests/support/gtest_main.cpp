// main() for the test binaries: GoogleTest's, plus an exit code ctest reads as "Skipped"
// when every case was skipped (suite_result.hpp).
#include <gtest/gtest.h>

#include "suite_result.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return lockstep::test::suite_exit_code(RUN_ALL_TESTS());
}
