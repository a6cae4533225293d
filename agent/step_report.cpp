#include "step_report.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "lockstep/contract.hpp"

namespace lockstep::agent {
namespace {

namespace report = lockstep::contract::report;

// A token as it may appear in a log line: bounded, printable ASCII only, since a report
// is untrusted bytes (binary, invalid UTF-8, control characters).
std::string quote(const std::string& token) {
  std::string out;
  for (size_t i = 0; i < token.size() && i < 40; ++i) {
    unsigned char c = static_cast<unsigned char>(token[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (token.size() > 40) out += "...";
  return "'" + out + "'";
}

// Keys are names: ASCII letters, digits, '_' and '.', so unknown ones can be ignored safely.
bool valid_key(const std::string& key) {
  if (key.empty() || key.size() > 64) return false;
  for (char c : key)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.')) return false;
  return true;
}

bool valid_op(const std::string& op) {
  if (op.empty() || op.size() > kMaxOpNameLength) return false;
  for (char c : op)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

}  // namespace

std::optional<StepReport> parse_step_report(const std::string& line, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<StepReport> {
    if (error) *error = why;
    return std::nullopt;
  };
  if (line.size() > kMaxReportBytes)
    return fail("report of " + std::to_string(line.size()) + " bytes exceeds the " + std::to_string(kMaxReportBytes) +
                "-byte limit");
  StepReport r;
  std::map<std::string, bool> seen;
  size_t pos = 0;
  // Tokens are separated by spaces, tabs or line ends; a trailing newline is allowed.
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (pos < line.size()) {
    while (pos < line.size() && is_space(line[pos])) ++pos;
    if (pos == line.size()) break;
    size_t end = pos;
    while (end < line.size() && !is_space(line[end])) ++end;
    std::string token = line.substr(pos, end - pos);
    pos = end;
    auto eq = token.find('=');
    if (eq == std::string::npos || eq == 0) return fail(quote(token) + " is not key=value");
    std::string key = token.substr(0, eq), text = token.substr(eq + 1);
    if (!valid_key(key)) return fail("key " + quote(key) + " is not a name of up to 64 characters of A-Z, a-z, 0-9, _ and .");
    if (seen.count(key)) return fail("key " + quote(key) + " appears twice");
    seen[key] = true;
    // strtod also reads inf, nan and hex; the whole value must be consumed (a NUL byte
    // would otherwise end it early) and finite and within bounds.
    char* endp = nullptr;
    errno = 0;
    double v = std::strtod(text.c_str(), &endp);
    if (text.empty() || endp != text.c_str() + text.size() || errno || !std::isfinite(v))
      return fail("value of " + quote(key) + " is not a number (finite)");
    if (std::fabs(v) > kMaxReportValue) return fail("value of " + quote(key) + " is out of range");
    if (v < 0 && key != report::kLoss) return fail("value of " + quote(key) + " is negative");
    if (key == report::kStep) {
      // Digits only, below 2^53 (where a double stops holding every integer): no cast of a
      // huge double, and the same step for every reader of the series.
      if (text.size() > 16 || text.find_first_not_of("0123456789") != std::string::npos ||
          std::strtoll(text.c_str(), nullptr, 10) >= (1LL << 53))
        return fail("step must be a non-negative integer below 2^53");
      r.step = std::strtoll(text.c_str(), nullptr, 10);
    } else if (key == report::kStepSeconds) r.step_s = v;
    else if (key == report::kComputeSeconds) r.compute_s = v;
    else if (key == report::kCommSeconds) r.comm_s = v;
    else if (key == report::kExposedCommSeconds) r.exposed_comm_s = v;
    else if (key == report::kTokens) r.tokens = v;
    else if (key == report::kFlops) r.flops = v;
    else if (key == report::kLoss) r.loss = v;
    else if (key == report::kMemBytes) r.mem_bytes = v;
    else if (key == report::kTotalSteps) r.total_steps = v;
    else if (const auto dot = key.find('.'); dot != std::string::npos) {
      // Per collective: comm_s.<op>, comm_bytes.<op>, exposed_comm_s.<op>, and NCCL's own
      // nccl_s.<op>, nccl_bytes.<op>, nccl_count.<op>. The op becomes a label value: a
      // bounded name, so a broken sender cannot mint series without end.
      const std::string kind = key.substr(0, dot), op = key.substr(dot + 1);
      auto* by_op = kind == report::kCommSeconds ? &r.comm_s_by_op
                    : kind == report::kCommBytes ? &r.comm_bytes_by_op
                    : kind == report::kExposedCommSeconds ? &r.exposed_comm_s_by_op
                    : kind == report::kNcclSeconds ? &r.nccl_s_by_op
                    : kind == report::kNcclBytes ? &r.nccl_bytes_by_op
                    : kind == report::kNcclCount ? &r.nccl_count_by_op : nullptr;
      if (by_op) {
        if (!valid_op(op)) return fail("collective name in " + quote(key) + " must be 1-" + std::to_string(kMaxOpNameLength) + " characters of a-z, 0-9 and _");
        (*by_op)[op] = v;
      }
    }
    // other keys: ignored (forward compatible)
  }
  const bool nccl = !r.nccl_s_by_op.empty() || !r.nccl_bytes_by_op.empty() || !r.nccl_count_by_op.empty();
  if (r.step < 0 && !nccl) return fail("no step=N (nor NCCL figures: nccl_s.<op>, nccl_bytes.<op>, nccl_count.<op>)");
  return r;
}

}  // namespace lockstep::agent
