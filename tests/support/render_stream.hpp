// `lockstep render`'s YAML stream read back (cli/render.hpp): its documents, which render_yaml
// separates with `---` lines, each read by the reader `lockstep validate` uses. Shared by
// render_test (tests/cli) and the comparisons with the live objects (tests/operator).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "validate.hpp"

namespace lockstep::test {

inline std::vector<nlohmann::json> read_render_stream(const std::string& yaml) {
  std::vector<nlohmann::json> docs;
  for (size_t start = 0; start < yaml.size();) {
    const size_t end = yaml.find("\n---\n", start);
    docs.push_back(lockstep::cli::yaml_to_json_text(yaml.substr(start, end == std::string::npos ? end : end - start + 1),
                                                    "lockstep render"));
    if (end == std::string::npos) break;
    start = end + 5;
  }
  return docs;
}

// "Kind/name" of each document.
inline std::vector<std::string> render_kinds(const std::vector<nlohmann::json>& docs) {
  std::vector<std::string> out;
  for (const auto& d : docs) out.push_back(d.value("kind", "?") + "/" + d["metadata"].value("name", "?"));
  return out;
}

}  // namespace lockstep::test
