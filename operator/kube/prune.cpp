#include "kube/prune.hpp"

#include "kube/json_text.hpp"

#include <charconv>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <string>
#include <utility>

using json = nlohmann::json;
namespace od = simdjson::ondemand;

namespace lockstep::kube {

// Note [Pruned parsing], continued: the text is read with simdjson's On-Demand API, which
// indexes the whole text at once (and checks it is UTF-8) and then reads a value only when
// asked; a member the rules drop is never asked for, so it is stepped over, not read. What is
// kept is built as json::parse() builds it (non-negative integers unsigned, others signed, the
// rest double). As before, a dropped subtree is checked for balanced brackets and strings only.
namespace {

class Builder {
 public:
  Builder(const Prune& prune, PruneRoot root) : prune_(prune) {
    switch (root) {
      case PruneRoot::Document: break;
      case PruneRoot::WatchObject: prefix_ = {"object"}; break;
      case PruneRoot::ListItems: prefix_ = {"items", "*"}; break;
    }
    for (const auto& rule : prune_.drop) max_depth_ = std::max(max_depth_, prefix_.size() + rule.size());
  }

  // The document's root value into `out`; false when the text is not JSON.
  bool root(od::document& doc, json& out) {
    bool scalar = false;
    if (doc.is_scalar().get(scalar)) return false;
    scalar_root_ = scalar;
    if (!scalar) {
      od::value v;
      if (doc.get_value().get(v)) return false;
      return value(v, out, 0);
    }
    od::json_type type;
    if (doc.type().get(type)) return false;
    if (type != od::json_type::number) return text_scalar(doc, type, out);
    // A number: the document's own getters, which also refuse what follows a root scalar.
    od::number_type kind;
    if (doc.get_number_type().get(kind)) return false;
    if (kind == od::number_type::floating_point_number) {
      double d;
      if (doc.get_double().get(d)) return false;
      out = d;
    } else if (kind == od::number_type::unsigned_integer) {
      std::uint64_t u;
      if (doc.get_uint64().get(u)) return false;
      out = u;
    } else {
      std::int64_t i;
      if (doc.get_int64().get(i)) return false;
      if (i >= 0) out = static_cast<std::uint64_t>(i);  // as json::parse: unsigned when not negative
      else out = i;
    }
    return true;
  }
  // Whether the root was a scalar (its getter checked that nothing follows it).
  bool scalar_root() const { return scalar_root_; }

 private:
  static constexpr int kMaxNesting = 512;

  bool value(od::value& v, json& out, int depth) {
    od::json_type type;
    if (v.type().get(type)) return false;
    switch (type) {
      case od::json_type::object: return object(v, out, depth);
      case od::json_type::array: return array(v, out, depth);
      case od::json_type::number: return number(v.raw_json_token(), out);
      default: return text_scalar(v, type, out);
    }
  }

  // A string, true, false or null, from a value or a document whose root is one.
  template <class Source>
  static bool text_scalar(Source& src, od::json_type type, json& out) {
    switch (type) {
      case od::json_type::string: {
        std::string_view s;
        if (src.get_string().get(s)) return false;
        out = std::string(s);
        return true;
      }
      case od::json_type::boolean: {
        bool b = false;
        if (src.get_bool().get(b)) return false;
        out = b;
        return true;
      }
      case od::json_type::null: {
        bool null = false;
        if (src.is_null().get(null) || !null) return false;
        out = nullptr;
        return true;
      }
      default: return false;
    }
  }

  bool object(od::value& v, json& out, int depth) {
    if (depth >= kMaxNesting) return false;
    od::object obj;
    if (v.get_object().get(obj)) return false;
    out = json::object();
    auto& map = out.get_ref<json::object_t&>();
    for (auto member : obj) {
      od::field field;
      std::string_view key;
      if (std::move(member).get(field) || field.unescaped_key().get(key)) return false;
      // A dropped member's value is never asked for: the iterator steps over it.
      if (static_cast<size_t>(depth) < max_depth_ && dropped(depth, key)) continue;
      set_path(depth, key);
      if (!value(field.value(), map[std::string(key)], depth + 1)) return false;
    }
    return true;
  }

  bool array(od::value& v, json& out, int depth) {
    if (depth >= kMaxNesting) return false;
    od::array arr;
    if (v.get_array().get(arr)) return false;
    out = json::array();
    auto& vec = out.get_ref<json::array_t&>();
    set_path(depth, "*");
    for (auto element : arr) {
      od::value item;
      if (std::move(element).get(item)) return false;
      vec.emplace_back();
      if (!value(item, vec.back(), depth + 1)) return false;
    }
    return true;
  }

  // A number's literal as json::parse reads it: an integer unsigned when not negative and
  // signed otherwise, if it fits; else a double (too small is 0, too large an error).
  static bool number(std::string_view token, json& out) {
    while (!token.empty() && (token.back() == ' ' || token.back() == '\n' || token.back() == '\r' || token.back() == '\t'))
      token.remove_suffix(1);  // raw_json_token() runs up to the next structural character
    const char* start = token.data();
    const char* end = start + token.size();
    if (start == end) return false;
    // RFC 8259's grammar first, which from_chars is looser than (it takes "01" and "1.").
    const char* p = start;
    if (*p == '-') ++p;
    if (p == end || *p < '0' || *p > '9') return false;
    if (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9') return false;
    while (p < end && *p >= '0' && *p <= '9') ++p;
    const bool integral = p == end;
    if (p < end && *p == '.') {
      ++p;
      if (p == end || *p < '0' || *p > '9') return false;
      while (p < end && *p >= '0' && *p <= '9') ++p;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
      ++p;
      if (p < end && (*p == '+' || *p == '-')) ++p;
      if (p == end || *p < '0' || *p > '9') return false;
      while (p < end && *p >= '0' && *p <= '9') ++p;
    }
    if (p != end) return false;
    if (integral) {
      if (*start == '-') {
        std::int64_t v;
        auto r = std::from_chars(start, end, v);
        if (r.ec == std::errc() && r.ptr == end) {
          out = v;
          return true;
        }
      } else {
        std::uint64_t v;
        auto r = std::from_chars(start, end, v);
        if (r.ec == std::errc() && r.ptr == end) {
          out = v;
          return true;
        }
      }
    }
    double d;
    auto r = std::from_chars(start, end, d);
    if (r.ptr != end) return false;
    if (r.ec == std::errc::result_out_of_range) {
      d = std::strtod(std::string(start, end).c_str(), nullptr);
      if (!std::isfinite(d)) return false;
    }
    out = d;
    return true;
  }

  // The key or "*" at nesting `depth` of the path from the root; deeper entries are stale.
  void set_path(int depth, std::string_view key) {
    if (static_cast<size_t>(depth) >= max_depth_) return;  // no rule reaches this deep
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

  const Prune& prune_;
  std::vector<std::string> prefix_;
  size_t max_depth_ = 0;           // the deepest path any rule can match
  std::vector<std::string> path_;  // path_[d]: the key (or "*") at nesting d
  bool scalar_root_ = false;
};

}  // namespace

bool JsonText::iterate(std::string_view text, simdjson::ondemand::document& doc) {
  release();
  const bool large = text.size() > kKept;
  if (large) large_parser_ = std::make_unique<simdjson::ondemand::parser>();
  auto& parser = large ? *large_parser_ : parser_;
  auto& padded = large ? large_padded_ : padded_;
  // simdjson reads up to SIMDJSON_PADDING bytes past the text: a copy with room for them.
  if (padded.size() < text.size() + simdjson::SIMDJSON_PADDING) padded.resize(text.size() + simdjson::SIMDJSON_PADDING);
  std::memcpy(padded.data(), text.data(), text.size());
  std::memset(padded.data() + text.size(), 0, simdjson::SIMDJSON_PADDING);
  return parser.iterate(padded.data(), text.size(), padded.size()).get(doc) == simdjson::SUCCESS;
}

void JsonText::release() {
  large_parser_.reset();
  std::vector<char>().swap(large_padded_);
}

bool JsonText::finished(simdjson::ondemand::document& doc) {
  // Past the root value, nothing but whitespace may follow.
  const char* at = nullptr;
  return doc.current_location().get(at) != simdjson::SUCCESS;
}

JsonText& JsonText::for_this_thread() {
  static thread_local JsonText text;
  return text;
}

json parse_pruned(std::string_view text, const Prune* prune, PruneRoot root) {
  if (!prune || prune->empty()) return json::parse(text, nullptr, false);
  if (prune->all) return json::object();
  JsonText& reader = JsonText::for_this_thread();
  od::document doc;
  json out;
  Builder builder(*prune, root);
  const bool ok = reader.iterate(text, doc) && builder.root(doc, out) && (builder.scalar_root() || JsonText::finished(doc));
  reader.release();
  if (!ok) return json(json::value_t::discarded);
  return out;
}

}  // namespace lockstep::kube
