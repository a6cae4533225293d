// lockstep/flags.hpp: the one way lockstep's programs find a flag and its value, and the
// converters whose errors name the flag and what is valid.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lockstep/flags.hpp"

using namespace lockstep::flags;
using namespace std::chrono_literals;

TEST(FlagsMatch, TakesTheJoinedAndTheSpacedFormAlike) {
  std::vector<std::string> args = {"--model=tiny", "--steps", "5", "--modelx=1", "--steps"};
  std::string v;
  size_t i = 0;
  EXPECT_TRUE(match(args, i, "--model", v));
  EXPECT_EQ(v, "tiny");
  EXPECT_EQ(i, 0u);
  i = 1;
  EXPECT_TRUE(match(args, i, "--steps", v));
  EXPECT_EQ(v, "5");
  EXPECT_EQ(i, 2u) << "the value was the next argument";
  i = 3;
  EXPECT_FALSE(match(args, i, "--model", v)) << "--modelx is another flag";
  std::vector<std::string> nul = {"--model", std::string("ti\0ny", 5), std::string("--model=a\0b", 11)};
  i = 0;
  EXPECT_TRUE(match(nul, i, "--model", v));
  EXPECT_EQ(v, nul[1]) << "a value is taken whole";
  i = 2;
  EXPECT_TRUE(match(nul, i, "--model", v));
  EXPECT_EQ(v, std::string("a\0b", 3));
  i = 4;
  try {
    match(args, i, "--steps", v);
    FAIL() << "a flag at the end has no value";
  } catch (const FlagError& e) {
    EXPECT_STREQ(e.what(), "--steps needs a value");
  }
}

TEST(FlagsMatch, ArgvAndStringsAgree) {
  std::vector<std::string> strings = {"prog", "--workers", "4", "--qps=2.5"};
  std::vector<char*> argv;
  for (auto& s : strings) argv.push_back(s.data());
  std::string v;
  int i = 1;
  EXPECT_TRUE(match(static_cast<int>(argv.size()), argv.data(), i, "--workers", v));
  EXPECT_EQ(v, "4");
  EXPECT_EQ(i, 2);
  i = 3;
  EXPECT_TRUE(match(static_cast<int>(argv.size()), argv.data(), i, "--qps", v));
  EXPECT_EQ(v, "2.5");
  EXPECT_EQ(i, 3);
}

TEST(FlagsConvert, EachErrorNamesTheFlagAndWhatIsValid) {
  EXPECT_EQ(to_int("--workers", "8", 1, 256), 8);
  EXPECT_EQ(to_double("--kube-api-qps", "2.5", 0.1, 1e6), 2.5);
  EXPECT_TRUE(to_bool("--leader-elect", "yes"));
  EXPECT_FALSE(to_bool("--leader-elect", "0"));
  EXPECT_EQ(to_duration("--retry-period", "250ms"), 250ms);
  EXPECT_EQ(to_duration("--retry-period", "2"), 2000ms) << "a bare number is seconds";
  EXPECT_EQ(to_duration("--retry-period", "1.5m"), 90000ms);
  EXPECT_EQ(to_duration("--retry-period", "1h"), 3600000ms);
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const FlagError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([] { to_int("--workers", "0", 1, 256); }), "--workers: expected an integer from 1 to 256, got '0'");
  EXPECT_EQ(message([] { to_int("--workers", "4x", 1, 256); }), "--workers: expected an integer from 1 to 256, got '4x'");
  EXPECT_NE(message([] { to_double("--kube-api-qps", "", 0.1, 1e6); }).find("--kube-api-qps: expected a number from"),
            std::string::npos);
  EXPECT_EQ(message([] { to_bool("--node-watch", "maybe"); }), "--node-watch: expected true or false, got 'maybe'");
  EXPECT_EQ(message([] { to_duration("--lease-duration", "10d"); }),
            "--lease-duration: expected a duration such as 250ms, 10s, 5m or 1h, got '10d'");
  EXPECT_EQ(message([] { to_duration("--lease-duration", "-1s"); }),
            "--lease-duration: expected a duration such as 250ms, 10s, 5m or 1h, got '-1s'");
}
