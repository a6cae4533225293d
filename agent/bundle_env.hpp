// The environment the bundle's launcher set aside (agent/bundle/saved_env.h), put back.
//
// Started from the bundle (docs/agent.md, "The bundle"), the agent runs under its own
// loader, and the launcher has removed the image's LD_PRELOAD, LD_LIBRARY_PATH and LD_AUDIT so
// that loader ignores them, recording each in a private LOCKSTEP_BUNDLE_SAVED_* variable.
// restore_bundle_environment() puts each back into the agent's own environment exactly as
// the image and pod set it (set, set but empty, or unset) and removes the private variables,
// so the workers, which inherit the agent's environment and start with their image's own
// loader, get what they would have got without the bundle, and nothing of it. Setting
// LD_PRELOAD now loads nothing into the agent: a loader reads these only when it starts.
//
// It also names the process after its argv[0] again (the loader's name otherwise shows in ps).
// Call it first thing in main(), before any thread exists (setenv is not thread-safe).
// Started any other way (no private variable), it changes nothing.
#pragma once

#include <string>
#include <vector>

namespace lockstep::agent {

struct BundleEnvironment {
  bool from_bundle = false;            // the launcher set variables aside
  std::vector<std::string> problems;   // private variables with a value the launcher never writes
};

BundleEnvironment restore_bundle_environment();

}  // namespace lockstep::agent
