// Reading JSON text with simdjson's On-Demand API (Note [Pruned parsing] in kube/prune.hpp):
// the one place the operator holds a simdjson parser. Included by the few files that read text
// this way; simdjson.h is a large header, so the rest of the operator does not see it.
#pragma once

#include <simdjson.h>

#include <memory>
#include <string_view>
#include <vector>

namespace lockstep::kube {

// One parser and its padded copy of the text, per thread (the informers' threads each read
// their own watch): a document read from it is valid until the thread's next iterate() or
// release(). A parser keeps buffers of about six times the largest text it has read, so only
// texts up to kKept (a pod, an event, a job) are read with the kept ones; a larger text (an
// object up to the API server's 1.5 MiB: Note [Streamed lists] in kube/list_stream.hpp) gets buffers
// of its own, freed by release() or the next iterate().
class JsonText {
 public:
  static constexpr size_t kKept = 64 * 1024;
  static JsonText& for_this_thread();
  // Starts reading `text` (copied with the padding simdjson reads past its end); false when
  // simdjson refuses it outright (not UTF-8, unbalanced, ...).
  bool iterate(std::string_view text, simdjson::ondemand::document& doc);
  // Frees what a text larger than kKept needed; the document read from it is then gone.
  void release();
  // Whether nothing but whitespace follows the root value just read.
  static bool finished(simdjson::ondemand::document& doc);

 private:
  simdjson::ondemand::parser parser_;
  std::vector<char> padded_;
  std::unique_ptr<simdjson::ondemand::parser> large_parser_;
  std::vector<char> large_padded_;
};

}  // namespace lockstep::kube
