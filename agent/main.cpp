// lockstep-agent: entry point. The component itself arrives with issue #4; until then this
// binary only reports its version, so the build, packaging and CI paths are exercised.
#include <cstring>
#include <iostream>

int main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--version") == 0 || std::strcmp(argv[1], "version") == 0)) {
    std::cout << "lockstep-agent " << LOCKSTEP_VERSION << "\n";
    return 0;
  }
  std::cerr << "lockstep-agent " << LOCKSTEP_VERSION << ": not implemented yet (issue #4); only --version works\n";
  return 2;
}
