// lockstep-test-worker: a torchrun-style program for the agent's tests.
//   allreduce OUT [FAIL_RANK CODE]  rendezvous at MASTER_ADDR:MASTER_PORT (TCPStore), Gloo
//                                   all-reduce of (RANK+1) five times, reporting a step each
//                                   time; writes the sum to OUT.rank-N; FAIL_RANK exits CODE
//                                   after its second step instead
//   env DIR                         writes its environment to DIR/rank-$RANK.env
//   steps N [then-hang]             reports N steps 50 ms apart, then exits 0 (or hangs)
//   stubborn [READY]                ignores SIGTERM and sleeps (and so does a child it starts);
//                                   with READY, creates that file once SIGTERM is ignored
//   garbage                         sends malformed reports (10: text, bad numbers, NaN, a
//                                   duplicate key, invalid UTF-8, a NUL, empty, 64 KB), then
//                                   2 valid ones, then hangs
//   compute STEPS MATMULS           STEPS steps of MATMULS 256x256 matrix products each,
//                                   reporting every step (bench/agent's workload)
//   busy SECONDS                    keeps a core busy for SECONDS, reporting a step every
//                                   100 ms, then exits 0
//   paced SECONDS MS [RANK F [SLOW_S]]  for SECONDS, steps of MS milliseconds of real time (a
//                                   sleep), each reported with the time it measured as its
//                                   step_s and compute_s; rank RANK's steps take F times as long
//                                   for its first SLOW_S seconds (default: throughout): a straggler
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>

extern char** environ;

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) { std::cerr << name << " is not set\n"; std::exit(90); }
  return std::atoi(v);
}

void report(const std::string& line) {
  const char* path = std::getenv("LOCKSTEP_METRICS_SOCKET");
  if (!path) return;
  int fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
  int sndbuf = 1 << 18;  // room for the 64 KB datagram of `garbage`
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
  ::sendto(fd, line.data(), line.size(), 0, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::close(fd);
}

void step(int n, double loss, int total = 0) {
  report("step=" + std::to_string(n) + " step_s=0.05 compute_s=0.03 comm_s=0.02 exposed_comm_s=0.01 tokens=512 "
         "flops=1e9 loss=" + std::to_string(loss) + " mem_bytes=1048576 comm_s.allreduce=0.02 comm_bytes.allreduce=4096 "
         "exposed_comm_s.allreduce=0.01" + (total > 0 ? " total_steps=" + std::to_string(total) : std::string()));
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "env") {
    std::ofstream out(std::string(argv[2]) + "/rank-" + std::getenv("RANK") + ".env");
    for (char** e = environ; *e; ++e) out << *e << "\n";
    return 0;
  }
  if (mode == "steps") {
    int n = std::atoi(argv[2]);
    for (int i = 1; i <= n; ++i) {
      step(i, 5.0 / i, n);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::cout << "rank " << env_int("RANK") << " reported " << n << " steps" << std::endl;
    if (argc > 3 && std::string(argv[3]) == "then-hang") ::pause();
    // rank 0 stops itself as a SIGSTOPped rank would be; the others wait in a "collective"
    if (argc > 3 && std::string(argv[3]) == "then-stop") {
      if (env_int("RANK") == 0) ::raise(SIGSTOP);
      ::pause();
    }
    return 0;
  }
  if (mode == "stubborn") {
    ::signal(SIGTERM, SIG_IGN);
    if (::fork() == 0) {  // a grandchild, also stubborn, in the same process group
      for (;;) ::pause();
    }
    std::cout << "ignoring SIGTERM" << std::endl;
    if (argc > 2) std::ofstream(argv[2]) << "ready\n";
    for (;;) ::pause();
  }
  if (mode == "garbage") {
    report("this is not a step report");
    report("step=banana");
    report("step=1 step_s=-3");
    report("step=nan");
    report("step=1 step=2");
    report("step=1 loss=\xc3\x28");
    report(std::string("step=1\0garbage", 14));
    report("");
    report("step=1e300");
    report("step=9 loss=1" + std::string(65000, ' '));  // 64 KB: cut at the limit it would parse
    step(1, 2.0);
    step(2, 1.5);
    ::pause();
  }
  if (mode == "busy") {
    using clock = std::chrono::steady_clock;
    const auto end = clock::now() + std::chrono::milliseconds(static_cast<long>(std::atof(argv[2]) * 1000));
    auto next = clock::now();
    volatile double sink = 0;
    for (int i = 0; clock::now() < end;) {
      for (int k = 0; k < 20000; ++k) sink = sink + k * 0.5;
      if (clock::now() >= next) {
        ++i;
        step(i, 1.0 / i);
        next += std::chrono::milliseconds(100);
      }
    }
    std::cout << "rank " << env_int("RANK") << " was busy for " << argv[2] << " s" << std::endl;
    return 0;
  }
  if (mode == "paced") {
    using clock = std::chrono::steady_clock;
    const double seconds = std::atof(argv[2]), ms = std::atof(argv[3]);
    const int slow_rank = argc > 5 ? std::atoi(argv[4]) : -1;
    const double factor = argc > 5 ? std::atof(argv[5]) : 1, slow_s = argc > 6 ? std::atof(argv[6]) : 1e9;
    const int rank = env_int("RANK");
    const auto start = clock::now();
    for (int i = 1; clock::now() - start < std::chrono::duration<double>(seconds); ++i) {
      const bool slow = rank == slow_rank && clock::now() - start < std::chrono::duration<double>(slow_s);
      const auto t0 = clock::now();
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(slow ? ms * factor : ms));
      const double took = std::chrono::duration<double>(clock::now() - t0).count();
      report("step=" + std::to_string(i) + " step_s=" + std::to_string(took) + " compute_s=" + std::to_string(took));
    }
    std::cout << "rank " << rank << " paced for " << argv[2] << " s" << std::endl;
    return 0;
  }
  if (mode == "compute") {
    const int steps = std::atoi(argv[2]), matmuls = std::atoi(argv[3]);
    torch::manual_seed(env_int("RANK"));
    auto a = torch::randn({256, 256}), b = torch::randn({256, 256});
    for (int i = 1; i <= steps; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < matmuls; ++k) a = torch::tanh(torch::mm(a, b) * 0.01);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      report("step=" + std::to_string(i) + " step_s=" + std::to_string(s) + " compute_s=" + std::to_string(s) +
             " comm_s=0 exposed_comm_s=0 tokens=1024 flops=" + std::to_string(2.0 * 256 * 256 * 256 * matmuls) +
             " loss=" + std::to_string(a.abs().mean().item<float>()));
    }
    return 0;
  }
  if (mode == "allreduce") {
    const int rank = env_int("RANK"), world = env_int("WORLD_SIZE"), port = env_int("MASTER_PORT");
    const int fail_rank = argc > 4 ? std::atoi(argv[3]) : -1, fail_code = argc > 4 ? std::atoi(argv[4]) : 0;
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(port);
    opts.isServer = rank == 0;
    opts.numWorkers = world;
    opts.timeout = std::chrono::seconds(60);
    const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
    std::cout << "rank " << rank << " restart count " << (restarts ? restarts : "unset") << std::endl;
    auto store = c10::make_intrusive<c10d::TCPStore>(std::getenv("MASTER_ADDR"), opts);
    auto pg_opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(20));
    pg_opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, pg_opts);
    at::Tensor t;
    for (int i = 1; i <= 5; ++i) {
      if (rank == fail_rank && i == 3) {
        std::cout << "rank " << rank << " failing on purpose with exit code " << fail_code << std::endl;
        std::_Exit(fail_code);
      }
      std::vector<at::Tensor> v{torch::full({4}, static_cast<float>(rank + 1))};
      try {
        pg->allreduce(v)->wait();
      } catch (const std::exception& e) {  // a peer is gone: the trainer's documented code for it
        std::cout << "rank " << rank << ": collective failed: " << e.what() << std::endl;
        std::_Exit(77);
      }
      t = v[0];
      step(i, 1.0 / i);
    }
    std::ofstream(std::string(argv[2]) + ".rank-" + std::to_string(rank)) << t[0].item<float>() << "\n";
    std::cout << "rank " << rank << " of " << world << ": all-reduce sum " << t[0].item<float>() << std::endl;
    return 0;
  }
  std::cerr << "usage: lockstep-test-worker allreduce|env|steps|stubborn|garbage|compute|busy|paced ...\n";
  return 2;
}
