// LibTorch as the build set-up provides it: CPU tensors, autograd, and c10d with a TCPStore
// rendezvous and the Gloo backend, between two ranks. If this fails, nothing in trainer/ can work.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <thread>

#include "lockstep/process.hpp"

TEST(LibTorch, AutogradOnCpu) {
  auto x = torch::tensor({1.0, 2.0, 3.0}, torch::requires_grad());
  auto y = (x * x).sum();  // dy/dx = 2x
  y.backward();
  EXPECT_TRUE(torch::allclose(x.grad(), torch::tensor({2.0, 4.0, 6.0})));
}

TEST(LibTorch, GlooAllReduceBetweenTwoRanks) {
  const int world = 2;
  const int port = lockstep::free_loopback_port();
  std::vector<at::Tensor> results(world);
  auto rank_main = [&](int rank) {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(port);
    opts.isServer = rank == 0;
    opts.numWorkers = world;
    opts.timeout = std::chrono::seconds(60);
    auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
    auto pg_opts = c10d::ProcessGroupGloo::Options::create();
    pg_opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, pg_opts);
    std::vector<at::Tensor> t{torch::arange(4, torch::kFloat32) * (rank + 1)};
    pg->allreduce(t)->wait();
    results[rank] = t[0];
  };
  std::thread r0(rank_main, 0), r1(rank_main, 1);
  r0.join();
  r1.join();
  auto expected = torch::arange(4, torch::kFloat32) * 3;  // (1 + 2) * [0, 1, 2, 3]
  EXPECT_TRUE(torch::equal(results[0], expected)) << results[0];
  EXPECT_TRUE(torch::equal(results[1], expected)) << results[1];
}
