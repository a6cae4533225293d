// Hostile YAML for the CLI (lockstep validate, run, plan --file; cli/validate.cpp), part of
// fuzz_test: each input ends in a result or an InputError with a message; never a crash, a
// hang or another exception. The corpus: recursive aliases, billion laughs, deep nesting
// (100k), huge scalars, binary, invalid UTF-8, every truncation of the examples, and seeded
// random mutations of them.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

#include "lockstep/process.hpp"
#include "fuzz_support.hpp"
#include "test_util.hpp"
#include "validate.hpp"

namespace fs = std::filesystem;
using lockstep::cli::InputError;
using lockstep::cli::YamlLimits;

namespace {

using lockstep::test::billion_laughs;
using lockstep::test::mutate;

std::string src(const std::string& rel) { return std::string(LOCKSTEP_SOURCE_DIR) + "/" + rel; }

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
