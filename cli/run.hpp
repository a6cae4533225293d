// `lockstep run FILE`: the TrainingJob of FILE on this machine. Validated with the CRD's
// rules, then `spec.nodes` agents start as local processes with exactly the environment the
// operator gives each pod (reconcile/manifests.hpp), on loopback. One live progress line,
// a summary at the end; Ctrl-C stops every process.
#pragma once

#include <string>
#include <vector>

namespace lockstep::cli {

int run_command(const std::vector<std::string>& args);  // exit code

}  // namespace lockstep::cli
