#include "kube/prune.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

using json = nlohmann::json;

namespace lockstep::kube {
namespace {

// Note [Pruned parsing], continued: the parser is our own, not nlohmann's SAX interface,
// because nlohmann's lexer copies every byte it reads into two buffers (one kept for error
// messages) and a dropped subtree still went through it; that lexer was the largest single
// cost of the operator at 10,000 pods. This one reads strings with memchr-style scans,
// skips a dropped subtree by matching brackets and quotes only, and builds the rest as
// json::parse() does (non-negative integers unsigned, others signed, the rest double).
// It accepts exactly RFC 8259 JSON, except that a dropped subtree is only checked for
// balanced brackets and strings, and string bytes are not checked to be valid UTF-8 (the
// API server sends nothing else).
class Parser {
 public:
  Parser(std::string_view text, const Prune& prune, PruneRoot root) : p_(text.data()), end_(text.data() + text.size()), prune_(prune) {
    switch (root) {
      case PruneRoot::Document: break;
      case PruneRoot::WatchObject: prefix_ = {"object"}; break;
      case PruneRoot::ListItems: prefix_ = {"items", "*"}; break;
    }
    for (const auto& rule : prune_.drop) max_depth_ = std::max(max_depth_, prefix_.size() + rule.size());
  }

  bool parse(json& out) {
    ws();
    if (!value(out, 0)) return false;
    ws();
    return p_ == end_;
  }

  bool visit(JsonVisitor& v) {
    visitor_ = &v;
    record_all_ = true;  // the visitor is given every value's full path
    ws();
    if (!visit_value(0)) return false;
    ws();
    return p_ == end_;
  }

 private:
  static constexpr int kMaxNesting = 512;

  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  bool value(json& out, int depth) {
    if (p_ == end_) return false;
    switch (*p_) {
      case '{': return object(out, depth);
      case '[': return array(out, depth);
      case '"': {
        std::string s;
        if (!string(s)) return false;
        out = std::move(s);
        return true;
      }
      case 't': return literal("true", json(true), out);
      case 'f': return literal("false", json(false), out);
      case 'n': return literal("null", json(nullptr), out);
      default: return number(out);
    }
  }

  bool literal(const char* word, json v, json& out) {
    size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) return false;
    p_ += n;
    out = std::move(v);
    return true;
  }

  bool object(json& out, int depth) {
    out = json::object();
    auto& map = out.get_ref<json::object_t&>();
    std::string key;
    return members(depth, key, [&] { return value(map[key], depth + 1); });
  }

  bool array(json& out, int depth) {
    out = json::array();
    auto& vec = out.get_ref<json::array_t&>();
    return elements(depth, [&] {
      vec.emplace_back();
      return value(vec.back(), depth + 1);
    });
  }

  // At a '{': each member's key read into `key`; a dropped member skipped, the others handed
  // to member() with the path set (it reads the value). False on malformed text.
  template <class Member>
  bool members(int depth, std::string& key, Member&& member) {
    if (depth >= kMaxNesting) return false;
    ++p_;  // {
    ws();
    if (p_ < end_ && *p_ == '}') {
      ++p_;
      return true;
    }
    while (true) {
      ws();
      if (p_ == end_ || *p_ != '"' || !string(key)) return false;
      ws();
      if (p_ == end_ || *p_ != ':') return false;
      ++p_;
      ws();
      if (static_cast<size_t>(depth) < max_depth_ && dropped(depth, key)) {
        if (!skip()) return false;
      } else {
        set_path(depth, key);
        if (!member()) return false;
      }
      ws();
      if (p_ == end_) return false;
      if (*p_ == ',') {
        ++p_;
        continue;
      }
      if (*p_ == '}') {
        ++p_;
        return true;
      }
      return false;
    }
  }

  // At a '[': element() reads each element, with the path set.
  template <class Element>
  bool elements(int depth, Element&& element) {
    if (depth >= kMaxNesting) return false;
    ++p_;  // [
    ws();
    if (p_ < end_ && *p_ == ']') {
      ++p_;
      return true;
    }
    set_path(depth, "*");
    while (true) {
      ws();
      if (!element()) return false;
      ws();
      if (p_ == end_) return false;
      if (*p_ == ',') {
        ++p_;
        continue;
      }
      if (*p_ == ']') {
        ++p_;
        return true;
      }
      return false;
    }
  }

  // Visiting (Note [Visited parsing]): as value(), building nothing; strings and keys are
  // read into buffers that keep their capacity.
  bool visit_value(int depth) {
    if (p_ == end_) return false;
    auto d = static_cast<size_t>(depth);
    switch (*p_) {
      case '{':
        if (depth >= kMaxNesting) return false;
        visitor_->value(path_, d, {JsonValue::Object, {}});
        return members(depth, key_, [&] { return visit_value(depth + 1); });
      case '[':
        if (depth >= kMaxNesting) return false;
        visitor_->value(path_, d, {JsonValue::Array, {}});
        return elements(depth, [&] { return visit_value(depth + 1); });
      case '"':
        if (!string(text_)) return false;
        visitor_->value(path_, d, {JsonValue::String, text_});
        return true;
      case 't': return visit_literal("true", JsonValue::True, d);
      case 'f': return visit_literal("false", JsonValue::False, d);
      case 'n': return visit_literal("null", JsonValue::Null, d);
      default: {
        const char* start = p_;
        bool integral, negative;
        if (!scan_number(integral, negative)) return false;
        visitor_->value(path_, d, {JsonValue::Number, std::string_view(start, static_cast<size_t>(p_ - start))});
        return true;
      }
    }
  }

  bool visit_literal(const char* word, JsonValue::Kind kind, size_t depth) {
    size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) return false;
    p_ += n;
    visitor_->value(path_, depth, {kind, {}});
    return true;
  }

  // The key or "*" at nesting `depth` of the path from the root; deeper entries are stale.
  void set_path(int depth, std::string_view key) {
    if (!record_all_ && static_cast<size_t>(depth) >= max_depth_) return;  // no rule reaches this deep
    if (path_.size() <= static_cast<size_t>(depth)) path_.resize(depth + 1);
    path_[depth].assign(key.data(), key.size());
  }

  static bool match(const std::string& rule, std::string_view key) {
    return (rule.size() == 1 && rule[0] == '*') || std::string_view(rule) == key;  // no strlen, lengths first
  }

  // Whether the value of `key`, in the object at nesting `depth`, is dropped: the path to it
  // is the prefix and then a drop rule, and no keep rule.
  bool dropped(int depth, std::string_view key) const {
    size_t len = static_cast<size_t>(depth) + 1;  // path_[0 .. depth-1], then key
    if (len <= prefix_.size()) return false;
    for (size_t i = 0; i < prefix_.size(); ++i)
      if (!match(prefix_[i], path_[i])) return false;
    for (const auto& rule : prune_.drop)
      if (matches(rule, len, key)) {
        for (const auto& kept : prune_.keep)
          if (matches(kept, len, key)) return false;
        return true;
      }
    return false;
  }

  // Whether `rule` names the member `key` whose path (after the prefix) is path_, `len` long.
  bool matches(const std::vector<std::string>& rule, size_t len, std::string_view key) const {
    if (prefix_.size() + rule.size() != len || !match(rule.back(), key)) return false;  // the key first: it differs most
    for (size_t i = 0; i + 1 < rule.size(); ++i)
      if (!match(rule[i], path_[prefix_.size() + i])) return false;
    return true;
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  bool hex4(unsigned& v) {
    if (end_ - p_ < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) {
      int h = hex(p_[i]);
      if (h < 0) return false;
      v = v * 16 + static_cast<unsigned>(h);
    }
    p_ += 4;
    return true;
  }

  static void utf8(unsigned cp, std::string& out) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // At a '"': the string's value into `out`.
  bool string(std::string& out) {
    ++p_;
    out.clear();
    while (true) {
      const char* run = p_;
      while (p_ < end_ && *p_ != '"' && *p_ != '\\' && static_cast<unsigned char>(*p_) >= 0x20) ++p_;
      out.append(run, p_ - run);
      if (p_ == end_ || static_cast<unsigned char>(*p_) < 0x20) return false;
      if (*p_ == '"') {
        ++p_;
        return true;
      }
      ++p_;  // backslash
      if (p_ == end_) return false;
      char e = *p_++;
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          unsigned cp;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate: its low half must follow
            unsigned lo;
            if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
            p_ += 2;
            if (!hex4(lo) || lo < 0xDC00 || lo > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return false;  // a low surrogate alone
          }
          utf8(cp, out);
          break;
        }
        default: return false;
      }
    }
  }

  // Past a number's literal, checked as RFC 8259 writes it.
  bool scan_number(bool& integral, bool& negative) {
    negative = p_ < end_ && *p_ == '-';
    if (negative) ++p_;
    if (p_ == end_ || *p_ < '0' || *p_ > '9') return false;
    if (*p_ == '0') {
      ++p_;
    } else {
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    integral = true;
    if (p_ < end_ && *p_ == '.') {
      integral = false;
      ++p_;
      if (p_ == end_ || *p_ < '0' || *p_ > '9') return false;
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      integral = false;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || *p_ < '0' || *p_ > '9') return false;
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    return true;
  }

  bool number(json& out) {
    const char* start = p_;
    bool integral, negative;
    if (!scan_number(integral, negative)) return false;
    if (integral) {  // as json::parse: unsigned when not negative, signed otherwise, if it fits
      if (negative) {
        std::int64_t v;
        auto r = std::from_chars(start, p_, v);
        if (r.ec == std::errc() && r.ptr == p_) {
          out = v;
          return true;
        }
      } else {
        std::uint64_t v;
        auto r = std::from_chars(start, p_, v);
        if (r.ec == std::errc() && r.ptr == p_) {
          out = v;
          return true;
        }
      }
    }
    double d;
    auto r = std::from_chars(start, p_, d);
    if (r.ptr != p_) return false;
    if (r.ec == std::errc::result_out_of_range) {  // as json::parse: too small is 0, too large an error
      d = std::strtod(std::string(start, p_).c_str(), nullptr);
      if (!std::isfinite(d)) return false;
    }
    out = d;
    return true;
  }

  // Past one value without building it: brackets and strings are matched, nothing else read.
  bool skip() {
    int open = 0;
    while (p_ < end_) {
      char c = *p_;
      if (c == '"') {
        ++p_;
        while (true) {
          const void* q = std::memchr(p_, '"', end_ - p_);
          if (!q) return false;
          const char* quote = static_cast<const char*>(q);
          size_t backslashes = 0;
          for (const char* b = quote; b > p_ && b[-1] == '\\'; --b) ++backslashes;
          p_ = quote + 1;
          if (backslashes % 2 == 0) break;
        }
        if (open == 0) return true;
        continue;
      }
      if (c == '{' || c == '[') {
        ++open;
      } else if (c == '}' || c == ']') {
        if (open == 0) return true;  // the end of the object holding a scalar value
        if (--open == 0) {
          ++p_;
          return true;
        }
      } else if (open == 0 && (c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
        return true;  // the end of a scalar
      }
      ++p_;
    }
    return open == 0;
  }

  const char* p_;
  const char* end_;
  const Prune& prune_;
  std::vector<std::string> prefix_;
  size_t max_depth_ = 0;           // the deepest path any rule can match
  std::vector<std::string> path_;  // path_[d]: the key (or "*") at nesting d
  JsonVisitor* visitor_ = nullptr;
  bool record_all_ = false;        // visiting: path_ is kept at every depth
  std::string key_, text_;         // visiting: the current key and string value
};

}  // namespace

json parse_pruned(std::string_view text, const Prune* prune, PruneRoot root) {
  if (!prune || prune->empty()) return json::parse(text, nullptr, false);
  if (prune->all) return json::object();
  json out;
  Parser parser(text, *prune, root);
  if (!parser.parse(out)) return json(json::value_t::discarded);
  return out;
}

bool visit_pruned(std::string_view text, const Prune* prune, PruneRoot root, JsonVisitor& visitor) {
  static const Prune kNone;
  if (prune && prune->all) return true;
  Parser parser(text, prune ? *prune : kNone, root);
  return parser.visit(visitor);
}

}  // namespace lockstep::kube
