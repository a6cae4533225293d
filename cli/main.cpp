// lockstep: the command line. `lockstep run FILE.yaml` runs a TrainingJob on this machine;
// `lockstep validate FILE.yaml` checks one with the CRD's rules; `lockstep render FILE.yaml`
// prints the objects the operator would create for it; `lockstep plan` prints per-GPU memory
// under DDP, ZeRO-1, ZeRO-2 and FSDP. Exit codes: docs/exit-codes.md.
#include <iostream>

#include "plan.hpp"
#include "render.hpp"
#include "run.hpp"
#include "validate.hpp"

namespace {

const char* kUsage = R"(usage: lockstep COMMAND [ARGS]
  run FILE.yaml        run the TrainingJob locally (spec.nodes agents on loopback)
  validate FILE.yaml   check a TrainingJob with the same rules as the cluster's CRD
  render FILE.yaml     print the objects the operator would create for it (Service, pods, ...)
  plan [--model NAME | --params 7.5B | --file JOB.yaml] [--gpus N] [--gpu-memory-gb G]
       [--seq-len S] [--micro-batch B] [--activation-checkpointing]
                       per-GPU memory under DDP, ZeRO-1, ZeRO-2 and FSDP, and the recommendation
  --version, --help
)";

const char* kValidateUsage = R"(usage: lockstep validate FILE.yaml
  Checks a TrainingJob with the rules of the CRD this lockstep was built with (types, required
  fields, enums, bounds, patterns, unknown fields, CEL rules), in the API server's words.
  Exit 0 valid, 1 invalid, 3 unreadable file, 4 not YAML (docs/exit-codes.md).
)";

int validate_command(const std::vector<std::string>& args) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kValidateUsage;
    return 0;
  }
  if (args.size() != 1) {
    std::cerr << kValidateUsage;
    return 2;
  }
  try {
    auto job = lockstep::cli::load_yaml_file(args[0]);
    auto errors = lockstep::cli::validate_trainingjob(job);
    for (const auto& e : errors) std::cerr << args[0] << ": " << e << "\n";
    if (!errors.empty()) return 1;
    std::cout << args[0] << ": valid TrainingJob " << job["metadata"]["name"].get<std::string>() << " ("
              << job["spec"]["nodes"] << " node(s) x " << job["spec"]["procsPerNode"] << " worker(s), strategy "
              << job["spec"]["strategy"].get<std::string>() << ")\n";
    return 0;
  } catch (const lockstep::cli::InputError& e) {
    std::cerr << "lockstep validate: " << e.what() << "\n";
    return e.exit_code;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "lockstep " << LOCKSTEP_VERSION << "\n";
    return 0;
  }
  std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "run") return lockstep::cli::run_command(args);
    if (cmd == "validate") return validate_command(args);
    if (cmd == "render") return lockstep::cli::render_command(args);
    if (cmd == "plan") return lockstep::cli::plan_command(args);
  } catch (const lockstep::cli::InputError& e) {
    std::cerr << "lockstep " << cmd << ": " << e.what() << "\n";
    return e.exit_code;
  } catch (const std::exception& e) {
    std::cerr << "lockstep " << cmd << ": " << e.what() << "\n";
    return 1;
  }
  std::cerr << "lockstep: unknown command '" << cmd << "'\n" << kUsage;
  return 2;
}
