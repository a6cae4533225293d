#include "reconcile/exposition.hpp"

#include <cstdlib>
#include <sstream>

namespace lockstep::reconcile {
namespace {

bool name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9');
}

// The metric name at the start of `line`: up to '{' or whitespace.
std::string name_of(const std::string& line) {
  size_t i = 0;
  while (i < line.size() && name_char(line[i], i == 0)) ++i;
  return line.substr(0, i);
}

// `{a="x",b="y\"z"}` from line[i] (the '{'); i ends after the '}'. False if malformed.
bool parse_labels(const std::string& line, size_t& i, std::map<std::string, std::string>& out) {
  ++i;  // '{'
  while (true) {
    while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
    if (i >= line.size()) return false;
    if (line[i] == '}') {
      ++i;
      return true;
    }
    size_t start = i;
    while (i < line.size() && name_char(line[i], i == start)) ++i;
    std::string key = line.substr(start, i - start);
    if (key.empty() || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') return false;
    i += 2;
    std::string value;
    for (;; ++i) {
      if (i >= line.size()) return false;
      char c = line[i];
      if (c == '"') break;
      if (c == '\\' && i + 1 < line.size()) {
        char e = line[++i];
        value += e == 'n' ? '\n' : e;  // \\ \" \n are the only escapes
      } else {
        value += c;
      }
    }
    ++i;  // the closing quote
    out[key] = value;
  }
}

}  // namespace

std::optional<std::string> Sample::label(const std::string& key) const {
  auto it = labels.find(key);
  if (it == labels.end()) return std::nullopt;
  return it->second;
}

std::optional<Sample> parse_sample(const std::string& line) {
  if (line.empty() || line[0] == '#') return std::nullopt;
  Sample s;
  s.name = name_of(line);
  if (s.name.empty()) return std::nullopt;
  size_t i = s.name.size();
  if (i < line.size() && line[i] == '{' && !parse_labels(line, i, s.labels)) return std::nullopt;
  if (i >= line.size() || (line[i] != ' ' && line[i] != '\t')) return std::nullopt;
  const char* start = line.c_str() + i;
  char* end = nullptr;
  s.value = std::strtod(start, &end);  // also NaN, +Inf, -Inf
  if (end == start) return std::nullopt;
  return s;
}

std::vector<Sample> samples_of(const std::string& text, const std::vector<std::string>& names) {
  std::vector<Sample> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    std::string name = name_of(line);
    bool wanted = false;
    for (const auto& n : names) wanted |= n == name;
    if (!wanted) continue;
    if (auto s = parse_sample(line)) out.push_back(std::move(*s));
  }
  return out;
}

}  // namespace lockstep::reconcile
