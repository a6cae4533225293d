#include "barrier/codec.hpp"

#include <chrono>
#include <sstream>

#include "barrier/trust.hpp"
#include "lockstep/text.hpp"

namespace lockstep::agent {
namespace {

std::string pct_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (c <= ' ' || c == '%' || c == '=' || c >= 0x7f) {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::optional<std::string> pct_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') { out += s[i]; continue; }
    if (i + 2 >= s.size()) return std::nullopt;
    auto nib = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int hi = nib(s[i + 1]), lo = nib(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

}  // namespace

long long unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string Message::get(const std::string& k, const std::string& fallback) const {
  auto it = fields.find(k);
  return it == fields.end() ? fallback : it->second;
}

int Message::get_int(const std::string& k, int fallback) const {
  auto it = fields.find(k);
  if (it == fields.end()) return fallback;
  try {
    size_t used = 0;
    int v = std::stoi(it->second, &used);
    return used == it->second.size() ? v : fallback;
  } catch (...) {
    return fallback;
  }
}

std::string encode(const Message& m) {
  std::string s = m.verb;
  for (const auto& [k, v] : m.fields) s += " " + k + "=" + pct_encode(v);
  return s;
}

std::optional<Message> decode(const std::string& line) {
  std::istringstream in(line);
  Message m;
  if (!(in >> m.verb)) return std::nullopt;
  for (char c : m.verb)
    if (c < 'A' || c > 'Z') return std::nullopt;
  std::string tok;
  while (in >> tok) {
    auto eq = tok.find('=');
    if (eq == std::string::npos || eq == 0) return std::nullopt;
    auto v = pct_decode(tok.substr(eq + 1));
    if (!v) return std::nullopt;
    m.fields[tok.substr(0, eq)] = *v;
  }
  return m;
}

Message failure_message(const std::string& verb, int generation, const std::optional<Failure>& f) {
  Message m{verb, {{"gen", std::to_string(generation)}}};
  if (f) {
    m.fields["node"] = std::to_string(f->node);
    m.fields["rank"] = std::to_string(f->rank);
    m.fields["code"] = std::to_string(f->code);
    m.fields["reason"] = f->reason;
    m.fields["at"] = std::to_string(f->at_ms);
    m.fields["what"] = f->what;
    if (!f->tail.empty())
      m.fields["tail"] = text::utf8_tail(f->tail, kFailureTailBytes);
  }
  return m;
}

std::optional<Failure> failure_of(const Message& m) {
  if (!m.fields.count("code")) return std::nullopt;
  Failure f;
  f.node = m.get_int("node");
  f.rank = m.get_int("rank");
  f.code = m.get_int("code", 1);
  f.reason = m.get("reason", "WorkerFailed");
  try {
    f.at_ms = std::stoll(m.get("at", "0"));
  } catch (...) {
    f.at_ms = 0;
  }
  f.what = m.get("what");
  f.tail = m.get("tail");
  return sanitize_failure(std::move(f));
}

}  // namespace lockstep::agent
