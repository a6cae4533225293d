// One step under PyTorch's Kineto profiler (--profile-step): where the step's time goes.
//
// Note [Step profile]
// The profiler records every kernel the step ran on the GPU (on the CPU, every operator) with
// its device-clock start and duration. The summary sums them by kernel name and by kind
// (matrix products, attention, the loss over the vocabulary, LayerNorm, GELU, other
// elementwise work, the optimizer, communication, copies), and sets the union of their
// intervals (the time the device was busy) against the step's own time: what is left is the
// device idle, waiting on the host. The full trace (Chrome trace format, chrome://tracing or
// Perfetto) goes to --profile-out when given.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <ostream>
#include <string>

namespace lockstep::trainer {

class StepProfile {
 public:
  explicit StepProfile(const torch::Device& device);
  ~StepProfile();
  void start();
  // Stops recording; prints the summary of what ran against `step_s` (the step's own time on
  // the device's clock), and saves the trace to `trace_path` unless it is empty.
  void finish(double step_s, const std::string& trace_path, std::ostream& out);

  // The kind a kernel or operator name belongs to (Note [Step profile]); pure, for tests.
  static std::string kind_of(const std::string& name);

 private:
  torch::Device device_;
  bool running_ = false;
};

}  // namespace lockstep::trainer
