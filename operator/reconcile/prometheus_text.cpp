#include "reconcile/prometheus_text.hpp"

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
    if (!valid_utf8(value)) return false;  // Note [Untrusted exposition]
    out[key] = value;
  }
}

}  // namespace

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    unsigned min, cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, min = 0x80, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, min = 0x800, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, min = 0x10000, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // cut short
    for (size_t k = 1; k <= n; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

std::optional<std::string> Sample::label(const std::string& key) const {
  auto it = labels.find(key);
  if (it == labels.end()) return std::nullopt;
  return it->second;
}

std::optional<Sample> parse_sample(const std::string& line) {
  if (line.empty() || line[0] == '#' || line.size() > kMaxLineBytes) return std::nullopt;
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
  // Then only an optional timestamp (an integer in ms) and blanks.
  auto blanks = [&] {
    while (*end == ' ' || *end == '\t') ++end;
  };
  blanks();
  if (*end == '-') ++end;
  while (*end >= '0' && *end <= '9') ++end;
  blanks();
  if (end != line.c_str() + line.size()) return std::nullopt;
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
    if (out.size() >= kMaxSamples) break;  // Note [Untrusted exposition]
  }
  return out;
}

std::string series_of_job(const std::string& text, const std::string& ns, const std::string& name) {
  std::string out;
  size_t kept = 0;
  for (size_t at = 0; at < text.size() && kept < kMaxSamples;) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty() || line[0] == '#' || line.size() > kMaxLineBytes) continue;
    auto sample = parse_sample(line);
    if (!sample || sample->label("namespace") != ns || sample->label("trainingjob") != name) continue;
    out += line;
    out += '\n';
    ++kept;
  }
  return out;
}

}  // namespace lockstep::reconcile
