// reconcile/prometheus_text: the samples of a /metrics page (names, labels, values), the rest
// skipped.
#include <gtest/gtest.h>

#include <cmath>

#include "reconcile/prometheus_text.hpp"

using namespace lockstep::reconcile;

TEST(Exposition, ReadsNamesLabelsAndValuesAndSkipsTheRest) {
  auto s = parse_sample(R"(lockstep_last_restart_info{kind="in_place",reason="Stall",msg="a \"b\" \\ c"} 1)");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->name, "lockstep_last_restart_info");
  EXPECT_EQ(s->label("reason"), "Stall");
  EXPECT_EQ(s->label("msg"), "a \"b\" \\ c");
  EXPECT_FALSE(s->label("rank").has_value());
  EXPECT_EQ(s->value, 1);
  EXPECT_EQ(parse_sample("lockstep_operator_leader 1 1700000000000")->value, 1);  // with a timestamp
  EXPECT_TRUE(std::isnan(parse_sample("x{a=\"1\"} NaN")->value));
  for (const char* bad : {"# TYPE x counter", "", "x{a=\"1\" 3", "x{a=1} 3", "{a=\"1\"} 3", "x", "x{} y"})
    EXPECT_FALSE(parse_sample(bad).has_value()) << bad;
  auto all = samples_of("a 1\nab 2\r\nb{c=\"}\"} 3\n# a 4\nbroken{ 5\na{} 6\n", {"a", "b"});
  ASSERT_EQ(all.size(), 3u);  // not ab (another name sharing the prefix), not the comment or the broken line
  EXPECT_EQ(all[1].label("c"), "}");
  EXPECT_EQ(all[2].value, 6);
}
