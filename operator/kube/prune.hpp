// Parsing API responses without building what nobody reads.
//
// Note [Pruned parsing]
// A pod as the API server sends it is 4 to 6 KB of JSON, most of it spec and managedFields,
// and an informer gets it again with every change. Parsed into nlohmann::json, every field
// is a map node and most strings a heap block: at 10,000 pods that parse was a large part
// of the operator's CPU (bench/operator/RESULTS.md). A Prune names the subtrees of an object
// to skip; parse_pruned() reads the text with simdjson's On-Demand API (kube/json_text.hpp)
// and builds the document as json::parse() would, except that a skipped subtree is stepped
// over and never built. The rules are relative to the object; `root` says where objects sit in
// the response (a watch event's "object", a list's "items" elements, or the response itself).
// The informers read their lists item by item, each item parsed alone as the response
// (Note [Streamed lists] in kube/list_stream.hpp). Pods, read most often, are not built at all
// (Note [Pod text] in controller/pod_event.hpp).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lockstep::kube {

struct Prune {
  using Rules = std::vector<std::vector<std::string>>;
  Prune(Rules drop_rules = {}, bool all_of_it = false, Rules keep_rules = {})
      : drop(std::move(drop_rules)), all(all_of_it), keep(std::move(keep_rules)) {}
  // Each rule is a path of keys from the object's root; "*" matches any key or array
  // element. {"spec"} skips the object's spec; {"metadata", "managedFields"} skips that.
  std::vector<std::vector<std::string>> drop;
  // Nothing of a successful answer is read but its status code: it is not parsed at all.
  bool all = false;
  // Exceptions to `drop`, in the same form: a member that a drop rule matches and a keep rule
  // of the same length matches too is read all the same. {"spec", "*"} dropped with
  // {"spec", "nodeName"} kept reads a pod's spec.nodeName and nothing else of its spec.
  std::vector<std::vector<std::string>> keep;
  // Of a successful write's answer nothing is read outside the object's metadata: the server
  // is asked for the metadata alone (Note [Metadata answers] in kube/client.hpp).
  bool metadata_only = false;
  bool empty() const { return drop.empty() && !all; }
};

inline const Prune kDiscardBody{{}, true};

enum class PruneRoot {
  Document,     // the response is the object
  WatchObject,  // {"type": ..., "object": OBJECT}
  ListItems,    // {"items": [OBJECT, ...], ...}: a list read whole (the informers stream theirs)
};

// Parses `text` as json::parse(text, nullptr, false) would (a discarded value when it is
// not JSON), leaving out every subtree `prune` drops. A null or empty prune parses all;
// one with `all` set gives an empty object without reading the text.
nlohmann::json parse_pruned(std::string_view text, const Prune* prune, PruneRoot root);

}  // namespace lockstep::kube
