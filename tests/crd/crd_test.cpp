// The TrainingJob CRD against a real kube-apiserver: it installs, its schema is complete and
// documented, defaults apply, examples are accepted, invalid jobs are rejected with a message
// naming the field, printer columns show, and unknown fields are never silently stored.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "kube_test_support.hpp"

namespace fs = std::filesystem;
using lockstep::test::create_namespace;
using lockstep::test::kubectl;
using lockstep::test::read_text;
using lockstep::test::source_path;
using nlohmann::json;

namespace {

const char* kCrd = "crds/lockstep.dev_trainingjobs.yaml";

// Installs the CRD once per binary and waits until it is served.
void install_crd() {
  static bool installed = false;
  if (installed) return;
  auto r = kubectl({"apply", "-f", source_path(kCrd)});
  ASSERT_TRUE(r.status.success()) << r.output;
  auto w = kubectl({"wait", "--for=condition=Established", "crd/trainingjobs.lockstep.dev", "--timeout=60s"});
  ASSERT_TRUE(w.status.success()) << w.output;
  installed = true;
}

json get_json(const std::vector<std::string>& args) {
  std::vector<std::string> a = args;
  a.insert(a.end(), {"-o", "json"});
  auto r = kubectl(a);
  if (!r.status.success()) throw std::runtime_error(lockstep::shell_join(a) + ": " + r.output);
  return json::parse(r.output);
}

// Every property below `schema` without a description, as dotted paths.
void undocumented(const json& schema, const std::string& path, std::vector<std::string>& out) {
  if (schema.contains("properties")) {
    for (auto& [name, sub] : schema["properties"].items()) {
      std::string p = path.empty() ? name : path + "." + name;
      if (p == "metadata") continue;  // standard ObjectMeta: the API server forbids describing it
      if (!sub.contains("description")) out.push_back(p);
      undocumented(sub, p, out);
    }
  }
  if (schema.contains("items")) undocumented(schema["items"], path + "[]", out);
}

const std::string kMinimalJob = R"(apiVersion: lockstep.dev/v1alpha1
kind: TrainingJob
metadata:
  name: NAME
spec:
  template:
    spec:
      containers:
      - {name: trainer, image: lockstep/trainer:0.1.0}
)";

std::string minimal_job(const std::string& name) {
  return std::regex_replace(kMinimalJob, std::regex("NAME"), name);
}

}  // namespace

TEST(Crd, InstallsAndIsEstablishedWithAStructuralSchema) {
  LOCKSTEP_REQUIRE_CONTROL_PLANE();
  install_crd();
  json crd = get_json({"get", "crd", "trainingjobs.lockstep.dev"});
  for (const auto& c : crd["status"]["conditions"]) {
    if (c["type"] == "Established") {
      EXPECT_EQ(c["status"], "True");
    }
    if (c["type"] == "NonStructuralSchema") ADD_FAILURE() << "schema is not structural: " << c["message"];
  }
  EXPECT_EQ(crd["spec"]["names"]["shortNames"], json::array({"tj"}));
  const json& version = crd["spec"]["versions"][0];
  EXPECT_TRUE(version["subresources"].contains("status"));
}

TEST(Crd, EverySpecFieldOfTheDesignIsInTheSchemaWithADescription) {
  LOCKSTEP_REQUIRE_CONTROL_PLANE();
  install_crd();
  json crd = get_json({"get", "crd", "trainingjobs.lockstep.dev"});
  const json& spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
  // The TrainingJob's spec as docs/trainingjob.md gives it, field by field.
  for (std::string path : {"nodes", "procsPerNode", "strategy", "template", "trainer.command", "trainer.args",
                           "runPolicy.backoffLimit", "runPolicy.inPlaceRestarts", "runPolicy.restartPolicy",
                           "runPolicy.activeDeadlineSeconds",
                           "runPolicy.ttlSecondsAfterFinished", "runPolicy.cleanPodPolicy", "runPolicy.suspend",
                           "scheduling.gang", "scheduling.schedulerName", "scheduling.queue",
                           "scheduling.priorityClassName", "checkpoint.path", "checkpoint.everySteps",
                           "metrics.port"}) {
    const json* node = &spec;
    for (size_t start = 0; start <= path.size();) {
      size_t dot = path.find('.', start);
      std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      ASSERT_TRUE((*node)["properties"].contains(part)) << "spec." << path << " missing from the schema";
      node = &(*node)["properties"][part];
      start = dot == std::string::npos ? path.size() + 1 : dot + 1;
    }
  }
  std::vector<std::string> missing;
  undocumented(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "", missing);
  EXPECT_TRUE(missing.empty()) << "properties without a description: " << testing::PrintToString(missing);
}

TEST(Crd, DefaultsAreApplied) {
  LOCKSTEP_REQUIRE_CONTROL_PLANE();
  install_crd();
  std::string ns = create_namespace("crd-defaults");
  auto r = kubectl({"apply", "-n", ns, "-f", "-"}, minimal_job("minimal"));
  ASSERT_TRUE(r.status.success()) << r.output;
  json spec = get_json({"get", "tj", "minimal", "-n", ns})["spec"];
  EXPECT_EQ(spec["nodes"], 1);
  EXPECT_EQ(spec["procsPerNode"], 1);
  EXPECT_EQ(spec["strategy"], "Auto");
  EXPECT_EQ(spec["masterPort"], 29500);
  EXPECT_EQ(spec["runPolicy"]["backoffLimit"], 3);
  EXPECT_EQ(spec["runPolicy"]["inPlaceRestarts"], 3);
  EXPECT_EQ(spec["runPolicy"]["restartPolicy"], "OnFailure");
  EXPECT_EQ(spec["runPolicy"]["cleanPodPolicy"], "Running");
  EXPECT_EQ(spec["runPolicy"]["suspend"], false);
  EXPECT_EQ(spec["scheduling"]["gang"], true);
  EXPECT_EQ(spec["metrics"]["port"], 9400);
}

TEST(Crd, EveryExampleApplies) {
  LOCKSTEP_REQUIRE_CONTROL_PLANE();
  install_crd();
  std::string ns = create_namespace("crd-examples");
  int count = 0;
  for (const auto& entry : fs::directory_iterator(source_path("examples"))) {
    if (entry.path().extension() != ".yaml") continue;
    ++count;
    auto r = kubectl({"apply", "-n", ns, "-f", entry.path().string()});
    EXPECT_TRUE(r.status.success()) << entry.path() << ":\n" << r.output;
    EXPECT_NE(r.output.find("created"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("Warning"), std::string::npos) << "warnings for " << entry.path() << ":\n" << r.output;
  }
  EXPECT_GE(count, 3) << "expected a DDP, an FSDP and a GPU example in examples/";
  auto list = get_json({"get", "trainingjobs", "-n", ns});
  EXPECT_EQ(static_cast<int>(list["items"].size()), count);
}

// Each file in tests/crd/invalid/ holds one mistake and names, in `# expect:` lines, what
// the rejection message must contain (the offending field).
TEST(Crd, InvalidJobsAreRejectedNamingTheField) {
  LOCKSTEP_REQUIRE_CONTROL_PLANE();
  install_crd();
  std::string ns = create_namespace("crd-invalid");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(source_path("tests/crd/invalid"))) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 10u);
  for (const auto& file : files) {
    SCOPED_TRACE(file.filename().string());
    std::string text = read_text(file.string());
    std::vector<std::string> expects;
    static const std::regex expect_line("# expect: (.*)");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), expect_line);
         it != std::sregex_iterator(); ++it)
      expects.push_back((*it)[1]);
    ASSERT_FALSE(expects.empty()) << "no '# expect:' line";
    auto r = kubectl({"apply", "-n", ns, "-f", file.string()});
    EXPECT_FALSE(r.status.success()) << "accepted, but should be rejected:\n" << r.output;
    for (const auto& e : expects) EXPECT_NE(r.output.find(e), std::string::npos) << "message lacks '" << e << "':\n" << r.output;
  }
  // Nothing of them was stored.
  auto list = get_json({"get", "tj", "-n", ns});
  EXPECT_EQ(list["items"].size(), 0u) << list.dump(2);
}

TEST(Crd, UnknownFieldsAreNeverSilentlyStored) {
  LOCKSTEP_REQUIRE_CONTROL_PLANE();
  install_crd();
  std::string ns = create_namespace("crd-unknown");
  std::string job = minimal_job("typo") + "  procsPerNod: 4\n  runPolicy:\n    backofLimit: 1\n";
  // kubectl's default (strict server-side field validation) rejects and names both fields.
  auto strict = kubectl({"apply", "-n", ns, "-f", "-"}, job);
  EXPECT_FALSE(strict.status.success()) << strict.output;
  EXPECT_NE(strict.output.find("unknown field \"spec.procsPerNod\""), std::string::npos) << strict.output;
  EXPECT_NE(strict.output.find("unknown field \"spec.runPolicy.backofLimit\""), std::string::npos) << strict.output;
  // With validation relaxed to a warning, the user is warned and the fields are pruned.
  auto warn = kubectl({"apply", "--validate=warn", "-n", ns, "-f", "-"}, job);
  ASSERT_TRUE(warn.status.success()) << warn.output;
  EXPECT_NE(warn.output.find("unknown field \"spec.procsPerNod\""), std::string::npos) << warn.output;
  json spec = get_json({"get", "tj", "typo", "-n", ns})["spec"];
  EXPECT_FALSE(spec.contains("procsPerNod")) << spec.dump();
  EXPECT_FALSE(spec["runPolicy"].contains("backofLimit")) << spec.dump();
}

TEST(Crd, PrinterColumnsAndShortName) {
  LOCKSTEP_REQUIRE_CONTROL_PLANE();
  install_crd();
  std::string ns = create_namespace("crd-columns");
  auto r = kubectl({"apply", "-n", ns, "-f", source_path("examples/ddp.yaml")});
  ASSERT_TRUE(r.status.success()) << r.output;
  // Status goes through the status subresource, as the operator writes it.
  auto p = kubectl({"patch", "tj", "tiny-ddp", "-n", ns, "--subresource=status", "--type=merge", "-p",
                    R"({"status":{"phase":"Running","queue":"team-a","nodes":{"active":2,"ready":2},"restarts":1,"inPlaceRestarts":4,)"
                    R"("currentAttemptInPlaceRestarts":1,)"
                    R"("progress":{"step":120,"totalSteps":200,"steps":"120/200","tokensPerSecond":50421,"eta":"6s"}}})"});
  ASSERT_TRUE(p.status.success()) << p.output;

  // The queue (docs/kueue.md), and Restarts (gang) and In-Place side by side.
  auto get = kubectl({"get", "tj", "-n", ns});
  ASSERT_TRUE(get.status.success()) << get.output;
  EXPECT_TRUE(std::regex_search(
      get.output, std::regex(R"(NAME\s+PHASE\s+QUEUE\s+NODES\s+READY\s+RESTARTS\s+IN-PLACE\s+STEP\s+TOK/S\s+ETA\s+AGE)")))
      << get.output;
  EXPECT_TRUE(std::regex_search(get.output, std::regex(R"(tiny-ddp\s+Running\s+team-a\s+2\s+2\s+1\s+4\s+120/200\s+50421\s+6s\s+\d+s)")))
      << get.output;

  auto wide = kubectl({"get", "tj", "-n", ns, "-o", "wide"});
  EXPECT_TRUE(std::regex_search(wide.output, std::regex(R"(STRATEGY[\s\S]*tiny-ddp\s+Running\s+team-a\s+2\s+2\s+1\s+4\s+120/200\s+50421\s+6s\s+DDP)")))
      << wide.output;
  // The status fields round-trip through the schema (nothing pruned).
  json status = get_json({"get", "tj", "tiny-ddp", "-n", ns})["status"];
  EXPECT_EQ(status["inPlaceRestarts"], 4);
  EXPECT_EQ(status["currentAttemptInPlaceRestarts"], 1);
}

TEST(Crd, StatusIsOnlyWrittenThroughTheSubresource) {
  LOCKSTEP_REQUIRE_CONTROL_PLANE();
  install_crd();
  std::string ns = create_namespace("crd-status");
  ASSERT_TRUE(kubectl({"apply", "-n", ns, "-f", "-"}, minimal_job("st")).status.success());
  ASSERT_TRUE(kubectl({"patch", "tj", "st", "-n", ns, "--subresource=status", "--type=merge", "-p",
                       R"({"status":{"phase":"Running"}})"}).status.success());
  auto main_patch = kubectl({"patch", "tj", "st", "-n", ns, "--type=merge", "-p", R"({"status":{"phase":"Failed"}})"});
  EXPECT_TRUE(main_patch.status.success()) << main_patch.output;  // accepted, but status is ignored
  EXPECT_EQ(get_json({"get", "tj", "st", "-n", ns})["status"]["phase"], "Running");
  // And the status schema is enforced too.
  auto bad = kubectl({"patch", "tj", "st", "-n", ns, "--subresource=status", "--type=merge", "-p",
                      R"({"status":{"phase":"Exploded"}})"});
  EXPECT_FALSE(bad.status.success());
  EXPECT_NE(bad.output.find("status.phase"), std::string::npos) << bad.output;
}

// #26 item 15: the gang's shape cannot change under its running pods; once Suspended (or
// before the operator has seen the job, or after it finished) it can.
TEST(Crd, GangShapeIsImmutableWhileTheJobRuns) {
  LOCKSTEP_REQUIRE_CONTROL_PLANE();
  install_crd();
  std::string ns = create_namespace("crd-immutable");
  ASSERT_TRUE(kubectl({"apply", "-n", ns, "-f", "-"}, minimal_job("shape")).status.success());
  auto patch = [&](const std::string& p) { return kubectl({"patch", "tj", "shape", "-n", ns, "--type=merge", "-p", p}); };
  auto set_phase = [&](const std::string& phase) {
    return kubectl({"patch", "tj", "shape", "-n", ns, "--subresource=status", "--type=merge", "-p",
                    R"({"status":{"phase":")" + phase + R"("}})"}).status.success();
  };
  EXPECT_TRUE(patch(R"({"spec":{"nodes":3}})").status.success()) << "no status yet: free to change";
  for (const char* phase : {"Pending", "Running", "Restarting"}) {
    SCOPED_TRACE(phase);
    ASSERT_TRUE(set_phase(phase));
    for (const char* p : {R"({"spec":{"nodes":4}})", R"({"spec":{"procsPerNode":8}})",
                          R"({"spec":{"template":{"metadata":{"labels":{"team":"b"}}}}})"}) {
      auto r = patch(p);
      EXPECT_FALSE(r.status.success()) << p;
      EXPECT_NE(r.output.find("spec.nodes, spec.procsPerNode and spec.template cannot change"), std::string::npos) << r.output;
    }
    // Other fields, and suspending, stay free; the status keeps being written.
    EXPECT_TRUE(patch(R"({"spec":{"runPolicy":{"backoffLimit":5}}})").status.success());
  }
  EXPECT_TRUE(patch(R"({"spec":{"runPolicy":{"suspend":true}}})").status.success());
  ASSERT_TRUE(set_phase("Suspended"));
  auto r = patch(R"({"spec":{"nodes":4,"procsPerNode":2,"template":{"metadata":{"labels":{"team":"b"}}}}})");
  EXPECT_TRUE(r.status.success()) << r.output;
  EXPECT_EQ(get_json({"get", "tj", "shape", "-n", ns})["spec"]["nodes"], 4);
}

int main(int argc, char** argv) { return lockstep::test::run_tests_with_control_plane(argc, argv); }
