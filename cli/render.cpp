#include "render.hpp"

#include <yaml-cpp/yaml.h>

#include <iostream>
#include <regex>
#include <sstream>

#include "reconcile/job.hpp"
#include "reconcile/kueue.hpp"
#include "reconcile/manifests.hpp"
#include "validate.hpp"

namespace lockstep::cli {

using json = nlohmann::json;

namespace {

// See Note [What render cannot know]: the secret's form (64 lowercase hex digits), not a secret.
const std::string kSecretPlaceholder(64, '0');
const std::string kZeroUid = "00000000-0000-0000-0000-000000000000";

// A string YAML 1.1 or 1.2 would read as another type when written plain: a number, a boolean,
// null, or nothing at all.
bool needs_quotes(const std::string& s) {
  static const std::regex other_type(
      "^(|~|null|Null|NULL|true|True|TRUE|false|False|FALSE|yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|y|Y|n|N|"
      "[-+]?(\\.[0-9]+|[0-9][0-9_]*(\\.[0-9_]*)?)([eE][-+]?[0-9]+)?|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)|"
      "0x[0-9a-fA-F_]+|0o[0-7]+|0b[01_]+|[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\\.[0-9_]*)?)$");
  return std::regex_match(s, other_type);
}

void emit(YAML::Emitter& out, const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [k, x] : v.items()) {
        out << YAML::Key;
        if (needs_quotes(k)) out << YAML::DoubleQuoted;
        out << k << YAML::Value;
        emit(out, x);
      }
      out << YAML::EndMap;
      break;
    case json::value_t::array:
      out << YAML::BeginSeq;
      for (const auto& x : v) emit(out, x);
      out << YAML::EndSeq;
      break;
    case json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      if (needs_quotes(s)) out << YAML::DoubleQuoted;
      out << s;
      break;
    }
    case json::value_t::boolean: out << v.get<bool>(); break;
    case json::value_t::null: out << YAML::Null; break;
    default: out << v.dump();  // numbers as JSON writes them
  }
}

}  // namespace

std::string default_agent_image() { return std::string("lockstep/agent:") + LOCKSTEP_VERSION; }

std::vector<RenderedObject> render_job(const json& job, const RenderOptions& o) {
  json copy = job;
  json& md = copy["metadata"];
  if (!o.namespace_name.empty()) md["namespace"] = o.namespace_name;
  else if (!md.contains("namespace") || !md["namespace"].is_string() || md["namespace"].get<std::string>().empty())
    md["namespace"] = "default";
  const bool uid_given = md.contains("uid") && md["uid"].is_string() && !md["uid"].get<std::string>().empty();
  if (!uid_given) md["uid"] = kZeroUid;
  reconcile::JobView view = reconcile::JobView::from_json(copy);
  if (!view.isolation_given)  // the operator's --default-isolation (Note [Job isolation])
    view.isolation = o.default_isolation == "NetworkPolicy" ? reconcile::Isolation::NetworkPolicy : reconcile::Isolation::None;
  const std::string owner_note = uid_given ? "" : "ownerReferences[0].uid is the TrainingJob's once it is created";
  const reconcile::AgentInjection agent{o.agent_image, o.agent_pull_policy};
  std::vector<RenderedObject> out;
  const std::string queue = reconcile::queue_of(view);
  if (!queue.empty()) {
    std::string note = "Kueue: created first; no other object until it is admitted in LocalQueue " + queue;
    if (!o.priority && (!view.kueue_priority_class.empty() || !view.priority_class_name.empty()))
      note += "; spec.priority is its priority class's value, read from the cluster (--priority N to print one)";
    out.push_back({reconcile::workload_manifest(view, agent, o.priority), note + (owner_note.empty() ? "" : "; " + owner_note)});
  }
  out.push_back({reconcile::service_manifest(view), owner_note});
  if (view.isolation == reconcile::Isolation::NetworkPolicy)
    out.push_back({reconcile::network_policy_manifest(view, {o.operator_namespace, o.monitoring_namespace}), owner_note});
  if (view.gang)
    out.push_back({reconcile::podgroup_manifest(view),
                   "created only where the coscheduling plugin's PodGroup CRD (scheduling.x-k8s.io/v1alpha1) is "
                   "installed" + (owner_note.empty() ? "" : "; " + owner_note)});
  std::string pods_note = "LOCKSTEP_BARRIER_SECRET is drawn for each gang attempt (this is a placeholder of its form)";
  if (!owner_note.empty()) pods_note += "; " + owner_note;
  if (!queue.empty()) pods_note += "; created once the Workload is admitted, with its flavors' nodeSelector and tolerations added";
  if (view.suspend) pods_note += "; none is created while spec.runPolicy.suspend is true";
  for (int i = 0; i < view.nodes; ++i)
    out.push_back({reconcile::pod_manifest(view, i, view.status.restarts, agent, kSecretPlaceholder, view.status.lost_nodes,
                                           view.status.stragglers.excluded_nodes),
                   pods_note});
  return out;
}

std::string render_yaml(const std::vector<RenderedObject>& objects) {
  std::ostringstream text;
  for (size_t i = 0; i < objects.size(); ++i) {
    const json& obj = objects[i].object;
    text << (i ? "---\n" : "") << "# " << obj.value("kind", "?") << " "
         << obj["metadata"].value("name", "?") << "\n";
    if (!objects[i].note.empty()) {
      std::string line;
      for (std::istringstream words(objects[i].note); std::getline(words, line, ';');)
        text << "# " << line.substr(line.find_first_not_of(' ') == std::string::npos ? 0 : line.find_first_not_of(' '))
             << "\n";
    }
    YAML::Emitter out;
    out.SetIndent(2);
    out.SetSeqFormat(YAML::Block);
    emit(out, obj);
    text << out.c_str() << "\n";
  }
  return text.str();
}

namespace {

const char* kRenderUsage = R"(usage: lockstep render [FLAGS] FILE.yaml   ("-" reads standard input)
  Prints, as YAML, the objects the operator would create for the TrainingJob, from the operator's
  own code: its Kueue Workload (when it names a queue), Service, NetworkPolicy (spec.isolation),
  PodGroup (spec.scheduling.gang) and one pod per node. What only the cluster decides is said in
  a comment above each object (docs/cli.md, "lockstep render").
  --agent-image IMAGE           as the operator's flag (default lockstep/agent:VERSION; '' injects nothing)
  --agent-image-pull-policy P   Always, IfNotPresent or Never (default IfNotPresent)
  --namespace NS                the job's namespace when the file names none (default "default")
  --operator-namespace NS       as the operator's flag: the NetworkPolicy's operator peer
  --monitoring-namespace NS     as the operator's flag: the NetworkPolicy's monitoring peer
  --default-isolation I         as the operator's flag: None or NetworkPolicy (default None)
  --priority N                  the Workload's spec.priority (its class's value in the cluster)
  Exit 0, 1 invalid job, 2 usage, 3 unreadable file, 4 not YAML (docs/exit-codes.md).
)";

}  // namespace

int render_command(const std::vector<std::string>& args) {
  RenderOptions o;
  o.agent_image = default_agent_image();
  std::string file;
  auto usage = [](const std::string& error) {
    std::cerr << "lockstep render: " << error << "\n" << kRenderUsage;
    return 2;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::cout << kRenderUsage;
      return 0;
    }
    std::string flag = a, value;
    bool has_value = false;
    if (const size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    auto take = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= args.size()) return false;
      value = args[++i];
      return true;
    };
    // The operator's own flags are checked by the operator's own checks (manifests.hpp).
    if (flag == "--agent-image") {
      if (!take()) return usage("--agent-image needs a value");
      if (auto error = reconcile::agent_image_flag_error(value); !error.empty()) return usage(error);
      o.agent_image = value;
    } else if (flag == "--agent-image-pull-policy") {
      if (!take()) return usage("--agent-image-pull-policy needs a value");
      if (auto error = reconcile::pull_policy_flag_error(value); !error.empty()) return usage(error);
      o.agent_pull_policy = value;
    } else if (flag == "--namespace" || flag == "--operator-namespace" || flag == "--monitoring-namespace") {
      if (!take()) return usage(flag + " needs a value");
      // Unlike the operator, '' is refused here too: the flag's absence already means none.
      auto error = value.empty() ? flag + ": '' is not a namespace name (a DNS label)" : reconcile::namespace_flag_error(flag, value);
      if (!error.empty()) return usage(error);
      (flag == "--namespace" ? o.namespace_name : flag == "--operator-namespace" ? o.operator_namespace : o.monitoring_namespace) = value;
    } else if (flag == "--default-isolation") {
      if (!take()) return usage("--default-isolation needs a value");
      if (auto error = reconcile::isolation_flag_error(value); !error.empty()) return usage(error);
      o.default_isolation = value;
    } else if (flag == "--priority") {
      if (!take()) return usage("--priority needs a value");
      static const std::regex integer("^-?[0-9]{1,10}$");
      long long p = std::regex_match(value, integer) ? std::stoll(value) : (1LL << 40);
      if (p < -2147483648LL || p > 1000000000LL)
        return usage("--priority: expected an integer in [-2147483648, 1000000000] (a priority class's value), got '" +
                     value + "'");
      o.priority = static_cast<int>(p);
    } else if (a.rfind("--", 0) == 0) {
      return usage("unknown flag " + a);
    } else if (file.empty()) {
      file = a;
    } else {
      return usage("one FILE.yaml, not two ('" + file + "', '" + a + "')");
    }
  }
  if (file.empty()) return usage("which TrainingJob? give FILE.yaml, or - for standard input");
  try {
    json job;
    if (file == "-") {
      std::string text;
      text.reserve(1 << 16);
      char buf[1 << 16];
      while (std::cin.read(buf, sizeof buf) || std::cin.gcount() > 0) {
        text.append(buf, static_cast<size_t>(std::cin.gcount()));
        if (text.size() > YamlLimits::kMaxBytes)
          throw InputError("standard input: more than " + std::to_string(YamlLimits::kMaxBytes) + " bytes", 4);
      }
      job = yaml_to_json_text(text, "standard input");
    } else {
      job = load_yaml_file(file);
    }
    const std::string name = file == "-" ? "standard input" : file;
    auto errors = validate_trainingjob(job);
    for (const auto& e : errors) std::cerr << name << ": " << e << "\n";
    if (!errors.empty()) return 1;
    std::cout << render_yaml(render_job(job, o));
    return 0;
  } catch (const InputError& e) {
    std::cerr << "lockstep render: " << e.what() << "\n";
    return e.exit_code;
  }
}

}  // namespace lockstep::cli
