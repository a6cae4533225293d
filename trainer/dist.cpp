#include "dist.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#ifdef LOCKSTEP_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <cstdlib>
#include <stdexcept>

#include "lockstep/contract.hpp"

namespace lockstep::trainer {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end || x < 0) throw std::runtime_error(std::string(name) + "='" + v + "' is not a non-negative integer");
  return static_cast<int>(x);
}

}  // namespace

Dist init_distributed(const std::string& backend, const torch::Device& device) {
  Dist d;
  d.device = device;
  d.rank = env_int("RANK", 0);
  d.world = env_int("WORLD_SIZE", 1);
  d.local_rank = env_int("LOCAL_RANK", 0);
  if (d.world < 1 || d.rank >= d.world)
    throw std::runtime_error("RANK=" + std::to_string(d.rank) + " must be below WORLD_SIZE=" + std::to_string(d.world));
  if (d.world == 1 && backend == "auto") return d;
  if (d.world == 1) {
    d.store = c10::make_intrusive<c10d::HashStore>();
  } else {
    const char* addr = std::getenv("MASTER_ADDR");
    if (!addr || !*addr) throw std::runtime_error("MASTER_ADDR is not set; run under lockstep-agent or torchrun");
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(env_int("MASTER_PORT", 29500));
    opts.isServer = d.rank == 0;
    opts.numWorkers = d.world;
    const int timeout_s = env_int(contract::kRendezvousTimeoutS, 300);
    opts.timeout = std::chrono::seconds(timeout_s);
    try {
      d.store = c10::make_intrusive<c10d::TCPStore>(addr, opts);
    } catch (const std::exception& e) {  // no master, or not every rank joined in time
      throw RendezvousError("rendezvous at MASTER_ADDR=" + std::string(addr) + " MASTER_PORT=" +
                            std::to_string(opts.port) + " failed for rank " + std::to_string(d.rank) + " of " +
                            std::to_string(d.world) + " within LOCKSTEP_RENDEZVOUS_TIMEOUT_S=" + std::to_string(timeout_s) +
                            "s (rank 0 hosts it; is it running?): " + error_text(e));
    }
  }

  std::string which = backend == "auto" ? (device.is_cuda() ? "nccl" : "gloo") : backend;
  if (which == "gloo") {
    auto o = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(env_int(contract::kCollectiveTimeoutS, 600)));
    // Gloo talks over the interface that resolves this host's name; on one machine, loopback.
    const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
    o->devices.push_back(iface ? c10d::ProcessGroupGloo::createDeviceForInterface(iface)
                               : c10d::ProcessGroupGloo::createDefaultDevice());
    try {
      d.pg = c10::make_intrusive<c10d::ProcessGroupGloo>(d.store, d.rank, d.world, o);
    } catch (const std::exception& e) {  // the ranks' connections to each other, through the store
      throw RendezvousError("rank " + std::to_string(d.rank) + " could not connect to its peers (Gloo, interface " +
                            (iface ? std::string("GLOO_SOCKET_IFNAME=") + iface : std::string("of this host's name")) +
                            "): " + error_text(e));
    }
  } else if (which == "nccl") {
    if (!device.is_cuda())
      throw std::invalid_argument("--backend nccl needs a CUDA device, and this rank runs on the CPU (--device, or no GPU visible)");
#ifdef USE_C10D_NCCL
    auto o = c10d::ProcessGroupNCCL::Options::create();
    d.pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(d.store, d.rank, d.world, o);
    d.pg->enableCollectivesTiming();  // CUDA events around each collective (DeviceCommTimer)
#else
    throw std::runtime_error("--backend nccl: this build has no NCCL (build against a CUDA PyTorch)");
#endif
  } else {
    throw std::runtime_error("--backend: expected auto, gloo or nccl, got '" + backend + "'");
  }
  d.backend = which;
  return d;
}

bool is_peer_gone(const std::exception& e) {
  if (dynamic_cast<const c10::DistError*>(&e)) return true;  // DistBackendError (NCCL), DistNetworkError, DistStoreError
  const std::string what = e.what();
  return what.find("gloo/") != std::string::npos;  // [.../gloo/transport/tcp/pair.cc:...] Read error ...: Connection reset
}

std::string error_text(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

void barrier(const Dist& d) {
  if (!d.pg) return;
  std::vector<at::Tensor> t{torch::zeros({1}, torch::TensorOptions().device(d.device))};
  d.pg->allreduce(t)->wait();
}

double DeviceCommTimer::seconds() {
  double total = 0;
  try {
    for (const auto& w : works_) total += static_cast<double>(w->getDuration()) / 1000.0;  // milliseconds
  } catch (const c10::Error&) {
    total = -1;
  }
  works_.clear();
  return total;
}

torch::Device choose_device(const std::string& want) {
  const int local_rank = env_int("LOCAL_RANK", 0);
  if (want == "cpu") return torch::Device(torch::kCPU);
  const bool is_auto = want == "auto", numbered = want.rfind("cuda:", 0) == 0;
  if (!is_auto && want != "cuda" && !numbered)
    throw std::invalid_argument("--device: expected auto, cpu, cuda or cuda:N, got '" + want + "'");
  const int64_t count = torch::cuda::is_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
  if (count == 0) {
    if (is_auto) return torch::Device(torch::kCPU);
#ifdef LOCKSTEP_WITH_CUDA
    throw std::invalid_argument("--device " + want + ": no CUDA device is visible to this process");
#else
    throw std::invalid_argument("--device " + want + ": this build has no CUDA (build against a CUDA PyTorch)");
#endif
  }
  int64_t index = local_rank;
  if (numbered) {
    char* end = nullptr;
    index = std::strtol(want.c_str() + 5, &end, 10);
    if (end == want.c_str() + 5 || *end || index < 0) throw std::invalid_argument("--device: '" + want + "' is not cuda:N with N a device number");
  }
  if (index >= count)
    throw std::invalid_argument((numbered ? "--device " + want : "LOCAL_RANK=" + std::to_string(local_rank)) +
                                " but this process sees " + std::to_string(count) +
                                " CUDA device(s): run at most one worker per GPU (procsPerNode), or --device cpu");
  torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
#ifdef LOCKSTEP_WITH_CUDA
  c10::cuda::set_device(device.index());
#endif
  return device;
}

}  // namespace lockstep::trainer
