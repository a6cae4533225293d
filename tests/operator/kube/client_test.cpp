// kube::Client's helpers (kube/client.hpp): a label selector's text in a URL. Client::list:
// list_stream_test.cpp.
#include <gtest/gtest.h>

#include "kube/client.hpp"

TEST(UrlEncode, EscapesAllButUnreservedCharacters) {
  using lockstep::kube::url_encode;
  EXPECT_EQ(url_encode("lockstep.dev/job-name=a b,c~_"), "lockstep.dev%2Fjob-name%3Da%20b%2Cc~_");
  EXPECT_EQ(url_encode("x&y?z#%+"), "x%26y%3Fz%23%25%2B");
  EXPECT_EQ(url_encode("\xc3\xa9"), "%C3%A9");  // UTF-8 bytes
  EXPECT_EQ(url_encode(""), "");
}
