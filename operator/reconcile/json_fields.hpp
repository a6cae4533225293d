// Reading fields of API objects whose shape nothing guarantees (a Workload, a TrainingJob, as the
// API server or another controller left them): a member of the wrong type reads as absent.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace lockstep::reconcile {

// The object at `key` of `j`; an empty object when either is not an object or `key` is absent.
inline const nlohmann::json& child(const nlohmann::json& j, const char* key) {
  static const nlohmann::json empty = nlohmann::json::object();
  if (!j.is_object()) return empty;
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : empty;
}

// The string at `key` of `j`; "" when it is not one.
inline std::string string_field(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace lockstep::reconcile
