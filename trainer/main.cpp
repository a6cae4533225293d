// lockstep-trainer: entry point. DDP, FSDP and the models arrive with issue #5; until then
// `--version` reports the LibTorch it was built against and which c10d backends it has, which
// is what the build set-up (issue #2) must get right.
#include <torch/torch.h>

#include <cstring>
#include <iostream>

int main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--version") == 0 || std::strcmp(argv[1], "version") == 0)) {
    std::cout << "lockstep-trainer " << LOCKSTEP_VERSION << "\n"
              << "libtorch " << TORCH_VERSION << "\n"
              << "cuda " << (torch::cuda::is_available() ? "available" : "unavailable") << "\n"
#ifdef USE_C10D_GLOO
              << "c10d backends: gloo"
#ifdef USE_C10D_NCCL
              << ", nccl"
#endif
              << "\n";
#endif
    return 0;
  }
  std::cerr << "lockstep-trainer " << LOCKSTEP_VERSION
            << ": training is not implemented yet (issue #5); only --version works\n";
  return 2;
}
