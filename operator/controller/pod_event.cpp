#include "controller/pod_event.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "kube/json_text.hpp"
#include "lockstep/contract.hpp"

namespace lockstep::controller {
namespace {

namespace od = simdjson::ondemand;
using reconcile::RawPod;

// Note [Pod text], continued: each reader below takes the fields of one object in the order
// the text has them, and asks for a value only where RawPod keeps it, with the type it keeps:
// a value of another type, or a field nobody reads, is stepped over. Duplicate keys: the last
// one wins for a single value, as json::parse keeps the last.

// A string value into `out`; a value of another type leaves it as it was.
void str(od::value& v, std::string& out) {
  std::string_view s;
  if (!v.get_string().get(s)) out.assign(s);
}

// A number's value as a double, when the value is a number.
std::optional<double> num(od::value& v) {
  double d;
  if (v.get_double().get(d)) return std::nullopt;
  return d;
}

// As nlohmann's get<int>() of a number: an integer cast, a fraction truncated; -1 when not a number.
int int_of(od::value& v) {
  od::number_type type;
  if (v.get_number_type().get(type)) return -1;
  if (type == od::number_type::signed_integer) {
    std::int64_t i;
    if (!v.get_int64().get(i)) return static_cast<int>(i);
  }
  double d;
  if (v.get_double().get(d)) return -1;
  return std::isfinite(d) && std::fabs(d) < 2147483648.0 ? static_cast<int>(d) : -1;
}

// Iterates an object's fields, calling f(key, value) for each; false when the text breaks off.
// A value that is not an object has no fields (true).
template <class F>
bool fields(od::value& v, F&& f) {
  od::object obj;
  if (v.get_object().get(obj)) return true;
  for (auto member : obj) {
    od::field field;
    if (std::move(member).get(field)) return false;
    std::string_view key;
    if (field.unescaped_key().get(key)) return false;
    if (!f(key, field.value())) return false;
  }
  return true;
}

// Iterates an array's elements, calling f(element) for each; true for a value that is no array.
template <class F>
bool elements(od::value& v, F&& f) {
  od::array arr;
  if (v.get_array().get(arr)) return true;
  for (auto item : arr) {
    od::value element;
    if (std::move(item).get(element)) return false;
    if (!f(element)) return false;
  }
  return true;
}

bool read_metadata(od::value& md, RawPod& r, std::string* resource_version) {
  return fields(md, [&](std::string_view k, od::value& v) {
    if (k == "name") str(v, r.name);
    else if (k == "namespace") str(v, r.ns);
    else if (k == "uid") str(v, r.uid);
    else if (k == "resourceVersion") { if (resource_version) str(v, *resource_version); }
    else if (k == "deletionTimestamp") {
      r.deleting = true;  // whatever its value, as contains()
      str(v, r.deletion_timestamp);
    }
    else if (k == "deletionGracePeriodSeconds") r.deletion_grace = num(v);
    else if (k == "finalizers") {
      return elements(v, [&](od::value& f) {
        std::string s;
        std::string_view view;
        if (!f.get_string().get(view)) r.finalizers.emplace_back(view);
        return true;
      });
    }
    else if (k == "labels") {
      return fields(v, [&](std::string_view label, od::value& value) {
        if (label == contract::kLabelJobName) str(value, r.job_label);
        else if (label == contract::kLabelNodeRank) str(value, r.rank_label);
        else if (label == contract::kLabelRestartAttempt) str(value, r.attempt_label);
        return true;
      });
    }
    else if (k == "ownerReferences") {
      return elements(v, [&](od::value& o) {
        RawPod::Owner& owner = r.owners.emplace_back();  // an element, of whatever kind
        return fields(o, [&](std::string_view f, od::value& value) {
          if (f == "kind") str(value, owner.kind);
          else if (f == "uid") str(value, owner.uid);
          else if (f == "controller") { bool b; if (!value.get_bool().get(b)) owner.controller = b; }
          return true;
        });
      });
    }
    return true;
  });
}

// A container of spec.containers: its name, and LOCKSTEP_BARRIER_SECRET's value in its env.
struct SpecContainer {
  std::string name, secret;
};

bool read_spec_container(od::value& ctr, SpecContainer& c) {
  return fields(ctr, [&](std::string_view k, od::value& v) {
    if (k == "name") str(v, c.name);
    else if (k == "env") {
      return elements(v, [&](od::value& e) {
        std::string name, value;
        bool ok = fields(e, [&](std::string_view f, od::value& x) {
          if (f == "name") str(x, name);
          else if (f == "value") str(x, value);
          return true;
        });
        if (name == contract::kBarrierSecret) c.secret = std::move(value);
        return ok;
      });
    }
    return true;
  });
}

bool read_spec(od::value& spec, RawPod& r) {
  return fields(spec, [&](std::string_view k, od::value& v) {
    if (k == "nodeName") str(v, r.node_name);
    else if (k == "hostNetwork") { bool b; if (!v.get_bool().get(b)) r.host_network = b; }
    else if (k == "containers") {
      // See Note [Barrier secret]: the trainer container's (the one named so, else the first), as
      // pod_manifest writes it; another container's variable of that name is not it.
      std::optional<SpecContainer> first, trainer;
      bool ok = elements(v, [&](od::value& ctr) {
        SpecContainer c;
        if (!read_spec_container(ctr, c)) return false;
        if (!first) first = c;
        if (c.name == contract::kTrainerContainer && !trainer) trainer = std::move(c);
        return true;
      });
      if (trainer) r.barrier_secret = trainer->secret;
      else if (first) r.barrier_secret = first->secret;
      return ok;
    }
    else if (k == "tolerations") {
      return elements(v, [&](od::value& t) {
        RawPod::Toleration& tol = r.tolerations.emplace_back();  // an element, of whatever kind
        return fields(t, [&](std::string_view f, od::value& value) {
          if (f == "key") str(value, tol.key);
          else if (f == "operator") str(value, tol.op);
          else if (f == "value") str(value, tol.value);
          else if (f == "effect") str(value, tol.effect);
          else if (f == "tolerationSeconds") tol.seconds = num(value);
          return true;
        });
      });
    }
    return true;
  });
}

// One container status: its name, and its state's waiting or terminated object (each counted
// only when it has a field).
bool read_container(od::value& cs, RawPod::Container& c) {
  return fields(cs, [&](std::string_view k, od::value& v) {
    if (k == "name") str(v, c.name);
    else if (k == "state") {
      return fields(v, [&](std::string_view which, od::value& state) {
        if (which == "waiting") {
          return fields(state, [&](std::string_view f, od::value& value) {
            c.waiting = true;
            if (f == "reason") str(value, c.waiting_reason);
            else if (f == "message") str(value, c.waiting_message);
            return true;
          });
        }
        if (which == "terminated") {
          return fields(state, [&](std::string_view f, od::value& value) {
            c.terminated = true;
            if (f == "exitCode") c.exit_code = int_of(value);
            else if (f == "reason") str(value, c.terminated_reason);
            else if (f == "finishedAt") str(value, c.finished_at);
            else if (f == "message") str(value, c.terminated_message);
            return true;
          });
        }
        return true;
      });
    }
    return true;
  });
}

bool read_status(od::value& st, RawPod& r, std::vector<RawPod::Container>& init) {
  return fields(st, [&](std::string_view k, od::value& v) {
    if (k == "phase") {
      std::string_view s;
      if (!v.get_string().get(s)) r.phase = std::string(s);
    }
    else if (k == "reason") str(v, r.reason);
    else if (k == "podIP") str(v, r.pod_ip);
    else if (k == "conditions") {
      return elements(v, [&](od::value& c) {
        RawPod::Condition& cond = r.conditions.emplace_back();
        return fields(c, [&](std::string_view f, od::value& value) {
          if (f == "type") str(value, cond.type);
          else if (f == "status") str(value, cond.status);
          else if (f == "reason") str(value, cond.reason);
          else if (f == "message") {
            std::string_view s;
            if (!value.get_string().get(s)) cond.message = std::string(s);
          }
          return true;
        });
      });
    }
    else if (k == "containerStatuses" || k == "initContainerStatuses") {
      auto& to = k == "containerStatuses" ? r.containers : init;
      bool is_init = k[0] == 'i';
      return elements(v, [&](od::value& cs) {
        RawPod::Container& c = to.emplace_back();
        c.init = is_init;
        return read_container(cs, c);
      });
    }
    return true;
  });
}

// A pod object into `r`; false when the text breaks off or the value is not an object.
bool read_pod(od::value& pod, RawPod& r, std::string* resource_version) {
  od::json_type type;
  if (pod.type().get(type) || type != od::json_type::object) return false;
  std::vector<RawPod::Container> init;  // initContainerStatuses go after containerStatuses
  bool ok = fields(pod, [&](std::string_view k, od::value& v) {
    if (k == "metadata") return read_metadata(v, r, resource_version);
    if (k == "spec") return read_spec(v, r);
    if (k == "status") return read_status(v, r, init);
    return true;
  });
  for (auto& c : init) r.containers.push_back(std::move(c));
  return ok;
}

}  // namespace

bool raw_pod_from_text(std::string_view object, RawPod& out, std::string* resource_version) {
  auto& reader = kube::JsonText::for_this_thread();
  od::document doc;
  od::value root;
  if (!reader.iterate(object, doc) || doc.get_value().get(root)) return false;
  out = RawPod{};
  return read_pod(root, out, resource_version) && kube::JsonText::finished(doc);
}

bool pod_from_text(std::string_view object, kube::EventHead& head, reconcile::PodRecord& out) {
  RawPod raw;
  if (!raw_pod_from_text(object, raw, &head.resource_version)) return false;
  head.key = raw.ns + "/" + raw.name;
  out = reconcile::PodRecord::from_raw(raw);
  return true;
}

bool pod_event_from_text(std::string_view line, kube::EventHead& head, reconcile::PodRecord& out) {
  auto& reader = kube::JsonText::for_this_thread();
  od::document doc;
  od::value event;
  od::json_type type;
  head = kube::EventHead{};
  RawPod raw;
  bool ok = reader.iterate(line, doc) && !doc.get_value().get(event) && !event.type().get(type) &&
            type == od::json_type::object && fields(event, [&](std::string_view key, od::value& v) {
              if (key == "type") str(v, head.type);
              else if (key == "object") return read_pod(v, raw, &head.resource_version);
              return true;
            });
  if (!ok || !kube::JsonText::finished(doc)) {
    head.type.clear();
    return false;
  }
  head.key = raw.ns + "/" + raw.name;
  out = reconcile::PodRecord::from_raw(raw);
  return true;
}

}  // namespace lockstep::controller
