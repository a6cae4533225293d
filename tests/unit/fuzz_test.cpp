// Hostile input for every parser of untrusted files on the CLI and operator side: the CLI's
// YAML (lockstep validate, run, plan --file) and the operator's kubeconfig and token files.
// Each input must end in a result or in the parser's own error type with a message; never a
// crash (a crash kills this binary, which ctest reports as a failure), a hang or another
// exception. The corpus: recursive aliases, billion laughs, deep nesting (100k), huge scalars,
// binary, invalid UTF-8, every truncation of real files, and seeded random mutations of them.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

#include "kube/rest_config.hpp"
#include "reconcile/prometheus_text.hpp"
#include "reconcile/in_place.hpp"
#include "reconcile/progress.hpp"
#include "lockstep/process.hpp"
#include "test_util.hpp"
#include "validate.hpp"

namespace fs = std::filesystem;
using lockstep::cli::InputError;
using lockstep::cli::YamlLimits;

namespace {

std::string src(const std::string& rel) { return std::string(LOCKSTEP_SOURCE_DIR) + "/" + rel; }

std::string billion_laughs(int levels, int width) {
  std::string s = "l0: &l0 [\"lol\"]\n";
  for (int i = 1; i <= levels; ++i) {
    s += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < width; ++k) s += (k ? ", *l" : "*l") + std::to_string(i - 1);
    s += "]\n";
  }
  return s;
}

std::string block_mapping_depth(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += std::string(static_cast<size_t>(i), ' ') + "k:\n";
  return s;
}

// A TrainingJob around `spec_extra` (YAML flow text inserted into spec) and `name`.
std::string job(const std::string& name, const std::string& spec_extra) {
  return "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: " + name +
         "}\nspec: {nodes: 1, procsPerNode: 2, template: {spec: {containers: [{name: trainer, image: i}]}}, " + spec_extra +
         "}\n";
}

// The hostile YAML corpus: a name for the failure message, and the text.
std::vector<std::pair<std::string, std::string>> yaml_corpus() {
  std::vector<std::pair<std::string, std::string>> c = {
      {"self-referential alias", "a: &a [*a]\n"},
      {"self-referential mapping", "&a {b: *a}\n"},
      {"mutually recursive", "a: &a {b: &b {c: *a, d: *b}}\n"},
      {"recursive alias inside a job", job("x", "template: &t {spec: {containers: [*t]}}")},
      {"alias as a mapping key", "a: &a {x: 1}\n? *a\n: 2\n"},
      {"undefined alias", "a: *nope\n"},
      // See Note [YAML documents]: yaml-cpp's LoadAll appends empty documents for these until
      // memory runs out (a seeded mutation of an example found it).
      {"a line starting with a comma", ", x\n"},
      {"a comma line after a comment, then a job", "# c\n, or locally\n" + job("x", "")},
      {"documents, a comma line in the second", job("x", "") + "---\n, x\n"},
      {"a hundred thousand small documents", [] {
         std::string s;
         for (int i = 0; i < 100000; ++i) s += "---\na: 1\n";
         return s;
       }()},
      {"billion laughs", billion_laughs(9, 9)},
      {"billion laughs, wide", billion_laughs(4, 200)},
      {"flow sequences 100k deep", std::string(100000, '[') + std::string(100000, ']')},
      {"flow mappings 100k deep", [] {
         std::string s;
         for (int i = 0; i < 100000; ++i) s += "{a: ";
         return s + "1" + std::string(100000, '}');
       }()},
      {"unclosed 100k deep", std::string(100000, '[')},
      {"block sequences 100k deep", [] {
         std::string s;
         for (int i = 0; i < 100000; ++i) s += "- ";
         return s + "x\n";
       }()},
      {"block mappings 1500 deep", block_mapping_depth(1500)},
      {"nesting past the converter's limit", std::string(YamlLimits::kMaxDepth + 20, '[') +
                                                 std::string(YamlLimits::kMaxDepth + 20, ']')},
      {"scalar just under the size limit", "a: " + std::string(YamlLimits::kMaxBytes - 10, 'x')},
      {"scalar over the size limit", "a: " + std::string(YamlLimits::kMaxBytes, 'x')},
      {"a million digits as spec.nodes", job("x", "nodes2: 0") + "x: " + std::string(1000000, '7') + "\n"},
      {"a megabyte of digits in a number field", "spec: {nodes: " + std::string(1000000, '9') + "}\n"},
      {"a megabyte name (regex-checked)", job(std::string(1000000, 'a'), "")},
      {"a megabyte queue (pattern-checked)", job("x", "scheduling: {queue: " + std::string(1000000, 'q') + "}")},
      {"a megabyte exponent", "a: 1e" + std::string(1000000, '9') + "\n"},
      {"float overflow", job("x", "nodes: 1e999999")},
      {"integer overflow", job("x", "nodes: 99999999999999999999999999")},
      {"metadata.name a number", job("12", "")},
      {"metadata a list", "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: [1]\nspec: {nodes: 1}\n"},
      {"spec a scalar", "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: x}\nspec: 3\n"},
      {"wrong types everywhere", job("x", "strategy: [1], trainer: 7, metrics: {port: x}, masterPort: {}, "
                                           "checkpoint: {path: 3}, runPolicy: [], scheduling: {gang: yes}")},
      {"binary: every byte value", [] {
         std::string s;
         for (int r = 0; r < 16; ++r)
           for (int b = 0; b < 256; ++b) s.push_back(static_cast<char>(b));
         return s;
       }()},
      {"NUL bytes in a scalar", std::string("a: b\0c\nd: e\n", 12)},
      {"only NUL bytes", std::string(4096, '\0')},
      {"invalid UTF-8: lone continuation byte", "a: \x80\n"},
      {"invalid UTF-8: overlong slash", "a: \xc0\xaf\n"},
      {"invalid UTF-8: surrogate", "a: \xed\xa0\x80\n"},
      {"invalid UTF-8: beyond U+10FFFF", "a: \xf4\x90\x80\x80\n"},
      {"invalid UTF-8: truncated sequence at the end", "a: \xe2\x82"},
      {"UTF-16 with a BOM", std::string("\xff\xfe" "a\0:\0 \0b\0", 10)},
      {"UTF-8 BOM and valid text", "\xef\xbb\xbf" + job("x", "")},
      {"tabs for indentation", "a:\n\tb: 1\n"},
      {"complex key", "? [a, b]\n: c\n"},
      {"many documents", "a: 1\n---\nb: 2\n---\n" + std::string(10000, '-')},
      {"tags", "!!binary a: !!map {b: !!seq [1]}\n"},
      {"empty", ""},
      {"only a comment", "# nothing\n"},
  };
  return c;
}

// One YAML input through everything the CLI does with a file: parse, then validate.
// Returns an empty string when the contract held, else what went wrong.
std::string yaml_contract(const std::string& name, const std::string& text) {
  try {
    auto doc = lockstep::cli::yaml_to_json_text(text, "input.yaml");
    auto errors = lockstep::cli::validate_trainingjob(doc);
    for (const auto& e : errors)
      if (e.empty()) return name + ": an empty validation error";
    return "";
  } catch (const InputError& e) {
    std::string what = e.what();
    if (what.find("input.yaml") != 0) return name + ": the error does not start with the file name: " + what;
    if (e.exit_code != 4) return name + ": exit code " + std::to_string(e.exit_code) + " for bad YAML (expected 4): " + what;
    return "";
  } catch (const std::exception& e) {
    return name + ": escaped as a " + typeid(e).name() + ", not an InputError: " + e.what();
  }
}

std::string example(const std::string& file) { return lockstep::test::read_file(src("examples/" + file)); }

// Seeded mutations: byte flips, deletions, insertions of YAML punctuation and duplications.
std::string mutate(std::string s, std::mt19937& rng) {
  static const std::string punct = "[]{}:&*!|>-?#,'\"\n\t %@`\\";
  std::uniform_int_distribution<int> op(0, 4), byte(0, 255);
  const int n = 1 + static_cast<int>(rng() % 8);
  for (int i = 0; i < n && !s.empty(); ++i) {
    size_t at = rng() % s.size();
    switch (op(rng)) {
      case 0: s[at] = static_cast<char>(byte(rng)); break;
      case 1: s.erase(at, 1 + rng() % 16); break;
      case 2: s.insert(at, 1, punct[rng() % punct.size()]); break;
      case 3: s.insert(at, "&a "); s.insert(rng() % s.size(), "*a "); break;
      case 4: s.insert(at, s.substr(rng() % s.size(), 1 + rng() % 64)); break;
    }
  }
  return s;
}

}  // namespace

TEST(FuzzYaml, HostileCorpusEndsInAResultOrAClearError) {
  for (const auto& [name, text] : yaml_corpus()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(yaml_contract(name, text), "");
  }
}

// The limits are named in the errors, so a user knows which bound was hit.
TEST(FuzzYaml, ErrorsNameTheLimit) {
  auto message = [](const std::string& text) -> std::string {
    try {
      lockstep::cli::yaml_to_json_text(text, "f.yaml");
      return "(no error)";
    } catch (const InputError& e) {
      return e.what();
    }
  };
  EXPECT_NE(message("a: &a [*a]\n").find("alias refers to a node that contains it"), std::string::npos) << message("a: &a [*a]\n");
  EXPECT_NE(message(billion_laughs(9, 9)).find("more than " + std::to_string(YamlLimits::kMaxValues) + " values"),
            std::string::npos);
  std::string deep = std::string(YamlLimits::kMaxDepth + 20, '[') + std::string(YamlLimits::kMaxDepth + 20, ']');
  EXPECT_NE(message(deep).find("deeper than " + std::to_string(YamlLimits::kMaxDepth) + " levels"), std::string::npos)
      << message(deep);
  std::string deeper = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_NE(message(deeper).find("deeper than the parser's limit"), std::string::npos) << message(deeper);
  EXPECT_NE(message(std::string(YamlLimits::kMaxBytes + 1, 'x')).find("larger than " + std::to_string(YamlLimits::kMaxBytes)),
            std::string::npos);
  EXPECT_NE(message("a: b\n\xff\n").find("f.yaml:2: not valid UTF-8 at byte 5"), std::string::npos) << message("a: b\n\xff\n");
  EXPECT_NE(message("# c\n, or locally\na: 1\n").find("f.yaml:2: YAML syntax error: nothing could be read from here on"),
            std::string::npos)
      << message("# c\n, or locally\na: 1\n");
  EXPECT_NE(message(std::string("---\na: 1\n") + "---\na: 1\n" + [] {
              std::string s;
              for (int i = 0; i < 20; ++i) s += "---\na: 1\n";
              return s;
            }()).find("more than " + std::to_string(YamlLimits::kMaxDocuments) + " documents"),
            std::string::npos);
  // Documents split at their markers keep the file's line numbers.
  EXPECT_NE(message("a: 1\n---\nb: [\n").find("f.yaml:4:"), std::string::npos) << message("a: 1\n---\nb: [\n");
  EXPECT_EQ(message("---\nkind: ConfigMap\n...\n--- # the job\n" + example("fsdp.yaml") + "---\n"), "(no error)");
  // A few anchors used a few times each are fine: the limits are far above any real job.
  EXPECT_EQ(message("base: &b {cpu: 2}\nx: *b\ny: *b\nz: [*b, *b]\n"), "(no error)");
  EXPECT_EQ(message(example("fsdp.yaml")), "(no error)");
}

TEST(FuzzYaml, EveryTruncationOfEveryExample) {
  for (const char* file : {"ddp.yaml", "fsdp.yaml", "gpu.yaml"}) {
    const std::string text = example(file);
    ASSERT_FALSE(text.empty()) << file;
    for (size_t n = 0; n < text.size(); ++n) {
      auto problem = yaml_contract(std::string(file) + " cut at byte " + std::to_string(n), text.substr(0, n));
      EXPECT_EQ(problem, "");
      if (!problem.empty()) break;  // one report per file is enough
    }
  }
}

TEST(FuzzYaml, SeededRandomMutationsOfTheExamples) {
  std::mt19937 rng(20240611);  // fixed: a failure reproduces
  const std::vector<std::string> seeds = {example("ddp.yaml"), example("fsdp.yaml"), example("gpu.yaml")};
  int failures = 0;
  for (int i = 0; i < 3000 && failures < 5; ++i) {
    std::string text = mutate(seeds[static_cast<size_t>(i) % seeds.size()], rng);
    auto problem = yaml_contract("mutation " + std::to_string(i), text);
    if (!problem.empty()) {
      ++failures;
      ADD_FAILURE() << problem << "\ninput:\n" << text;
    }
  }
}

// The same inputs through the binary users run: an exit code and a message, never a signal.
TEST(FuzzYaml, LockstepValidateExitsWithACodeNotASignal) {
  const std::string cli = lockstep::test::env_or("LOCKSTEP_CLI_BIN", "");
  if (cli.empty()) GTEST_SKIP() << "SKIPPED: LOCKSTEP_CLI_BIN is not set (ctest sets it)";
  const std::string dir = ::testing::TempDir() + "/fuzz-cli-" + std::to_string(::getpid());
  fs::create_directories(dir);
  int i = 0;
  for (const auto& [name, text] : yaml_corpus()) {
    SCOPED_TRACE(name);
    const std::string path = dir + "/" + std::to_string(i++) + ".yaml";
    std::ofstream(path, std::ios::binary) << text;
    auto r = lockstep::run_capture({cli, "validate", path}, {}, std::chrono::seconds(60));
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.status.signal, 0) << r.status.describe();
    EXPECT_TRUE(r.status.code == 0 || r.status.code == 1 || r.status.code == 4)
        << r.status.describe() << ": " << r.output.substr(0, 400);
    EXPECT_NE(r.output.find(path), std::string::npos) << "the message should name the file: " << r.output.substr(0, 400);
  }
  fs::remove_all(dir);
}

// kubeconfig (operator/kube/rest_config.cpp): hostile files end in a RestConfig or a ConfigError.
namespace {

const char* kKubeconfig = R"(apiVersion: v1
kind: Config
current-context: c
clusters:
- name: k
  cluster:
    server: https://127.0.0.1:6443/
    certificate-authority-data: Y2E=
    insecure-skip-tls-verify: false
contexts:
- name: c
  context: {cluster: k, user: u, namespace: ns}
users:
- name: u
  user: {token: abc}
)";

std::string kubeconfig_contract(const std::string& name, const std::string& text, const std::string& dir) {
  const std::string path = dir + "/kubeconfig";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  try {
    auto c = lockstep::kube::RestConfig::from_kubeconfig(path);
    (void)c.bearer_token();
    return "";
  } catch (const lockstep::kube::ConfigError& e) {
    return std::string(e.what()).empty() ? name + ": an empty ConfigError" : "";
  } catch (const std::exception& e) {
    return name + ": escaped as a " + typeid(e).name() + ", not a ConfigError: " + e.what();
  }
}

}  // namespace

TEST(FuzzKubeconfig, HostileCorpusEndsInAConfigOrAConfigError) {
  const std::string dir = ::testing::TempDir() + "/fuzz-kube-" + std::to_string(::getpid());
  fs::create_directories(dir);
  ASSERT_EQ(kubeconfig_contract("the valid one", kKubeconfig, dir), "");
  std::vector<std::pair<std::string, std::string>> corpus = {
      {"recursive alias", "clusters: &a [*a]\ncontexts: &b [{name: c, context: *b}]\ncurrent-context: c\n"},
      {"recursive context", "current-context: c\ncontexts: &x [{name: c, context: {cluster: *x}}]\n"},
      {"billion laughs", billion_laughs(9, 9) + "current-context: c\n"},
      {"100k deep", std::string(100000, '[') + std::string(100000, ']')},
      {"a scalar document", "just a string\n"},
      {"a list document", "- a\n- b\n"},
      {"clusters a mapping", "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: {k: 1}\n"},
      {"names that are lists", "current-context: [c]\ncontexts: [{name: [c]}]\n"},
      {"server a list", "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
                        "clusters: [{name: k, cluster: {server: [1]}}]\n"},
      {"bad base64", "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
                     "clusters: [{name: k, cluster: {server: s, certificate-authority-data: \"%%%\"}}]\n"},
      {"insecure not a bool", "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
                              "clusters: [{name: k, cluster: {server: s, insecure-skip-tls-verify: maybe}}]\n"},
      {"certificate file is a directory", "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
                                          "clusters: [{name: k, cluster: {server: s, certificate-authority: /}}]\n"},
      {"huge scalar", "current-context: " + std::string(4 * 1024 * 1024, 'c') + "\n"},
      {"binary", std::string("\x00\xff\xfe\x01[{", 6) + std::string(1000, '\x80')},
      {"invalid UTF-8", "current-context: \xc0\xaf\n"},
      {"empty", ""},
  };
  for (const auto& [name, text] : corpus) {
    SCOPED_TRACE(name);
    EXPECT_EQ(kubeconfig_contract(name, text, dir), "");
  }
  const std::string valid = kKubeconfig;
  for (size_t n = 0; n < valid.size(); ++n) {
    auto problem = kubeconfig_contract("cut at byte " + std::to_string(n), valid.substr(0, n), dir);
    EXPECT_EQ(problem, "");
    if (!problem.empty()) break;
  }
  std::mt19937 rng(7);
  int failures = 0;
  for (int i = 0; i < 2000 && failures < 5; ++i) {
    std::string text = mutate(valid, rng);
    auto problem = kubeconfig_contract("mutation " + std::to_string(i), text, dir);
    if (!problem.empty()) {
      ++failures;
      ADD_FAILURE() << problem << "\ninput:\n" << text;
    }
  }
  fs::remove_all(dir);
}

// Token files (a kubeconfig's tokenFile, the service account's token): read as bytes, so
// anything ends in a token or a ConfigError.
TEST(FuzzKubeconfig, HostileTokenFiles) {
  const std::string dir = ::testing::TempDir() + "/fuzz-token-" + std::to_string(::getpid());
  fs::create_directories(dir);
  lockstep::kube::RestConfig c;
  c.token_file = dir + "/token";
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"binary", std::string("\x00\x01\xff\n", 4)},
           {"invalid UTF-8", "\xc0\xaf\xed\xa0\x80"},
           {"only newlines", std::string(1000, '\n')},
           {"empty", ""},
           {"a megabyte", std::string(1 << 20, 't')}}) {
    SCOPED_TRACE(name);
    std::ofstream(c.token_file, std::ios::binary | std::ios::trunc) << bytes;
    EXPECT_NO_THROW((void)c.bearer_token());
  }
  fs::remove(c.token_file);
  EXPECT_THROW((void)c.bearer_token(), lockstep::kube::ConfigError) << "a missing token file";
  fs::create_directories(c.token_file);  // a directory where the file should be
  try {
    std::string t = c.bearer_token();
    EXPECT_TRUE(t.empty()) << "a directory read as a token";
  } catch (const lockstep::kube::ConfigError&) {
  }
  fs::remove_all(dir);
}

// Prometheus text from a pod's metrics port (Note [Untrusted exposition]): what rank 0's agent
// serves reaches status.progress, the Restarted condition and an Event through
// reconcile/prometheus_text.cpp, parse_progress and parse_in_place. Whatever the text, they end in a
// result whose every field is in range and whose every string is short, valid UTF-8 that a
// JSON status write takes; never an exception, a crash or a long parse.
namespace {

const std::string kAgentPage =
    "# HELP lockstep_step The last step a rank reported\n# TYPE lockstep_step gauge\n"
    "lockstep_step{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 120\n"
    "lockstep_step{namespace=\"ns\",node_rank=\"0\",rank=\"1\",trainingjob=\"tj\"} 120\n"
    "lockstep_total_steps{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 1000\n"
    "lockstep_steps_total{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 121\n"
    "lockstep_tokens_total{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 7929856\n"
    "lockstep_restarts_total{kind=\"in_place\",namespace=\"ns\",node_rank=\"0\",trainingjob=\"tj\"} 2\n"
    "lockstep_restart_attempt{namespace=\"ns\",node_rank=\"0\",trainingjob=\"tj\"} 0\n"
    "lockstep_last_restart_timestamp_seconds{kind=\"in_place\",namespace=\"ns\",node_rank=\"0\",trainingjob=\"tj\"} "
    "1799999988.25\n"
    "lockstep_last_restart_info{exit_code=\"137\",kind=\"in_place\",namespace=\"ns\",node_rank=\"0\",rank=\"3\","
    "reason=\"WorkerFailed\",trainingjob=\"tj\"} 1\n";

std::string info_with(const std::string& labels, const std::string& value = "1") {
  return "lockstep_restarts_total{kind=\"in_place\"} 1\nlockstep_last_restart_info{kind=\"in_place\"," + labels + "} " +
         value + "\n";
}

std::vector<std::pair<std::string, std::string>> exposition_corpus() {
  std::vector<std::pair<std::string, std::string>> c = {
      {"the real page", kAgentPage},
      {"invalid UTF-8 reason", info_with("reason=\"\xc0\xaf\xff\",rank=\"3\",exit_code=\"1\"")},
      {"a surrogate in a label", info_with("reason=\"\xed\xa0\x80\"")},
      {"a truncated UTF-8 sequence", info_with("reason=\"Worker\xe2\x82\"")},
      {"a 1 MB reason", info_with("reason=\"" + std::string(1 << 20, 'A') + "\"")},
      {"a long CamelCase reason", info_with("reason=\"" + std::string(65, 'A') + "\"")},
      {"a reason with spaces and quotes", info_with("reason=\"Worker \\\"Failed\\\"\\n\"")},
      {"a huge rank", info_with("reason=\"Stall\",rank=\"99999999999999999999\"")},
      {"a rank of words", info_with("reason=\"Stall\",rank=\"three\",exit_code=\"-\"")},
      {"NaN everywhere",
       "lockstep_step{rank=\"0\"} NaN\nlockstep_total_steps{rank=\"0\"} NaN\nlockstep_steps_total{rank=\"0\"} NaN\n"
       "lockstep_tokens_total{rank=\"0\"} NaN\nlockstep_restarts_total{kind=\"in_place\"} NaN\n"
       "lockstep_restart_attempt NaN\nlockstep_last_restart_timestamp_seconds{kind=\"in_place\"} NaN\n"},
      {"infinities",
       "lockstep_step{rank=\"0\"} +Inf\nlockstep_total_steps{rank=\"0\"} -Inf\nlockstep_steps_total{rank=\"0\"} +Inf\n"
       "lockstep_tokens_total{rank=\"0\"} +Inf\nlockstep_restarts_total{kind=\"in_place\"} +Inf\n"
       "lockstep_last_restart_timestamp_seconds{kind=\"in_place\"} +Inf\n"},
      {"huge numbers",
       "lockstep_step{rank=\"0\"} 1e300\nlockstep_total_steps{rank=\"0\"} 9.3e18\nlockstep_steps_total{rank=\"0\"} 1\n"
       "lockstep_tokens_total{rank=\"0\"} 1.7e308\nlockstep_restarts_total{kind=\"in_place\"} 1e300\n"
       "lockstep_restart_attempt 1e300\nlockstep_last_restart_timestamp_seconds{kind=\"in_place\"} 1e300\n"},
      {"negative and fractional",
       "lockstep_step{rank=\"0\"} -5\nlockstep_step{rank=\"0\"} 2.5\nlockstep_total_steps{rank=\"0\"} -1\n"
       "lockstep_steps_total{rank=\"0\"} 3\nlockstep_restart_attempt -0.5\n"},
      {"hex floats and junk after the value",
       "lockstep_step{rank=\"0\"} 0x1p62\nlockstep_step{rank=\"0\"} 12abc\nlockstep_steps_total{rank=\"0\"} 1 2 3\n"},
      {"binary", std::string("\x00\x01\x02lockstep_step{rank=\"0\"} 1\n\xff\xfe", 31)},
      {"unterminated labels", "lockstep_step{rank=\"0 1\nlockstep_step{rank=\\\"0\"} 1\nlockstep_step{"},
      {"a 1 MB line", "lockstep_step{rank=\"0\",x=\"" + std::string(1 << 20, 'x') + "\"} 5\n"},
      {"only newlines", std::string(1 << 20, '\n')},
      {"an escape at the very end", "lockstep_step{rank=\"\\"},
  };
  std::string many;  // thousands of series, as many as fit in the reader's 1 MiB
  for (int i = 0; many.size() < (1 << 20) - 100; ++i)
    many += "lockstep_step{rank=\"" + std::to_string(i % 7) + "\",i=\"" + std::to_string(i) + "\"} " +
            std::to_string(i) + "\n";
  c.push_back({"thousands of series", many});
  return c;
}

// Empty when the contract held for `text`, else what went wrong.
std::string exposition_contract(const std::string& text) {
  using namespace lockstep::reconcile;
  try {
    auto samples = samples_of(text, {"lockstep_step", "lockstep_total_steps", "lockstep_tokens_total",
                                     "lockstep_steps_total", "lockstep_restarts_total", "lockstep_restart_attempt",
                                     "lockstep_last_restart_timestamp_seconds", "lockstep_last_restart_info"});
    if (samples.size() > kMaxSamples) return "more than kMaxSamples samples";
    for (const auto& s : samples)
      for (const auto& [k, v] : s.labels)
        if (!valid_utf8(v) || v.size() > kMaxLineBytes) return "label " + k + " is not short, valid UTF-8";
    const Time at = Clock::from_time_t(1'800'000'000);
    if (auto p = parse_progress(text, 0, at)) {
      if (p->step < 0 || p->step > kMaxSteps) return "step out of range";
      if (p->total_steps != -1 && (p->total_steps < 1 || p->total_steps > kMaxSteps)) return "total out of range";
      if (p->tokens != -1 && !(std::isfinite(p->tokens) && p->tokens >= 0)) return "tokens not finite";
      auto before = *p;
      before.at = at - std::chrono::seconds(30);
      before.step = 0;
      before.tokens = 0;
      Progress pr = progress_between(before, *p, 64);
      if (pr.tokens_per_second && !(std::isfinite(*pr.tokens_per_second) && *pr.tokens_per_second <= 9e15))
        return "tokens/s out of range";
      nlohmann::json status = {{"step", pr.step}, {"totalSteps", pr.total_steps}};
      (void)status.dump();
    }
    if (auto r = parse_in_place(text, 0)) {
      if (r->restarts < 0) return "negative restarts";
      for (const auto* s : {&r->reason, &r->rank, &r->exit_code})
        if (!valid_utf8(*s) || s->size() > kMaxReasonBytes) return "a cause that is not short, valid UTF-8";
      const std::string message = in_place_event_message(*r, 3, 2);
      if (message.size() > 512) return "an Event message of " + std::to_string(message.size()) + " bytes";
      nlohmann::json status = {{"message", in_place_message(*r, 3)}, {"event", message}};
      (void)status.dump();  // throws on invalid UTF-8
      if (r->last_at) (void)format_time(*r->last_at);
    }
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  }
  return "";
}

}  // namespace

TEST(FuzzExposition, HostileCorpusEndsInBoundedValidFields) {
  for (const auto& [name, text] : exposition_corpus()) {
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(exposition_contract(text), "") << name;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(ms, 2000) << name;
    if (text.size() >= 1000000) std::cout << "figure: " << name << " (" << text.size() << " bytes) parsed in " << ms << " ms\n";
  }
  using namespace lockstep::reconcile;
  // What the hostile causes leave: nothing said, never the bytes.
  auto r = parse_in_place(info_with("reason=\"\xc0\xaf\",rank=\"3\",exit_code=\"137\""), 0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, "");
  EXPECT_EQ(r->rank, "") << "the whole line is malformed, not only its reason";
  r = parse_in_place(info_with("reason=\"" + std::string(100, 'A') + "\",rank=\"x\",exit_code=\"137\""), 0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, "");
  EXPECT_EQ(r->rank, "");
  EXPECT_EQ(r->exit_code, "137");
  EXPECT_FALSE(parse_in_place("lockstep_restarts_total{kind=\"in_place\"} 1\nlockstep_restart_attempt NaN\n", 0))
      << "an attempt that is not a number is not this attempt";
  EXPECT_FALSE(parse_in_place("lockstep_restarts_total{kind=\"in_place\"} 1\nlockstep_restart_attempt 1e300\n", 0));
}

TEST(FuzzExposition, SeededRandomMutationsOfAnAgentsPage) {
  std::mt19937 rng(26);
  const std::string bytes = "{}\",=\\\n #\x80\xc0\xff\xed";
  for (int i = 0; i < 3000; ++i) {
    std::string s = kAgentPage;
    int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      size_t at = rng() % s.size();
      switch (rng() % 4) {
        case 0: s[at] = bytes[rng() % bytes.size()]; break;
        case 1: s.erase(at, 1 + rng() % 16); break;
        case 2: s.insert(at, 1, bytes[rng() % bytes.size()]); break;
        default: s.insert(at, s.substr(at, rng() % 64)); break;
      }
    }
    ASSERT_EQ(exposition_contract(s), "") << "mutation " << i;
  }
}
