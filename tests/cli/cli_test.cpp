// The lockstep command line: validate with the cluster's rules, plan against the ZeRO paper,
// and run TrainingJobs locally to completion (DDP and FSDP), or interrupted with nothing left.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "lockstep/model_shapes.hpp"
#include "lockstep/process.hpp"
#include "test_util.hpp"
#include "validate.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::string cli() { return lockstep::test::env_or("LOCKSTEP_CLI_BIN", "lockstep"); }
std::string src(const std::string& rel) { return std::string(LOCKSTEP_SOURCE_DIR) + "/" + rel; }

lockstep::RunResult lockstep_cmd(std::vector<std::string> args, std::chrono::seconds timeout = 60s) {
  args.insert(args.begin(), cli());
  return lockstep::run_capture(args, {}, timeout);
}



}  // namespace

TEST(Validate, AcceptsEveryExample) {
  for (const auto& e : fs::directory_iterator(src("examples"))) {
    if (e.path().extension() != ".yaml") continue;
    auto r = lockstep_cmd({"validate", e.path().string()});
    EXPECT_EQ(r.status.shell_code(), 0) << e.path() << ": " << r.output;
    EXPECT_NE(r.output.find("valid TrainingJob"), std::string::npos) << r.output;
  }
}

// What a reader copies: every TrainingJob in a ```yaml block of the README and docs/ is one the
// API server would take.
TEST(Validate, AcceptsEveryTrainingJobTheReadmeAndDocsShow) {
  const fs::path dir = fs::temp_directory_path() / ("lockstep-doc-jobs-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<fs::path> pages = {src("README.md")};
  for (const auto& e : fs::directory_iterator(src("docs")))
    if (e.path().extension() == ".md") pages.push_back(e.path());
  int jobs = 0;
  for (const auto& page : pages) {
    std::istringstream in(lockstep::test::read_file(page.string()));
    std::string line, block;
    bool inside = false;
    int at = 0, line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (!inside && line.rfind("```yaml", 0) == 0) { inside = true; block.clear(); at = line_no; continue; }
      if (!inside) continue;
      if (line.rfind("```", 0) != 0) { block += line + "\n"; continue; }
      inside = false;
      if (block.find("kind: TrainingJob") == std::string::npos) continue;
      ++jobs;
      const fs::path f = dir / (page.filename().string() + "-" + std::to_string(at) + ".yaml");
      std::ofstream(f) << block;
      auto r = lockstep_cmd({"validate", f.string()});
      EXPECT_EQ(r.status.shell_code(), 0) << page.filename().string() << ":" << at << ": " << r.output;
    }
  }
  fs::remove_all(dir);
  EXPECT_GT(jobs, 0) << "the README shows a TrainingJob";
}

// The default scheduler ignores PodGroups: an example that asks for gang scheduling names a
// scheduler that honours them (scheduler-plugins' coscheduling), or it would promise what a
// cluster does not do (#11 item 15).
TEST(Examples, AGangExampleNamesAGangScheduler) {
  int gang = 0;
  for (const auto& e : fs::directory_iterator(src("examples"))) {
    if (e.path().extension() != ".yaml") continue;
    std::string text = lockstep::test::read_file(e.path().string());
    if (text.find("gang: true") == std::string::npos) continue;
    ++gang;
    EXPECT_NE(text.find("schedulerName: "), std::string::npos) << e.path() << " asks for gang scheduling but names no schedulerName";
  }
  EXPECT_GT(gang, 0) << "no example shows gang scheduling";
}

// The same corpus crd_test sends to the real API server, with the same expected words.
TEST(Validate, RejectsWhatTheApiServerRejectsWithTheSameMessages) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(src("tests/crd/invalid"))) {
    SCOPED_TRACE(e.path().filename().string());
    std::string text = lockstep::test::read_file(e.path().string());
    auto r = lockstep_cmd({"validate", e.path().string()});
    EXPECT_EQ(r.status.shell_code(), 1) << r.output;
    static const std::regex expect_line("# expect: (.*)");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), expect_line); it != std::sregex_iterator(); ++it)
      EXPECT_NE(r.output.find((*it)[1].str()), std::string::npos) << "lacks '" << (*it)[1] << "':\n" << r.output;
    ++n;
  }
  EXPECT_GE(n, 10);
}

TEST(Validate, KnowsEveryCelRuleOfTheCrd) {
  std::set<std::string> in_crd;
  std::function<void(const YAML::Node&)> walk = [&](const YAML::Node& n) {
    if (n.IsMap()) {
      if (n["x-kubernetes-validations"])
        for (const auto& v : n["x-kubernetes-validations"]) in_crd.insert(v["rule"].as<std::string>());
      for (const auto& kv : n) walk(kv.second);
    } else if (n.IsSequence()) {
      for (const auto& x : n) walk(x);
    }
  };
  walk(YAML::LoadFile(src("crds/lockstep.dev_trainingjobs.yaml")));
  auto known = lockstep::cli::known_cel_rules();
  std::set<std::string> known_set(known.begin(), known.end());
  EXPECT_EQ(in_crd, known_set) << "a CEL rule in the CRD has no counterpart in cli/validate.cpp, or the reverse";
}

// See Note [Queue fields]: the Kueue labels are label values naming a LocalQueue and a
// WorkloadPriorityClass, and the queue label and spec.scheduling.queue agree; each error names
// the field and what is valid. An example queued both ways, agreeing, is valid.
TEST(Validate, TheQueueFieldsAreCheckedAsTheOperatorChecksThem) {
  const fs::path dir = fs::temp_directory_path() / ("lockstep-queue-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto job = [&](const std::string& labels, const std::string& queue) {
    const fs::path f = dir / "job.yaml";
    std::ofstream(f) << "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: q\n  labels: {" << labels
                     << "}\nspec:\n  nodes: 2\n" << (queue.empty() ? "" : "  scheduling: {queue: " + queue + "}\n");
    return lockstep_cmd({"validate", f.string()});
  };
  auto ok = job("kueue.x-k8s.io/queue-name: team-a, kueue.x-k8s.io/priority-class: high", "team-a");
  EXPECT_EQ(ok.status.shell_code(), 0) << ok.output;
  auto torn = job("kueue.x-k8s.io/queue-name: team-a", "team-b");
  EXPECT_NE(torn.status.shell_code(), 0) << torn.output;
  EXPECT_NE(torn.output.find("metadata.labels[kueue.x-k8s.io/queue-name]=team-a and spec.scheduling.queue=team-b name "
                             "different LocalQueues"), std::string::npos) << torn.output;
  auto bad = job("kueue.x-k8s.io/priority-class: \"-high\"", "");
  EXPECT_NE(bad.status.shell_code(), 0) << bad.output;
  EXPECT_NE(bad.output.find("metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("WorkloadPriorityClass"), std::string::npos) << bad.output;
  // Volcano reads a PodGroup Lockstep does not make: said as the CRD and docs say it.
  std::ofstream(dir / "volcano.yaml") << "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: v}\n"
                                         "spec:\n  scheduling: {schedulerName: volcano}\n";
  auto volcano = lockstep_cmd({"validate", (dir / "volcano.yaml").string()});
  EXPECT_NE(volcano.status.shell_code(), 0) << volcano.output;
  EXPECT_NE(volcano.output.find("spec.scheduling.schedulerName: Unsupported value: \"volcano\""), std::string::npos)
      << volcano.output;
  // See Note [Agent injection]: a mount over the agent in the container that runs it, in the
  // operator's words (its PodsBlocked condition says the same).
  std::ofstream(dir / "overlay.yaml") << "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: v}\n"
                                         "spec:\n  template:\n    spec:\n      volumes: [{name: bin, emptyDir: {}}]\n"
                                         "      containers:\n      - name: trainer\n        image: lockstep/trainer:test\n"
                                         "        volumeMounts: [{name: bin, mountPath: /data}, {name: bin, mountPath: "
                                         "/lockstep/agent/lockstep-agent, subPath: x}]\n";
  auto overlay = lockstep_cmd({"validate", (dir / "overlay.yaml").string()});
  EXPECT_NE(overlay.status.shell_code(), 0) << overlay.output;
  EXPECT_NE(overlay.output.find("spec.template.spec.containers[0].volumeMounts[1].mountPath: Invalid value: "
                                "\"/lockstep/agent/lockstep-agent\""), std::string::npos)
      << overlay.output;
  std::ofstream(dir / "plain.yaml") << "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: v}\n"
                                       "spec:\n  scheduling: {schedulerName: volcano, gang: false}\n";
  EXPECT_EQ(lockstep_cmd({"validate", (dir / "plain.yaml").string()}).status.shell_code(), 0);
  fs::remove_all(dir);
}

TEST(Validate, InputErrorsHaveTheirOwnExitCodes) {
  auto missing = lockstep_cmd({"validate", "/nonexistent/job.yaml"});
  EXPECT_EQ(missing.status.shell_code(), 3);
  EXPECT_NE(missing.output.find("cannot read"), std::string::npos) << missing.output;
  std::string bad = ::testing::TempDir() + "/bad-syntax.yaml";
  std::ofstream(bad) << "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nspec:\n  nodes: [1, 2\n";
  auto syntax = lockstep_cmd({"validate", bad});
  EXPECT_EQ(syntax.status.shell_code(), 4);
  EXPECT_TRUE(std::regex_search(syntax.output, std::regex(R"(bad-syntax\.yaml:\d+:\d+: YAML syntax error)"))) << syntax.output;
}

// A manifest file with other objects beside the job (examples/pytorch-script.yaml has its
// script's ConfigMap) is read for its one TrainingJob; none, or two, is an error saying so.
TEST(Validate, AFileOfSeveralDocumentsIsReadForItsOneTrainingJob) {
  const std::string job = "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: NAME}\nspec:\n"
                          "  template: {spec: {containers: [{name: trainer, image: img}]}}\n";
  const std::string cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: script}\ndata: {train.py: pass}\n";
  auto write = [](const std::string& name, const std::string& text) {
    std::string f = ::testing::TempDir() + "/" + name;
    std::ofstream(f) << text;
    return f;
  };
  auto named = [&](const std::string& n) { return std::regex_replace(job, std::regex("NAME"), n); };
  auto one = lockstep_cmd({"validate", write("one.yaml", cm + "---\n" + named("a"))});
  EXPECT_EQ(one.status.shell_code(), 0) << one.output;
  EXPECT_NE(one.output.find("valid TrainingJob a "), std::string::npos) << one.output;
  auto none = lockstep_cmd({"validate", write("none.yaml", cm + "---\n" + cm)});
  EXPECT_EQ(none.status.shell_code(), 4) << none.output;
  EXPECT_NE(none.output.find("holds 2 YAML documents (ConfigMap, ConfigMap) and no TrainingJob"), std::string::npos)
      << none.output;
  auto two = lockstep_cmd({"validate", write("two.yaml", named("a") + "---\n" + named("b"))});
  EXPECT_EQ(two.status.shell_code(), 4) << two.output;
  EXPECT_NE(two.output.find("holds 2 TrainingJobs"), std::string::npos) << two.output;
}

// ZeRO (Rajbhandari et al. 2020): 7.5B parameters on 64 GPUs, mixed-precision Adam.
TEST(Plan, PrintsThePublishedZeroFigures) {
  auto r = lockstep_cmd({"plan", "--params", "7.5B", "--gpus", "64"});
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  for (auto [row, states] : std::vector<std::pair<std::string, std::string>>{
           {"DDP", "120.0 GB"}, {"ZeRO-1", "31.4 GB"}, {"ZeRO-2", "16.6 GB"}, {"FSDP (ZeRO-3)", "1.9 GB"}})
    EXPECT_TRUE(std::regex_search(r.output, std::regex(std::regex_replace(row, std::regex(R"([()])"), R"(\$&)") +
                                                       R"(\s+\S+ GB\s+\S+ GB\s+\S+ GB\s+)" + std::regex_replace(states, std::regex(R"(\.)"), R"(\.)"))))
        << row << " should show " << states << " of model states:\n" << r.output;
  EXPECT_NE(r.output.find("recommended: FSDP"), std::string::npos) << r.output;
  auto small = lockstep_cmd({"plan", "--model", "gpt2-124m", "--gpus", "8", "--gpu-memory-gb", "80"});
  EXPECT_NE(small.output.find("recommended: DDP"), std::string::npos) << small.output;
}

// The models are the trainer's own (lockstep/model_shapes.hpp, one list): `plan` sizes GPT-2 XL
// from its shape (1,557,611,200 parameters, 16 bytes each under DDP), plans every preset the
// trainer's --model takes, and an unknown model's error and the usage list them all.
TEST(Plan, KnowsEveryTrainerPresetIncludingGpt2Xl) {
  auto xl = lockstep_cmd({"plan", "--model", "gpt2-1558m", "--gpus", "8"});
  ASSERT_EQ(xl.status.shell_code(), 0) << xl.output;
  EXPECT_NE(xl.output.find("model: gpt2-1558m, 1557.6M parameters; 8 GPUs"), std::string::npos) << xl.output;
  EXPECT_TRUE(std::regex_search(xl.output, std::regex(R"(\nDDP\s+3\.1 GB\s+3\.1 GB\s+18\.7 GB\s+24\.9 GB)"))) << xl.output;
  EXPECT_NE(xl.output.find("activations per GPU: "), std::string::npos) << xl.output;
  auto usage = lockstep_cmd({"plan", "--help"});
  EXPECT_NE(usage.output.find(lockstep::models::names()), std::string::npos) << usage.output;
  auto bad = lockstep_cmd({"plan", "--model", "gpt5"});
  EXPECT_EQ(bad.status.shell_code(), 2) << bad.output;
  EXPECT_NE(bad.output.find("unknown --model 'gpt5'; valid: " + lockstep::models::names()), std::string::npos) << bad.output;
  for (const auto& p : lockstep::models::kPresets) {
    SCOPED_TRACE(std::string(p.name));
    auto r = lockstep_cmd({"plan", "--model=" + std::string(p.name)});
    EXPECT_EQ(r.status.shell_code(), 0) << r.output;
    EXPECT_NE(r.output.find("model: " + std::string(p.name) + ", "), std::string::npos) << r.output;
    EXPECT_NE(bad.output.find(std::string(p.name)), std::string::npos) << bad.output;
  }
}

// A job's trainer args are read as its program reads them: `--model tiny` (a separate value)
// plans the same as `--model=tiny`, and so does `--batch-size 3`; before, the spaced form was
// silently ignored and the default model planned.
TEST(Plan, AJobsSpacedAndJoinedFlagsPlanAlike) {
  auto job = [](const std::string& name, const std::string& args) {
    const std::string f = ::testing::TempDir() + "/" + name + ".yaml";
    std::ofstream(f) << "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: " << name
                     << "}\nspec:\n  nodes: 2\n  procsPerNode: 2\n  trainer:\n    args: [" << args
                     << "]\n  template: {spec: {containers: [{name: trainer, image: img}]}}\n";
    return f;
  };
  auto joined = lockstep_cmd({"plan", "--file", job("joined", "--model=tiny, --batch-size=3")});
  auto spaced = lockstep_cmd({"plan", "--file", job("spaced", "--model, tiny, --batch-size, '3'")});
  auto none = lockstep_cmd({"plan", "--file", job("none", "--device=cpu")});
  ASSERT_EQ(joined.status.shell_code(), 0) << joined.output;
  ASSERT_EQ(spaced.status.shell_code(), 0) << spaced.output;
  EXPECT_EQ(spaced.output, joined.output);
  EXPECT_NE(joined.output, none.output) << "tiny must plan unlike the default gpt2-124m";
  auto bad = lockstep_cmd({"plan", "--file", job("bad", "--model, tiny, --batch-size, none")});
  EXPECT_EQ(bad.status.shell_code(), 1) << bad.output;
  EXPECT_NE(bad.output.find("spec.trainer.args --batch-size"), std::string::npos) << bad.output;
}

TEST(Run, TwoNodesOfTwoWorkersFinishDdpAndFsdpJobs) {
  for (const char* example : {"examples/ddp.yaml", "examples/fsdp.yaml"}) {
    SCOPED_TRACE(example);
    std::string dir = ::testing::TempDir() + "/run-" + std::to_string(::getpid());
    fs::create_directories(dir);
    auto r = lockstep::run_capture({"/bin/sh", "-c", "cd '" + dir + "' && exec '" + cli() + "' run '" + src(example) + "'"}, {},
                                   300s);
    EXPECT_EQ(r.status.shell_code(), 0) << r.output;
    EXPECT_NE(r.output.find("finished: 200 steps"), std::string::npos) << r.output;
    EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(step 200/200  loss [0-9.]+ .* ETA 0s)"))) << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(; loss ([0-9.]+) -> ([0-9.]+))"))) << r.output;
    EXPECT_LT(std::stod(m[2]), std::stod(m[1]) / 2) << "the loss should fall";
    EXPECT_NE(r.output.find("metrics were served while it ran at http://127.0.0.1:"), std::string::npos) << r.output;
  }
}

TEST(Run, CtrlCStopsEveryProcess) {
  std::string dir = ::testing::TempDir() + "/run-int-" + std::to_string(::getpid());
  fs::create_directories(dir);
  lockstep::SpawnOptions so;
  so.argv = {cli(), "run", src("examples/ddp.yaml")};
  so.cwd = dir;
  so.output_path = dir + "/out.log";
  auto p = lockstep::Process::spawn(so);
  std::set<pid_t> tree;
  for (int i = 0; i < 200; ++i) {  // wait until training is under way
    std::this_thread::sleep_for(100ms);
    const std::string out = lockstep::test::read_file(dir + "/out.log");
    static const std::regex step_line(R"(step (\d+)/)");
    int highest = 0;
    for (std::sregex_iterator it(out.begin(), out.end(), step_line), end; it != end; ++it)
      highest = std::max(highest, std::stoi((*it)[1]));
    if (highest >= 20) break;
  }
  tree = lockstep::test::descendants(p.pid());
  ASSERT_GE(tree.size(), 6u) << "2 agents and 4 workers expected:\n" << lockstep::test::read_file(dir + "/out.log");
  p.signal(SIGINT);
  auto st = p.wait_for(60s);
  ASSERT_TRUE(st.has_value()) << lockstep::test::read_file(dir + "/out.log");
  EXPECT_EQ(st->shell_code(), 130) << lockstep::test::read_file(dir + "/out.log");
  EXPECT_NE(lockstep::test::read_file(dir + "/out.log").find("stopped by Interrupt"), std::string::npos) << lockstep::test::read_file(dir + "/out.log");
  for (pid_t pid : tree) {
    for (int i = 0; i < 50 && lockstep::test::is_running(pid); ++i) std::this_thread::sleep_for(100ms);
    EXPECT_FALSE(lockstep::test::is_running(pid)) << "pid " << pid << " left behind";
  }
}

// `lockstep COMMAND --help` prints that command's usage and succeeds, for every command.
TEST(Help, EveryCommandPrintsItsUsageAndExitsZero) {
  for (const char* cmd : {"run", "validate", "plan"}) {
    SCOPED_TRACE(cmd);
    for (const char* flag : {"--help", "-h"}) {
      auto r = lockstep_cmd({cmd, flag});
      EXPECT_EQ(r.status.shell_code(), 0) << r.output;
      EXPECT_NE(r.output.find(std::string("usage: lockstep ") + cmd), std::string::npos) << r.output;
    }
  }
  auto plan = lockstep_cmd({"plan", "--help"});
  for (const char* flag : {"--model", "--params", "--file", "--gpus", "--gpu-memory-gb", "--seq-len", "--micro-batch",
                           "--activation-checkpointing"})
    EXPECT_NE(plan.output.find(flag), std::string::npos) << "plan --help should list " << flag << ":\n" << plan.output;
}

// Each flag's error names that flag and what it accepts, not another flag's format.
TEST(Plan, EachFlagHasItsOwnMessage) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  for (const auto& c : std::vector<Case>{
           {{"--gpus", "0"}, "--gpus: expected a whole number of GPUs, at least 1, got '0'"},
           {{"--gpus", "2.5"}, "--gpus: expected a whole number of GPUs"},
           {{"--gpu-memory-gb", "-1"}, "--gpu-memory-gb: expected the memory of one GPU in GB, a number > 0 such as 80"},
           {{"--seq-len", "x"}, "--seq-len: expected a whole number of tokens, at least 1, got 'x'"},
           {{"--micro-batch", "0"}, "--micro-batch: expected a whole number of sequences per GPU, at least 1"},
           {{"--params", "lots"}, "--params: expected a positive parameter count such as 124M, 7.5B or 1.3e9"},
           {{"--gpus"}, "--gpus needs a value"},
       }) {
    SCOPED_TRACE(c.args[0]);
    std::vector<std::string> args = {"plan"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto r = lockstep_cmd(args);
    EXPECT_EQ(r.status.shell_code(), 2) << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << r.output;
    if (c.args[0] != "--params") {
      EXPECT_EQ(r.output.find("124M"), std::string::npos) << "another flag's message:\n" << r.output;
    }
  }
}

// Found by trying: a self-referential alias made `lockstep validate` die with SIGSEGV.
TEST(Validate, RecursiveAliasIsAnErrorNotACrash) {
  std::string f = ::testing::TempDir() + "/recursive-alias.yaml";
  std::ofstream(f) << "a: &a [*a]\n";
  auto r = lockstep_cmd({"validate", f});
  EXPECT_EQ(r.status.signal, 0) << r.status.describe();
  EXPECT_EQ(r.status.shell_code(), 4) << r.output;
  EXPECT_NE(r.output.find("recursive-alias.yaml:1:4: YAML too complex: an alias refers to a node that contains it"),
            std::string::npos)
      << r.output;
}

namespace {

// A 2x2 job whose workers only record, in the checkpoint directory they are given, that they
// saw it: the directory layout `lockstep run` gives, without training.
std::string checkpoint_probe_job(const std::string& volume) {
  return R"(apiVersion: lockstep.dev/v1alpha1
kind: TrainingJob
metadata:
  name: ckpt-probe
spec:
  nodes: 2
  procsPerNode: 2
  template:
    spec:
      containers:
      - name: trainer
        image: lockstep/trainer:0.1.0
        volumeMounts:
        - {name: ckpt, mountPath: /ckpt}
      volumes:
      - name: ckpt
        )" + volume + R"(
  trainer:
    command: [/bin/sh, -c, 'mkdir -p "$LOCKSTEP_CHECKPOINT_PATH" && touch "$LOCKSTEP_CHECKPOINT_PATH/rank-$RANK"']
  checkpoint:
    path: /ckpt/run
    everySteps: 10
)";
}

std::set<std::string> files_under(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.is_regular_file()) out.insert(fs::relative(e.path(), dir).string());
  return out;
}

lockstep::RunResult run_in(const std::string& dir, const std::string& job_file) {
  return lockstep::run_capture({"/bin/sh", "-c", "cd '" + dir + "' && exec '" + cli() + "' run '" + job_file + "'"}, {}, 120s);
}

}  // namespace

// As on a cluster, where each pod's emptyDir is its own: one checkpoint directory per node,
// so a job that needs shared storage and lacks it fails locally as it would there.
TEST(Run, EmptyDirCheckpointsGetOneDirectoryPerNode) {
  std::string dir = ::testing::TempDir() + "/run-emptydir-" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/job.yaml") << checkpoint_probe_job("emptyDir: {}");
  auto r = run_in(dir, dir + "/job.yaml");
  ASSERT_EQ(r.status.shell_code(), 0) << r.output;
  EXPECT_NE(r.output.find("one per node (volume 'ckpt' is an emptyDir"), std::string::npos) << r.output;
  const std::string runs = dir + "/lockstep-runs/ckpt-probe";
  EXPECT_EQ(files_under(runs + "/node-0"), (std::set<std::string>{"ckpt/run/rank-0", "ckpt/run/rank-1"})) << r.output;
  EXPECT_EQ(files_under(runs + "/node-1"), (std::set<std::string>{"ckpt/run/rank-2", "ckpt/run/rank-3"})) << r.output;
  EXPECT_FALSE(fs::exists(runs + "/shared"));
}

// A persistentVolumeClaim (or hostPath, nfs, csi: anything but an emptyDir) is what every pod
// shares: one directory for all nodes.
TEST(Run, PersistentVolumeCheckpointsAreSharedByEveryNode) {
  for (const char* volume : {"persistentVolumeClaim: {claimName: ckpt}", "nfs: {server: nfs.example, path: /ckpt}"}) {
    SCOPED_TRACE(volume);
    std::string dir = ::testing::TempDir() + "/run-shared-" + std::to_string(::getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir + "/job.yaml") << checkpoint_probe_job(volume);
    auto r = run_in(dir, dir + "/job.yaml");
    ASSERT_EQ(r.status.shell_code(), 0) << r.output;
    EXPECT_NE(r.output.find("for every node (volume 'ckpt' is a"), std::string::npos) << r.output;
    const std::string runs = dir + "/lockstep-runs/ckpt-probe";
    EXPECT_EQ(files_under(runs + "/shared"),
              (std::set<std::string>{"ckpt/run/rank-0", "ckpt/run/rank-1", "ckpt/run/rank-2", "ckpt/run/rank-3"}))
        << r.output;
    EXPECT_FALSE(fs::exists(runs + "/node-0")) << r.output;
  }
}

// See Note [Worker threads]: each local "pod" gets what the downward API would give it, so each
// worker's OMP_NUM_THREADS is the container's CPU request's share, or without one, this
// machine's cores over the job's nodes: two nodes on one machine do not each take every core.
TEST(Run, WorkersGetTheirPodsShareOfThreads) {
  std::string dir = ::testing::TempDir() + "/run-threads-" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir + "/seen");
  auto job = [&](const std::string& resources) {
    return R"(apiVersion: lockstep.dev/v1alpha1
kind: TrainingJob
metadata:
  name: threads
spec:
  nodes: 2
  procsPerNode: 1
  template:
    spec:
      containers:
      - name: trainer
        image: lockstep/trainer:0.1.0
)" + resources + R"(
  trainer:
    command: [/bin/sh, -c, 'echo "$OMP_NUM_THREADS" > )" + dir + R"(/seen/rank-$RANK']
)";
  };
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  struct Case {
    std::string resources, want;
  } cases[] = {
      {"        resources: {requests: {cpu: \"3\"}}", "3"},
      {"        resources: {requests: {cpu: 1500m}, limits: {cpu: 4}}", "1"},
      {"        resources: {limits: {cpu: 2}}", "2"},
      {"", std::to_string(std::max(1, cores / 2))},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.resources.empty() ? "no resources" : c.resources);
    fs::remove_all(dir + "/seen");
    fs::create_directories(dir + "/seen");
    std::ofstream(dir + "/job.yaml") << job(c.resources);
    auto r = run_in(dir, dir + "/job.yaml");
    ASSERT_EQ(r.status.shell_code(), 0) << r.output;
    for (int rank = 0; rank < 2; ++rank)
      EXPECT_EQ(lockstep::test::read_file(dir + "/seen/rank-" + std::to_string(rank)), c.want + "\n") << r.output;
  }
}

// #14: `lockstep run` restarts as the cluster would: in place first (the agents' restart
// barrier, the same agent processes), then the gang anew once that budget is spent, and says
// so as it goes and in the summary. Every generation of this job crashes (137) after step 12,
// having checkpointed step 10, so it resumes at 10 each time and spends both budgets.
TEST(Run, RestartsInPlaceThenAsAGangAndSaysSo) {
  std::string dir = ::testing::TempDir() + "/run-restarts-" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/job.yaml") << R"(apiVersion: lockstep.dev/v1alpha1
kind: TrainingJob
metadata: {name: crashy}
spec:
  nodes: 2
  procsPerNode: 1
  strategy: DDP
  template:
    spec:
      containers:
      - name: trainer
        image: lockstep/trainer:0.1.0
        volumeMounts: [{name: ckpt, mountPath: /ckpt}]
      volumes:
      - name: ckpt
        persistentVolumeClaim: {claimName: ckpt}
  trainer:
    command: [lockstep-trainer]
    args: [--model=tiny, --device=cpu, --steps=40, --batch-size=4, --exit-after-step=12]
  checkpoint: {path: /ckpt, everySteps: 10}
  runPolicy: {inPlaceRestarts: 1, backoffLimit: 1, restartPolicy: OnFailure}
)";
  auto r = lockstep::run_capture({"/bin/sh", "-c", "cd '" + dir + "' && exec '" + cli() + "' run job.yaml"}, {}, 300s);
  EXPECT_EQ(r.status.shell_code(), 137) << r.output;
  EXPECT_NE(r.output.find("in-place restarts up to 1, gang restarts up to 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lockstep run: restarted in place (generation 1): rank "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("restarting the gang as attempt 1 of 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 gang restart(s) reached spec.runPolicy.backoffLimit=1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("restarts: 2 in place, 1 gang"), std::string::npos) << "one in place in each gang attempt\n"
                                                                                << r.output;
  std::string node0 = lockstep::test::read_file(dir + "/lockstep-runs/crashy/node-0.log");
  EXPECT_NE(node0.find("resumed from"), std::string::npos) << node0;
}
