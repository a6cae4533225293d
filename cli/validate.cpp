#include "validate.hpp"

#include "reconcile/json_fields.hpp"
#include "reconcile/manifests.hpp"

#include <yaml-cpp/depthguard.h>  // YAML::DeepRecursion (not included by yaml.h in 0.7)
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>

#include "crd_text.hpp"
#include "lockstep/flags.hpp"
#include "lockstep/text.hpp"

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace lockstep::cli {
namespace {

// Plain (unquoted) scalars that YAML 1.2's core schema reads as numbers. Hand-written rather
// than std::regex, whose recursive matcher overflows the stack on a long enough scalar.
bool is_integer(const std::string& s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}
bool is_number(const std::string& s) {  // [-+]?(digits[.digits*]|.digits)([eE][-+]?digits)?
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  auto digits = [&] {
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - start;
  };
  size_t whole = digits(), frac = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    frac = digits();
  }
  if (whole == 0 && frac == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    if (digits() == 0) return false;
  }
  return i == s.size();
}

// YAML to JSON within YamlLimits. yaml-cpp shares one node among an anchor and its aliases,
// so a document can be a cycle (`a: &a [*a]`) or expand exponentially ("billion laughs")
// while being a few bytes long: the walk counts values and depth and recognises an ancestor.
class Converter {
 public:
  explicit Converter(const std::string& name) : name_(name) {}

  json convert(const YAML::Node& n) {
    if (++values_ > YamlLimits::kMaxValues)
      fail("the document expands to more than " + std::to_string(YamlLimits::kMaxValues) +
           " values (aliases repeating a large anchor?); a TrainingJob needs a few hundred");
    if (ancestors_.size() >= YamlLimits::kMaxDepth)
      fail("the document nests deeper than " + std::to_string(YamlLimits::kMaxDepth) + " levels; a TrainingJob needs about 20");
    for (const auto& a : ancestors_)
      if (a.is(n)) fail("an alias refers to a node that contains it (a recursive anchor such as `a: &a [*a]`)", n);
    switch (n.Type()) {
      case YAML::NodeType::Sequence: {
        ancestors_.push_back(n);
        json a = json::array();
        for (const auto& x : n) a.push_back(convert(x));
        ancestors_.pop_back();
        return a;
      }
      case YAML::NodeType::Map: {
        ancestors_.push_back(n);
        json o = json::object();
        for (const auto& kv : n) {
          if (!kv.first.IsScalar()) fail("a mapping key is a sequence or mapping; keys must be strings", kv.first);
          o[kv.first.Scalar()] = convert(kv.second);
        }
        ancestors_.pop_back();
        return o;
      }
      case YAML::NodeType::Scalar: {
        const std::string& s = n.Scalar();
        if (n.Tag() == "!") return s;  // quoted: always a string
        if (s == "true" || s == "True" || s == "TRUE") return true;
        if (s == "false" || s == "False" || s == "FALSE") return false;
        if (s == "null" || s == "~" || s.empty()) return nullptr;
        if (is_integer(s)) {
          try { return std::stoll(s); } catch (const std::out_of_range&) {}
        }
        if (is_number(s)) {
          try { return std::stod(s); } catch (const std::out_of_range&) {}
        }
        return s;
      }
      default: return nullptr;
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what, const YAML::Node& at = YAML::Node()) {
    std::string where = name_;
    if (at.IsDefined() && at.Mark().line >= 0)
      where += ":" + std::to_string(at.Mark().line + 1) + ":" + std::to_string(at.Mark().column + 1);
    throw InputError(where + ": YAML too complex: " + what, 4);
  }

  const std::string& name_;
  size_t values_ = 0;
  std::vector<YAML::Node> ancestors_;
};

std::string show(const json& v) {
  if (!v.is_string()) return v.dump();
  const auto& s = v.get_ref<const std::string&>();
  std::string out;
  out.reserve(s.size() + 2);
  out.append(1, '"').append(s).append(1, '"');
  return out;
}

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
         return name.size() <= 50 && std::regex_match(name, dns1035);  // short first: std::regex recurses per character
       }},
      // A transition rule (it reads oldSelf): the API server runs it on updates only, and
      // lockstep validate checks a job as it would be created.
      {"!has(oldSelf.status) || !has(oldSelf.status.phase) || !(oldSelf.status.phase in ['Queued', "
       "'Pending', 'Running', 'Restarting']) || (has(self.spec.nodes) == has(oldSelf.spec.nodes) && "
       "(!has(self.spec.nodes) || self.spec.nodes == oldSelf.spec.nodes) && has(self.spec.procsPerNode) "
       "== has(oldSelf.spec.procsPerNode) && (!has(self.spec.procsPerNode) || self.spec.procsPerNode == "
       "oldSelf.spec.procsPerNode) && has(self.spec.template) == has(oldSelf.spec.template) && "
       "(!has(self.spec.template) || self.spec.template == oldSelf.spec.template))",
       [](const json&) { return true; }},
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
      {"!has(self.metrics) || !has(self.metrics.port) || self.metrics.port != self.masterPort + 1",
       [](const json& self) {
         return !self.contains("metrics") || !self["metrics"].contains("port") ||
                self["metrics"]["port"].get<long long>() != self.value("masterPort", 29500LL) + 1;
       }},
      {"!has(self.restartPolicy) || self.restartPolicy == 'Never'",
       [](const json& self) { return !self.contains("restartPolicy") || self["restartPolicy"] == "Never"; }},
      {"!has(self.hostname) && !has(self.subdomain)",
       [](const json& self) { return !self.contains("hostname") && !self.contains("subdomain"); }},
      // Note [Pods placed by hand] (operator/reconcile/node.hpp): the operator says the same.
      {"!has(self.nodeName)", [](const json& self) { return !self.contains("nodeName"); }},
      {"!has(self.command) || !(self.command[0] == 'torchrun' || self.command[0].endsWith('/torchrun') || (size(self.command) > 2 && self.command[1] == '-m' && self.command[2] in ['torch.distributed.run', 'torch.distributed.launch']))",
       [](const json& self) {
         if (!self.contains("command") || !self["command"].is_array() || self["command"].empty()) return true;
         const json& c = self["command"];
         auto at = [&](size_t i) { return c.size() > i && c[i].is_string() ? c[i].get<std::string>() : std::string(); };
         const std::string first = at(0);
         const bool torchrun = first == "torchrun" || (first.size() > 9 && first.compare(first.size() - 9, 9, "/torchrun") == 0);
         const bool module = c.size() > 2 && at(1) == "-m" && (at(2) == "torch.distributed.run" || at(2) == "torch.distributed.launch");
         return !torchrun && !module;
       }},
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

void check(const json& schema, const json& v, const std::string& path, std::vector<std::string>& errors);

// The schema's bounds on a scalar: enum, minimum and maximum, lengths and pattern.
void check_scalar(const json& schema, const json& v, const std::string& where, std::vector<std::string>& errors) {
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
    // std::regex recurses per character: a string past its maxLength (already an error) is
    // not matched, so a megabyte-long value cannot overflow the stack.
    const bool too_long = schema.contains("maxLength") && s.size() > schema["maxLength"].get<size_t>();
    if (schema.contains("pattern") && !too_long && !std::regex_search(s, std::regex(schema["pattern"].get<std::string>())))
      errors.push_back(where + ": Invalid value: " + show(v) + ": " + where + " in body should match '" + schema["pattern"].get<std::string>() + "'");
  }
}

// An object's required, known and unknown fields, each checked against its own schema.
void check_fields(const json& schema, const json& v, const std::string& path, std::vector<std::string>& errors) {
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

// The schema's CEL rules (x-kubernetes-validations), each one lockstep validate knows.
void check_rules(const json& schema, const json& v, const std::string& path, std::vector<std::string>& errors) {
  const std::string where = path.empty() ? "<root>" : path;
  for (const auto& rule : schema.value("x-kubernetes-validations", json::array())) {
    std::string text = rule["rule"], message = rule.value("message", "failed rule: " + text);
    auto it = cel_rules().find(text);
    if (it == cel_rules().end()) {
      errors.push_back(where + ": lockstep validate does not know the CEL rule '" + text + "' (update cli/validate.cpp)");
      continue;
    }
    bool holds = true;
    try {
      holds = it->second(v);
    } catch (const json::exception&) {
      // A field of the wrong type (reported above): the API server does not evaluate CEL on
      // an object that fails its schema either.
      continue;
    }
    if (!holds) {
      std::string field = where;
      if (rule.contains("fieldPath")) field = path + rule["fieldPath"].get<std::string>();
      errors.push_back(field + ": Invalid value: \"object\": " + message);
    }
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
  check_scalar(schema, v, where, errors);
  if (v.is_array()) {
    if (schema.contains("minItems") && v.size() < schema["minItems"].get<size_t>())
      errors.push_back(where + ": Invalid value: " + std::to_string(v.size()) + ": " + where + " in body should have at least " + schema["minItems"].dump() + " items");
    if (schema.contains("items"))
      for (size_t i = 0; i < v.size(); ++i) check(schema["items"], v[i], path + "[" + std::to_string(i) + "]", errors);
  }
  if (v.is_object() && path == "metadata") return;  // ObjectMeta: the API server's own rules
  if (v.is_object()) check_fields(schema, v, path, errors);
  check_rules(schema, v, path, errors);
}

const json& crd_schema() {
  static const json schema = [] {
    json crd = yaml_to_json_text(kCrdText, "the embedded CRD");
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
  }();
  return schema;
}

// Note [YAML documents]
// yaml-cpp 0.7's LoadAll never returns on some malformed input: its parser reports a document
// without consuming anything (a line that starts with ',' after a comment, found by
// fuzz_test's mutations), so LoadAll appends empty documents until memory runs out (23 GB,
// then the OOM killer). So the documents are split here, at the markers that end one in
// YAML 1.2 (a line starting `---` or `...` followed by a blank or its end, which content may
// not begin with), and each is read by YAML::Load, which reads one. Each piece keeps its
// place (blank lines before it), so yaml-cpp's line numbers stay those of the file. A piece
// from which yaml-cpp reads nothing although it holds more than comments is that same
// parser state: a syntax error at its first such line, not an empty document.
bool document_marker(const std::string& text, size_t at) {
  if (text.compare(at, 3, "---") != 0 && text.compare(at, 3, "...") != 0) return false;
  return at + 3 >= text.size() || text[at + 3] == ' ' || text[at + 3] == '\t' || text[at + 3] == '\n' ||
         text[at + 3] == '\r';
}

std::vector<YAML::Node> load_documents(const std::string& text, const std::string& name) {
  std::vector<YAML::Node> docs;
  // The piece [start, end) beginning on line start_line (0-based): a document unless it holds
  // only blank lines, comments and a bare `---`.
  auto read = [&](size_t start, size_t end, size_t start_line) {
    std::string content;  // the first line with content, from its first character
    size_t content_line = start_line;
    for (size_t at = start; at < end && content.empty(); ++content_line) {
      size_t eol = std::min(text.find('\n', at), end);
      size_t first = text.find_first_not_of(" \t\r", at);
      if (first < eol && text[first] != '#') {
        content = text.substr(first, eol - first);
        if (first == at && document_marker(text, at)) {  // `--- value` holds the value
          size_t value = content.find_first_not_of(" \t\r", 3);
          content = value == std::string::npos || content[value] == '#' ? "" : content.substr(value);
        }
      }
      if (!content.empty()) break;
      at = eol + 1;
    }
    if (content.empty()) return;
    if (docs.size() >= YamlLimits::kMaxDocuments)
      throw InputError(name + ":" + std::to_string(content_line + 1) + ": YAML too complex: more than " +
                           std::to_string(YamlLimits::kMaxDocuments) +
                           " documents; a TrainingJob file holds the job and a few objects beside it",
                       4);
    YAML::Node node = YAML::Load(std::string(start_line, '\n') + text.substr(start, end - start));
    const bool null_written = content.rfind("~", 0) == 0 || content.rfind("null", 0) == 0 ||
                              content.rfind("Null", 0) == 0 || content.rfind("NULL", 0) == 0 || content.rfind("!!null", 0) == 0;
    if ((!node || node.IsNull()) && !null_written)
      throw InputError(name + ":" + std::to_string(content_line + 1) +
                           ": YAML syntax error: nothing could be read from here on (a line that YAML cannot start "
                           "with, such as one beginning with ','?)",
                       4);
    docs.push_back(std::move(node));
  };
  size_t start = 0, start_line = 0, line = 0;
  for (size_t at = 0; at < text.size(); ++line) {
    size_t eol = text.find('\n', at);
    if (eol == std::string::npos) eol = text.size();
    if (document_marker(text, at)) {
      read(start, at, start_line);
      if (text[at] == '-') {  // `---` begins the next document, on this line
        start = at, start_line = line;
      } else {  // `...` ends this one; the next begins after it
        start = std::min(eol + 1, text.size()), start_line = line + 1;
      }
    }
    at = eol + 1;
  }
  read(start, text.size(), start_line);
  return docs;
}

}  // namespace

json yaml_to_json_text(const std::string& text, const std::string& name) {
  if (text.size() > YamlLimits::kMaxBytes)
    throw InputError(name + ": larger than " + std::to_string(YamlLimits::kMaxBytes) +
                         " bytes, the most a TrainingJob may be (the API server's request limit)", 4);
  if (size_t at = lockstep::text::utf8_invalid_at(text); at != std::string::npos) {  // Note [UTF-8 text]
    size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
    throw InputError(name + ":" + std::to_string(line) + ": not valid UTF-8 at byte " + std::to_string(at) +
                         " (a binary file?); YAML manifests must be UTF-8 text", 4);
  }
  YAML::Node root;
  try {
    // A manifest file may hold other objects beside the job (a ConfigMap with the script, as
    // examples/pytorch-script.yaml does): of several documents, the one TrainingJob is read.
    // See Note [YAML documents]: not YAML::LoadAll.
    std::vector<YAML::Node> docs = load_documents(text, name);
    std::vector<YAML::Node> jobs;
    std::string kinds;
    for (const auto& d : docs) {
      const YAML::Node kind = d.IsMap() ? d["kind"] : YAML::Node();
      const std::string k = kind && kind.IsScalar() ? kind.Scalar() : "?";
      if (k == "TrainingJob") jobs.push_back(d);
      kinds += (kinds.empty() ? "" : ", ") + k;
    }
    if (docs.size() <= 1) root = docs.empty() ? YAML::Node() : docs[0];
    else if (jobs.size() == 1) root = jobs[0];
    else if (jobs.empty())
      throw InputError(name + ": holds " + std::to_string(docs.size()) + " YAML documents (" + kinds +
                           ") and no TrainingJob (kind: TrainingJob)", 4);
    else
      throw InputError(name + ": holds " + std::to_string(jobs.size()) +
                           " TrainingJobs; lockstep reads one per file: put each in a file of its own", 4);
  } catch (const YAML::DeepRecursion& e) {
    throw InputError(name + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                         ": YAML too complex: nested deeper than the parser's limit of " + std::to_string(e.depth()) +
                         " levels", 4);
  } catch (const YAML::Exception& e) {
    throw InputError(name + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                         ": YAML syntax error: " + e.msg, 4);
  }
  try {
    return Converter(name).convert(root);
  } catch (const YAML::Exception& e) {  // yaml-cpp's own errors while walking the document
    throw InputError(name + ": YAML error: " + e.msg, 4);
  }
}

json load_yaml_file(const std::string& path) {
  if (std::error_code ec; fs::is_directory(path, ec)) throw InputError(path + ": is a directory, not a YAML file", 3);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read the file (does it exist?)", 3);
  // Read at most one byte past the limit, so /dev/zero or a huge file is refused, not slurped.
  std::string text(YamlLimits::kMaxBytes + 1, '\0');
  in.read(&text[0], static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (in.bad()) throw InputError(path + ": cannot read the file", 3);
  return yaml_to_json_text(text, path);
}

namespace {

// Note [Queue fields]: what the operator checks of a job's Kueue fields before it makes a
// Workload (operator/reconcile/kueue.hpp, queue_of), said here too, with the same words: the
// kueue.x-k8s.io/queue-name and kueue.x-k8s.io/priority-class labels are label values (the API
// server checks that), and the queue label and spec.scheduling.queue must not name different
// LocalQueues.
// The document may be anything (the schema check above says what is wrong with it): its parts
// are read with reconcile::child, an empty object where there is none of that type.
void check_queue(const json& job, std::vector<std::string>& errors) {
  using reconcile::child;
  const json& labels = child(child(job, "metadata"), "labels");
  const json& spec = child(job, "spec");
  static const std::regex label_value("^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$");
  for (const char* key : {"kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class"}) {
    if (!labels.is_object() || !labels.contains(key)) continue;
    const json& v = labels[key];
    if (!v.is_string() || v.get<std::string>().size() > 63 || !std::regex_match(v.get<std::string>(), label_value))
      errors.push_back(std::string("metadata.labels[") + key + "]: Invalid value: " + show(v) +
                       ": a label value (at most 63 characters: letters, digits, '-', '_' and '.', starting and "
                       "ending with a letter or digit) naming a Kueue " +
                       (std::string(key).find("queue") != std::string::npos ? "LocalQueue" : "WorkloadPriorityClass"));
  }
  const json& sched = child(spec, "scheduling");
  // Volcano: the operator makes scheduler-plugins' PodGroup only, which Volcano does not read, so
  // a gang would not be held together (docs/trainingjob.md; the CRD says the same).
  auto field = [&](const char* key, const json& fallback) { return sched.contains(key) ? sched[key] : fallback; };
  if (field("schedulerName", json("")) == "volcano" && field("gang", json(true)) == true)
    errors.push_back("spec.scheduling.schedulerName: Unsupported value: \"volcano\" with spec.scheduling.gang true: "
                     "Volcano schedules a gang by its own PodGroup (scheduling.volcano.sh), which Lockstep does not make "
                     "(it makes scheduler-plugins' scheduling.x-k8s.io PodGroup, for a Coscheduling scheduler); set "
                     "spec.scheduling.gang: false to use Volcano as a plain scheduler (untested), or use a Coscheduling one");
  if (labels.is_object() && labels.contains("kueue.x-k8s.io/queue-name") && labels["kueue.x-k8s.io/queue-name"].is_string() &&
      sched.is_object() && sched.contains("queue") && sched["queue"].is_string()) {
    const std::string label = labels["kueue.x-k8s.io/queue-name"], queue = sched["queue"];
    if (!label.empty() && !queue.empty() && label != queue)
      errors.push_back("metadata.labels[kueue.x-k8s.io/queue-name]=" + label + " and spec.scheduling.queue=" + queue +
                       " name different LocalQueues: set one of them, or both to the same queue");
  }
}

}  // namespace

std::vector<std::string> validate_trainingjob(json& job) {
  std::vector<std::string> errors;
  if (!job.is_object()) return {"the document is not a YAML mapping: expected a TrainingJob"};
  // json::value() throws when the key is there with another type (`apiVersion:` is null).
  auto text_of = [&](const char* key) {
    return !job.contains(key) ? std::string("(none)") : job[key].is_string() ? job[key].get<std::string>() : job[key].dump();
  };
  if (text_of("apiVersion") != "lockstep.dev/v1alpha1" || text_of("kind") != "TrainingJob")
    errors.push_back("apiVersion/kind: expected lockstep.dev/v1alpha1 TrainingJob, got " + text_of("apiVersion") + " " +
                     text_of("kind"));
  if (!job.contains("metadata") || !job["metadata"].is_object() || !job["metadata"].contains("name"))
    errors.push_back("metadata.name: Required value");
  else if (!job["metadata"]["name"].is_string())
    errors.push_back("metadata.name: Invalid value: " + job["metadata"]["name"].dump() + ": must be a string");
  apply_defaults(crd_schema(), job);
  check(crd_schema(), job, "", errors);
  check_queue(job, errors);
  // Note [Agent injection] (operator/reconcile/manifests.hpp): nothing where the agent is mounted.
  if (std::string overlay = reconcile::agent_overlay(reconcile::child(reconcile::child(job, "spec"), "template"));
      !overlay.empty())
    errors.push_back(overlay);
  return errors;
}

std::vector<std::string> known_cel_rules() {
  std::vector<std::string> out;
  for (const auto& [rule, _] : cel_rules()) out.push_back(rule);
  return out;
}

// Read with the programs' own matcher (lockstep/flags.hpp).
std::optional<std::string> arg_value(const std::vector<std::string>& args, const std::string& flag) {
  std::optional<std::string> value;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string v;
    try {
      if (flags::match(args, i, flag, v)) value = v;
    } catch (const flags::FlagError&) {  // given last without a value: as if not given
    }
  }
  return value;
}

}  // namespace lockstep::cli
