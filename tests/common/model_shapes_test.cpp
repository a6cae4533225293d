// The one table of model presets (lockstep/model_shapes.hpp) that the trainer's --model and
// `lockstep plan --model` share, sized by the memory plan's parameter count.
#include <gtest/gtest.h>

#include "lockstep/memory_plan.hpp"
#include "lockstep/model_shapes.hpp"

using namespace lockstep;

namespace {

double gpt_count(const models::Shape& s) {
  return plan::gpt_parameters(static_cast<double>(s.layers), static_cast<double>(s.width), static_cast<double>(s.vocab),
                              static_cast<double>(s.context));
}

}  // namespace

TEST(ModelShapes, NamesEveryPresetInTheTablesOrder) {
  EXPECT_EQ(models::names(), "tiny, gpt2-124m, gpt2-1558m, mlp");
  EXPECT_EQ(models::names(" | "), "tiny | gpt2-124m | gpt2-1558m | mlp");
  for (const auto& p : models::kPresets) {
    ASSERT_NE(models::find(p.name), nullptr) << p.name;
    EXPECT_EQ(models::find(p.name)->name, p.name);
  }
  EXPECT_EQ(models::find("gpt2"), nullptr);
  EXPECT_EQ(models::find(""), nullptr);
}

// GPT-2 small and XL as published (Hugging Face's gpt2 and gpt2-xl, tied head): 124,439,808 and
// 1,557,611,200 parameters.
TEST(ModelShapes, Gpt2PresetsHaveThePublishedParameterCounts) {
  EXPECT_EQ(gpt_count(models::find("gpt2-124m")->shape), 124439808.0);
  EXPECT_EQ(gpt_count(models::find("gpt2-1558m")->shape), 1557611200.0);
  const models::Shape& xl = models::find("gpt2-1558m")->shape;
  EXPECT_EQ(xl.width % xl.heads, 0) << "the width must split into the heads";
}

TEST(ModelShapes, TheMlpIsTinysWidthAndVocabulary) {
  const models::Preset* mlp = models::find("mlp");
  ASSERT_NE(mlp, nullptr);
  EXPECT_EQ(mlp->kind, models::Kind::Mlp);
  EXPECT_EQ(mlp->shape.width, models::find("tiny")->shape.width);
  EXPECT_EQ(mlp->shape.vocab, models::find("tiny")->shape.vocab);
  // embedding 256x64, 64->256 and 256->64 layers with biases, head 64->256 with bias
  EXPECT_EQ(plan::mlp_parameters(64, 256), 256.0 * 64 + (64 * 256 + 256) + (256 * 64 + 64) + (64 * 256 + 256));
}
