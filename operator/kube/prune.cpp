#include "kube/prune.hpp"

#include <utility>

using json = nlohmann::json;

namespace lockstep::kube {
namespace {

// Builds the document like nlohmann's own DOM parser, keeping the path of keys from the
// response's root (array elements are "*") to decide what to skip. While a dropped subtree
// is read, `skip_` counts its open containers and nothing is built.
class PrunedBuilder : public nlohmann::json_sax<json> {
 public:
  PrunedBuilder(json& out, const Prune& prune, PruneRoot root) : out_(out), prune_(prune) {
    switch (root) {
      case PruneRoot::Document: break;
      case PruneRoot::WatchObject: prefix_ = {"object"}; break;
      case PruneRoot::ListItems: prefix_ = {"items", "*"}; break;
    }
  }

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override { return value(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return value(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool string(string_t& v) override { return value(json(std::move(v))); }
  bool binary(binary_t& v) override { return value(json::binary(std::move(v))); }

  bool start_object(std::size_t) override { return open(json::value_t::object); }
  bool start_array(std::size_t) override { return open(json::value_t::array); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    if (skip_ > 0) return true;
    path_.resize(stack_.size());  // the path's last entry is this key
    path_.back() = k;
    if (dropped()) {
      pending_skip_ = true;
      return true;
    }
    key_ = &(*stack_.back())[k];
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    failed_ = true;
    return false;
  }
  bool failed() const { return failed_; }

 private:
  // Where the next value goes: the key just read, a new array element, or the root.
  json* slot() {
    if (stack_.empty()) return &out_;
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(nullptr);
      return &top.back();
    }
    return key_;
  }

  bool value(json&& v) {
    if (skip_ > 0) return true;
    if (pending_skip_) {
      pending_skip_ = false;
      return true;
    }
    *slot() = std::move(v);
    return true;
  }

  bool open(json::value_t type) {
    if (skip_ > 0 || pending_skip_) {
      pending_skip_ = false;
      ++skip_;
      return true;
    }
    json* s = slot();
    *s = json(type);
    if (!stack_.empty() && stack_.back()->is_array()) {  // elements are "*" in paths
      path_.resize(stack_.size());
      path_.back() = "*";
    }
    stack_.push_back(s);
    return true;
  }

  bool close() {
    if (skip_ > 0) {
      --skip_;
      return true;
    }
    stack_.pop_back();
    return true;
  }

  static bool match(const std::string& rule, const std::string& key) { return rule == "*" || rule == key; }

  // path_ (the keys down to the one just read) is prefix_ + a rule.
  bool dropped() const {
    if (path_.size() <= prefix_.size()) return false;
    for (size_t i = 0; i < prefix_.size(); ++i)
      if (!match(prefix_[i], path_[i])) return false;
    size_t depth = path_.size() - prefix_.size();
    for (const auto& rule : prune_.drop) {
      if (rule.size() != depth) continue;
      bool all = true;
      for (size_t i = 0; i < depth && all; ++i) all = match(rule[i], path_[prefix_.size() + i]);
      if (all) return true;
    }
    return false;
  }

  json& out_;
  const Prune& prune_;
  std::vector<std::string> prefix_;
  std::vector<json*> stack_;
  std::vector<std::string> path_;  // path_[i]: the key (or "*") under stack_[i]
  json* key_ = nullptr;
  int skip_ = 0;
  bool pending_skip_ = false;  // the key just read is dropped: skip its value
  bool failed_ = false;
};

}  // namespace

json parse_pruned(std::string_view text, const Prune* prune, PruneRoot root) {
  if (!prune || prune->empty()) return json::parse(text, nullptr, false);
  if (prune->all) return json::object();
  json out;
  PrunedBuilder builder(out, *prune, root);
  json::sax_parse(text, &builder);
  if (builder.failed()) return json(json::value_t::discarded);
  return out;
}

}  // namespace lockstep::kube
