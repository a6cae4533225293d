// The HTTP/1.1 transport (operator/kube/http.hpp) against a scripted server on loopback: the
// framing a real API server uses (Content-Length, chunks split anywhere, a body to the end),
// keep-alive reuse, a connection the server closed under the pool, batches in flight
// together, interrupting a stream, and TLS verification. The real API server is
// operator_test's; this checks what it will not do on demand.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kube/http.hpp"
#include "test_util.hpp"

using namespace lockstep::kube::http;
using namespace std::chrono_literals;

namespace {

// A key and a certificate for `ip`, signed by `issuer` (self-signed when null), as PEM.
struct Pki {
  std::string cert_pem, key_pem;
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  ~Pki() {
    EVP_PKEY_free(key);
    X509_free(cert);
  }
};

std::string pem_of(X509* cert) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, cert);
  char* data;
  long n = BIO_get_mem_data(b, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(b);
  return out;
}

void make_pki(Pki& p, const std::string& cn, const std::string& san, const Pki* issuer, bool ca) {
  p.key = EVP_EC_gen("P-256");
  ASSERT_NE(p.key, nullptr);
  p.cert = X509_new();
  X509_set_version(p.cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(p.cert), ca ? 1 : 2);
  X509_gmtime_adj(X509_getm_notBefore(p.cert), -60);
  X509_gmtime_adj(X509_getm_notAfter(p.cert), 3600);
  X509_set_pubkey(p.cert, p.key);
  X509_NAME* name = X509_get_subject_name(p.cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(p.cert, issuer ? X509_get_subject_name(issuer->cert) : name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer ? issuer->cert : p.cert, p.cert, nullptr, nullptr, 0);
  auto add = [&](int nid, const char* value) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    ASSERT_NE(ext, nullptr);
    X509_add_ext(p.cert, ext, -1);
    X509_EXTENSION_free(ext);
  };
  add(NID_basic_constraints, ca ? "critical,CA:TRUE" : "CA:FALSE");
  if (!san.empty()) add(NID_subject_alt_name, san.c_str());
  ASSERT_GT(X509_sign(p.cert, issuer ? issuer->key : p.key, EVP_sha256()), 0);
  p.cert_pem = pem_of(p.cert);
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(b, p.key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data;
  long n = BIO_get_mem_data(b, &data);
  p.key_pem.assign(data, static_cast<size_t>(n));
  BIO_free(b);
}

// One accepted connection, plain or TLS, for a handler to read requests from and write to.
class Peer {
 public:
  Peer(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}
  ~Peer() {
    if (ssl_) SSL_free(ssl_);
    ::close(fd_);
  }
  // The next request, head and body; empty when the client closed the connection.
  std::string read_request() {
    for (;;) {
      size_t end = buf_.find("\r\n\r\n");
      if (end != std::string::npos) {
        size_t length = 0;
        auto at = buf_.find("Content-Length: ");
        if (at != std::string::npos && at < end) length = std::stoul(buf_.substr(at + 16));
        if (buf_.size() >= end + 4 + length) {
          std::string req = buf_.substr(0, end + 4 + length);
          buf_.erase(0, end + 4 + length);
          return req;
        }
      }
      char tmp[4096];
      int n = ssl_ ? SSL_read(ssl_, tmp, sizeof tmp) : static_cast<int>(::recv(fd_, tmp, sizeof tmp, 0));
      if (n <= 0) return "";
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }
  void write(const std::string& s) {
    if (ssl_) SSL_write(ssl_, s.data(), static_cast<int>(s.size()));
    else ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
  }
  // Each piece written on its own, a pause between, so the client reads them apart.
  void write_pieces(const std::vector<std::string>& pieces) {
    for (const auto& p : pieces) {
      write(p);
      std::this_thread::sleep_for(15ms);
    }
  }

 private:
  int fd_;
  SSL* ssl_;
  std::string buf_;
};

// A loopback server that runs `handler` on a thread per accepted connection.
class Server {
 public:
  using Handler = std::function<void(Peer&, int connection)>;
  Server(Handler handler, const Pki* tls = nullptr, const std::string& bind_ip = "127.0.0.1") : handler_(std::move(handler)) {
    if (tls) {
      ctx_ = SSL_CTX_new(TLS_server_method());
      SSL_CTX_use_certificate(ctx_, tls->cert);
      SSL_CTX_use_PrivateKey(ctx_, tls->key);
    }
    fd_ = lockstep::test::listen_loopback(port_, 64, bind_ip.c_str());
    EXPECT_GE(fd_, 0);
    acceptor_ = std::thread([this] {
      for (int n = 0;; ++n) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        accepted_++;
        std::lock_guard<std::mutex> lock(mu_);
        threads_.emplace_back([this, c, n] {
          SSL* ssl = nullptr;
          if (ctx_) {
            ssl = SSL_new(ctx_);
            SSL_set_fd(ssl, c);
            if (SSL_accept(ssl) != 1) {
              SSL_free(ssl);
              ::close(c);
              return;
            }
          }
          Peer peer(c, ssl);
          handler_(peer, n);
        });
      }
    });
  }
  ~Server() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    acceptor_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : threads_) t.join();
    if (ctx_) SSL_CTX_free(ctx_);
  }
  std::string url(const std::string& scheme = "http", const std::string& host = "127.0.0.1") const {
    return scheme + "://" + host + ":" + std::to_string(port_);
  }
  int accepted() const { return accepted_; }

 private:
  Handler handler_;
  SSL_CTX* ctx_ = nullptr;
  int fd_ = -1, port_ = 0;
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

std::string ok(const std::string& body) {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

const bool kIgnoreSigpipe = [] {
  std::signal(SIGPIPE, SIG_IGN);  // the scripted server's writes to a closed client
  return true;
}();

}  // namespace

TEST(HttpTransport, SendsWellFormedRequestsAndReusesOneKeptAliveConnection) {
  std::mutex mu;
  std::vector<std::string> seen;
  Server server([&](Peer& p, int) {
    for (std::string req; !(req = p.read_request()).empty();) {
      {
        std::lock_guard<std::mutex> lock(mu);
        seen.push_back(req);
      }
      p.write(ok("{\"n\":" + std::to_string(seen.size()) + "}"));
    }
  });
  Transport t(server.url() + "/prefix/", {}, 5s, "lockstep-test/1");
  Reply a = t.round_trip({"POST", "/api/v1/pods?x=1", "application/json", "{\"a\":1}", "Bearer T"});
  Reply b = t.round_trip({"GET", "/api/v1/pods", "", "", ""});
  EXPECT_EQ(a.status, 200) << a.error;
  EXPECT_EQ(a.body, "{\"n\":1}");
  EXPECT_EQ(b.body, "{\"n\":2}");
  EXPECT_EQ(t.connections_opened(), 1u);
  EXPECT_EQ(server.accepted(), 1);
  ASSERT_EQ(seen.size(), 2u);
  std::string host = "Host: 127.0.0.1:" + server.url().substr(server.url().rfind(':') + 1) + "\r\n";
  EXPECT_EQ(seen[0].rfind("POST /prefix/api/v1/pods?x=1 HTTP/1.1\r\n", 0), 0u) << seen[0];
  EXPECT_NE(seen[0].find(host), std::string::npos) << seen[0];
  EXPECT_NE(seen[0].find("Authorization: Bearer T\r\n"), std::string::npos);
  EXPECT_NE(seen[0].find("Content-Type: application/json\r\nContent-Length: 7\r\n"), std::string::npos);
  EXPECT_NE(seen[0].find("User-Agent: lockstep-test/1\r\n"), std::string::npos);
  EXPECT_EQ(seen[0].substr(seen[0].size() - 7), "{\"a\":1}");
  EXPECT_EQ(seen[1].rfind("GET /prefix/api/v1/pods HTTP/1.1\r\n", 0), 0u);
  EXPECT_EQ(seen[1].find("Authorization"), std::string::npos);
  EXPECT_EQ(seen[1].find("Content-Length"), std::string::npos);
}

TEST(HttpTransport, ReassemblesChunksSplitAnywhereAndSkipsInterimAnswers) {
  Server server([](Peer& p, int) {
    for (std::string req; !(req = p.read_request()).empty();) {
      p.write_pieces({"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nTransfer-Encoding: chu",
                      "nked\r\n\r\n5\r\nhel", "lo\r\n1", "A;ext=1\r\n", std::string(26, 'x'),
                      "\r\n0\r\nTrailer: t\r\n", "\r\n"});
    }
  });
  Transport t(server.url(), {}, 5s);
  for (int i = 0; i < 2; ++i) {  // and the connection is left at the start of the next answer
    Reply r = t.round_trip({"POST", "/x", "application/json", "{}", ""});
    EXPECT_EQ(r.status, 201) << r.error;
    EXPECT_EQ(r.body, "hello" + std::string(26, 'x'));
  }
  EXPECT_EQ(t.connections_opened(), 1u);
}

TEST(HttpTransport, ReadsABodyThatRunsToTheEndAndDoesNotReuseThatConnection) {
  Server server([](Peer& p, int) {
    if (p.read_request().empty()) return;
    p.write_pieces({"HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n{\"kind\":", "\"Status\"}"});
  });
  Transport t(server.url(), {}, 5s);
  for (int i = 0; i < 2; ++i) {
    Reply r = t.round_trip({"GET", "/y", "", "", ""});
    EXPECT_EQ(r.status, 404) << r.error;
    EXPECT_EQ(r.body, "{\"kind\":\"Status\"}");
  }
  EXPECT_EQ(t.connections_opened(), 2u);
  EXPECT_EQ(t.idle_connections(), 0u);
}

TEST(HttpTransport, AConnectionClosedWhileIdleIsNotUsedAndAnUnansweredRequestIsSentAgain) {
  std::atomic<int> requests{0};
  Server server([&](Peer& p, int connection) {
    if (connection == 0) {  // answers once, then closes while the client holds it idle
      if (p.read_request().empty()) return;
      requests++;
      p.write(ok("{}"));
      return;
    }
    if (connection == 1) {  // answers once; then reads the next request and closes unanswered
      if (p.read_request().empty()) return;
      requests++;
      p.write(ok("{\"second\":1}"));
      if (p.read_request().empty()) return;
      requests++;
      return;
    }
    for (std::string req; !(req = p.read_request()).empty();) {
      requests++;
      p.write(ok("{\"fresh\":1}"));
    }
  });
  Transport t(server.url(), {}, 5s);
  EXPECT_EQ(t.round_trip({"GET", "/a", "", "", ""}).status, 200);
  std::this_thread::sleep_for(100ms);  // the server has closed connection 0 by now
  Reply second = t.round_trip({"GET", "/b", "", "", ""});
  EXPECT_EQ(second.body, "{\"second\":1}") << second.error;
  EXPECT_EQ(t.connections_opened(), 2u);  // the closed one was not used again
  Reply third = t.round_trip({"POST", "/c", "application/json", "{}", ""});
  EXPECT_EQ(third.status, 200) << third.error;
  EXPECT_EQ(third.body, "{\"fresh\":1}");
  EXPECT_EQ(requests, 4);  // /c reached connection 1 (unanswered), then connection 2
  EXPECT_EQ(t.connections_opened(), 3u);
}

TEST(HttpTransport, ABatchIsInFlightTogetherOnAConnectionEach) {
  constexpr int kBatch = 6;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  Server server([&](Peer& p, int) {
    for (std::string req; !(req = p.read_request()).empty();) {
      std::unique_lock<std::mutex> lock(mu);
      ++arrived;
      cv.notify_all();
      // No answer until every request of the batch is here: a client that waited for each
      // answer before sending the next would never get one.
      bool all = cv.wait_for(lock, 5s, [&] { return arrived >= kBatch; });
      lock.unlock();
      std::string path = req.substr(4, req.find(' ', 4) - 4);
      p.write(all ? ok("\"" + path + "\"") : "HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 0\r\n\r\n");
    }
  });
  Transport t(server.url(), {}, 10s);
  std::vector<std::string> paths;
  std::vector<Request> reqs;
  for (int i = 0; i < kBatch; ++i) paths.push_back("/p" + std::to_string(i));
  for (auto& p : paths) reqs.push_back({"GET", p, "", "", ""});
  std::vector<size_t> order;
  auto replies = t.round_trip_all(reqs, [&](size_t i) { order.push_back(i); });
  ASSERT_EQ(replies.size(), static_cast<size_t>(kBatch));
  for (int i = 0; i < kBatch; ++i) {
    EXPECT_EQ(replies[i].status, 200) << replies[i].error;
    EXPECT_EQ(replies[i].body, "\"/p" + std::to_string(i) + "\"");  // in request order
    EXPECT_EQ(order[i], static_cast<size_t>(i));
  }
  EXPECT_EQ(t.idle_connections(), static_cast<size_t>(kBatch));  // all kept for the next batch
}

TEST(HttpTransport, AStreamHandsOnChunksAsTheyComeAndAnInterruptEndsABlockedRead) {
  std::atomic<bool> release{false};
  Server server([&](Peer& p, int) {
    if (p.read_request().empty()) return;
    p.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    p.write_pieces({"6\r\nevent1\r\n", "6\r\nevent2\r\n"});
    while (!release) std::this_thread::sleep_for(10ms);  // then silence, as a quiet watch
  });
  Transport t(server.url(), {}, 5s);
  Interrupt interrupt;
  std::vector<std::string> pieces;
  std::mutex mu;
  std::condition_variable cv;
  std::thread stopper([&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, 5s, [&] { return pieces.size() >= 2; });
    lock.unlock();
    std::this_thread::sleep_for(50ms);
    interrupt.interrupt();
  });
  auto start = std::chrono::steady_clock::now();
  Reply r = t.stream({"GET", "/watch", "", "", ""}, 60s, interrupt, [&](std::string_view s) {
    std::lock_guard<std::mutex> lock(mu);
    pieces.emplace_back(s);
    cv.notify_all();
    return true;
  });
  auto took = std::chrono::steady_clock::now() - start;
  stopper.join();
  release = true;
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.error, "interrupted");
  EXPECT_EQ(pieces, (std::vector<std::string>{"event1", "event2"}));
  EXPECT_LT(took, 3s);  // not the 60 s read timeout
  // Once interrupted it stays so: the next stream does not start.
  Reply again = t.stream({"GET", "/watch", "", "", ""}, 60s, interrupt, [](std::string_view) { return true; });
  EXPECT_EQ(again.error, "interrupted");
}

TEST(HttpTransport, AnInterruptEndsAStreamStillInItsTlsHandshake) {
  std::atomic<bool> release{false};
  Server silent([&](Peer&, int) {  // accepts, then never answers the ClientHello
    while (!release) std::this_thread::sleep_for(10ms);
  });
  Transport t(silent.url("https"), {}, 30s);
  Interrupt interrupt;
  std::thread stopper([&] {
    std::this_thread::sleep_for(300ms);
    interrupt.interrupt();
  });
  auto start = std::chrono::steady_clock::now();
  Reply r = t.stream({"GET", "/watch", "", "", ""}, 60s, interrupt, [](std::string_view) { return true; });
  auto took = std::chrono::steady_clock::now() - start;
  stopper.join();
  release = true;
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.error, "interrupted");
  EXPECT_LT(took, 3s);  // not the 30 s handshake timeout
}

TEST(HttpTransport, ASilentServerTimesOutAndAMalformedAnswerIsNamed) {
  Server server([](Peer& p, int connection) {
    if (p.read_request().empty()) return;
    if (connection == 0) {
      std::this_thread::sleep_for(2500ms);  // answers nothing within the client's 1 s
      return;
    }
    p.write("SSH-2.0-OpenSSH\r\n\r\n");
  });
  Transport t(server.url(), {}, 1s);
  Reply slow = t.round_trip({"GET", "/slow", "", "", ""});
  EXPECT_EQ(slow.status, 0);
  EXPECT_NE(slow.error.find("timed out"), std::string::npos) << slow.error;
  Reply odd = t.round_trip({"GET", "/odd", "", "", ""});
  EXPECT_EQ(odd.status, 0);
  EXPECT_NE(odd.error.find("not an HTTP/1.x response: 'SSH-2.0-OpenSSH'"), std::string::npos) << odd.error;
}

TEST(HttpTransport, BadServerUrlsAreRefusedWithTheReason) {
  auto why = [](const std::string& url) {
    try {
      Transport t(url, {}, 1s);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(why("127.0.0.1:6443").find("no scheme"), std::string::npos);
  EXPECT_NE(why("ftp://h").find("scheme 'ftp' is neither https nor http"), std::string::npos);
  EXPECT_NE(why("https://h:99999").find("port '99999' is not 1 to 65535"), std::string::npos);
  EXPECT_NE(why("https://[::1").find("unclosed '['"), std::string::npos);
  EXPECT_NE(why("https://u:p@h").find("user information"), std::string::npos);
  EXPECT_EQ(why("https://[::1]:6443/"), "accepted");
  Reply r = Transport("http://127.0.0.1:1", {}, 1s).round_trip({"GET", "/", "", "", ""});
  EXPECT_NE(r.error.find("cannot connect to 127.0.0.1:1: Connection refused"), std::string::npos) << r.error;
}

TEST(HttpTransport, TlsTrustsOnlyTheGivenCaAndChecksTheAddress) {
  Pki ca, leaf, other_ca;
  ASSERT_NO_FATAL_FAILURE(make_pki(ca, "test-ca", "", nullptr, true));
  ASSERT_NO_FATAL_FAILURE(make_pki(leaf, "apiserver", "IP:127.0.0.1", &ca, false));
  ASSERT_NO_FATAL_FAILURE(make_pki(other_ca, "other-ca", "", nullptr, true));
  Server server(
      [](Peer& p, int) {
        for (std::string req; !(req = p.read_request()).empty();) p.write(ok("{\"tls\":true}"));
      },
      &leaf);
  TlsConfig good;
  good.ca_pem = ca.cert_pem;
  Transport t(server.url("https"), good, 5s);
  Reply r = t.round_trip({"GET", "/", "", "", ""});
  EXPECT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.body, "{\"tls\":true}");
  EXPECT_EQ(t.round_trip({"GET", "/", "", "", ""}).status, 200);
  EXPECT_EQ(t.connections_opened(), 1u);

  TlsConfig wrong;
  wrong.ca_pem = other_ca.cert_pem;
  Reply untrusted = Transport(server.url("https"), wrong, 5s).round_trip({"GET", "/", "", "", ""});
  EXPECT_EQ(untrusted.status, 0);
  EXPECT_NE(untrusted.error.find("TLS handshake with 127.0.0.1:"), std::string::npos) << untrusted.error;
  EXPECT_NE(untrusted.error.find("unable to get local issuer certificate"), std::string::npos) << untrusted.error;

  // The certificate is for 127.0.0.1; dialled as 127.0.0.2 (the same listener on all of
  // 127/8 would be needed, so a second server there), it must be refused.
  Server elsewhere(
      [](Peer& p, int) {
        for (std::string req; !(req = p.read_request()).empty();) p.write(ok("{}"));
      },
      &leaf, "127.0.0.2");
  Reply mismatch = Transport(elsewhere.url("https", "127.0.0.2"), good, 5s).round_trip({"GET", "/", "", "", ""});
  EXPECT_EQ(mismatch.status, 0);
  EXPECT_NE(mismatch.error.find("IP address mismatch"), std::string::npos) << mismatch.error;

  TlsConfig insecure;
  insecure.insecure_skip_verify = true;
  EXPECT_EQ(Transport(elsewhere.url("https", "127.0.0.2"), insecure, 5s).round_trip({"GET", "/", "", "", ""}).status, 200);

  TlsConfig empty_ca;
  empty_ca.ca_pem = "not a certificate";
  try {
    Transport bad(server.url("https"), empty_ca, 5s);
    ADD_FAILURE() << "a CA without a certificate was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("certificate-authority holds no PEM certificate"), std::string::npos);
  }
  TlsConfig mismatched_key = good;
  mismatched_key.cert_pem = leaf.cert_pem;
  mismatched_key.key_pem = other_ca.key_pem;
  try {
    Transport bad(server.url("https"), mismatched_key, 5s);
    ADD_FAILURE() << "a client key that does not match its certificate was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("client-key does not match client-certificate"), std::string::npos) << e.what();
  }
}
