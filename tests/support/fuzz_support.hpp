// The YAML fuzzers' shared pieces (fuzz_test: tests/cli/validate_fuzz_test.cpp and
// tests/operator/kube/rest_config_fuzz_test.cpp): a billion-laughs document and seeded mutations.
#pragma once

#include <random>
#include <string>

namespace lockstep::test {

// `levels` anchors, each a list of `width` aliases of the one before: width^levels values.
inline std::string billion_laughs(int levels, int width) {
  std::string s = "l0: &l0 [\"lol\"]\n";
  for (int i = 1; i <= levels; ++i) {
    s += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < width; ++k) s += (k ? ", *l" : "*l") + std::to_string(i - 1);
    s += "]\n";
  }
  return s;
}

// Seeded mutations: byte flips, deletions, insertions of YAML punctuation and duplications.
inline std::string mutate(std::string s, std::mt19937& rng) {
  static const std::string punct = "[]{}:&*!|>-?#,'\"\n\t %@`\\";
  std::uniform_int_distribution<int> op(0, 4), byte(0, 255);
  const int n = 1 + static_cast<int>(rng() % 8);
  for (int i = 0; i < n && !s.empty(); ++i) {
    size_t at = rng() % s.size();
    switch (op(rng)) {
      case 0: s[at] = static_cast<char>(byte(rng)); break;
      case 1: s.erase(at, 1 + rng() % 16); break;
      case 2: s.insert(at, 1, punct[rng() % punct.size()]); break;
      case 3: s.insert(at, "&a "); s.insert(rng() % s.size(), "*a "); break;
      case 4: s.insert(at, s.substr(rng() % s.size(), 1 + rng() % 64)); break;
    }
  }
  return s;
}

}  // namespace lockstep::test
