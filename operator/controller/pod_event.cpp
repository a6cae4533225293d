#include "controller/pod_event.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "lockstep/contract.hpp"

namespace lockstep::controller {
namespace {

using kube::JsonValue;

// A path part against a literal: lengths first, no strlen.
bool is(const std::string& s, std::string_view lit) { return std::string_view(s) == lit; }

// Fills a RawPod as RawPod::from_json reads a parsed pod, from the values of the event's text:
// strings only where from_json takes strings, a field's presence where it asks for presence.
class PodVisitor : public kube::JsonVisitor {
 public:
  PodVisitor(kube::EventHead& head, reconcile::RawPod& raw) : head_(head), raw_(raw) {}

  void value(const std::vector<std::string>& path, size_t depth, const JsonValue& v) override {
    bool str = v.kind == JsonValue::String;
    if (depth == 1) {
      if (is(path[0], "type") && str) head_.type.assign(v.text);
      return;
    }
    if (depth < 3 || !is(path[0], "object")) return;
    const std::string& part = path[1];
    const std::string& field = path[2];
    if (is(part, "metadata")) {
      if (depth == 3) {
        if (is(field, "deletionTimestamp")) raw_.deleting = true;  // whatever its value, as contains()
        if (is(field, "deletionGracePeriodSeconds") && v.kind == JsonValue::Number)
          raw_.deletion_grace = std::strtod(std::string(v.text).c_str(), nullptr);
        if (!str) return;
        if (is(field, "deletionTimestamp")) raw_.deletion_timestamp.assign(v.text);
        if (is(field, "name")) raw_.name.assign(v.text);
        else if (is(field, "namespace")) raw_.ns.assign(v.text);
        else if (is(field, "uid")) raw_.uid.assign(v.text);
        else if (is(field, "resourceVersion")) head_.resource_version.assign(v.text);
      } else if (depth == 4 && is(field, "labels") && str) {
        const std::string& label = path[3];
        if (is(label, contract::kLabelJobName)) raw_.job_label.assign(v.text);
        else if (is(label, contract::kLabelNodeRank)) raw_.rank_label.assign(v.text);
        else if (is(label, contract::kLabelRestartAttempt)) raw_.attempt_label.assign(v.text);
      } else if (depth == 4 && is(field, "finalizers") && is(path[3], "*") && str) {
        raw_.finalizers.emplace_back(v.text);
      } else if (is(field, "ownerReferences") && is(path[3], "*")) {
        if (depth == 4) {
          raw_.owners.emplace_back();  // an element, of whatever kind
        } else if (depth == 5 && !raw_.owners.empty()) {
          auto& o = raw_.owners.back();
          const std::string& k = path[4];
          if (is(k, "kind") && str) o.kind.assign(v.text);
          else if (is(k, "uid") && str) o.uid.assign(v.text);
          else if (is(k, "controller") && (v.kind == JsonValue::True || v.kind == JsonValue::False))
            o.controller = v.kind == JsonValue::True;
        }
      }
      return;
    }
    if (is(part, "spec")) {
      if (depth == 3) {
        if (is(field, "nodeName") && str) raw_.node_name.assign(v.text);
        if (is(field, "tolerations")) tolerations_are_array_ = v.kind == JsonValue::Array;
        return;
      }
      if (!is(field, "tolerations") || !tolerations_are_array_ || !is(path[3], "*")) return;
      if (depth == 4) {
        raw_.tolerations.emplace_back();  // an element, of whatever kind
      } else if (depth == 5 && !raw_.tolerations.empty()) {
        auto& t = raw_.tolerations.back();
        const std::string& k = path[4];
        if (is(k, "tolerationSeconds")) {
          if (v.kind == JsonValue::Number) t.seconds = std::strtod(std::string(v.text).c_str(), nullptr);
        } else if (!str) {
          return;
        } else if (is(k, "key")) {
          t.key.assign(v.text);
        } else if (is(k, "operator")) {
          t.op.assign(v.text);
        } else if (is(k, "value")) {
          t.value.assign(v.text);
        } else if (is(k, "effect")) {
          t.effect.assign(v.text);
        }
      }
      return;
    }
    if (!is(part, "status")) return;
    if (depth == 3) {
      if (!str) return;
      if (is(field, "phase")) raw_.phase = std::string(v.text);
      else if (is(field, "reason")) raw_.reason.assign(v.text);
      else if (is(field, "podIP")) raw_.pod_ip.assign(v.text);
      return;
    }
    if (!is(path[3], "*")) return;  // conditions and containerStatuses are read as arrays only
    if (is(field, "conditions")) {
      if (depth == 4) {
        raw_.conditions.emplace_back();
      } else if (depth == 5 && str && !raw_.conditions.empty()) {
        auto& c = raw_.conditions.back();
        const std::string& k = path[4];
        if (is(k, "type")) c.type.assign(v.text);
        else if (is(k, "status")) c.status.assign(v.text);
        else if (is(k, "reason")) c.reason.assign(v.text);
        else if (is(k, "message")) c.message = std::string(v.text);
      }
    } else if (is(field, "containerStatuses") || is(field, "initContainerStatuses")) {
      if (depth == 4) {
        raw_.containers.emplace_back();
        raw_.containers.back().init = field[0] == 'i';
        state_is_object_ = waiting_is_object_ = terminated_is_object_ = false;
        return;
      }
      if (raw_.containers.empty()) return;
      auto& c = raw_.containers.back();
      if (depth == 5) {
        if (is(path[4], "name") && str) c.name.assign(v.text);
        if (is(path[4], "state")) state_is_object_ = v.kind == JsonValue::Object;
        return;
      }
      if (!is(path[4], "state") || !state_is_object_) return;
      const std::string& which = path[5];
      if (depth == 6) {
        if (is(which, "waiting")) waiting_is_object_ = v.kind == JsonValue::Object;
        else if (is(which, "terminated")) terminated_is_object_ = v.kind == JsonValue::Object;
        return;
      }
      if (depth != 7) return;
      const std::string& k = path[6];
      if (is(which, "waiting") && waiting_is_object_) {
        c.waiting = true;  // an object with a field
        if (is(k, "reason") && str) c.waiting_reason.assign(v.text);
        else if (is(k, "message") && str) c.waiting_message.assign(v.text);
      } else if (is(which, "terminated") && terminated_is_object_) {
        c.terminated = true;
        if (is(k, "exitCode") && v.kind == JsonValue::Number) c.exit_code = to_int(v.text);
        else if (is(k, "reason") && str) c.terminated_reason.assign(v.text);
        else if (is(k, "finishedAt") && str) c.finished_at.assign(v.text);
        else if (is(k, "message") && str) c.terminated_message.assign(v.text);
      }
    }
  }

 private:
  // As nlohmann's get<int>() of a number: an integer cast, a fraction truncated.
  static int to_int(std::string_view text) {
    long long i;
    auto r = std::from_chars(text.data(), text.data() + text.size(), i);
    if (r.ec == std::errc() && r.ptr == text.data() + text.size()) return static_cast<int>(i);
    double d = std::strtod(std::string(text).c_str(), nullptr);
    return std::isfinite(d) && std::fabs(d) < 2147483648.0 ? static_cast<int>(d) : -1;
  }

  kube::EventHead& head_;
  reconcile::RawPod& raw_;
  bool state_is_object_ = false, waiting_is_object_ = false, terminated_is_object_ = false;
  bool tolerations_are_array_ = false;  // spec.tolerations, as RawPod::from_json reads only an array
};

}  // namespace

bool pod_event_from_text(std::string_view line, const kube::Prune* prune, kube::EventHead& head,
                         reconcile::PodRecord& out) {
  reconcile::RawPod raw;
  PodVisitor visitor(head, raw);
  if (!kube::visit_pruned(line, prune, kube::PruneRoot::WatchObject, visitor)) {
    head.type.clear();
    return false;
  }
  head.key = raw.ns + "/" + raw.name;
  out = reconcile::PodRecord::from_raw(raw);
  return true;
}

}  // namespace lockstep::controller
