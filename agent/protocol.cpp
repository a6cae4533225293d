#include "protocol.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace lockstep::agent {

std::optional<StepReport> parse_step_report(const std::string& line, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<StepReport> {
    if (error) *error = why;
    return std::nullopt;
  };
  StepReport r;
  std::istringstream in(line);
  std::string token;
  while (in >> token) {
    auto eq = token.find('=');
    if (eq == std::string::npos || eq == 0) return fail("'" + token + "' is not key=value");
    std::string key = token.substr(0, eq), text = token.substr(eq + 1);
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end || errno || !std::isfinite(v)) return fail("value of '" + key + "' is not a number");
    if (key == "step") {
      if (v < 0 || v != std::floor(v)) return fail("step must be a non-negative integer");
      r.step = static_cast<long long>(v);
    } else if (key == "step_s") r.step_s = v;
    else if (key == "compute_s") r.compute_s = v;
    else if (key == "comm_s") r.comm_s = v;
    else if (key == "exposed_comm_s") r.exposed_comm_s = v;
    else if (key == "tokens") r.tokens = v;
    else if (key == "flops") r.flops = v;
    else if (key == "loss") r.loss = v;
    else if (key == "mem_bytes") r.mem_bytes = v;
    else if (key.rfind("comm_s.", 0) == 0 && key.size() > 7) r.comm_s_by_op[key.substr(7)] = v;
    else if (key.rfind("comm_bytes.", 0) == 0 && key.size() > 11) r.comm_bytes_by_op[key.substr(11)] = v;
    // other keys: ignored (forward compatible)
    if (v < 0 && key != "loss") return fail("value of '" + key + "' is negative");
  }
  if (r.step < 0) return fail("no step=N");
  return r;
}

}  // namespace lockstep::agent
