// bench/trainer: DDP on CPU with Gloo, under lockstep-agent, in the same run:
//  1. step time of 2-rank DDP against 1 rank at the same per-rank batch (scaling cost);
//  2. the share of communication hidden behind backward: buckets all-reduced during
//     backward against the same buckets all-reduced after it (--no-overlap).
// Target (issue #5): at least 60% of communication hidden on the tiny preset.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <cstdio>
#include <map>
#include <thread>

#include "lockstep/flags.hpp"
#include "lockstep/process.hpp"
#include "bench_util.hpp"

namespace bench = lockstep::bench;

using namespace std::chrono_literals;

namespace {

std::map<std::string, double> run(int nproc, const std::vector<std::string>& extra, const std::string& stats) {
  std::vector<std::string> argv = {LOCKSTEP_AGENT_BIN, "--nproc-per-node", std::to_string(nproc), "--master-port",
                                   std::to_string(lockstep::free_loopback_port()), "--no-metrics", "--",
                                   LOCKSTEP_TRAINER_BIN, "--device", "cpu", "--stats-file", stats};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto r = lockstep::run_capture(argv, {{"GLOO_SOCKET_IFNAME", "lo"}, {"MASTER_ADDR", "127.0.0.1"}}, 600s);
  if (!r.status.success()) {
    std::cerr << r.output;
    std::exit(1);
  }
  std::map<std::string, double> out;
  std::ifstream in(stats);
  std::string k;
  double v;
  while (in >> k >> v) out[k] = v;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "tiny", steps = "60", batch = "16";
  int rounds = 3;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string v;
      using namespace lockstep::flags;
      if (match(argc, argv, i, "--model", v)) model = v;
      else if (match(argc, argv, i, "--steps", v)) steps = v;
      else if (match(argc, argv, i, "--batch-size", v)) batch = v;
      else if (match(argc, argv, i, "--rounds", v)) rounds = to_int("--rounds", v, 1, 20);
      else throw FlagError(std::string("unknown flag '") + argv[i] + "' (flags: --model --steps --batch-size --rounds)");
    }
  } catch (const std::exception& e) {
    std::cerr << "lockstep-bench-trainer: " << e.what() << "\n";
    return 2;
  }
  std::string stats = "/tmp/lockstep-bench-trainer-" + std::to_string(::getpid());
  std::vector<std::string> common = {"--model", model, "--steps", steps, "--batch-size", batch, "--log-every", "1000"};
  std::cout << "bench/trainer: " << model << ", " << steps << " steps, batch " << batch << " per rank, Gloo on CPU, "
            << rounds << " rounds" << std::endl;
  std::vector<double> one_step, two_step, hidden_on, hidden_off, comm_share_on;
  for (int r = 1; r <= rounds; ++r) {
    auto one = run(1, common, stats);
    auto on = run(2, common, stats);
    auto off_args = common;
    off_args.push_back("--no-overlap");
    auto off = run(2, off_args, stats);
    one_step.push_back(one["step_s_median"]);
    two_step.push_back(on["step_s_median"]);
    hidden_on.push_back(1 - on["exposed_s"] / on["comm_s"]);
    hidden_off.push_back(1 - off["exposed_s"] / off["comm_s"]);
    comm_share_on.push_back(on["comm_s"] / (on["steps"] * on["step_s_median"]));
    std::cout << std::fixed << std::setprecision(2) << "  round " << r << ": step 1 rank " << one["step_s_median"] * 1000
              << " ms, 2 ranks " << on["step_s_median"] * 1000 << " ms (no overlap " << off["step_s_median"] * 1000
              << " ms); hidden " << hidden_on.back() * 100 << "% vs " << hidden_off.back() * 100 << "%" << std::endl;
  }
  std::cout << std::fixed << std::setprecision(3) << "\nresults (medians of " << rounds << " rounds; "
            << std::thread::hardware_concurrency() << " cores)\n"
            << "  step time, 2-rank DDP / 1 rank at the same per-rank batch: " << bench::percentile(two_step, 0.5) / bench::percentile(one_step, 0.5)
            << " (" << bench::percentile(two_step, 0.5) * 1000 << " ms vs " << bench::percentile(one_step, 0.5) * 1000 << " ms)\n"
            << std::setprecision(1) << "  communication hidden behind backward: " << bench::percentile(hidden_on, 0.5) * 100
            << "% with bucketed overlap vs " << bench::percentile(hidden_off, 0.5) * 100 << "% all-reducing after backward (target >= 60%)\n"
            << "  communication time / step time (2 ranks): " << bench::percentile(comm_share_on, 0.5) * 100 << "%\n"
            << (bench::percentile(hidden_on, 0.5) >= 0.6 ? "target met\n" : "target NOT met\n");
  std::remove(stats.c_str());
  return 0;
}
