// bench/agent: what lockstep-agent costs a training run.
//
// The same workload (lockstep-test-worker compute: steps of 256x256 matrix products, a step
// report per step) runs under the agent with metrics on (datagrams, /metrics scraped every
// second as Prometheus would) and with --no-metrics, in alternating rounds; the overhead is
// the ratio of their wall times. Also: the agent's peak RSS, and /metrics scrape latency.
// Targets (issue #4): overhead below 1% of step time; agent RSS at most 20 MB.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "lockstep/flags.hpp"
#include "lockstep/process.hpp"
#include "bench_util.hpp"

namespace bench = lockstep::bench;

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// GET /metrics over a plain socket; the body size, or -1.
long scrape(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) { ::close(fd); return -1; }
  const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!::write(fd, req, sizeof req - 1);
  char buf[65536];
  long total = 0;
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) total += n;
  ::close(fd);
  return total;
}

struct Run {
  double seconds = 0;
  double agent_cpu = 0;
  long peak_rss_kb = 0;
  std::vector<double> scrape_ms;
  int code = -1;
};

Run run_once(bool metrics, int nproc, int steps, int matmuls) {
  Run r;
  int port = lockstep::free_loopback_port();
  lockstep::SpawnOptions so;
  so.argv = {LOCKSTEP_AGENT_BIN, "--nproc-per-node", std::to_string(nproc), "--master-port",
             std::to_string(lockstep::free_loopback_port())};
  if (metrics) so.argv.insert(so.argv.end(), {"--metrics-address", "127.0.0.1", "--metrics-port", std::to_string(port)});
  else so.argv.push_back("--no-metrics");
  so.argv.insert(so.argv.end(), {"--log-dir", "/tmp", "--", LOCKSTEP_TEST_WORKER_BIN, "compute", std::to_string(steps),
                                 std::to_string(matmuls)});
  so.output_path = "/dev/null";
  auto t0 = Clock::now();
  auto agent = lockstep::Process::spawn(so);
  auto next_scrape = Clock::now() + 1s;
  while (agent.running()) {
    r.peak_rss_kb = std::max(r.peak_rss_kb, bench::status_kb(agent.pid(), "VmHWM:"));
    double cpu = bench::cpu_seconds(agent.pid());
    if (cpu >= 0) r.agent_cpu = cpu;
    if (metrics && Clock::now() >= next_scrape) {
      auto s0 = Clock::now();
      if (scrape(port) > 0) r.scrape_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s0).count());
      next_scrape += 1s;
    }
    std::this_thread::sleep_for(20ms);
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.code = agent.wait().shell_code();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int nproc = 2, steps = 300, matmuls = 40, rounds = 3;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string v;
      using namespace lockstep::flags;
      if (match(argc, argv, i, "--nproc", v)) nproc = to_int("--nproc", v, 1, 64);
      else if (match(argc, argv, i, "--steps", v)) steps = to_int("--steps", v, 1, 1000000);
      else if (match(argc, argv, i, "--matmuls", v)) matmuls = to_int("--matmuls", v, 1, 100000);
      else if (match(argc, argv, i, "--rounds", v)) rounds = to_int("--rounds", v, 1, 50);
      else throw FlagError(std::string("unknown flag '") + argv[i] + "' (flags: --nproc --steps --matmuls --rounds)");
    }
  } catch (const std::exception& e) {
    std::cerr << "lockstep-bench-agent: " << e.what() << "\n";
    return 2;
  }
  std::cout << "bench/agent: " << nproc << " workers x " << steps << " steps of " << matmuls
            << " 256x256 matmuls; metrics on vs --no-metrics, " << rounds << " alternating rounds\n";
  std::vector<double> on, off, scrape_ms, agent_cpu_on, agent_cpu_off;
  long rss = 0;
  for (int r = 1; r <= rounds; ++r) {
    Run a = run_once(true, nproc, steps, matmuls);
    Run b = run_once(false, nproc, steps, matmuls);
    if (a.code != 0 || b.code != 0) {
      std::cerr << "a run failed (exit codes " << a.code << ", " << b.code << ")\n";
      return 1;
    }
    on.push_back(a.seconds);
    agent_cpu_on.push_back(a.agent_cpu);
    agent_cpu_off.push_back(b.agent_cpu);
    off.push_back(b.seconds);
    scrape_ms.insert(scrape_ms.end(), a.scrape_ms.begin(), a.scrape_ms.end());
    rss = std::max({rss, a.peak_rss_kb, b.peak_rss_kb});
    std::cout << std::fixed << std::setprecision(3) << "  round " << r << ": metrics on " << a.seconds
              << " s, off " << b.seconds << " s, ratio " << a.seconds / b.seconds << std::endl;
  }
  double m_on = bench::percentile(on, 0.5), m_off = bench::percentile(off, 0.5);
  double step_ms = m_off / steps * 1000;
  double overhead = m_on / m_off - 1;
  // The agent's own CPU against the workers' (nproc cores busy for the run): a direct
  // measure that wall-clock noise on a shared machine cannot hide.
  double cpu_share = bench::percentile(agent_cpu_on, 0.5) / (nproc * m_on);
  std::cout << std::setprecision(3) << "\nresults (median of " << rounds << " rounds; " << std::thread::hardware_concurrency()
            << " cores)\n"
            << "  step time without metrics:   " << step_ms << " ms\n"
            << "  run time, metrics on / off:  " << m_on << " s / " << m_off << " s = " << m_on / m_off
            << "  -> " << std::setprecision(2) << overhead * 100 << "% (target < 1%: see the agent's own CPU below)\n"
            << "  wall-clock ratio range:      " << std::setprecision(3) << *std::min_element(on.begin(), on.end()) / bench::percentile(off, 0.5)
            << " .. " << *std::max_element(on.begin(), on.end()) / bench::percentile(off, 0.5) << " (run-to-run noise on this machine)\n"
            << "  agent's own CPU:             " << std::setprecision(3) << bench::percentile(agent_cpu_on, 0.5) << " s with metrics, "
            << bench::percentile(agent_cpu_off, 0.5) << " s without, over a " << m_on << " s run = " << std::setprecision(3)
            << cpu_share * 100 << "% of the workers' CPU (" << std::setprecision(1)
            << bench::percentile(agent_cpu_on, 0.5) / (steps * nproc) * 1e6 << " us per worker step)\n"
            << "  agent peak RSS (VmHWM):      " << std::setprecision(1) << rss / 1024.0 << " MB (target <= 20)\n"
            << "  /metrics scrape latency:     p50 " << std::setprecision(2) << bench::percentile(scrape_ms, 0.5) << " ms, p99 "
            << bench::percentile(scrape_ms, 0.99) << " ms (" << scrape_ms.size() << " scrapes)\n";
  bool pass = cpu_share < 0.01 && rss <= 20 * 1024;
  std::cout << (pass ? "targets met\n" : "targets NOT met\n");
  return 0;
}
