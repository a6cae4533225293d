// The models lockstep knows by name: one table for the trainer's --model and `lockstep plan
// --model`, so the two list, accept and size the same presets. Header-only, standard library
// only (the trainer includes it without linking lockstep_common).
//
// Dimension legend, as trainer/model.hpp's: L layers, NH heads, C width (channels),
// T context (sequence), V vocabulary.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lockstep::models {

// The GPT decoder of trainer/model.hpp, or the small MLP on the same token task (which uses
// only C and V).
enum class Kind { Gpt, Mlp };

struct Shape {
  int64_t layers = 0, heads = 0, width = 0, context = 0, vocab = 0;  // L, NH, C, T, V
};

struct Preset {
  std::string_view name;
  Kind kind;
  Shape shape;
};

// tiny: 2 layers, 2 heads, width 64, context 64, vocabulary 256. GPT-2 small and GPT-2 XL
// (bench/trainer/gpu.sh: MFU at 1.5B): context 1024, GPT-2's vocabulary. mlp: the MLP at
// tiny's width and vocabulary.
inline constexpr Preset kPresets[] = {
    {"tiny", Kind::Gpt, {2, 2, 64, 64, 256}},
    {"gpt2-124m", Kind::Gpt, {12, 12, 768, 1024, 50257}},
    {"gpt2-1558m", Kind::Gpt, {48, 25, 1600, 1024, 50257}},
    {"mlp", Kind::Mlp, {2, 2, 64, 64, 256}},
};

// The preset called `name`; null when there is none.
inline const Preset* find(std::string_view name) {
  for (const auto& p : kPresets)
    if (p.name == name) return &p;
  return nullptr;
}

// Every preset's name, in the table's order, joined by `separator`: "tiny, gpt2-124m, ...".
inline std::string names(std::string_view separator = ", ") {
  std::string out;
  for (const auto& p : kPresets) {
    if (!out.empty()) out += separator;
    out += p.name;
  }
  return out;
}

}  // namespace lockstep::models
