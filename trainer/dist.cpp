#include "dist.hpp"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>
#include <stdexcept>

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
  d.rank = env_int("RANK", 0);
  d.world = env_int("WORLD_SIZE", 1);
  d.local_rank = env_int("LOCAL_RANK", 0);
  if (d.world < 1 || d.rank >= d.world)
    throw std::runtime_error("RANK=" + std::to_string(d.rank) + " must be below WORLD_SIZE=" + std::to_string(d.world));
  if (d.world == 1) return d;
  const char* addr = std::getenv("MASTER_ADDR");
  if (!addr || !*addr) throw std::runtime_error("MASTER_ADDR is not set; run under lockstep-agent or torchrun");
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(env_int("MASTER_PORT", 29500));
  opts.isServer = d.rank == 0;
  opts.numWorkers = d.world;
  opts.timeout = std::chrono::seconds(env_int("LOCKSTEP_RENDEZVOUS_TIMEOUT_S", 300));
  d.store = c10::make_intrusive<c10d::TCPStore>(addr, opts);

  std::string which = backend == "auto" ? (device.is_cuda() ? "nccl" : "gloo") : backend;
  if (which == "gloo") {
    auto o = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(env_int("LOCKSTEP_COLLECTIVE_TIMEOUT_S", 600)));
    // Gloo talks over the interface that resolves this host's name; on one machine, loopback.
    const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
    o->devices.push_back(iface ? c10d::ProcessGroupGloo::createDeviceForInterface(iface)
                               : c10d::ProcessGroupGloo::createDefaultDevice());
    d.pg = c10::make_intrusive<c10d::ProcessGroupGloo>(d.store, d.rank, d.world, o);
  } else if (which == "nccl") {
#ifdef USE_C10D_NCCL
    auto o = c10d::ProcessGroupNCCL::Options::create();
    d.pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(d.store, d.rank, d.world, o);
#else
    throw std::runtime_error("--backend nccl: this build has no NCCL (build against a CUDA PyTorch)");
#endif
  } else {
    throw std::runtime_error("--backend: expected auto, gloo or nccl, got '" + backend + "'");
  }
  d.backend = which;
  return d;
}

}  // namespace lockstep::trainer
