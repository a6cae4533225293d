// lockstep/time_text.hpp: the one RFC 3339 timestamp and the one compact duration, with the
// exact texts the operator's status, the logs and the command line write.
#include <gtest/gtest.h>

#include "lockstep/time_text.hpp"

using namespace lockstep::time_text;
using namespace std::chrono_literals;

namespace {
// 2026-11-22T00:42:38Z and 123,456 microseconds.
const SystemTime kT = std::chrono::system_clock::from_time_t(1795308158) + 123456us;
}  // namespace

TEST(Rfc3339, WritesSecondsMillisecondsOrMicrosecondsInUtc) {
  EXPECT_EQ(rfc3339(kT), "2026-11-22T00:42:38Z");
  EXPECT_EQ(rfc3339(kT, 3), "2026-11-22T00:42:38.123Z");
  EXPECT_EQ(rfc3339(kT, 6), "2026-11-22T00:42:38.123456Z");
  EXPECT_EQ(rfc3339(std::chrono::system_clock::from_time_t(0), 3), "1970-01-01T00:00:00.000Z");
}

TEST(Rfc3339, ReadsWhatTheApiServerWritesToTheSecond) {
  EXPECT_EQ(parse_rfc3339("2026-11-22T00:42:38Z"), std::chrono::system_clock::from_time_t(1795308158));
  EXPECT_EQ(parse_rfc3339("2026-11-22T00:42:38.999999Z"), std::chrono::system_clock::from_time_t(1795308158));
  EXPECT_EQ(parse_rfc3339(rfc3339(kT, 6)), std::chrono::system_clock::from_time_t(1795308158));
  EXPECT_FALSE(parse_rfc3339("2026-11-22T00:42:38+01:00").has_value()) << "the API server writes UTC";
  EXPECT_FALSE(parse_rfc3339("yesterday").has_value());
  EXPECT_FALSE(parse_rfc3339("").has_value());
}

TEST(CompactDuration, KeepsTheTwoLargestUnits) {
  EXPECT_EQ(compact_duration(0), "0s");
  EXPECT_EQ(compact_duration(-5), "0s");
  EXPECT_EQ(compact_duration(45), "45s");
  EXPECT_EQ(compact_duration(200), "3m20s");
  EXPECT_EQ(compact_duration(3599), "59m59s");
  EXPECT_EQ(compact_duration(7523), "2h05m");
  EXPECT_EQ(compact_duration(3 * 86400 + 4 * 3600 + 59), "3d04h");
}

TEST(CompactDuration, ReadsBackWhatItWrites) {
  for (long long s : {0LL, 59LL, 61LL, 3599LL, 7500LL, 90000LL})
    EXPECT_EQ(compact_duration(*parse_compact_duration(compact_duration(s))), compact_duration(s)) << s;
  EXPECT_EQ(parse_compact_duration("1d02h"), 93600);
  EXPECT_EQ(parse_compact_duration("3m20s"), 200);
  EXPECT_FALSE(parse_compact_duration("soon").has_value());
  EXPECT_FALSE(parse_compact_duration("").has_value());
  EXPECT_FALSE(parse_compact_duration("12").has_value()) << "a number needs its unit";
  EXPECT_FALSE(parse_compact_duration("9999999999999s").has_value()) << "more than 12 digits";
}

TEST(Seconds, MeasuredWithFixedDecimalsAndSettingsShortest) {
  EXPECT_EQ(seconds(6.0312, 2), "6.03 s");
  EXPECT_EQ(seconds(0.1254, 3), "0.125 s");
  EXPECT_EQ(seconds(12.34, 1), "12.3 s");
  EXPECT_EQ(seconds(6031ms, 2), "6.03 s") << "a duration, as the barrier's silences are measured";
  EXPECT_EQ(seconds(std::chrono::steady_clock::duration(std::chrono::microseconds(125400)), 3), "0.125 s");
  EXPECT_EQ(setting_seconds(6000ms), "6 s");
  EXPECT_EQ(setting_seconds(2500ms), "2.5 s");
  EXPECT_EQ(setting_seconds(250ms), "0.25 s");
}
