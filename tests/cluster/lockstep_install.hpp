// Lockstep installed into the suite's real-node cluster, as a user would: the images
// scripts/images.sh built are imported into the node (under the names the chart and the
// examples use, so nothing is edited to choose them), then `helm install` of charts/lockstep.
// scripts/test.sh builds the images before the tests.
#pragma once

#include <string>
#include <vector>

#include "lockstep/process.hpp"

namespace lockstep::test {

inline constexpr const char* kOperatorNamespace = "lockstep-system";

// helm against the suite's cluster, with its caches under the test's temporary directory.
RunResult cluster_helm(std::vector<std::string> args);

// Imports this build's image `name` (operator, trainer, agent: scripts/images.sh) into every
// node of the suite's cluster. Returns "" when done, else why not. A case that runs one of them
// without installing Lockstep imports it first: a node new to this cluster's state holds only
// what `scripts/cluster.sh up` imports (the pause and nettest images).
std::string import_image(const std::string& name);

// Imports the three images and installs the chart into kOperatorNamespace with `helm_sets`
// (--set values) and --wait. Returns "" when the operator is ready, else why not;
// `seconds` gets the time helm took.
std::string install_lockstep(const std::vector<std::string>& helm_sets, double* seconds = nullptr);

}  // namespace lockstep::test
