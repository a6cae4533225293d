// Training data: a token file of uint16 ids (nanoGPT's .bin format) or a built-in synthetic
// task, and a distributed sampler.
//
// Note [Global batch order]
// Step s of epoch e uses global batch s of a permutation that depends only on (seed, e), so
// every rank, every restart and a single-process run agree on it. Rank r of W takes the
// r-th contiguous slice of B examples of the W*B global batch, so W ranks together see
// exactly the examples one process would see with batch W*B, in the same order.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lockstep::trainer {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;  // examples
  // Example i: (inputs (T), targets (T)), int64.
  virtual std::pair<torch::Tensor, torch::Tensor> get(int64_t i) const = 0;
  virtual double uniform_loss() const = 0;  // ln(V): the loss of guessing uniformly
};

// Sequences in which each token is a fixed (seeded) permutation of the one before, with 10%
// of tokens replaced by noise. A model that learns the permutation reaches a loss far below
// ln(V); one that learns nothing stays at ln(V).
std::unique_ptr<Dataset> make_synthetic(int64_t vocab, int64_t seq_len, int64_t examples, uint64_t seed);

// Non-overlapping windows of seq_len + 1 tokens from a file of little-endian uint16 ids.
// Throws std::runtime_error naming the file and the problem.
std::unique_ptr<Dataset> make_token_file(const std::string& path, int64_t vocab, int64_t seq_len);

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int64_t batch_per_rank, int rank, int world, uint64_t seed);
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // Indices for this rank at global step `step` (Note [Global batch order]).
  std::vector<int64_t> indices(int64_t step) const;

 private:
  const std::vector<int64_t>& permutation(int64_t epoch) const;  // computed once per epoch
  int64_t n_, batch_, steps_per_epoch_;
  int rank_, world_;
  uint64_t seed_;
  mutable int64_t perm_epoch_ = -1;
  mutable std::vector<int64_t> perm_;
};

// Stacks examples into (inputs (B,T), targets (B,T)).
std::pair<torch::Tensor, torch::Tensor> make_batch(const Dataset& data, const std::vector<int64_t>& indices);

}  // namespace lockstep::trainer
