// The process group, from the agent's (torchrun's) environment: a TCPStore rendezvous at
// MASTER_ADDR:MASTER_PORT (rank 0 hosts it) and a c10d backend: Gloo on CPU, NCCL on CUDA.
#pragma once

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <stdexcept>
#include <string>

namespace lockstep::trainer {

struct Dist {
  int rank = 0, world = 1, local_rank = 0;
  std::string backend = "none";  // gloo, nccl, or none for a single process
  // Where this rank trains, and so where every tensor handed to `pg` must live: NCCL rejects
  // host tensors ("Tensors must be CUDA and dense"). Note [Collective device]
  torch::Device device{torch::kCPU};
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;  // null when world == 1
};

// backend: auto (NCCL for a CUDA device, else Gloo), gloo or nccl. With auto a single process
// has no process group; a backend named explicitly gets one even for one rank (an in-process
// store then), so its collectives can be exercised on one GPU. Throws std::runtime_error
// naming the variable or flag at fault.
Dist init_distributed(const std::string& backend, const torch::Device& device);

// Failures with their own exit codes (docs/exit-codes.md; lockstep/contract.hpp), so the
// operator's ExitCode policy can tell a consequence from a cause:
// the rendezvous (the TCPStore at MASTER_ADDR:MASTER_PORT, the process group's connections)
// failed or timed out: kExitRendezvous, 76, retryable.
struct RendezvousError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Whether `e` says a collective failed because a peer is gone (its connection closed or reset,
// NCCL reported a remote error, the collective timed out): kExitCollective, 77, retryable; the
// peer's own exit is the cause. c10d's distributed errors (NCCL, the store) and Gloo's
// transport errors, which reach us as std::runtime_error whose message names gloo's source.
bool is_peer_gone(const std::exception& e);
// e.what(), without the C++ backtrace c10::Error appends.
std::string error_text(const std::exception& e);

// Note [Collective device]: every collective the trainer issues outside DDP and FSDP (barriers,
// the last "leave together") goes through these, which build their tensor on `d.device`.
// A no-op without a process group.
void barrier(const Dist& d);

// Communication time on the device. With NCCL a collective runs on the GPU's NCCL stream after
// the host has moved on (wait() only orders streams), so host clocks see none of it; the
// process group then times each collective with CUDA events (enableCollectivesTiming, set by
// init_distributed), and a step's communication is the sum of its collectives' durations:
// one NCCL stream runs them one after another, so the sum is that stream's busy time. Call
// seconds() only once the step's work has finished on the device. Gloo (CPU) collectives
// finish on the host, where the callers' wall-clock intervals are exact.
class DeviceCommTimer {
 public:
  void add(const c10::intrusive_ptr<c10d::Work>& work) { if (work) works_.push_back(work); }
  // The summed durations, and forgets them; -1 when the backend did not time them.
  double seconds();

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
};

// --device: auto (CUDA device LOCAL_RANK when CUDA is available, else the CPU), cpu, cuda
// (device LOCAL_RANK) or cuda:N. Makes a CUDA device the current one. Throws
// std::invalid_argument naming the flag, or LOCAL_RANK, and what is valid.
torch::Device choose_device(const std::string& device);

}  // namespace lockstep::trainer
