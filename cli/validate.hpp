// TrainingJob validation without a cluster: the CRD's own OpenAPI schema (embedded at build
// time from crds/), applied with the API server's rules and messages: defaults first, then
// types, required fields, enums, bounds, lengths, patterns, unknown fields (as kubectl's
// strict validation), and the CRD's CEL rules. `lockstep validate` and `lockstep run` use it;
// tests/crd/invalid/ checks that it rejects what the API server rejects, with the same words.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace lockstep::cli {

// A file that cannot be read (exit 3) or parsed as YAML (exit 4); what() says where.
struct InputError : std::runtime_error {
  InputError(const std::string& what, int code) : std::runtime_error(what), exit_code(code) {}
  int exit_code;
};

// Bounds on a YAML document, so hostile input fails with an error naming the bound instead of
// exhausting the stack or memory (an alias can make a few bytes expand without limit).
struct YamlLimits {
  static constexpr size_t kMaxBytes = 3 * 1024 * 1024;  // the API server's request body limit
  static constexpr size_t kMaxDepth = 100;              // nesting, aliases expanded
  static constexpr size_t kMaxValues = 100000;          // values, aliases expanded
  // Documents in one file (Note [YAML documents]): a job and a few objects beside it. Each is
  // read with its line offset, so the bound keeps a file of many small documents linear.
  static constexpr size_t kMaxDocuments = 16;
};

// Reads one YAML document into JSON (quoted scalars stay strings). Throws InputError (exit 4)
// for a syntax error, invalid UTF-8, a recursive alias or a document past YamlLimits.
nlohmann::json load_yaml_file(const std::string& path);
nlohmann::json yaml_to_json_text(const std::string& text, const std::string& name);

// Validates `job` in place (defaults are filled in); returns the errors, empty when valid.
std::vector<std::string> validate_trainingjob(nlohmann::json& job);

// The value a program's arguments give `flag` (e.g. "--model"), written either way a program's
// argument parser takes it: "--model=tiny" or "--model", "tiny". The last one wins, as it does
// for the trainer's parser; nullopt when not given (or given last without a value).
std::optional<std::string> arg_value(const std::vector<std::string>& args, const std::string& flag);

// The CEL rules of the CRD this build knows how to check (a test compares with the CRD).
std::vector<std::string> known_cel_rules();

}  // namespace lockstep::cli
