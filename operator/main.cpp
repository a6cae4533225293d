// lockstep-operator: entry point. The component itself arrives with issue #3; until then this
// binary only reports its version, so the build, packaging and CI paths are exercised.
#include <cstring>
#include <iostream>

int main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--version") == 0 || std::strcmp(argv[1], "version") == 0)) {
    std::cout << "lockstep-operator " << LOCKSTEP_VERSION << "\n";
    return 0;
  }
  std::cerr << "lockstep-operator " << LOCKSTEP_VERSION << ": not implemented yet (issue #3); only --version works\n";
  return 2;
}
