// lockstep::text::trim (lockstep/text.hpp): HTTP's optional whitespace by default, any set given.
#include <gtest/gtest.h>

#include "lockstep/text.hpp"

using lockstep::text::trim;

TEST(Trim, SpacesAndTabsByDefaultAnySetGiven) {
  EXPECT_EQ(trim(" \t gzip \t"), "gzip");
  EXPECT_EQ(trim("a b"), "a b") << "inner whitespace stays";
  EXPECT_EQ(trim(" \t "), "");
  EXPECT_EQ(trim(""), "");
  EXPECT_EQ(trim("1a\r\n"), "1a\r\n") << "only spaces and tabs by default";
  EXPECT_EQ(trim(" /dev/nvidia0 \r\n\v\f", " \t\r\n\v\f"), "/dev/nvidia0");
}
