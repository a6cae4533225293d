#include "data.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>

namespace lockstep::trainer {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64: a stateless, well-spread hash for per-example seeds
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class Synthetic : public Dataset {
 public:
  Synthetic(int64_t vocab, int64_t seq_len, int64_t examples, uint64_t seed)
      : vocab_(vocab), T_(seq_len), n_(examples), seed_(seed), next_(static_cast<size_t>(vocab)) {
    std::iota(next_.begin(), next_.end(), 0);
    std::mt19937_64 rng(mix(seed));
    std::shuffle(next_.begin(), next_.end(), rng);
  }
  int64_t size() const override { return n_; }
  double uniform_loss() const override { return std::log(static_cast<double>(vocab_)); }
  std::pair<torch::Tensor, torch::Tensor> get(int64_t i) const override {
    std::mt19937_64 rng(mix(seed_ ^ mix(static_cast<uint64_t>(i))));
    std::uniform_int_distribution<int64_t> tok(0, vocab_ - 1);
    std::uniform_real_distribution<double> u(0, 1);
    auto seq = torch::empty({T_ + 1}, torch::kInt64);
    auto* s = seq.data_ptr<int64_t>();
    s[0] = tok(rng);
    for (int64_t t = 1; t <= T_; ++t) s[t] = u(rng) < 0.1 ? tok(rng) : next_[static_cast<size_t>(s[t - 1])];
    return {seq.slice(0, 0, T_), seq.slice(0, 1, T_ + 1)};
  }

 private:
  int64_t vocab_, T_, n_;
  uint64_t seed_;
  std::vector<int64_t> next_;
};

class TokenFile : public Dataset {
 public:
  TokenFile(const std::string& path, int64_t vocab, int64_t seq_len) : vocab_(vocab), T_(seq_len) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("--data: cannot open token file '" + path + "': " + std::strerror(errno));
    struct stat st{};
    ::fstat(fd, &st);
    if (st.st_size % 2 != 0)
      throw std::runtime_error("--data: '" + path + "' has an odd size; expected uint16 token ids");
    tokens_ = st.st_size / 2;
    if (tokens_ < seq_len + 1)
      throw std::runtime_error("--data: '" + path + "' holds " + std::to_string(tokens_) +
                               " tokens, fewer than one sequence of --seq-len+1=" + std::to_string(seq_len + 1));
    map_ = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map_ == MAP_FAILED) throw std::runtime_error("--data: cannot map '" + path + "'");
    bytes_ = static_cast<size_t>(st.st_size);
    const auto* ids = static_cast<const uint16_t*>(map_);
    // Check the ids once against the vocabulary; a wrong --vocab-size would silently train on garbage.
    uint16_t max_id = *std::max_element(ids, ids + tokens_);
    if (max_id >= vocab)
      throw std::runtime_error("--data: '" + path + "' has token id " + std::to_string(max_id) +
                               ", outside the model's vocabulary of " + std::to_string(vocab) + " (--vocab-size)");
  }
  ~TokenFile() override { ::munmap(map_, bytes_); }
  int64_t size() const override { return (tokens_ - 1) / T_; }
  double uniform_loss() const override { return std::log(static_cast<double>(vocab_)); }
  std::pair<torch::Tensor, torch::Tensor> get(int64_t i) const override {
    const auto* ids = static_cast<const uint16_t*>(map_) + i * T_;
    auto seq = torch::empty({T_ + 1}, torch::kInt64);
    auto* s = seq.data_ptr<int64_t>();
    for (int64_t t = 0; t <= T_; ++t) s[t] = ids[t];
    return {seq.slice(0, 0, T_), seq.slice(0, 1, T_ + 1)};
  }

 private:
  int64_t vocab_, T_, tokens_ = 0;
  void* map_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<Dataset> make_synthetic(int64_t vocab, int64_t seq_len, int64_t examples, uint64_t seed) {
  return std::make_unique<Synthetic>(vocab, seq_len, examples, seed);
}

std::unique_ptr<Dataset> make_token_file(const std::string& path, int64_t vocab, int64_t seq_len) {
  return std::make_unique<TokenFile>(path, vocab, seq_len);
}

DistributedSampler::DistributedSampler(int64_t n, int64_t batch_per_rank, int rank, int world, uint64_t seed)
    : n_(n), batch_(batch_per_rank), rank_(rank), world_(world), seed_(seed) {
  steps_per_epoch_ = n_ / (batch_ * world_);
  if (steps_per_epoch_ < 1)
    throw std::runtime_error("the dataset has " + std::to_string(n_) + " examples, fewer than one global batch of " +
                             std::to_string(batch_ * world_) + " (--batch-size x world size)");
}

const std::vector<int64_t>& DistributedSampler::permutation(int64_t epoch) const {
  if (epoch != perm_epoch_) {
    perm_.resize(static_cast<size_t>(n_));
    std::iota(perm_.begin(), perm_.end(), 0);
    std::mt19937_64 rng(mix(seed_ ^ mix(static_cast<uint64_t>(epoch) + 1)));
    std::shuffle(perm_.begin(), perm_.end(), rng);
    perm_epoch_ = epoch;
  }
  return perm_;
}

std::vector<int64_t> DistributedSampler::indices(int64_t step) const {
  // Note [Global batch order]
  const int64_t epoch = step / steps_per_epoch_, in_epoch = step % steps_per_epoch_;
  const auto& perm = permutation(epoch);
  const int64_t start = in_epoch * batch_ * world_ + rank_ * batch_;
  return std::vector<int64_t>(perm.begin() + start, perm.begin() + start + batch_);
}

std::pair<torch::Tensor, torch::Tensor> make_batch(const Dataset& data, const std::vector<int64_t>& indices) {
  std::vector<torch::Tensor> xs, ys;
  for (auto i : indices) {
    auto [x, y] = data.get(i);
    xs.push_back(x);
    ys.push_back(y);
  }
  return {torch::stack(xs), torch::stack(ys)};
}

}  // namespace lockstep::trainer
