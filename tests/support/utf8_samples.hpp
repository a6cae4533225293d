// Characters of each UTF-8 length and the checks the tests of cut text share (Note [UTF-8 text]
// in common/include/lockstep/text.hpp): tests/common/text_test.cpp, tests/operator/reconcile/job_test.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "lockstep/text.hpp"

namespace lockstep::test {

inline bool valid(const std::string& s) { return lockstep::text::utf8_invalid_at(s) == std::string::npos; }

// What nlohmann::json makes of `s` in a document: true when dump() takes it.
inline bool dumps(const std::string& s) {
  try {
    (void)nlohmann::json{{"message", s}}.dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

struct Character {
  const char* name;
  std::string bytes;
};
inline const std::vector<Character> kCharacters = {
    {"2-byte U+00E9", "\xC3\xA9"}, {"3-byte U+20AC", "\xE2\x82\xAC"}, {"4-byte U+1F600", "\xF0\x9F\x98\x80"}};

}  // namespace lockstep::test
