#include "plan.hpp"

#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "memory_plan.hpp"
#include "validate.hpp"

namespace lockstep::cli {
namespace {

double parse_count(const std::string& flag, const std::string& v) {  // 124M, 7.5B, 1.3e9
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  std::string unit = end ? end : "";
  double mult = unit.empty() ? 1 : unit == "K" || unit == "k" ? 1e3 : unit == "M" ? 1e6 : unit == "B" || unit == "G" ? 1e9 : unit == "T" ? 1e12 : -1;
  if (end == v.c_str() || mult < 0 || !(x > 0))
    throw std::invalid_argument(flag + ": expected a positive number such as 124M, 7.5B or 1.3e9, got '" + v + "'");
  return x * mult;
}

std::string gb(double bytes) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(bytes >= 1e10 ? 1 : bytes >= 1e9 ? 1 : 3) << bytes / 1e9 << " GB";
  return o.str();
}

}  // namespace

int plan_command(const std::vector<std::string>& args) {
  std::string model = "gpt2-124m", file;
  bool model_given = false;
  double params = 0, gpus = 8, memory_gb = 80, seq = -1, micro = 1;
  bool checkpointing = false;
  try {
    for (size_t i = 0; i < args.size(); ++i) {
      auto next = [&]() -> std::string {
        if (i + 1 >= args.size()) throw std::invalid_argument(args[i] + " needs a value");
        return args[++i];
      };
      const std::string& a = args[i];
      if (a == "--model") { model = next(); model_given = true; }
      else if (a == "--params") params = parse_count(a, next());
      else if (a == "--file") file = next();
      else if (a == "--gpus") gpus = parse_count(a, next());
      else if (a == "--gpu-memory-gb") memory_gb = parse_count(a, next());
      else if (a == "--seq-len") seq = parse_count(a, next());
      else if (a == "--micro-batch") micro = parse_count(a, next());
      else if (a == "--activation-checkpointing") checkpointing = true;
      else throw std::invalid_argument("unknown flag '" + a + "' (see lockstep plan --help)");
    }
  } catch (const std::invalid_argument& e) {
    std::cerr << "lockstep plan: " << e.what() << "\n";
    return 2;
  }
  // The model's shape: a preset, or a TrainingJob's --model and size flags.
  if (!file.empty()) {
    auto job = load_yaml_file(file);
    auto errors = validate_trainingjob(job);
    if (!errors.empty()) {
      for (const auto& e : errors) std::cerr << file << ": " << e << "\n";
      return 1;
    }
    const auto& spec = job["spec"];
    gpus = spec.value("nodes", 1) * spec.value("procsPerNode", 1);
    for (const auto& a : spec.value("trainer", nlohmann::json::object()).value("args", nlohmann::json::array())) {
      std::string s = a;
      if (s.rfind("--model=", 0) == 0) model = s.substr(8);
      if (s.rfind("--batch-size=", 0) == 0) micro = std::stod(s.substr(13));
    }
  }
  plan::TransformerShape shape;
  double vocab = 50257;
  if (params > 0 && !model_given && file.empty()) model = "custom";  // a bare count: model states only
  if (model == "custom") {}
  else if (model == "gpt2-124m") shape = {12, 768, 12, 1024, micro};
  else if (model == "tiny") { shape = {2, 64, 2, 64, micro}; vocab = 256; }
  else if (params == 0) {
    std::cerr << "lockstep plan: unknown --model '" << model << "'; valid: tiny, gpt2-124m, or give --params\n";
    return 2;
  }
  if (seq > 0) shape.seq = seq;
  if (params == 0) params = plan::gpt_parameters(shape.layers, shape.width, vocab, shape.seq);
  const int n = static_cast<int>(gpus);
  const double act = shape.layers > 0 ? plan::activation_bytes(shape, checkpointing) : 0;
  std::cout << std::fixed << std::setprecision(1) << "model: " << (shape.layers > 0 ? model : "custom") << ", "
            << params / 1e6 << "M parameters; " << n << " GPUs x " << memory_gb << " GB; mixed-precision Adam (16 bytes/parameter)\n";
  if (shape.layers > 0)
    std::cout << "activations per GPU: " << gb(act) << " (sequence " << static_cast<long>(shape.seq) << ", micro-batch "
              << static_cast<long>(shape.micro_batch)
              << (checkpointing ? ", activation checkpointing" : "") << ")\n";
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
  auto choice = plan::choose(params, n, act, memory_gb * 1e9);
  std::cout << "\nrecommended: " << choice.why << "\n";
  return 0;
}

}  // namespace lockstep::cli
