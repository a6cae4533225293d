// ListStream and Client::list (Note [Streamed lists] in operator/kube/list_stream.hpp): a list's
// page read as it arrives, each element of its "items" handed on alone, whole, once it is
// complete, wherever the reads split the text; the page's metadata wherever it stands; at
// most one item kept, and one over the cap refused before it ends.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kube/client.hpp"
#include "loopback_client.hpp"
#include "test_util.hpp"

using json = nlohmann::json;
using lockstep::kube::Cancellation;
using lockstep::kube::Client;
using lockstep::kube::ListStream;
using lockstep::kube::Response;
using namespace std::chrono_literals;

namespace {

// What a ListStream handed on, and what it said of the page.
struct Read {
  bool fed = true;      // every feed() was accepted
  bool finished = false;
  std::vector<std::string> items;
  std::string cont, version, error;
  size_t largest = 0;
};

// `text` fed in the pieces that `cuts` (ascending offsets) make, then finish().
Read read_in_pieces(std::string_view text, const std::vector<size_t>& cuts, size_t max_item = ListStream::kMaxItem) {
  Read out;
  ListStream page([&](std::string_view item) {
    out.items.emplace_back(item);
    return true;
  }, max_item);
  size_t from = 0;
  for (size_t cut : cuts) {
    out.fed = out.fed && page.feed(text.substr(from, cut - from));
    from = cut;
  }
  out.fed = out.fed && page.feed(text.substr(from));
  out.finished = out.fed && page.finish();
  out.cont = page.continue_token();
  out.version = page.resource_version();
  out.error = page.error();
  out.largest = page.largest_item();
  return out;
}

Read read_whole(std::string_view text, size_t max_item = ListStream::kMaxItem) {
  return read_in_pieces(text, {}, max_item);
}

// Items with every kind of text the splitter has to follow: brackets and braces inside strings,
// escaped quotes and backslashes (one ending a string), \u escapes, nesting, numbers, literals
// and whitespace between every token. Each is exactly the text that is to come out.
const std::vector<std::string> kItems = {
    R"({"metadata":{"name":"a","labels":{"x":"]}{["}},"spec":{"args":["\"","\\","\\\"","a\\"],"n":[1,-2.5e3,true,false,null]}})",
    "{ \"metadata\" :\n\t{ \"name\" : \"b\" } ,\r\n \"data\" : { \"k\" : \"\\u007d\\u005d\\\\\" , \"deep\" : [[[{}],[]],{\"x\":[{\"y\":{}}]}] } }",
    R"({})",
    R"({"metadata":{"name":"c","annotations":{"note":"ends in a backslash \\"}},"items":[{"not":"an item of the list"}]})",
};

std::string list_text(bool metadata_first, const std::string& items_member) {
  const std::string md = R"("metadata": {"resourceVersion": "12345", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzNDV9\"\\", "remainingItemCount": 7})";
  std::string text = "{\"kind\": \"PodList\",\n \"apiVersion\": \"v1\",\n ";
  if (metadata_first) text += md + ",\n " + items_member;
  else text += items_member + ",\n " + md;
  return text + "\n}\n";
}

std::string items_member(const std::vector<std::string>& items) {
  std::string text = "\"items\": [\n  ";
  for (size_t i = 0; i < items.size(); ++i) text += (i ? " ,\n  " : "") + items[i];
  return text + "\n ]";
}

}  // namespace

TEST(ListStream, HandsOnEveryItemWholeWhereverTheReadsSplitTheText) {
  for (bool metadata_first : {true, false}) {
    const std::string text = list_text(metadata_first, items_member(kItems));
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      Read r = read_in_pieces(text, {cut});
      ASSERT_TRUE(r.finished) << "split at " << cut << ": " << r.error;
      ASSERT_EQ(r.items, kItems) << "split at " << cut;
      ASSERT_EQ(r.version, "12345") << "split at " << cut;
      ASSERT_EQ(r.cont, "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzNDV9\"\\") << "split at " << cut;
    }
    // And a byte at a time: every byte a split point at once.
    std::vector<size_t> every;
    for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
    Read r = read_in_pieces(text, every);
    ASSERT_TRUE(r.finished) << r.error;
    EXPECT_EQ(r.items, kItems);
    EXPECT_EQ(r.version, "12345");
    size_t largest = 0;
    for (const auto& item : kItems) {
      largest = std::max(largest, item.size());
      EXPECT_TRUE(json::accept(item)) << item;  // each is JSON as it stands, alone
    }
    EXPECT_EQ(r.largest, largest);
  }
}

TEST(ListStream, AListWithoutItemsHasNone) {
  for (const std::string items : {"\"items\": null", "\"items\": []", "\"items\" : [ \n ]", "\"other\": [{\"a\": 1}]"}) {
    Read r = read_whole(list_text(true, items));
    EXPECT_TRUE(r.finished) << items << ": " << r.error;
    EXPECT_TRUE(r.items.empty()) << items;
    EXPECT_EQ(r.version, "12345") << items;
  }
  Read bare = read_whole("{}");
  EXPECT_TRUE(bare.finished) << bare.error;
  EXPECT_TRUE(bare.items.empty());
  EXPECT_EQ(bare.cont, "");
}

TEST(ListStream, ReadsKeysAsTheNamesTheirEscapesSpell) {
  Read r = read_whole(R"({"\u0069tems": [{"a": 1}], "meta\u0064ata": {"resourceVersion": "9"}, "\"items\"": [{"b": 2}]})");
  ASSERT_TRUE(r.finished) << r.error;
  EXPECT_EQ(r.items, std::vector<std::string>{R"({"a": 1})"});
  EXPECT_EQ(r.version, "9");
}

TEST(ListStream, RefusesAnItemOverTheCapBeforeItEnds) {
  constexpr size_t kCap = 1000;
  const std::string small = R"({"metadata":{"name":"small"}})";
  const std::string big = "{\"note\": \"" + std::string(kCap, 'x') + "\"}";
  const std::string text = "{\"items\": [" + small + ", " + big + ", " + small + "], \"metadata\": {}}";
  const size_t big_ends = text.find(big) + big.size();
  for (size_t cut = 0; cut <= text.size(); cut += 7) {
    Read r = read_in_pieces(text, {cut}, kCap);
    EXPECT_FALSE(r.finished) << "split at " << cut;
    EXPECT_EQ(r.items, std::vector<std::string>{small}) << "split at " << cut << ": the big one, or what follows it";
    EXPECT_NE(r.error.find("item 2 of the list is larger than"), std::string::npos) << r.error;
  }
  // Fed in 64-byte reads, as a socket brings it: refused once more than the cap is kept, long
  // before the item (and the page) ends, and nothing is read after that.
  ListStream page([](std::string_view) { return true; }, kCap);
  size_t fed = 0;
  while (fed < text.size() && page.feed(std::string_view(text).substr(fed, 64))) fed += 64;
  EXPECT_LT(fed, big_ends);
  EXPECT_GE(fed + 64, text.find(big) + kCap);
  EXPECT_FALSE(page.feed("]}"));
  EXPECT_FALSE(page.finish());
  // At the cap itself, the same item is read.
  Read at_cap = read_in_pieces(text, {100}, big.size());
  EXPECT_TRUE(at_cap.finished) << at_cap.error;
  EXPECT_EQ(at_cap.items, (std::vector<std::string>{small, big, small}));
}

TEST(ListStream, SaysWhatIsWrongWithAnAnswerThatIsNoList) {
  struct Case {
    std::string text, error;
  };
  const std::vector<Case> cases = {
      {"", "the answer ended before its list did (at byte 0"},
      {"[{\"a\": 1}]", "expected a JSON object, the list, not '['"},
      {"<html>", "expected a JSON object, the list, not '<'"},
      {"{\"items\": {\"a\": 1}}", "expected \"items\" to be an array or null, not '{'"},
      {"{\"items\": [{\"a\": 1},]}", "expected a value, not ']'"},
      {"{\"items\": [{\"a\": [1}]}", "expected ']', not '}'"},
      {"{\"items\": [{\"a\": 1}] \"kind\": \"List\"}", "expected ',' or '}' after a member of the list"},
      {"{\"items\": [{\"a\": 1} {\"b\": 2}]}", "expected ',' or ']' after an item, not '{'"},
      {"{\"items\": [{\"a\": \"}]}", "the answer ended before its list did"},
      {"{\"items\": []} {}", "expected nothing after the list, not '{'"},
      {"{\"metadata\": {\"continue\": }, \"items\": []}", "the list's metadata is not JSON"},
      {"{\"items\" [] }", "expected ':', not '['"},
      {"{items: []}", "expected a member's key, not 'i'"},
  };
  for (const auto& c : cases) {
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      Read r = read_in_pieces(c.text, {cut});
      EXPECT_FALSE(r.finished) << c.text;
      EXPECT_NE(r.error.find(c.error), std::string::npos) << c.text << " split at " << cut << ": " << r.error;
    }
  }
}

TEST(ListStream, StopsWhenItsReaderSaysSo) {
  const std::string text = list_text(false, items_member(kItems));
  int seen = 0;
  ListStream page([&](std::string_view) { return ++seen < 2; });
  EXPECT_FALSE(page.feed(text));
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(page.items(), 2u);
  EXPECT_NE(page.error().find("item 2 of the list could not be read"), std::string::npos) << page.error();
  EXPECT_FALSE(page.finish());
}

TEST(ListStream, ReadsAnItemOfTheApiServersLargestSizeInSocketSizedReads) {
  // 1.5 MiB of escapes and letters, read 16 KiB at a time (a TLS record each).
  std::string value;
  for (size_t i = 0; value.size() < (3u << 19); ++i) value += i % 64 == 0 ? '"' : i % 64 == 32 ? '\\' : 'a';
  const std::string big = json{{"metadata", {{"name", "big"}}}, {"env", {{{"value", value}}}}}.dump();
  const std::string text = list_text(true, items_member({big, "{}"}));
  std::vector<size_t> cuts;
  for (size_t at = 16384; at < text.size(); at += 16384) cuts.push_back(at);
  Read r = read_in_pieces(text, cuts);
  ASSERT_TRUE(r.finished) << r.error;
  ASSERT_EQ(r.items.size(), 2u);
  EXPECT_EQ(r.items[0], big);
  EXPECT_EQ(r.largest, big.size());
}

// Client::list over a socket: a server on loopback that answers one request with `answer`,
// sent in `pieces` writes, then (with `hold`) keeps the connection open without a word more.
namespace {

class OneAnswer {
 public:
  OneAnswer(std::string answer, size_t pieces = 1, bool hold = false) {
    fd_ = lockstep::test::listen_loopback(port_, 4);
    EXPECT_GE(fd_, 0);
    thread_ = std::thread([this, answer = std::move(answer), pieces, hold] {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string request;
      char buf[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        request.append(buf, static_cast<size_t>(n));
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        target_ = request.substr(0, request.find("\r\n"));
      }
      const size_t step = answer.size() / pieces + 1;
      for (size_t at = 0; at < answer.size(); at += step) {
        if (::send(c, answer.data() + at, std::min(step, answer.size() - at), MSG_NOSIGNAL) < 0) break;
        std::this_thread::sleep_for(2ms);
      }
      while (hold && !done_) std::this_thread::sleep_for(10ms);
      ::close(c);
    });
  }
  ~OneAnswer() {
    done_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  Client client() const { return lockstep::test::loopback_client(port_); }
  std::string request_line() const {
    std::lock_guard<std::mutex> lock(mu_);
    return target_;
  }

 private:
  int fd_ = -1, port_ = 0;
  std::atomic<bool> done_{false};
  mutable std::mutex mu_;
  std::string target_;  // the request's first line
  std::thread thread_;
};

std::string http_answer(int status, const std::string& body, bool chunked = false) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\n";
  if (!chunked) return head + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  std::string out = head + "Transfer-Encoding: chunked\r\n\r\n";
  for (size_t at = 0; at < body.size(); at += 100) {
    const std::string part = body.substr(at, 100);
    char size[16];
    std::snprintf(size, sizeof size, "%zx", part.size());
    out += std::string(size) + "\r\n" + part + "\r\n";
  }
  return out + "0\r\n\r\n";
}

}  // namespace

TEST(ClientList, HandsOnTheItemsOfAChunkedPageAndItsContinueToken) {
  const std::string body = list_text(false, items_member(kItems));
  OneAnswer server(http_answer(200, body, true), 9);
  Client client = server.client();
  std::vector<std::string> items;
  ListStream page([&](std::string_view item) {
    items.emplace_back(item);
    return true;
  });
  Response r = client.list("/api/v1/pods?limit=4", page, Cancellation());
  EXPECT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(items, kItems);
  EXPECT_EQ(page.continue_token(), "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzNDV9\"\\");
  EXPECT_EQ(page.bytes(), body.size());
  EXPECT_EQ(server.request_line(), "GET /api/v1/pods?limit=4 HTTP/1.1");
}

TEST(ClientList, ReadsAnErrorsStatusWholeAndNoLongerThanItsCap) {
  const std::string status =
      R"({"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods is forbidden: no list","reason":"Forbidden","code":403})";
  {
    OneAnswer server(http_answer(403, status), 3);
    Client client = server.client();
    ListStream page([](std::string_view) { return true; });
    Response r = client.list("/api/v1/pods", page, Cancellation());
    EXPECT_EQ(r.status, 403);
    EXPECT_EQ(r.reason(), "Forbidden");
    EXPECT_EQ(r.message(), "pods is forbidden: no list");
    EXPECT_EQ(page.items(), 0u);
  }
  {
    const std::string huge(Client::kMaxStatus + 1, ' ');
    OneAnswer server(http_answer(500, status + huge));
    Client client = server.client();
    ListStream page([](std::string_view) { return true; });
    Response r = client.list("/api/v1/pods", page, Cancellation());
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.error.find("body is longer than 1048576 bytes"), std::string::npos) << r.error;
  }
}

TEST(ClientList, FailsAPageWithAnItemOverTheCapAsATransportError) {
  const std::string big = "{\"note\": \"" + std::string(5000, 'x') + "\"}";
  const std::string body = "{\"items\": [{}, " + big + "], \"metadata\": {}}";
  OneAnswer server(http_answer(200, body, true), 50);
  Client client = server.client();
  ListStream page([](std::string_view) { return true; }, 4096);
  Response r = client.list("/api/v1/pods", page, Cancellation());
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.message().find("item 2 of the list is larger than"), std::string::npos) << r.message();
  EXPECT_EQ(page.items(), 1u);
}

TEST(ClientList, ACancellationEndsAListThatStalledMidItemAtOnce) {
  // Half an item, then nothing: without the cancellation the read would wait for its timeout.
  const std::string answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
                             "{\"items\": [{\"metadata\": {\"name\": \"stalled";
  OneAnswer server(answer, 1, true);
  Client client = server.client();
  Cancellation cancel;
  std::thread stopper([&] {
    std::this_thread::sleep_for(300ms);
    cancel.cancel();
  });
  ListStream page([](std::string_view) { return true; });
  auto t0 = std::chrono::steady_clock::now();
  Response r = client.list("/api/v1/pods", page, cancel);
  auto took = std::chrono::steady_clock::now() - t0;
  stopper.join();
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.error, "list cancelled");
  EXPECT_LT(took, 3s) << "not the 30 s read timeout";
  EXPECT_EQ(page.items(), 0u);
}
