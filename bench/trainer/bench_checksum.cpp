// lockstep-bench-checksum: the checkpoint checksums' speed (Note [Checkpoint checksum]), every
// round printed. XXH3-64 (what checkpoints record) against lanes64 and byte-wise FNV-1a (what
// older ones recorded, still verified), over the same buffer in this process, alternating, so
// the ratio is what a resume's verification of a large shard gains. The buffer is in memory:
// from the page cache a file reads at memory speed too, and from a disk the disk decides.
//
//   lockstep-bench-checksum [--mib N] [--rounds R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "checksum.hpp"

namespace ck = lockstep::trainer::checksum;

int main(int argc, char** argv) {
  size_t mib = 256;
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--mib" || a == "--rounds") && i + 1 < argc) {
      const long v = std::strtol(argv[++i], nullptr, 10);
      if (v < 1 || v > 65536) {
        std::fprintf(stderr, "lockstep-bench-checksum: %s takes 1 to 65536\n", a.c_str());
        return 64;
      }
      if (a == "--mib") mib = static_cast<size_t>(v);
      else rounds = static_cast<int>(v);
    } else {
      std::fprintf(stderr, "usage: lockstep-bench-checksum [--mib N] [--rounds R]\n");
      return 64;
    }
  }
  std::vector<unsigned char> data(mib << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  auto gbps = [&](auto hash, uint64_t& out) {
    const auto t0 = std::chrono::steady_clock::now();
    out = hash();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return static_cast<double>(data.size()) / s / 1e9;
  };
  auto fnv = [&] {
    uint64_t h = 1469598103934665603ULL;
    for (unsigned char c : data) h = (h ^ c) * 1099511628211ULL;
    return h;
  };
  std::printf("bench/trainer checksum: %zu MiB in memory, %d rounds, GB/s (higher is faster)\n", mib, rounds);
  std::vector<double> x, l, f;
  uint64_t sink = 0, v = 0;
  for (int r = 1; r <= rounds; ++r) {
    x.push_back(gbps([&] { return ck::xxh3(data.data(), data.size()); }, v));
    sink ^= v;
    l.push_back(gbps([&] { return ck::lanes64(data.data(), data.size()); }, v));
    sink ^= v;
    f.push_back(gbps(fnv, v));
    sink ^= v;
    std::printf("  round %d: xxh3 %.2f, lanes64 %.2f, fnv1a64 %.2f; xxh3 / lanes64 %.2fx\n", r, x.back(), l.back(), f.back(),
                x.back() / l.back());
    std::fflush(stdout);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("median: xxh3 %.2f GB/s, lanes64 %.2f GB/s, fnv1a64 %.2f GB/s; xxh3 / lanes64 %.2fx (checksums xor %llx)\n",
              median(x), median(l), median(f), median(x) / median(l), static_cast<unsigned long long>(sink));
  return 0;
}
