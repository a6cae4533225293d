#include "bundle_env.hpp"

#include <errno.h>
#include <sys/prctl.h>

#include <cstdlib>
#include <cstring>

#include "bundle/saved_env.h"

extern char** environ;

namespace lockstep::agent {

BundleEnvironment restore_bundle_environment() {
  BundleEnvironment out;
  static const char* const kNames[] = LOCKSTEP_BUNDLE_SAVED_NAMES;
  const std::string set_prefix = LOCKSTEP_BUNDLE_SET;
  for (const char* name : kNames) {
    std::string key = std::string(LOCKSTEP_BUNDLE_SAVED_PREFIX) + name;
    const char* saved = std::getenv(key.c_str());
    if (!saved) continue;
    out.from_bundle = true;
    std::string value = saved;
    if (value == LOCKSTEP_BUNDLE_UNSET) {
      ::unsetenv(name);
    } else if (value.compare(0, set_prefix.size(), set_prefix) == 0) {
      ::setenv(name, value.c_str() + set_prefix.size(), 1);
    } else {
      out.problems.push_back(key + "='" + value.substr(0, 200) + "' is neither '" LOCKSTEP_BUNDLE_UNSET "' nor '" +
                             set_prefix + "VALUE'; " + name + " left as it is");
    }
  }
  // Every private variable goes, also any a newer or older launcher may have added.
  std::vector<std::string> private_names;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, LOCKSTEP_BUNDLE_SAVED_PREFIX, std::strlen(LOCKSTEP_BUNDLE_SAVED_PREFIX)) == 0) {
      const char* eq = std::strchr(*e, '=');
      private_names.emplace_back(*e, eq ? static_cast<size_t>(eq - *e) : std::strlen(*e));
    }
  for (const auto& n : private_names) ::unsetenv(n.c_str());
  // Run by the bundle's loader, the process is named after it (ld-linux-x86-64 in ps, top,
  // /proc/PID/comm); take the name it was started by (the launcher's --argv0) back.
  if (out.from_bundle) ::prctl(PR_SET_NAME, program_invocation_short_name, 0, 0, 0);
  return out;
}

}  // namespace lockstep::agent
