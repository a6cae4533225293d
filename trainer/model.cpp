#include "model.hpp"

#include "lockstep/memory_plan.hpp"
#include "lockstep/model_shapes.hpp"

#include <cmath>
#include <stdexcept>

namespace F = torch::nn::functional;

namespace lockstep::trainer {
namespace {

// Note [Fused bias]
// A Linear layer through ATen's own linear op, not LinearImpl::forward: libtorch's functional
// linear (torch/nn/functional/linear.h) multiplies a 3-D input and then adds the bias in a
// separate broadcast kernel, while ATen's op (what Python's nn.Linear calls) flattens a
// contiguous input to one matrix product whose epilogue adds the bias (cuBLASLt on the GPU).
// The GPU profile of 2026-11-28 showed the cost: 48 extra strided add kernels a gpt2-124m step,
// 5.9 ms of 53.6, the bulk of the gap to PyTorch eager.
torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return torch::linear(x, layer->weight, layer->bias);
}

}  // namespace

// The presets are lockstep/model_shapes.hpp's table, which `lockstep plan` sizes too; "mlp"
// gives the MLP's width and vocabulary (tiny's).
GptConfig GptConfig::preset(const std::string& name) {
  const models::Preset* p = models::find(name);
  if (!p) throw std::invalid_argument("--model: unknown preset '" + name + "'; valid: " + models::names());
  GptConfig c;
  c.n_layer = p->shape.layers;
  c.n_head = p->shape.heads;
  c.n_embd = p->shape.width;
  c.block_size = p->shape.context;
  c.vocab_size = p->shape.vocab;
  return c;
}

int64_t GptConfig::parameters() const {
  return static_cast<int64_t>(plan::gpt_parameters(static_cast<double>(n_layer), static_cast<double>(n_embd),
                                                   static_cast<double>(vocab_size), static_cast<double>(block_size)));
}

BlockImpl::BlockImpl(const GptConfig& c) : n_head(c.n_head) {
  ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  c_attn = register_module("c_attn", torch::nn::Linear(c.n_embd, 3 * c.n_embd));
  c_proj = register_module("c_proj", torch::nn::Linear(c.n_embd, c.n_embd));
  ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  c_fc = register_module("c_fc", torch::nn::Linear(c.n_embd, 4 * c.n_embd));
  mlp_proj = register_module("mlp_proj", torch::nn::Linear(4 * c.n_embd, c.n_embd));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), NH = n_head, HS = C / NH;
  auto qkv = linear(c_attn, ln_1(x));                 // (B,T,3C)
  auto parts = qkv.split(C, /*dim=*/2);
  auto q = parts[0].view({B, T, NH, HS}).transpose(1, 2);  // (B,NH,T,HS)
  auto k = parts[1].view({B, T, NH, HS}).transpose(1, 2);
  auto v = parts[2].view({B, T, NH, HS}).transpose(1, 2);
  auto y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);  // (B,NH,T,HS)
  y = y.transpose(1, 2).contiguous().view({B, T, C});  // (B,T,C)
  auto h = x + linear(c_proj, y);
  return h + linear(mlp_proj, F::gelu(linear(c_fc, ln_2(h)), F::GELUFuncOptions().approximate("tanh")));
}

GptImpl::GptImpl(const GptConfig& c) : config(c) {
  wte = register_module("wte", torch::nn::Embedding(c.vocab_size, c.n_embd));
  wpe = register_module("wpe", torch::nn::Embedding(c.block_size, c.n_embd));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) blocks->push_back(Block(c));
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  // GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 * n_layer).
  torch::NoGradGuard no_grad;
  for (auto& p : named_parameters()) {
    const std::string& n = p.key();
    if (n.find("bias") != std::string::npos) p.value().zero_();
    else if (n.find("ln_") != std::string::npos) p.value().fill_(1.0);
    else {
      double std = 0.02;
      if (n.find("c_proj.weight") != std::string::npos || n.find("mlp_proj.weight") != std::string::npos)
        std /= std::sqrt(2.0 * static_cast<double>(c.n_layer));
      p.value().normal_(0.0, std);
    }
  }
}

torch::Tensor GptImpl::forward(const torch::Tensor& idx) {
  const int64_t T = idx.size(1);
  TORCH_CHECK(T <= config.block_size, "sequence length ", T, " exceeds the model's context ", config.block_size,
              " (--seq-len)");
  auto pos = torch::arange(T, idx.options());
  auto x = wte(idx) + wpe(pos);  // (B,T,C) + (T,C)
  for (size_t i = 0; i < blocks->size(); ++i)
    x = run_block ? run_block(i, x) : blocks[i]->as<Block>()->forward(x);
  x = ln_f(x);
  return torch::matmul(x, wte->weight.t());  // (B,T,V), head tied to the embedding
}

MlpImpl::MlpImpl(int64_t vocab, int64_t width) {
  emb = register_module("emb", torch::nn::Embedding(vocab, width));
  fc1 = register_module("fc1", torch::nn::Linear(width, 4 * width));
  fc2 = register_module("fc2", torch::nn::Linear(4 * width, width));
  head = register_module("head", torch::nn::Linear(width, vocab));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& idx) {
  auto x = emb(idx);                                      // (B,T,W)
  x = x + linear(fc2, F::gelu(linear(fc1, x)));           // (B,T,W)
  return linear(head, x);                                 // (B,T,V)
}

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  // 16-bit logits are copied to fp32 first: PyTorch 2.11's fused half-to-float log-softmax
  // takes fp16 only ("conversion is supported for Half type only" for bf16, seen on an H200),
  // so a loss without that copy needs a kernel of its own (Note [Step speed]).
  auto flat = logits.reshape({-1, logits.size(-1)});
  if (flat.scalar_type() != torch::kFloat32 && flat.scalar_type() != torch::kFloat64) flat = flat.to(torch::kFloat32);
  return F::cross_entropy(flat, targets.reshape({-1}));
}

}  // namespace lockstep::trainer
