#include "reconcile/node.hpp"

#include "lockstep/contract.hpp"

using json = nlohmann::json;

namespace lockstep::reconcile {
namespace {

const json& member(const json& j, const char* key) {
  static const json none;
  return j.is_object() && j.contains(key) ? j[key] : none;
}

std::string text(const json& j, const char* key) {
  const json& v = member(j, key);
  return v.is_string() ? v.get<std::string>() : "";
}

}  // namespace

std::string printable(const std::string& s, size_t max) {
  std::string out;
  out.reserve(std::min(s.size(), max));
  for (char c : s) {
    if (out.size() == max) return out + "...";
    out.push_back(c >= 0x20 && c <= 0x7e ? c : '?');
  }
  return out;
}

NodeView NodeView::from_json(const json& node) {
  NodeView n;
  n.name = printable(text(member(node, "metadata"), "name"), kMaxNodeName);
  const json& conditions = member(member(node, "status"), "conditions");
  if (conditions.is_array())
    for (const auto& c : conditions) {
      if (text(c, "type") != "Ready") continue;
      n.ready = printable(text(c, "status"), 16);
      n.ready_reason = printable(text(c, "reason"), 128);
      n.ready_message = printable(text(c, "message"), 256);
      n.ready_since = printable(text(c, "lastTransitionTime"), 40);
    }
  const json& taints = member(member(node, "spec"), "taints");
  if (taints.is_array())
    for (const auto& t : taints) {
      if (text(t, "effect") != "NoExecute") continue;
      if (n.no_execute.size() == kMaxNodeTaints) break;
      n.no_execute.push_back({printable(text(t, "key"), kMaxTaintKey), printable(text(t, "value"), kMaxTaintValue)});
    }
  return n;
}

bool tolerates_for_ever(const Toleration& t, const NodeTaint& taint) {
  if (t.seconds) return false;  // Note [Lost nodes]: for a while only
  if (!t.key.empty() && t.key != taint.key) return false;
  return t.exists || t.value == taint.value;
}

std::optional<int> silent_peer(const std::string& message) {
  const std::string prefix = std::string(contract::kSilentPeerLine) + " node=";
  const std::string line = message.substr(0, message.find('\n'));
  if (line.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string digits = line.substr(prefix.size());
  if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos ||
      (digits.size() > 1 && digits[0] == '0'))
    return std::nullopt;
  return std::stoi(digits);
}

std::optional<std::string> node_lost(const PodView& pod, const NodeView& node) {
  const std::string name = "node " + printable(node.name, kMaxNodeName);
  if (node.gone) return name + " is gone (deleted)";
  if (node.ready == "False" || node.ready == "Unknown") {
    std::string why = "Ready=" + node.ready;
    if (!node.ready_reason.empty()) why += ", " + node.ready_reason;
    if (!node.ready_message.empty()) why += ": " + node.ready_message;
    return name + " is NotReady (" + why + ")" + (node.ready_since.empty() ? "" : " since " + node.ready_since);
  }
  if (pod.tolerations_cut) return std::nullopt;  // more tolerations than kept: taken as tolerating
  for (const auto& taint : node.no_execute) {
    bool tolerated = false, for_a_while = false;
    for (const auto& t : pod.tolerations) {
      Toleration forever = t;
      forever.seconds.reset();
      if (!tolerates_for_ever(forever, taint)) continue;
      if (!t.seconds) tolerated = true;
      else for_a_while = true;
    }
    if (tolerated) continue;
    std::string s = name + " has taint " + taint.key + (taint.value.empty() ? "" : "=" + taint.value) +
                    ":NoExecute that pod " + pod.name + " does not tolerate";
    if (for_a_while) s += " (its toleration has tolerationSeconds: it would be evicted)";
    return s;
  }
  return std::nullopt;
}

}  // namespace lockstep::reconcile
