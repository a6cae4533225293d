// Checkpoint checksums: detect a damaged or truncated file at resume, fast enough to re-read
// multi-GB shards. Standard library and POSIX only (no LibTorch), so tools and tests can use it.
//
// Note [Checkpoint checksum]
// `xxh3`: XXH3, 64-bit, default seed (xxHash 0.8), the file read in 1 MiB blocks. It comes
// header-only from libxxhash-dev (XXH_INLINE_ALL), so the trainer gains no runtime library, and
// it is a standard: `xxhsum -H3` prints the same value, so any checkpoint can be verified
// without Lockstep (docs/trainer.md, "Checkpoints"). MANIFEST and the .sum files write it as 16
// hex digits, as xxhsum does. Not cryptographic: it guards against damage, not an adversary.
// Checkpoints written before it name `lanes64` (our own four-lane multiply-rotate hash in the
// style of xxHash64, but not xxHash64, so no tool could verify it) or, earlier, record
// byte-wise FNV-1a (`fnv1a64`); both, in decimal, are still verified.
#pragma once

#define XXH_INLINE_ALL  // header-only: no libxxhash at run time
#include <xxhash.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace lockstep::trainer::checksum {

inline constexpr const char* kXxh3 = "xxh3";
inline constexpr const char* kLanes64 = "lanes64";
inline constexpr const char* kFnv1a64 = "fnv1a64";

namespace detail {
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL, kP2 = 0xC2B2AE3D27D4EB4FULL, kP3 = 0x165667B19E3779F9ULL;
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t round(uint64_t acc, uint64_t word) { return rotl(acc + word * kP2, 31) * kP1; }
inline uint64_t load64(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof w);  // unaligned-safe; the compiler makes it one load
  return w;
}

// Reads `path` in 1 MiB blocks, handing each to `consume(data, size)`.
template <typename F>
void for_each_block(const std::string& path, F consume) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("checkpoint: cannot read " + path + ": " + std::strerror(errno));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<unsigned char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw std::runtime_error("checkpoint: cannot read " + path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    consume(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
}
}  // namespace detail

// Streaming XXH3-64 (Note [Checkpoint checksum]).
class Xxh3 {
 public:
  Xxh3() { XXH3_64bits_reset(&state_); }
  void update(const unsigned char* p, size_t n) { XXH3_64bits_update(&state_, p, n); }
  uint64_t digest() const { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_;
};

inline uint64_t xxh3(const unsigned char* p, size_t n) { return XXH3_64bits(p, n); }

inline uint64_t xxh3_file(const std::string& path) {
  Xxh3 h;
  detail::for_each_block(path, [&](const unsigned char* p, size_t n) { h.update(p, n); });
  return h.digest();
}

// A checksum as MANIFEST and the .sum files write it: 16 hex digits for xxh3 (as xxhsum
// prints it), decimal for the older kinds.
inline std::string to_text(uint64_t sum, const std::string& kind) {
  if (kind != kXxh3) return std::to_string(sum);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, sum);
  return buf;
}

// The reverse; false for text that is not a whole such number.
inline bool from_text(const std::string& text, const std::string& kind, uint64_t& sum) {
  const bool hex = kind == kXxh3;
  if (text.empty() || text.size() > (hex ? 16u : 20u)) return false;
  for (char c : text)
    if (!(c >= '0' && c <= '9') && !(hex && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))) return false;
  errno = 0;
  sum = std::strtoull(text.c_str(), nullptr, hex ? 16 : 10);
  return errno == 0;
}

// Streaming lanes64, which checkpoints before xxh3 name (Note [Checkpoint checksum]).
class Lanes64 {
 public:
  void update(const unsigned char* p, size_t n) {
    total_ += n;
    if (pending_ > 0) {  // finish a stripe begun by the previous block
      size_t take = std::min(n, sizeof stripe_ - pending_);
      std::memcpy(stripe_ + pending_, p, take);
      pending_ += take;
      p += take;
      n -= take;
      if (pending_ < sizeof stripe_) return;
      stripe(stripe_);
      pending_ = 0;
    }
    for (; n >= 32; p += 32, n -= 32) stripe(p);
    std::memcpy(stripe_, p, n);
    pending_ = n;
  }
  uint64_t digest() const {
    using namespace detail;
    uint64_t h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18);
    for (uint64_t v : v_) h = (h ^ round(0, v)) * kP1 + kP3;
    h += total_;
    for (size_t i = 0; i < pending_; ++i) h = rotl(h ^ (stripe_[i] * kP3), 11) * kP1;
    h ^= h >> 33;  // avalanche
    h *= kP2;
    h ^= h >> 29;
    h *= kP3;
    h ^= h >> 32;
    return h;
  }

 private:
  void stripe(const unsigned char* p) {
    using namespace detail;
    v_[0] = round(v_[0], load64(p));
    v_[1] = round(v_[1], load64(p + 8));
    v_[2] = round(v_[2], load64(p + 16));
    v_[3] = round(v_[3], load64(p + 24));
  }
  uint64_t v_[4] = {detail::kP1 + detail::kP2, detail::kP2, 0, 0 - detail::kP1};
  unsigned char stripe_[32] = {};
  size_t pending_ = 0;
  uint64_t total_ = 0;
};

inline uint64_t lanes64(const unsigned char* p, size_t n) {
  Lanes64 h;
  h.update(p, n);
  return h.digest();
}

inline uint64_t lanes64_file(const std::string& path) {
  Lanes64 h;
  detail::for_each_block(path, [&](const unsigned char* p, size_t n) { h.update(p, n); });
  return h.digest();
}

// Byte-wise FNV-1a, 64-bit: what checkpoints written before lanes64 record.
inline uint64_t fnv1a64_file(const std::string& path) {
  uint64_t h = 1469598103934665603ULL;
  detail::for_each_block(path, [&](const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  });
  return h;
}

}  // namespace lockstep::trainer::checksum
