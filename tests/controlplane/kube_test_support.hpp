// GoogleTest support for suites that need the real control plane.
//
// A suite's main() calls run_tests_with_control_plane(); it starts one control plane for the
// whole binary (start-up takes seconds; namespaces keep tests apart), stops it at the end,
// and on Ctrl-C or SIGTERM tears it down before exiting. Tests call
// LOCKSTEP_REQUIRE_CONTROL_PLANE() first: when etcd or kube-apiserver is not built the test
// is SKIPPED with the reason, or FAILS if LOCKSTEP_REQUIRE_ALL=1 (as scripts/test.sh sets).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "control_plane.hpp"

namespace lockstep::test {

// The suite's control plane; nullptr when it could not be started (see skip_reason()).
ControlPlane* control_plane();
const std::string& control_plane_skip_reason();

// Runs kubectl against the suite's control plane; stdout and stderr come back together.
RunResult kubectl(const std::vector<std::string>& args, const std::string& stdin_data = "");

// A path inside the source tree (LOCKSTEP_SOURCE_DIR is compiled in).
std::string source_path(const std::string& relative);
std::string read_text(const std::string& path);

// Creates a namespace with a unique name derived from `prefix` and returns its name.
std::string create_namespace(const std::string& prefix);

// A kubeconfig (written to `path`) that speaks to the suite's control plane as ServiceAccount
// `sa` of `ns`, with a token of two hours; throws std::runtime_error when none can be made.
std::string service_account_kubeconfig(const std::string& ns, const std::string& sa, const std::string& path);

// True when a missing prerequisite must fail rather than skip (LOCKSTEP_REQUIRE_ALL=1).
bool require_all();

int run_tests_with_control_plane(int argc, char** argv, ControlPlaneOptions options = {});

}  // namespace lockstep::test

#define LOCKSTEP_REQUIRE_CONTROL_PLANE()                                                    \
  do {                                                                                      \
    if (!::lockstep::test::control_plane()) {                                               \
      if (::lockstep::test::require_all()) {                                                \
        FAIL() << "control plane unavailable: " << ::lockstep::test::control_plane_skip_reason(); \
      }                                                                                     \
      GTEST_SKIP() << "SKIPPED: " << ::lockstep::test::control_plane_skip_reason();         \
    }                                                                                       \
  } while (0)
