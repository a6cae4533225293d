// lockstep/text.hpp (Note [UTF-8 text]): cuts at a character boundary and validity. The bounds of
// the texts the operator keeps of a pod: tests/operator/reconcile/job_test.cpp.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "lockstep/text.hpp"
#include "utf8_samples.hpp"

using json = nlohmann::json;
using lockstep::text::utf8_char_length;
using lockstep::text::utf8_head;
using lockstep::text::utf8_invalid_at;
using lockstep::text::utf8_tail;
using lockstep::text::utf8_valid;
using lockstep::test::dumps;
using lockstep::test::kCharacters;
using lockstep::test::valid;

// A cut at every byte offset of text around a character of each length: never in the character,
// never longer than asked, and as long as a boundary allows.
TEST(Utf8Cut, AtEveryOffsetOfTwoThreeAndFourByteCharactersTheCutIsOnABoundary) {
  for (const auto& c : kCharacters) {
    SCOPED_TRACE(c.name);
    const size_t len = c.bytes.size();
    const std::string s = "ab" + c.bytes + "cd";  // the character at [2, 2 + len)
    for (size_t max = 0; max <= s.size() + 1; ++max) {
      SCOPED_TRACE("max " + std::to_string(max));
      const std::string head = utf8_head(s, max), tail = utf8_tail(s, max);
      EXPECT_LE(head.size(), max);
      EXPECT_LE(tail.size(), max);
      EXPECT_EQ(s.compare(0, head.size(), head), 0) << "a prefix";
      EXPECT_EQ(s.compare(s.size() - tail.size(), tail.size(), tail), 0) << "a suffix";
      EXPECT_TRUE(valid(head) && valid(tail));
      EXPECT_TRUE(dumps(head) && dumps(tail));
      // The longest prefix that ends on a boundary: the character whole or not at all.
      const size_t want_head = max >= s.size() ? s.size() : max <= 2 ? max : max < 2 + len ? 2 : max;
      EXPECT_EQ(head.size(), want_head);
      // And the longest suffix that starts on one.
      const size_t from = max >= s.size() ? 0 : s.size() - max;
      const size_t want_tail = from <= 2 ? s.size() - from : from < 2 + len ? 2 : s.size() - from;
      EXPECT_EQ(tail.size(), want_tail);
    }
    // A run of the character: a cut keeps whole characters only, as many as fit.
    std::string run;
    for (int i = 0; i < 9; ++i) run += c.bytes;
    for (size_t max = 0; max <= run.size(); ++max) {
      EXPECT_EQ(utf8_head(run, max).size(), max / len * len) << max;
      EXPECT_EQ(utf8_tail(run, max).size(), max / len * len) << max;
    }
  }
}

// Text that is not UTF-8 has no boundary to find: the cut stays bounded, moving at most 3 bytes.
TEST(Utf8Cut, OnTextThatIsNotUtf8TheCutStaysBounded) {
  const std::string continuation(100, '\x80');
  EXPECT_EQ(utf8_head(continuation, 50).size(), 50u);
  EXPECT_EQ(utf8_tail(continuation, 50).size(), 50u);
  EXPECT_EQ(utf8_head(continuation, 0), "");
  EXPECT_EQ(utf8_tail(continuation, 0), "");
  const std::string leads(100, '\xF0');  // lead bytes with no continuation: each a boundary
  EXPECT_EQ(utf8_head(leads, 37).size(), 37u);
  EXPECT_EQ(utf8_tail(leads, 37).size(), 37u);
  // A text no longer than the bound comes back as it is, valid or not.
  EXPECT_EQ(utf8_head("ab\xE2\x82", 4), "ab\xE2\x82");
  EXPECT_EQ(utf8_tail("\x82\xAC", 2), "\x82\xAC");
}

// Each byte that begins no valid character becomes U+FFFD; valid text is kept as it is.
TEST(Utf8Valid, ReplacesEachByteThatBeginsNoCharacter) {
  const std::string r = "\xEF\xBF\xBD";
  struct Case {
    const char* what;
    std::string in, out;
    size_t invalid_at;
  };
  const Case cases[] = {
      {"ASCII", "plain text\n", "plain text\n", std::string::npos},
      {"every length", "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80",
       std::string::npos},
      {"a stray continuation byte", "a\x80z", "a" + r + "z", 1},
      {"a character cut short at the end", "ab\xE2\x82", "ab" + r + r, 2},
      {"a character cut short by ASCII", "\xF0\x9F" "a", r + r + "a", 0},
      {"an overlong '/'", "\xC0\xAF", r + r, 0},
      {"an overlong 3-byte form", "\xE0\x80\xAF", r + r + r, 0},
      {"a surrogate", "x\xED\xA0\x80", "x" + r + r + r, 1},
      {"past U+10FFFF", "\xF4\x90\x80\x80", r + r + r + r, 0},
      {"a byte no character begins with", "\xFF", r, 0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(utf8_invalid_at(c.in), c.invalid_at);
    EXPECT_EQ(utf8_valid(c.in), c.out);
    EXPECT_TRUE(valid(utf8_valid(c.in)));
    EXPECT_TRUE(dumps(utf8_valid(c.in)));
    // The hazard the rule is for: the text as it came cannot be dumped unless it was valid.
    EXPECT_EQ(dumps(c.in), c.invalid_at == std::string::npos);
  }
  EXPECT_EQ(utf8_char_length(""), 0u);
  EXPECT_EQ(utf8_char_length("\xF0\x9F\x98\x80tail"), 4u);
}

// lockstep::text::trim: HTTP's optional whitespace by default, any set given.
TEST(Trim, SpacesAndTabsByDefaultAnySetGiven) {
  EXPECT_EQ(lockstep::text::trim(" \t gzip \t"), "gzip");
  EXPECT_EQ(lockstep::text::trim("a b"), "a b") << "inner whitespace stays";
  EXPECT_EQ(lockstep::text::trim(" \t "), "");
  EXPECT_EQ(lockstep::text::trim(""), "");
  EXPECT_EQ(lockstep::text::trim("1a\r\n"), "1a\r\n") << "only spaces and tabs by default";
  EXPECT_EQ(lockstep::text::trim(" /dev/nvidia0 \r\n\v\f", " \t\r\n\v\f"), "/dev/nvidia0");
}

// lockstep::text::small_decimal: an index or count a peer says, digits only, at most 9 (or fewer).
TEST(SmallDecimal, DigitsOnlyWithinTheirCountElseMinusOne) {
  using lockstep::text::small_decimal;
  EXPECT_EQ(small_decimal("0"), 0);
  EXPECT_EQ(small_decimal("007"), 7) << "leading zeros are digits (a caller that minds checks them)";
  EXPECT_EQ(small_decimal("999999999"), 999999999);
  EXPECT_EQ(small_decimal("1000000000"), -1) << "10 digits";
  EXPECT_EQ(small_decimal("123456", 6), 123456);
  EXPECT_EQ(small_decimal("1234567", 6), -1);
  EXPECT_EQ(small_decimal("1234567890", 12), -1) << "never more than 9, whatever is asked";
  for (const char* bad : {"", "-1", "+1", "1.0", " 1", "1 ", "1e3", "0x1", "١"}) EXPECT_EQ(small_decimal(bad), -1) << bad;
}

TEST(Hex, TwoLowercaseDigitsPerByteHighNibbleFirst) {
  const unsigned char bytes[] = {0x00, 0x0f, 0xa5, 0xff, 0x10};
  EXPECT_EQ(lockstep::text::hex(bytes, sizeof bytes), "000fa5ff10");
  EXPECT_EQ(lockstep::text::hex(bytes, 0), "");
}
