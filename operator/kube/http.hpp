// A small HTTP/1.1 client for the Kubernetes API: keep-alive connections over TLS (OpenSSL)
// or plain TCP, each request written and its answer read on the caller's own thread.
//
// Note [Own HTTP client]
// The operator first spoke to the API server through cpprestsdk. At 10,000 pods half of its
// CPU went to that client's machinery around each request (bench/operator/RESULTS.md): a
// pplx task and continuation per step, hand-offs between the caller and the I/O threads
// (futex waits and context switches were 15% of all samples), asio's reactor, a header map
// per response, and a fresh TLS context per connection. A request here is one write and
// the reads its answer needs, on blocking sockets with the caller's thread doing the work:
//  * one SSL_CTX per Transport (the CA, the client certificate), shared by its connections;
//  * idle connections kept in a pool and reused (keep-alive), newest first;
//  * round_trip_all() writes every request of a batch, each on its own connection, before it
//    reads any answer, so the API server works on them together without a thread each;
//  * a streamed answer (a watch) is handed on chunk by chunk as it arrives, on a connection
//    of its own that an Interrupt ends at once, in its connect and handshake as in its reads;
//  * a connection the server closed while it sat idle is noticed before use (a zero-time
//    poll), and a request that got no byte of answer on a reused connection is sent once more
//    on a new one, as Go's client does for a connection the server closed under it;
//  * timeouts are the sockets' own (SO_RCVTIMEO, SO_SNDTIMEO), and writes never raise SIGPIPE.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::kube::http {

struct TlsConfig {
  std::string ca_pem;        // trust only these CAs; empty: the system's roots
  std::string cert_pem;      // client certificate chain (PEM), optional
  std::string key_pem;       // and its key
  bool insecure_skip_verify = false;
};

struct Request {
  std::string_view method;
  std::string_view target;        // path and query, e.g. /api/v1/pods?limit=500
  std::string_view content_type;  // only with a body
  std::string_view body;
  std::string_view authorization;  // the Authorization header's value; empty: none
  bool discard_ok_body = false;     // a 2xx answer's body is read past, not kept
  size_t max_body = 0;              // a body read whole that is longer fails the request; 0: any length
  std::string_view accept = {};     // the Accept header's value; empty: application/json
};

struct Reply {
  int status = 0;     // HTTP status; 0 when no answer came (error says why)
  std::string body;   // the whole body (a streamed 200's body went to the sink instead)
  std::string error;
};

// Takes a streamed body piece by piece, in order; returns false to stop reading.
using Sink = std::function<bool(std::string_view)>;

// Ends a stream from another thread at once: interrupt() shuts the attached socket down, so
// a read blocked on it returns. Once interrupted it stays so; attach() then refuses.
class Interrupt {
 public:
  void interrupt();
  bool interrupted() const;
  bool attach(int fd);  // false when already interrupted
  void detach();

 private:
  mutable std::mutex mu_;
  bool interrupted_ = false;
  int fd_ = -1;
};

class Connection;

class Transport {
 public:
  // `server`: https://host[:port][/prefix] or http://...; throws std::invalid_argument for a
  // bad URL and std::runtime_error for unusable TLS material (both name what is wrong).
  // `timeout` bounds the connect and each read and write of a request.
  Transport(const std::string& server, const TlsConfig& tls, std::chrono::milliseconds timeout,
            std::string user_agent = "lockstep");
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  Reply round_trip(const Request& request);
  // Every request on its own connection, all written before any answer is read; the replies
  // in order. `before_send(i)` runs just before request i is written (a rate limiter's wait).
  std::vector<Reply> round_trip_all(const std::vector<Request>& requests,
                                    const std::function<void(size_t)>& before_send = nullptr);
  // A request whose answer may last or be large (a watch, a list's page): on a connection of
  // its own with `timeout` for each read. A 200's body goes to `sink` as it arrives (reply.body
  // stays empty) until it ends, the sink says stop, or `interrupt` fires (then reply.status is 0
  // and reply.error says so); any other status's body is read whole into reply.body.
  Reply stream(const Request& request, std::chrono::milliseconds timeout, Interrupt& interrupt, const Sink& sink);

  size_t idle_connections() const;
  size_t connections_opened() const { return opened_; }

 private:
  // A new connection; with `interrupt`, its socket is attached to it from the start (and
  // detached again on failure), so an interrupt ends a connect or handshake too.
  void parse_server(const std::string& server);
  void make_tls_context(const TlsConfig& tls);
  std::unique_ptr<Connection> dial(std::chrono::milliseconds timeout, std::string& error, Interrupt* interrupt = nullptr);
  std::unique_ptr<Connection> acquire(bool& reused, std::string& error);
  void release(std::unique_ptr<Connection> c);
  bool send(Connection& c, const Request& r, std::string& error);
  void encode(const Request& r, std::string& out) const;

  bool tls_ = true;
  std::string host_;         // without brackets: a name or an IP literal
  std::string port_;
  std::string host_header_;  // host[:port] as the URL gave it
  std::string prefix_;       // path prefix of the server URL, without a trailing slash
  bool host_is_ip_ = false;
  bool verify_ = true;
  std::chrono::milliseconds timeout_;
  std::string user_agent_;
  SSL_CTX* ctx_ = nullptr;

  mutable std::mutex pool_mu_;
  std::vector<std::unique_ptr<Connection>> idle_;
  std::atomic<size_t> opened_{0};
};

}  // namespace lockstep::kube::http
