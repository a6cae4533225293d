// Models the trainer knows. Model code knows nothing of parallelism: DDP and FSDP are
// applied to a model from outside (ddp.hpp).
//
// Dimension legend, as in llm.c: B batch, T time (sequence), C channels (width),
// V vocabulary, NH heads, HS head size (C / NH).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>

namespace lockstep::trainer {

struct GptConfig {
  int64_t n_layer = 2, n_head = 2, n_embd = 64, block_size = 64, vocab_size = 256;
  static GptConfig preset(const std::string& name);  // lockstep/model_shapes.hpp; throws naming valid ones
  int64_t parameters() const;                         // exact count, tied embeddings counted once
};

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const GptConfig& c);
  torch::Tensor forward(const torch::Tensor& x);  // x (B,T,C) -> (B,T,C)
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr}, c_fc{nullptr}, mlp_proj{nullptr};
  int64_t n_head;
};
TORCH_MODULE(Block);

// A GPT-2 style decoder: token and position embeddings, pre-LayerNorm blocks of causal
// self-attention and a GELU MLP, a final LayerNorm, and an LM head tied to the token
// embedding.
struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptConfig& c);
  torch::Tensor forward(const torch::Tensor& idx);  // idx (B,T) int64 -> logits (B,T,V)
  // How block i is run on x (B,T,C); by default it is simply called. A parallelism can wrap
  // it (FSDP gathers the block's parameters around it) without the model knowing.
  std::function<torch::Tensor(size_t i, const torch::Tensor& x)> run_block;
  GptConfig config;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(Gpt);

// A small MLP on the same token task: embedding, two hidden layers, a vocabulary head.
struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t vocab, int64_t width);
  torch::Tensor forward(const torch::Tensor& idx);  // idx (B,T) -> logits (B,T,V)
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, head{nullptr};
};
TORCH_MODULE(Mlp);

// Mean cross-entropy of next-token logits (B,T,V) against targets (B,T).
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace lockstep::trainer
