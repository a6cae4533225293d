// kube::Client's helpers (kube/client.hpp): a label selector's text in a URL; the fallback of
// Note [Metadata answers] against a scripted server on loopback. Client::list:
// list_stream_test.cpp.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kube/client.hpp"
#include "loopback_client.hpp"
#include "test_util.hpp"

using json = nlohmann::json;
using lockstep::kube::Client;

TEST(UrlEncode, EscapesAllButUnreservedCharacters) {
  using lockstep::kube::url_encode;
  EXPECT_EQ(url_encode("lockstep.dev/job-name=a b,c~_"), "lockstep.dev%2Fjob-name%3Da%20b%2Cc~_");
  EXPECT_EQ(url_encode("x&y?z#%+"), "x%26y%3Fz%23%25%2B");
  EXPECT_EQ(url_encode("\xc3\xa9"), "%C3%A9");  // UTF-8 bytes
  EXPECT_EQ(url_encode(""), "");
}

namespace {

// A server on loopback that answers each request on a connection of its own, 406 to a request
// that asks for the metadata alone (as a server that cannot answer so would) and 201 with a
// created object to any other, and records every request's Accept header.
class RefusesMetadataAnswers {
 public:
  RefusesMetadataAnswers() {
    fd_ = lockstep::test::listen_loopback(port_);
    EXPECT_GE(fd_, 0);
    thread_ = std::thread([this] {
      for (;;) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        serve(c);
        ::close(c);
      }
    });
  }
  ~RefusesMetadataAnswers() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  Client client() const { return lockstep::test::loopback_client(port_); }
  std::vector<std::string> accepts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return accepts_;
  }

 private:
  void serve(int c) {
    std::string request;
    char buf[4096];
    size_t end = std::string::npos;
    while ((end = request.find("\r\n\r\n")) == std::string::npos) {
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      request.append(buf, static_cast<size_t>(n));
    }
    const auto header = [&](const std::string& name) {
      const auto at = request.find("\r\n" + name + ": ");
      if (at == std::string::npos || at > end) return std::string();
      const auto from = at + name.size() + 4;
      return request.substr(from, request.find("\r\n", from) - from);
    };
    const size_t body = header("Content-Length").empty() ? 0 : std::stoul(header("Content-Length"));
    while (request.size() < end + 4 + body) {
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      request.append(buf, static_cast<size_t>(n));
    }
    const std::string accept = header("Accept");
    {
      std::lock_guard<std::mutex> lock(mu_);
      accepts_.push_back(accept);
    }
    const bool refuse = accept.find("as=PartialObjectMetadata") != std::string::npos;
    const std::string text = refuse ? R"({"kind":"Status","status":"Failure","reason":"NotAcceptable","code":406})"
                                    : R"({"kind":"Pod","metadata":{"name":"p","resourceVersion":"7"}})";
    const std::string answer = std::string("HTTP/1.1 ") + (refuse ? "406 Not Acceptable" : "201 Created") +
                               "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                               std::to_string(text.size()) + "\r\n\r\n" + text;
    ::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
  }

  int fd_ = -1, port_ = 0;
  mutable std::mutex mu_;
  std::vector<std::string> accepts_;
  std::thread thread_;
};

}  // namespace

// See Note [Metadata answers]: a write whose answer is read for nothing asks for the metadata alone;
// a server that says 406 to that gets the same request again asking for JSON, which succeeds,
// and from then on every request asks for JSON (one creates, then a batch of two).
TEST(ClientMetadataAnswers, A406IsSentAgainAskingForJsonAndJsonIsAskedForFromThenOn) {
  RefusesMetadataAnswers server;
  Client client = server.client();
  const json pod = {{"metadata", {{"name", "p"}}}};
  auto r = client.create("/api/v1/namespaces/n/pods", pod, &lockstep::kube::kDiscardBody);
  EXPECT_EQ(r.status, 201) << r.message();
  auto batch = client.create_all("/api/v1/namespaces/n/pods", {pod, pod}, &lockstep::kube::kDiscardBody);
  ASSERT_EQ(batch.size(), 2u);
  for (const auto& b : batch) EXPECT_EQ(b.status, 201) << b.message();
  auto read = client.create("/api/v1/namespaces/n/pods", pod);  // no prune: the object is read
  EXPECT_EQ(read.body["metadata"].value("resourceVersion", ""), "7");
  const auto accepts = server.accepts();
  ASSERT_EQ(accepts.size(), 5u);
  EXPECT_EQ(accepts[0], lockstep::kube::kMetadataAnswer);
  for (size_t i = 1; i < accepts.size(); ++i) EXPECT_EQ(accepts[i], "application/json") << i;
}

// Against a server that answers so, the metadata alone is asked for until a 406: a batch's
// writes all ask (the real API server's answers: operator_test's
// WritesWhoseAnswerIsNotReadAskForTheMetadataAlone).
TEST(ClientMetadataAnswers, ABatchWhoseWritesAreAllRefusedIsSentAgainWhole) {
  RefusesMetadataAnswers server;
  Client client = server.client();
  const json pod = {{"metadata", {{"name", "p"}}}};
  auto batch = client.create_all("/api/v1/namespaces/n/pods", {pod, pod, pod}, &lockstep::kube::kDiscardBody);
  ASSERT_EQ(batch.size(), 3u);
  for (const auto& b : batch) EXPECT_EQ(b.status, 201) << b.message();
  const auto accepts = server.accepts();
  ASSERT_EQ(accepts.size(), 6u);
  EXPECT_EQ(std::count(accepts.begin(), accepts.end(), std::string(lockstep::kube::kMetadataAnswer)), 3);
}
