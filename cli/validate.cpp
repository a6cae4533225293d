#include "validate.hpp"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>

#include "crd_text.hpp"

using json = nlohmann::json;

namespace lockstep::cli {
namespace {

json to_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return nullptr;
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& x : n) a.push_back(to_json(x));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = to_json(kv.second);
      return o;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted: always a string
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
      if (s == "null" || s == "~" || s.empty()) return nullptr;
      static const std::regex integer(R"([-+]?[0-9]+)"), number(R"([-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?)");
      if (std::regex_match(s, integer)) {
        try { return std::stoll(s); } catch (...) {}
      }
      if (std::regex_match(s, number)) return std::stod(s);
      return s;
    }
    default: return nullptr;
  }
}

std::string show(const json& v) { return v.is_string() ? "\"" + v.get<std::string>() + "\"" : v.dump(); }

std::string type_of(const json& v) {
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  return "null";
}

// Note [CEL rules]: the CRD's x-kubernetes-validations, one C++ predicate each, keyed by
// the exact rule text, so a rule changed in the CRD without a counterpart here is caught
// (known_cel_rules() is compared with the CRD by a test).
using Rule = std::function<bool(const json& self)>;
const std::map<std::string, Rule>& cel_rules() {
  static const std::map<std::string, Rule> rules = {
      {"self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 50",
       [](const json& self) {
         std::string name = self.value("metadata", json::object()).value("name", "");
         static const std::regex dns1035("^[a-z]([-a-z0-9]*[a-z0-9])?$");
         return std::regex_match(name, dns1035) && name.size() <= 50;
       }},
      {"!has(self.strategy) || self.strategy != 'FSDP' || self.nodes * self.procsPerNode >= 2",
       [](const json& self) {
         return !self.contains("strategy") || self["strategy"] != "FSDP" ||
                self.value("nodes", 1) * self.value("procsPerNode", 1) >= 2;
       }},
      {"!has(self.metrics) || !has(self.metrics.port) || self.metrics.port != self.masterPort",
       [](const json& self) {
         return !self.contains("metrics") || !self["metrics"].contains("port") ||
                self["metrics"]["port"] != self.value("masterPort", json(29500));
       }},
      {"!has(self.restartPolicy) || self.restartPolicy == 'Never'",
       [](const json& self) { return !self.contains("restartPolicy") || self["restartPolicy"] == "Never"; }},
      {"!has(self.hostname) && !has(self.subdomain)",
       [](const json& self) { return !self.contains("hostname") && !self.contains("subdomain"); }},
      {"self.startsWith('/')", [](const json& self) { return self.is_string() && !self.get<std::string>().empty() && self.get<std::string>()[0] == '/'; }},
  };
  return rules;
}

void apply_defaults(const json& schema, json& value) {
  if (!value.is_object() || !schema.contains("properties")) {
    if (value.is_array() && schema.contains("items"))
      for (auto& item : value) apply_defaults(schema["items"], item);
    return;
  }
  for (const auto& [name, sub] : schema["properties"].items()) {
    if (!value.contains(name) && sub.contains("default")) value[name] = sub["default"];
    if (value.contains(name)) apply_defaults(sub, value[name]);
  }
}

void check(const json& schema, const json& v, const std::string& path, std::vector<std::string>& errors) {
  const std::string where = path.empty() ? "<root>" : path;
  if (schema.contains("type")) {
    std::string want = schema["type"], got = type_of(v);
    bool ok = want == got || (want == "number" && got == "integer");
    if (!ok) {
      errors.push_back(where + ": Invalid value: " + show(v) + ": " + where + " in body must be of type " + want + ": \"" + got + "\"");
      return;
    }
  }
  if (schema.contains("enum")) {
    bool found = false;
    std::string list;
    for (const auto& e : schema["enum"]) {
      found |= e == v;
      list += (list.empty() ? "" : ", ") + show(e);
    }
    if (!found) errors.push_back(where + ": Unsupported value: " + show(v) + ": supported values: " + list);
  }
  if (v.is_number()) {
    if (schema.contains("minimum") && v.get<double>() < schema["minimum"].get<double>())
      errors.push_back(where + ": Invalid value: " + v.dump() + ": " + where + " in body should be greater than or equal to " + schema["minimum"].dump());
    if (schema.contains("maximum") && v.get<double>() > schema["maximum"].get<double>())
      errors.push_back(where + ": Invalid value: " + v.dump() + ": " + where + " in body should be less than or equal to " + schema["maximum"].dump());
  }
  if (v.is_string()) {
    const std::string s = v;
    if (schema.contains("minLength") && s.size() < schema["minLength"].get<size_t>())
      errors.push_back(where + ": Invalid value: " + show(v) + ": " + where + " in body should be at least " + schema["minLength"].dump() + " chars long");
    if (schema.contains("maxLength") && s.size() > schema["maxLength"].get<size_t>())
      errors.push_back(where + ": Too long: may not be longer than " + schema["maxLength"].dump());
    if (schema.contains("pattern") && !std::regex_search(s, std::regex(schema["pattern"].get<std::string>())))
      errors.push_back(where + ": Invalid value: " + show(v) + ": " + where + " in body should match '" + schema["pattern"].get<std::string>() + "'");
  }
  if (v.is_array()) {
    if (schema.contains("minItems") && v.size() < schema["minItems"].get<size_t>())
      errors.push_back(where + ": Invalid value: " + std::to_string(v.size()) + ": " + where + " in body should have at least " + schema["minItems"].dump() + " items");
    if (schema.contains("items"))
      for (size_t i = 0; i < v.size(); ++i) check(schema["items"], v[i], path + "[" + std::to_string(i) + "]", errors);
  }
  if (v.is_object() && path == "metadata") return;  // ObjectMeta: the API server's own rules
  if (v.is_object()) {
    const bool open = schema.value("x-kubernetes-preserve-unknown-fields", false);
    const json props = schema.value("properties", json::object());
    for (const auto& r : schema.value("required", json::array())) {
      std::string name = r;
      if (!v.contains(name)) errors.push_back((path.empty() ? "" : path + ".") + name + ": Required value");
    }
    for (const auto& [name, sub] : v.items()) {
      std::string child = path.empty() ? name : path + "." + name;
      if (props.contains(name)) check(props[name], sub, child, errors);
      else if (schema.contains("additionalProperties")) check(schema["additionalProperties"], sub, child, errors);
      else if (!open && !(path.empty() && (name == "apiVersion" || name == "kind" || name == "metadata")))
        errors.push_back("unknown field \"" + child + "\"");
    }
  }
  for (const auto& rule : schema.value("x-kubernetes-validations", json::array())) {
    std::string text = rule["rule"], message = rule.value("message", "failed rule: " + text);
    auto it = cel_rules().find(text);
    if (it == cel_rules().end()) {
      errors.push_back(where + ": lockstep validate does not know the CEL rule '" + text + "' (update cli/validate.cpp)");
      continue;
    }
    if (!it->second(v)) {
      std::string field = where;
      if (rule.contains("fieldPath")) field = path + rule["fieldPath"].get<std::string>();
      errors.push_back(field + ": Invalid value: \"object\": " + message);
    }
  }
}

const json& crd_schema() {
  static const json schema = [] {
    json crd = yaml_to_json_text(kCrdText, "the embedded CRD");
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
  }();
  return schema;
}

}  // namespace

json yaml_to_json_text(const std::string& text, const std::string& name) {
  try {
    return to_json(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    throw InputError(name + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                         ": YAML syntax error: " + e.msg, 4);
  }
}

json load_yaml_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot read the file (does it exist?)", 3);
  std::stringstream ss;
  ss << in.rdbuf();
  return yaml_to_json_text(ss.str(), path);
}

std::vector<std::string> validate_trainingjob(json& job) {
  std::vector<std::string> errors;
  if (!job.is_object()) return {"the document is not a YAML mapping: expected a TrainingJob"};
  if (job.value("apiVersion", "") != "lockstep.dev/v1alpha1" || job.value("kind", "") != "TrainingJob")
    errors.push_back("apiVersion/kind: expected lockstep.dev/v1alpha1 TrainingJob, got " + job.value("apiVersion", "(none)") +
                     " " + job.value("kind", "(none)"));
  if (!job.contains("metadata") || !job["metadata"].contains("name"))
    errors.push_back("metadata.name: Required value");
  apply_defaults(crd_schema(), job);
  check(crd_schema(), job, "", errors);
  return errors;
}

std::vector<std::string> known_cel_rules() {
  std::vector<std::string> out;
  for (const auto& [rule, _] : cel_rules()) out.push_back(rule);
  return out;
}

}  // namespace lockstep::cli
