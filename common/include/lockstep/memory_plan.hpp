// Per-rank memory of model states and activations under DDP, ZeRO-1, ZeRO-2 and FSDP
// (ZeRO-3), and the strategy Auto picks. Pure arithmetic, standard library only, shared by
// the trainer (strategy Auto) and the `lockstep plan` command (the models they size:
// lockstep/model_shapes.hpp).
//
// Model states, per the ZeRO paper (Rajbhandari et al. 2020, section 3.1), for mixed-
// precision Adam: 2 bytes of 16-bit parameters, 2 of 16-bit gradients and K = 12 of
// optimizer state (32-bit master copy, momentum, variance) per parameter, 16 in all; the
// same 16 hold for 32-bit Adam (4 + 4 + 8). With N ranks:
//   DDP     (2 + 2 + K) P        ZeRO-1  2P + 2P + K P / N
//   ZeRO-2  2P + (2 + K) P / N   ZeRO-3  (2 + 2 + K) P / N
// Activations of a GPT layer, per Korthikanti et al. 2022 (16-bit, no recomputation):
//   s b h (34 + 5 a s / h) bytes, s sequence, b micro-batch, h width, a heads;
// with full activation checkpointing only each layer's input, 2 s b h bytes, is kept.
#pragma once

#include <cstdint>
#include <string>

namespace lockstep::plan {

struct StateBytes {
  double params = 0, grads = 0, optimizer = 0;
  double total() const { return params + grads + optimizer; }
};

enum class Sharding { DDP, ZeRO1, ZeRO2, ZeRO3 };

inline StateBytes model_states(double params, int ranks, Sharding s) {
  const double n = ranks, k = 12;
  switch (s) {
    case Sharding::DDP: return {2 * params, 2 * params, k * params};
    case Sharding::ZeRO1: return {2 * params, 2 * params, k * params / n};
    case Sharding::ZeRO2: return {2 * params, 2 * params / n, k * params / n};
    case Sharding::ZeRO3: return {2 * params / n, 2 * params / n, k * params / n};
  }
  return {};
}

// Parameters of the GPT decoder in trainer/model.hpp: embeddings (the head is tied to the
// token embedding), per block two LayerNorms, attention (qkv and projection) and the MLP,
// and the final LayerNorm.
inline double gpt_parameters(double layers, double width, double vocab, double context) {
  const double c = width;
  const double block = 2 * 2 * c + (c * 3 * c + 3 * c) + (c * c + c) + (c * 4 * c + 4 * c) + (4 * c * c + c);
  return vocab * c + context * c + layers * block + 2 * c;
}

// Parameters of the small MLP in trainer/model.hpp: the embedding, two hidden layers (C to 4C
// and back) and the vocabulary head.
inline double mlp_parameters(double width, double vocab) {
  const double c = width;
  return vocab * c + (c * 4 * c + 4 * c) + (4 * c * c + c) + (c * vocab + vocab);
}

struct TransformerShape {
  double layers = 0, width = 0, heads = 1, seq = 0, micro_batch = 1;
};

// Activation bytes per rank; `bytes_per_value` 2 for 16-bit, 4 for 32-bit training.
inline double activation_bytes(const TransformerShape& t, bool checkpointing, double bytes_per_value = 2) {
  const double sbh = t.seq * t.micro_batch * t.width;
  const double per_layer = checkpointing ? 2 * sbh : sbh * (34 + 5 * t.heads * t.seq / t.width);
  return t.layers * per_layer * bytes_per_value / 2;
}

struct Choice {
  bool fsdp = false;
  double ddp_bytes = 0, fsdp_bytes = 0, budget = 0;  // budget: usable bytes per rank
  std::string why;
};

// Auto: DDP when its model states and activations fit in `headroom` (80%) of the rank's
// memory, else FSDP (even if FSDP does not fit either: then the log says so).
inline Choice choose(double params, int ranks, double activations, double memory_per_rank, double headroom = 0.8) {
  Choice c;
  c.budget = memory_per_rank * headroom;
  c.ddp_bytes = model_states(params, ranks, Sharding::DDP).total() + activations;
  c.fsdp_bytes = model_states(params, ranks, Sharding::ZeRO3).total() + activations;
  auto gb = [](double b) {  // 2 decimals, in GB or MB
    const bool big = b >= 1e9;
    std::string v = std::to_string(b / (big ? 1e9 : 1e6));
    return v.substr(0, v.find('.') + 3) + (big ? " GB" : " MB");
  };
  if (c.ddp_bytes <= c.budget) {
    c.fsdp = false;
    c.why = "DDP: its " + gb(c.ddp_bytes) + " per rank (16 bytes x params + activations) fit in " + gb(c.budget) +
            " (80% of " + gb(memory_per_rank) + ")";
  } else {
    c.fsdp = true;
    c.why = "FSDP: DDP would need " + gb(c.ddp_bytes) + " per rank, more than " + gb(c.budget) + " (80% of " +
            gb(memory_per_rank) + "); sharded over " + std::to_string(ranks) + " ranks it needs " + gb(c.fsdp_bytes) +
            (c.fsdp_bytes > c.budget ? ", which does not fit either: use more ranks or activation checkpointing" : "");
  }
  return c;
}

}  // namespace lockstep::plan
