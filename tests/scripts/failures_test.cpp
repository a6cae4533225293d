// scripts/failures.sh (the end of scripts/test.sh's output when a test failed) on a ctest log
// written here: a failed googletest's failure blocks and its FAILED line, a failed test that is
// no googletest's last lines, nothing of a passed test, and nothing at all when none failed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "lockstep/process.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

std::string block(const std::string& header, const std::string& output, const std::string& result) {
  return "----------------------------------------------------------\n" + header + "\nCommand: \"x\"\nOutput:\n"
         "----------------------------------------------------------\n" + output + "<end of output>\nTest time =   1.00 sec\n"
         "----------------------------------------------------------\n" + result + "\n";
}

class Failures : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "failures_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    fs::create_directories(dir_ / "Testing/Temporary");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / "Testing/Temporary" / name) << text;
  }
  lockstep::RunResult run() {
    return lockstep::run_capture({std::string(LOCKSTEP_SOURCE_DIR) + "/scripts/failures.sh", dir_.string()}, {}, 30s);
  }
  fs::path dir_;
};

TEST_F(Failures, ShowsEachFailedTestsFailuresAndNothingOfThePassedOnes) {
  std::string gtest_out =
      "[==========] Running 2 tests from 1 test suite.\n"
      "[ RUN      ] Suite.Passes\n"
      "a line of a passing case\n"
      "[       OK ] Suite.Passes (5 ms)\n"
      "[ RUN      ] Suite.Fails\n"
      "progress of the failing case\n"
      "/src/t.cpp:12: Failure\n"
      "Value of: ready()\n"
      "  Actual: false (the reason)\n"
      "Expected: true\n"
      "[  FAILED  ] Suite.Fails (7 ms)\n"
      "[==========] 2 tests from 1 test suite ran.\n"
      "[  FAILED  ] 1 test, listed below:\n"
      "[  FAILED  ] Suite.Fails\n";
  std::string shell_out;
  for (int i = 1; i <= 40; ++i) shell_out += "shell line " + std::to_string(i) + "\n";
  write("LastTest.log", "Start testing\n" +
                            block("1/3 Testing: ok_test\n1/3 Test: ok_test", "PASSED OUTPUT\n", "Test Passed.") +
                            block("2/3 Testing: g_test\n2/3 Test: g_test", gtest_out, "Test Failed.") +
                            block("3/3 Testing: sh_test\n3/3 Test: sh_test", shell_out, "Test Failed."));
  write("LastTestsFailed.log", "2:g_test\n3:sh_test\n");
  auto r = run();
  ASSERT_TRUE(r.status.success()) << r.output;
  const std::string& o = r.output;
  EXPECT_NE(o.find("---- g_test\n/src/t.cpp:12: Failure\nValue of: ready()\n  Actual: false (the reason)\nExpected: true\n"
                   "[  FAILED  ] Suite.Fails (7 ms)\n---- sh_test\n"),
            std::string::npos) << o;
  EXPECT_EQ(o.find("progress of the failing case"), std::string::npos) << o;
  EXPECT_EQ(o.find("a line of a passing case"), std::string::npos) << o;
  EXPECT_EQ(o.find("PASSED OUTPUT"), std::string::npos) << o;
  EXPECT_EQ(o.find("shell line 10\n"), std::string::npos) << "only the last 30 lines: " << o;
  EXPECT_NE(o.find("shell line 11\n"), std::string::npos) << o;
  EXPECT_NE(o.find("shell line 40\n"), std::string::npos) << o;
}

TEST_F(Failures, SaysNothingWhenNoTestFailed) {
  write("LastTest.log", block("1/1 Testing: ok_test\n1/1 Test: ok_test", "fine\n", "Test Passed."));
  write("LastTestsFailed.log", "");
  auto r = run();
  ASSERT_TRUE(r.status.success()) << r.output;
  EXPECT_EQ(r.output, "");
}

}  // namespace
