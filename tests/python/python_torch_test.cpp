// The CPU-only Python torch that scripts/python-torch.sh makes from the pinned PyPI wheel (its CPU
// libraries, stubs in place of the CUDA ones), used as the host tests use it: the host's python3
// with the tree on PYTHONPATH (LOCKSTEP_PYTHON_TORCH, which scripts/test.sh sets). Python runs with
// -S, so nothing of the host's own site-packages can stand in for what the tree lacks.
//   - `import torch` gives the pinned version, from the tree, and no CUDA;
//   - autograd's gradient of sum((tanh(w*x) - y)^2) equals the one worked out by hand here;
//   - two torchrun-style processes (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) train a Linear layer
//     under DDP on Gloo with different data: both see the mean of their gradients, worked out by hand
//     here, take the same SGD step, record the all-reduce in the CPU profiler, and round-trip their
//     state through torch.save/torch.load.
// Without LOCKSTEP_PYTHON_TORCH it says SKIPPED, or fails under LOCKSTEP_REQUIRE_ALL=1.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "lockstep/process.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using lockstep::test::env_or;
using lockstep::test::read_file;

namespace {

const std::string kSource = LOCKSTEP_SOURCE_DIR;
const std::string kScripts = kSource + "/tests/python";

std::string tree() { return env_or("LOCKSTEP_PYTHON_TORCH", ""); }
bool require_all() { return env_or("LOCKSTEP_REQUIRE_ALL", "") == "1"; }

bool on_path(const std::string& tool) {
  std::istringstream path(env_or("PATH", ""));
  for (std::string dir; std::getline(path, dir, ':');)
    if (!dir.empty() && ::access((dir + "/" + tool).c_str(), X_OK) == 0) return true;
  return false;
}

// Why this suite cannot run here, or "" when it can.
std::string missing_prerequisite() {
  if (tree().empty())
    return "LOCKSTEP_PYTHON_TORCH is not set; scripts/python-torch.sh makes the tree (scripts/setup.sh runs it) "
           "and scripts/test.sh sets it";
  if (!on_path("python3")) return "python3 not found on PATH";
  return "";
}

#define REQUIRE_PYTHON_TORCH()                                                                         \
  do {                                                                                                 \
    const std::string why = missing_prerequisite();                                                    \
    if (!why.empty()) {                                                                                \
      if (require_all()) FAIL() << why << " (LOCKSTEP_REQUIRE_ALL=1)";                                 \
      GTEST_SKIP() << "SKIPPED: " << why;                                                              \
    }                                                                                                  \
    ASSERT_TRUE(fs::exists(tree() + "/torch/__init__.py"))                                             \
        << "LOCKSTEP_PYTHON_TORCH=" << tree() << " holds no torch/__init__.py; run scripts/python-torch.sh"; \
  } while (0)

// TORCH_VERSION as scripts/versions.env pins it.
std::string pinned_torch_version() {
  std::smatch m;
  const std::string env = read_file(kSource + "/scripts/versions.env");
  return std::regex_search(env, m, std::regex(R"((^|\n)TORCH_VERSION=([^\s]+))")) ? m[2].str() : "";
}

// The environment every Python process gets: the tree, one thread, and nothing written into the tree.
std::map<std::string, std::string> python_env() {
  return {{"PYTHONPATH", tree()}, {"PYTHONDONTWRITEBYTECODE", "1"}, {"OMP_NUM_THREADS", "1"}};
}

// The JSON of the line a script prints as `RESULT {...}`, or null.
json result_of(const std::string& output) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("RESULT ", 0) == 0) return json::parse(line.substr(7), nullptr, false);
  return json();
}

// check_torch.py's run, once for the tests that read it (importing torch takes seconds).
const json kCheckInputs = {{"w", {0.5, -1.5, 2.0}}, {"x", {1.0, 2.0, -0.5}}, {"y", {0.25, -0.75, 0.1}}};
const lockstep::RunResult& check_run() {
  static const lockstep::RunResult r = lockstep::run_capture(
      {"python3", "-S", kScripts + "/check_torch.py", kCheckInputs.dump()}, python_env(), 300s);
  return r;
}

}  // namespace

TEST(PythonTorch, ImportsThePinnedVersionFromTheTreeWithoutCuda) {
  REQUIRE_PYTHON_TORCH();
  const auto& r = check_run();
  ASSERT_FALSE(r.timed_out) << r.output;
  ASSERT_TRUE(r.status.success()) << r.status.describe() << "\n" << r.output;
  const json res = result_of(r.output);
  ASSERT_TRUE(res.is_object()) << "no RESULT line:\n" << r.output;
  const std::string want = pinned_torch_version();
  ASSERT_FALSE(want.empty()) << "no TORCH_VERSION in scripts/versions.env";
  // The wheel's version is 2.11.0+cu130: a local part, but the release is the pinned one.
  const std::string version = res["version"];
  EXPECT_EQ(version.substr(0, version.find('+')), want) << version;
  EXPECT_EQ(fs::weakly_canonical(res["file"].get<std::string>()), fs::weakly_canonical(tree() + "/torch/__init__.py"));
  EXPECT_EQ(res["cuda_available"], false);
  EXPECT_EQ(res["cuda_device_count"], 0);
}

TEST(PythonTorch, AutogradGivesTheGradientWorkedOutByHand) {
  REQUIRE_PYTHON_TORCH();
  const auto& r = check_run();
  ASSERT_TRUE(r.status.success()) << r.status.describe() << "\n" << r.output;
  const json res = result_of(r.output);
  ASSERT_TRUE(res.is_object()) << "no RESULT line:\n" << r.output;
  // L = sum_i (tanh(w_i x_i) - y_i)^2, so dL/dw_i = 2 (tanh(w_i x_i) - y_i) (1 - tanh(w_i x_i)^2) x_i.
  const auto w = kCheckInputs["w"].get<std::vector<double>>(), x = kCheckInputs["x"].get<std::vector<double>>(),
             y = kCheckInputs["y"].get<std::vector<double>>();
  double loss = 0;
  ASSERT_EQ(res["grad"].size(), w.size()) << r.output;
  for (size_t i = 0; i < w.size(); ++i) {
    const double t = std::tanh(w[i] * x[i]);
    loss += (t - y[i]) * (t - y[i]);
    EXPECT_NEAR(res["grad"][i].get<double>(), 2 * (t - y[i]) * (1 - t * t) * x[i], 1e-12) << "w[" << i << "]";
  }
  EXPECT_NEAR(res["loss"].get<double>(), loss, 1e-12);
}

TEST(PythonTorch, TwoGlooRanksTrainUnderDdpWithTheMeanOfTheirGradients) {
  REQUIRE_PYTHON_TORCH();
  // Linear(3, 1): weight w, bias b; rank r's loss is sum_j (w.x_rj + b - t_rj)^2 over its two rows.
  const std::vector<double> w = {0.1, -0.2, 0.3};
  const double b = 0.05, lr = 0.1;
  const std::vector<std::vector<std::vector<double>>> inputs = {{{1, 2, -1}, {0.5, 0, 1}}, {{2, 4, -2}, {0.5, 1, 1}}};
  const std::vector<std::vector<double>> targets = {{1, -1}, {0.5, 2}};
  const int world = 2;

  // By hand: d/dw = sum_j 2 e_rj x_rj and d/db = sum_j 2 e_rj with e_rj = w.x_rj + b - t_rj; DDP's
  // all-reduce leaves every rank the mean over ranks.
  std::vector<std::vector<double>> local_w(world, std::vector<double>(w.size(), 0));
  std::vector<double> local_b(world, 0), mean_w(w.size(), 0);
  double mean_b = 0;
  for (int r = 0; r < world; ++r) {
    for (size_t j = 0; j < inputs[r].size(); ++j) {
      double e = b - targets[r][j];
      for (size_t k = 0; k < w.size(); ++k) e += w[k] * inputs[r][j][k];
      for (size_t k = 0; k < w.size(); ++k) local_w[r][k] += 2 * e * inputs[r][j][k];
      local_b[r] += 2 * e;
    }
    for (size_t k = 0; k < w.size(); ++k) mean_w[k] += local_w[r][k] / world;
    mean_b += local_b[r] / world;
  }
  // The ranks' own gradients differ from the mean, so a run that did not all-reduce fails below.
  for (int r = 0; r < world; ++r) ASSERT_GT(std::abs(local_b[r] - mean_b), 0.1) << "rank " << r;

  const json job = {{"weight", w}, {"bias", b}, {"inputs", inputs}, {"targets", targets}, {"lr", lr}};
  const std::string dir = ::testing::TempDir() + "/python-torch-ddp-" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const int port = lockstep::free_loopback_port();
  std::vector<lockstep::Process> ranks;
  for (int r = 0; r < world; ++r) {
    lockstep::SpawnOptions so;
    so.argv = {"python3", "-S", kScripts + "/ddp_gloo.py", job.dump()};
    so.env = python_env();
    so.env.insert({{"RANK", std::to_string(r)}, {"LOCAL_RANK", std::to_string(r)}, {"WORLD_SIZE", std::to_string(world)},
                   {"LOCAL_WORLD_SIZE", std::to_string(world)}, {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", std::to_string(port)}});
    so.output_path = dir + "/rank-" + std::to_string(r) + ".log";
    ranks.push_back(lockstep::Process::spawn(so));
  }
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::string log = dir + "/rank-" + std::to_string(r) + ".log";
    auto st = ranks[r].wait_for(300s);
    if (!st) st = ranks[r].terminate(2s);
    ASSERT_TRUE(st->success()) << st->describe() << "\n" << read_file(log);
    const json res = result_of(read_file(log));
    ASSERT_TRUE(res.is_object()) << "no RESULT line:\n" << read_file(log);
    EXPECT_EQ(res["rank"], r);
    EXPECT_EQ(res["world_size"], world);
    EXPECT_EQ(res["backend"], "gloo");
    ASSERT_EQ(res["grad_weight"].size(), w.size()) << read_file(log);
    for (size_t k = 0; k < w.size(); ++k) {
      EXPECT_NEAR(res["grad_weight"][k].get<double>(), mean_w[k], 1e-12) << "d/dw[" << k << "]";
      EXPECT_NEAR(res["weight"][k].get<double>(), w[k] - lr * mean_w[k], 1e-12) << "w[" << k << "] after the step";
    }
    EXPECT_NEAR(res["grad_bias"].get<double>(), mean_b, 1e-12);
    EXPECT_NEAR(res["bias"].get<double>(), b - lr * mean_b, 1e-12);
    const auto profiled = res["profiled"].get<std::vector<std::string>>();
    // c10d::allreduce_ is DDP's all-reduce as dispatched on the rank's own thread; Gloo's own
    // "gloo:all_reduce" event is recorded on Gloo's thread when the work ends, which on a busy
    // machine can be after the profiler stopped (seen: rank 1 lacked it once, c10d's was there).
    for (const char* op : {"aten::linear", "c10d::allreduce_", "DistributedDataParallel.forward"})
      EXPECT_NE(std::find(profiled.begin(), profiled.end(), op), profiled.end()) << op << " not in " << res["profiled"];
    EXPECT_EQ(res["state_dict_roundtrip"], true);
  }
}
