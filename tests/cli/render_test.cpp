// `lockstep render` (cli/render.hpp, Note [What render cannot know]): the objects are the
// operator's own manifests for the job as the CRD defaults it, in creation order; the YAML reads
// back as the same objects, whatever the strings in them look like; the command's flags and
// exit codes. tests/operator/render_test.cpp compares it with what the operator creates on a
// real API server.
#include <gtest/gtest.h>

#include <sstream>

#include "lockstep/contract.hpp"
#include "lockstep/process.hpp"
#include "reconcile/job.hpp"
#include "reconcile/manifests.hpp"
#include "render.hpp"
#include "render_stream.hpp"
#include "test_util.hpp"
#include "validate.hpp"

namespace {

using json = nlohmann::json;
using lockstep::cli::RenderedObject;
using lockstep::cli::RenderOptions;

std::string cli() { return lockstep::test::env_or("LOCKSTEP_CLI_BIN", "lockstep"); }

json load_example(const std::string& name) {
  json job = lockstep::cli::load_yaml_file(std::string(LOCKSTEP_SOURCE_DIR) + "/examples/" + name);
  auto errors = lockstep::cli::validate_trainingjob(job);
  EXPECT_TRUE(errors.empty()) << errors.front();
  return job;
}

std::vector<std::string> kinds(const std::vector<RenderedObject>& objects) {
  std::vector<json> docs;
  for (const auto& o : objects) docs.push_back(o.object);
  return lockstep::test::render_kinds(docs);
}

TEST(Render, TheObjectsAreTheOperatorsManifestsInCreationOrder) {
  json job = load_example("ddp.yaml");
  RenderOptions o;
  o.agent_image = "lockstep/agent:9.9.9";
  const auto objects = lockstep::cli::render_job(job, o);
  EXPECT_EQ(kinds(objects), (std::vector<std::string>{"Service/tiny-ddp", "PodGroup/tiny-ddp", "Pod/tiny-ddp-0", "Pod/tiny-ddp-1"}));
  // The operator's pod 1 for the same job, as it would see it stored in namespace "default".
  json stored = job;
  stored["metadata"]["namespace"] = "default";
  stored["metadata"]["uid"] = "00000000-0000-0000-0000-000000000000";
  const auto view = lockstep::reconcile::JobView::from_json(stored);
  EXPECT_EQ(objects[3].object, lockstep::reconcile::pod_manifest(view, 1, 0, {"lockstep/agent:9.9.9", "IfNotPresent"},
                                                                 std::string(64, '0')));
  // What render cannot know is said, and nothing secret is printed.
  EXPECT_NE(objects[3].note.find("LOCKSTEP_BARRIER_SECRET is drawn for each gang attempt"), std::string::npos);
  EXPECT_NE(objects[1].note.find("coscheduling"), std::string::npos);
  EXPECT_NE(objects[0].note.find("uid"), std::string::npos);
  // The agent is injected as the operator's flag says, and not with '' (its --agent-image '').
  EXPECT_NE(objects[2].object.dump().find("lockstep/agent:9.9.9"), std::string::npos);
  o.agent_image = "";
  EXPECT_EQ(lockstep::cli::render_job(job, o)[2].object.dump().find("lockstep/agent"), std::string::npos);
}

TEST(Render, IsolationQueueAndAUidFromTheFileAreTheOperators) {
  json job = load_example("ddp.yaml");
  job["metadata"]["namespace"] = "team-a";
  job["metadata"]["uid"] = "6f1c1f7e-0d7a-4e55-9b1e-3c1a2b3c4d5e";
  job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-a-queue";
  job["spec"]["isolation"] = "NetworkPolicy";
  RenderOptions o;
  o.operator_namespace = "lockstep-system";
  o.monitoring_namespace = "monitoring";
  o.priority = 100;
  const auto objects = lockstep::cli::render_job(job, o);
  ASSERT_EQ(objects.size(), 6u) << json(kinds(objects)).dump();
  EXPECT_EQ(objects[0].object["kind"], "Workload") << "a queued job's Workload comes first";
  EXPECT_EQ(objects[0].object["spec"]["queueName"], "team-a-queue");
  EXPECT_EQ(objects[0].object["spec"]["priority"], 100);
  EXPECT_NE(objects[0].note.find("admitted"), std::string::npos);
  EXPECT_EQ(objects[2].object["kind"], "NetworkPolicy");
  EXPECT_NE(objects[2].object.dump().find("lockstep-system"), std::string::npos);
  EXPECT_NE(objects[2].object.dump().find("monitoring"), std::string::npos);
  for (const auto& obj : objects) {
    EXPECT_EQ(obj.object["metadata"]["namespace"], "team-a");
    EXPECT_EQ(obj.object["metadata"]["ownerReferences"][0]["uid"], "6f1c1f7e-0d7a-4e55-9b1e-3c1a2b3c4d5e");
    EXPECT_EQ(obj.note.find("uid is the TrainingJob's"), std::string::npos) << "the uid was given";
  }
  EXPECT_NE(objects[4].note.find("admitted"), std::string::npos) << "a queued job's pods wait for admission";
  // spec.isolation unset: the operator's --default-isolation decides.
  job["spec"].erase("isolation");
  EXPECT_EQ(lockstep::cli::render_job(job, o)[2].object["kind"], "PodGroup");
  o.default_isolation = "NetworkPolicy";
  EXPECT_EQ(lockstep::cli::render_job(job, o)[2].object["kind"], "NetworkPolicy");
}

// Every string YAML would read as something else is quoted: env values are strings to the API
// server, and `1`, `true` or `0x10` written plain would be refused or changed.
TEST(Render, TheYamlReadsBackAsTheSameObjects) {
  json job = load_example("ddp.yaml");
  json env = json::array();
  int i = 0;
  for (const char* v : {"1", "29500", "-3", "1.5", "1e3", ".5", "true", "False", "yes", "off", "y", "null", "~", "",
                        "0x10", "0o17", "1:30", ".inf", ".NaN", "plain words", "a: b", "- item", "#hash", "'quoted'",
                        "\"double\"", "line\nbreak", "tab\there", "ünïcödé", "*alias", "&anchor", "!tag", "@at", "`tick",
                        "{flow}", "[seq]", "%percent", "|pipe", ">fold", "?q"})
    env.push_back({{"name", "V" + std::to_string(i++)}, {"value", v}});
  job["spec"]["template"]["spec"]["containers"][0]["env"] = env;
  job["metadata"]["annotations"] = {{"true", "1"}, {"note", "a\nb"}};
  RenderOptions o;
  o.agent_image = lockstep::cli::default_agent_image();
  const auto objects = lockstep::cli::render_job(job, o);
  const std::string yaml = lockstep::cli::render_yaml(objects);
  const auto docs = lockstep::test::read_render_stream(yaml);
  ASSERT_EQ(docs.size(), objects.size()) << yaml;
  for (size_t d = 0; d < docs.size(); ++d) EXPECT_EQ(docs[d], objects[d].object) << "document " << d << "\n" << yaml;
  EXPECT_NE(yaml.find("# Pod tiny-ddp-0\n# LOCKSTEP_BARRIER_SECRET is drawn"), std::string::npos) << yaml;
}

TEST(RenderCommand, PrintsTheStreamReadsStandardInputAndSaysWhatIsWrong) {
  const std::string example = std::string(LOCKSTEP_SOURCE_DIR) + "/examples/ddp.yaml";
  auto r = lockstep::run_capture({cli(), "render", example});
  ASSERT_EQ(r.status.code, 0) << r.output;
  EXPECT_NE(r.output.find("kind: Service"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("image: " + lockstep::cli::default_agent_image()), std::string::npos) << r.output;
  // The same from standard input, in another namespace.
  auto piped = lockstep::run_capture({cli(), "render", "--namespace", "team-b", "-"}, {}, std::chrono::seconds(30),
                                     lockstep::test::read_file(example));
  ASSERT_EQ(piped.status.code, 0) << piped.output;
  EXPECT_NE(piped.output.find("namespace: team-b"), std::string::npos);
  // An invalid job: exit 1, the field named as `lockstep validate` names it; nothing rendered.
  auto bad = lockstep::run_capture({cli(), "render", "-"}, {}, std::chrono::seconds(30),
                                   "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: x}\n"
                                   "spec: {nodes: 0, template: {spec: {containers: [{name: trainer, image: i}]}}}\n");
  EXPECT_EQ(bad.status.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("spec.nodes"), std::string::npos) << bad.output;
  EXPECT_EQ(bad.output.find("kind: Pod"), std::string::npos) << bad.output;
  // Flags are checked as the operator checks its own.
  const std::pair<std::vector<std::string>, std::string> usage[] = {
      {{"--default-isolation", "Strict", example}, "--default-isolation: expected None or NetworkPolicy"},
      {{"--agent-image-pull-policy=Sometimes", example}, "expected Always, IfNotPresent or Never"},
      {{"--namespace", "Team_B", example}, "not a namespace name"},
      {{"--priority", "high", example}, "--priority: expected an integer"},
      {{"--frobnicate", example}, "unknown flag --frobnicate"},
      {{example, example}, "one FILE.yaml, not two"},
      {{}, "which TrainingJob?"},
  };
  for (const auto& [args, words] : usage) {
    std::vector<std::string> argv = {cli(), "render"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto u = lockstep::run_capture(argv);
    EXPECT_EQ(u.status.code, 2) << u.output;
    EXPECT_NE(u.output.find(words), std::string::npos) << u.output;
  }
  auto missing = lockstep::run_capture({cli(), "render", "/nonexistent/job.yaml"});
  EXPECT_EQ(missing.status.code, 3) << missing.output;
}

}  // namespace
