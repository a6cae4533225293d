// lockstep-trainer: DDP training of a GPT-style decoder on LibTorch (docs/trainer.md).
// Depends on LibTorch and the standard library only, so it builds inside any PyTorch image.
#include <torch/torch.h>

#include <csignal>
#include <cstring>
#include <iostream>

#include "checkpoint.hpp"
#include "dist.hpp"
#include "lockstep/contract.hpp"  // header-only constants: the exit codes the agent and operator read
#include "train.hpp"

int main(int argc, char** argv) {
  // A write to a peer rank that has died must fail with EPIPE, which Gloo reports as a failed
  // collective (exit 77, docs/exit-codes.md), not kill this rank with SIGPIPE (exit 141, no
  // message). Python ignores SIGPIPE at start-up, so torchrun's workers never see it; the
  // agent starts its workers with every signal at its default, so the trainer does it here.
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::cout << lockstep::trainer::kUsage;
      return 0;
    }
    if (a == "--version") {
      std::cout << "lockstep-trainer " << LOCKSTEP_VERSION << "\nlibtorch " << TORCH_VERSION << "\ncuda "
                << (torch::cuda::is_available() ? "available" : "unavailable") << "\nc10d backends: gloo"
#ifdef USE_C10D_NCCL
                << ", nccl"
#endif
                << "\n";
      return 0;
    }
  }
  lockstep::trainer::Options options;
  try {
    options = lockstep::trainer::parse_options(args);
  } catch (const std::invalid_argument& e) {
    std::cerr << "lockstep-trainer: " << e.what() << "\n";
    return 64;
  }
  try {
    return lockstep::trainer::run(options);
  } catch (const std::invalid_argument& e) {
    std::cerr << "lockstep-trainer: " << e.what() << "\n";
    return lockstep::contract::kExitUsage;
  } catch (const lockstep::trainer::RendezvousError& e) {
    std::cerr << "lockstep-trainer: " << e.what() << "\n";
    return lockstep::contract::kExitRendezvous;
  } catch (const lockstep::trainer::CheckpointFenced& e) {  // a rank of a replaced gang attempt
    std::cerr << "lockstep-trainer: " << e.what() << "\n";
    return lockstep::contract::kExitRendezvous;
  } catch (const std::exception& e) {
    if (lockstep::trainer::is_peer_gone(e)) {
      std::cerr << "lockstep-trainer: a collective failed because a peer rank is gone (exit "
                << lockstep::contract::kExitCollective << ", a consequence: the first rank to fail is the cause): "
                << lockstep::trainer::error_text(e) << "\n";
      return lockstep::contract::kExitCollective;
    }
    std::cerr << "lockstep-trainer: " << lockstep::trainer::error_text(e) << "\n";
    return 1;
  }
}
