// agent/barrier/codec: the restart barrier's wire format.
#include <gtest/gtest.h>

#include <string>

#include "barrier/codec.hpp"

using namespace lockstep::agent;

TEST(Barrier, MessagesRoundTripWhateverTheTextHolds) {
  Message m{"EXIT", {{"why", "rank 3 (pid 9) killed = bad; 100% gone\nnext line"}, {"exit", "137"}}};
  auto back = decode(encode(m));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->verb, "EXIT");
  EXPECT_EQ(back->fields, m.fields);
  EXPECT_EQ(encode(m).find('\n'), std::string::npos);
  EXPECT_FALSE(decode("").has_value());
  EXPECT_FALSE(decode("start gen=1").has_value());
  EXPECT_FALSE(decode("START gen").has_value());
  EXPECT_FALSE(decode("START gen=%zz").has_value());
  EXPECT_EQ(decode("START gen=x")->get_int("gen", -5), -5);
  // A failure travels with the failing rank's last lines, bounded, the newest kept.
  Failure f{1, 3, 64, "WorkerFailed", 1700000000123, "rank 3 (pid 9) exited with code 64",
            std::string(3000, 'x') + "\nlockstep-trainer: --steps must be an integer >= 1\n"};
  auto f2 = failure_of(*decode(encode(failure_message("FAILED", 0, f))));
  ASSERT_TRUE(f2.has_value());
  EXPECT_EQ(f2->what, f.what);
  EXPECT_EQ(f2->at_ms, f.at_ms);
  EXPECT_EQ(f2->tail.size(), kFailureTailBytes);
  EXPECT_EQ(f2->tail, f.tail.substr(f.tail.size() - kFailureTailBytes));
}
