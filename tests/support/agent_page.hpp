// What a real agent serves for rank 0 of node 0 (trimmed): every series exists from its start,
// at 0 (tests/operator/reconcile/progress_test.cpp, tests/operator/controller/agent_reader_test.cpp).
#pragma once

#include <sstream>
#include <string>

namespace lockstep::test {

inline std::string agent_page(double step, double total, double reports, double tokens = 0) {
  const std::string l = "{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"}";
  auto num = [](double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  };
  return "lockstep_step" + l + " " + num(step) + "\nlockstep_total_steps" + l + " " + num(total) +
         "\nlockstep_steps_total" + l + " " + num(reports) + "\nlockstep_tokens_total" + l + " " + num(tokens) + "\n";
}

}  // namespace lockstep::test
