#include "plan.hpp"

#include <cmath>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include "lockstep/flags.hpp"
#include "lockstep/memory_plan.hpp"
#include "lockstep/model_shapes.hpp"
#include "validate.hpp"

namespace lockstep::cli {
namespace {

// The models are the trainer's presets (lockstep/model_shapes.hpp): one list.
std::string plan_usage() {
  return R"(usage: lockstep plan [--model NAME | --params N | --file JOB.yaml] [--gpus N]
                     [--gpu-memory-gb G] [--seq-len S] [--micro-batch B] [--activation-checkpointing]
  Per-GPU memory of the model states (and activations, for a known model) under DDP, ZeRO-1,
  ZeRO-2 and FSDP, and the strategy the trainer's Auto would pick.
  --model NAME              one of )" + models::names() + R"( (default gpt2-124m)
  --params N                a parameter count instead of a model, such as 124M, 7.5B or 1.3e9
  --file JOB.yaml           the model, batch and GPU count of a TrainingJob
  --gpus N                  data-parallel GPUs, a whole number >= 1 (default 8)
  --gpu-memory-gb G         memory per GPU in GB, > 0 (default 80)
  --seq-len S               sequence length in tokens, a whole number >= 1 (default: the model's)
  --micro-batch B           sequences per GPU per step, a whole number >= 1 (default 1)
  --activation-checkpointing  activations recomputed in backward
)";
}

// Each flag's own words: what it is and what is valid, as every user-facing error must say.
double parse_count(const std::string& flag, const std::string& v) {  // 124M, 7.5B, 1.3e9
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  std::string unit = end ? end : "";
  double mult = unit.empty() ? 1 : unit == "K" || unit == "k" ? 1e3 : unit == "M" ? 1e6 : unit == "B" || unit == "G" ? 1e9 : unit == "T" ? 1e12 : -1;
  if (v.empty() || end == v.c_str() || mult < 0 || !(x > 0) || !std::isfinite(x * mult))
    throw std::invalid_argument(flag + ": expected a positive parameter count such as 124M, 7.5B or 1.3e9, got '" + v + "'");
  return x * mult;
}

// A whole number >= 1 (GPUs, tokens, sequences); `what` names the unit in the message.
double parse_whole(const std::string& flag, const std::string& v, const std::string& what) {
  size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (v.empty() || used != v.size() || x < 1 || x > 1000000000)
    throw std::invalid_argument(flag + ": expected a whole number of " + what + ", at least 1, got '" + v + "'");
  return static_cast<double>(x);
}

double parse_gb(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !(x > 0) || !std::isfinite(x))
    throw std::invalid_argument(flag + ": expected the memory of one GPU in GB, a number > 0 such as 80 or 40.5, got '" +
                                v + "'");
  return x;
}

std::string gb(double bytes) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(bytes >= 1e10 ? 1 : bytes >= 1e9 ? 1 : 3) << bytes / 1e9 << " GB";
  return o.str();
}

// What `lockstep plan` was asked: its flags, and what a job file adds to them.
struct PlanRequest {
  std::string model = "gpt2-124m", file;
  bool model_given = false;
  double params = 0, gpus = 8, memory_gb = 80, seq = -1, micro = 1;
  bool checkpointing = false;
};

// The flags into `req`, each --flag value or --flag=value (lockstep/flags.hpp); an exit code
// where the command ends here (--help: 0, a bad flag: 2).
std::optional<int> parse_plan_flags(const std::vector<std::string>& args, PlanRequest& req) {
  try {
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string a = args[i];
      std::string v;
      if (a == "--help" || a == "-h") {
        std::cout << plan_usage();
        return 0;
      }
      if (flags::match(args, i, "--model", v)) { req.model = v; req.model_given = true; }
      else if (flags::match(args, i, "--params", v)) req.params = parse_count("--params", v);
      else if (flags::match(args, i, "--file", v)) req.file = v;
      else if (flags::match(args, i, "--gpus", v)) req.gpus = parse_whole("--gpus", v, "GPUs");
      else if (flags::match(args, i, "--gpu-memory-gb", v)) req.memory_gb = parse_gb("--gpu-memory-gb", v);
      else if (flags::match(args, i, "--seq-len", v)) req.seq = parse_whole("--seq-len", v, "tokens");
      else if (flags::match(args, i, "--micro-batch", v)) req.micro = parse_whole("--micro-batch", v, "sequences per GPU");
      else if (a == "--activation-checkpointing") req.checkpointing = true;
      else throw std::invalid_argument("unknown flag '" + a + "' (see lockstep plan --help)");
    }
  } catch (const flags::FlagError& e) {  // a flag without its value
    std::cerr << "lockstep plan: " << e.what() << " (lockstep plan --help lists each flag)\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "lockstep plan: " << e.what() << "\n";
    return 2;
  }
  return std::nullopt;
}

// A TrainingJob's GPU count, --model and --batch-size into `req`; false (the errors printed)
// where the file is no valid TrainingJob.
bool read_job_file(PlanRequest& req) {
  auto job = load_yaml_file(req.file);
  auto errors = validate_trainingjob(job);
  if (!errors.empty()) {
    for (const auto& e : errors) std::cerr << req.file << ": " << e << "\n";
    return false;
  }
  const auto& spec = job["spec"];
  req.gpus = spec.value("nodes", 1) * spec.value("procsPerNode", 1);
  std::vector<std::string> trainer_args;
  for (const auto& a : spec.value("trainer", nlohmann::json::object()).value("args", nlohmann::json::array()))
    if (a.is_string()) trainer_args.push_back(a.get<std::string>());
  // --model=X and --model X alike (the trainer's parser takes both).
  if (auto m = arg_value(trainer_args, "--model")) req.model = *m;
  if (auto b = arg_value(trainer_args, "--batch-size")) {
    try {
      req.micro = parse_whole("spec.trainer.args --batch-size", *b, "sequences per GPU");
    } catch (const std::invalid_argument& e) {
      std::cerr << req.file << ": " << e.what() << "\n";
      return false;
    }
  }
  return true;
}

// The table: each strategy's per-GPU memory, and the choice.
void print_plan(const PlanRequest& req, const std::string& label, const plan::TransformerShape& shape, double params) {
  const int n = static_cast<int>(req.gpus);
  const double act = shape.layers > 0 ? plan::activation_bytes(shape, req.checkpointing) : 0;
  std::cout << std::fixed << std::setprecision(1) << "model: " << label << ", "
            << params / 1e6 << "M parameters; " << n << " GPUs x " << req.memory_gb << " GB; mixed-precision Adam (16 bytes/parameter)\n";
  if (shape.layers > 0)
    std::cout << "activations per GPU: " << gb(act) << " (sequence " << static_cast<long>(shape.seq) << ", micro-batch "
              << static_cast<long>(shape.micro_batch)
              << (req.checkpointing ? ", activation checkpointing" : "") << ")\n";
  std::cout << "\n" << std::left << std::setw(16) << "strategy" << std::right << std::setw(12) << "parameters"
            << std::setw(12) << "gradients" << std::setw(12) << "optimizer" << std::setw(14) << "model states"
            << std::setw(14) << "+ activations" << "\n";
  const std::pair<const char*, plan::Sharding> rows[] = {{"DDP", plan::Sharding::DDP},
                                                         {"ZeRO-1", plan::Sharding::ZeRO1},
                                                         {"ZeRO-2", plan::Sharding::ZeRO2},
                                                         {"FSDP (ZeRO-3)", plan::Sharding::ZeRO3}};
  for (const auto& [name, s] : rows) {
    auto st = plan::model_states(params, n, s);
    std::cout << std::left << std::setw(16) << name << std::right << std::setw(12) << gb(st.params) << std::setw(12)
              << gb(st.grads) << std::setw(12) << gb(st.optimizer) << std::setw(14) << gb(st.total()) << std::setw(14)
              << gb(st.total() + act) << "\n";
  }
  auto choice = plan::choose(params, n, act, req.memory_gb * 1e9);
  std::cout << "\nrecommended: " << choice.why << "\n";
}

}  // namespace

int plan_command(const std::vector<std::string>& args) {
  PlanRequest req;
  if (auto code = parse_plan_flags(args, req)) return *code;
  // The model's shape: a preset, or a TrainingJob's --model and size flags.
  if (!req.file.empty() && !read_job_file(req)) return 1;
  plan::TransformerShape shape;
  double vocab = 50257;
  std::string model = req.model;
  if (req.params > 0 && !req.model_given && req.file.empty()) model = "custom";  // a bare count: model states only
  const models::Preset* preset = model == "custom" ? nullptr : models::find(model);
  if (preset && preset->kind == models::Kind::Gpt) {
    const models::Shape& m = preset->shape;
    shape = {static_cast<double>(m.layers), static_cast<double>(m.width), static_cast<double>(m.heads),
             static_cast<double>(m.context), req.micro};
    vocab = static_cast<double>(m.vocab);
  } else if (!preset && model != "custom" && req.params == 0) {
    std::cerr << "lockstep plan: unknown --model '" << model << "'; valid: " << models::names() << ", or give --params\n";
    return 2;
  }
  if (req.seq > 0) shape.seq = req.seq;
  // The MLP's activations are not modelled (Korthikanti's formula is a transformer layer's).
  const bool mlp = preset && preset->kind == models::Kind::Mlp;
  double params = req.params > 0 ? req.params
                  : mlp ? plan::mlp_parameters(static_cast<double>(preset->shape.width), static_cast<double>(preset->shape.vocab))
                        : plan::gpt_parameters(shape.layers, shape.width, vocab, shape.seq);
  print_plan(req, shape.layers > 0 || mlp ? model : "custom", shape, params);
  return 0;
}

}  // namespace lockstep::cli
