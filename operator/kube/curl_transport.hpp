// The Kubernetes API client's transport on libcurl's multi interface, with HTTP/2 multiplexing:
// every request and watch of a client on one connection, as client-go does. The operator's
// `--kube-http curl` chooses it instead of our own HTTP/1.1 client (kube/http.hpp); it brings
// what ours lacks (proxy settings from the environment, compressed answers), and
// bench/operator/RESULTS.md measures the two against each other (Note [Kubernetes HTTP client]).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kube/http.hpp"

namespace lockstep::kube::http {

// Note [Kubernetes HTTP client]
// One thread drives a curl multi handle: callers hand it their requests and wait for their
// answers; it adds them to the multi, runs the transfers and wakes each caller as its transfer
// ends. Over TLS the transfers are HTTP/2 streams of one connection (CURLPIPE_MULTIPLEX, with
// PIPEWAIT so a request waits for that connection rather than opening another); over plain
// HTTP they are HTTP/1.1 on pooled connections. A watch's body is handed to its sink on that
// thread as it arrives; an Interrupt is looked at every 50 ms and ends the watch's stream alone.
// The same interface as Transport: Client uses one or the other.
class CurlTransport {
 public:
  // As Transport's: throws std::invalid_argument for a bad URL, std::runtime_error when curl
  // cannot be set up.
  CurlTransport(const std::string& server, const TlsConfig& tls, std::chrono::milliseconds timeout,
                std::string user_agent = "lockstep");
  ~CurlTransport();
  CurlTransport(const CurlTransport&) = delete;
  CurlTransport& operator=(const CurlTransport&) = delete;

  Reply round_trip(const Request& request);
  std::vector<Reply> round_trip_all(const std::vector<Request>& requests,
                                    const std::function<void(size_t)>& before_send = nullptr);
  Reply stream(const Request& request, std::chrono::seconds timeout, Interrupt& interrupt, const Sink& sink);
  size_t connections_opened() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::kube::http
