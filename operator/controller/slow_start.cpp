#include "controller/slow_start.hpp"

#include <algorithm>

namespace lockstep::controller {

std::vector<int> slow_start_batches(int missing, int max_batch, int per_pass) {
  max_batch = std::max(1, max_batch);
  int left = std::min(missing, std::max(1, per_pass));
  std::vector<int> out;
  for (int size = 1; left > 0; size = std::min(size * 2, max_batch)) {
    int n = std::min(size, left);
    out.push_back(n);
    left -= n;
  }
  return out;
}

}  // namespace lockstep::controller
