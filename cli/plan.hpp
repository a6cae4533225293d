// `lockstep plan`: per-GPU memory of a model under DDP, ZeRO-1, ZeRO-2 and FSDP (ZeRO-3), and
// the strategy the trainer's Auto would pick (the same code and models: lockstep/memory_plan.hpp,
// lockstep/model_shapes.hpp).
#pragma once

#include <string>
#include <vector>

namespace lockstep::cli {

int plan_command(const std::vector<std::string>& args);  // exit code

}  // namespace lockstep::cli
