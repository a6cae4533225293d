// Reading JSON text with simdjson's On-Demand API (Note [Pruned parsing] in kube/prune.hpp):
// the one place the operator holds a simdjson parser. Included by the few files that read text
// this way; simdjson.h is a large header, so the rest of the operator does not see it.
#pragma once

#include <simdjson.h>

#include <string_view>
#include <vector>

namespace lockstep::kube {

// One parser and its padded copy of the text, per thread (the informers' threads each read
// their own watch): a document read from it is valid until the thread's next iterate().
class JsonText {
 public:
  static JsonText& for_this_thread();
  // Starts reading `text` (copied with the padding simdjson reads past its end); false when
  // simdjson refuses it outright (not UTF-8, unbalanced, ...).
  bool iterate(std::string_view text, simdjson::ondemand::document& doc);
  // Whether nothing but whitespace follows the root value just read.
  static bool finished(simdjson::ondemand::document& doc);

 private:
  simdjson::ondemand::parser parser_;
  std::vector<char> padded_;
};

}  // namespace lockstep::kube
