// The operator's own HTTP listener (--http-port, 8080): /healthz, /readyz and /metrics, for the
// kubelet's probes and Prometheus. libmicrohttpd's epoll loops under the limits of Note [Listener
// limits] (lockstep/listener_limits.hpp): any pod can reach this port, so what one peer may hold
// is bounded in bytes, time and connections, and a connection holds no thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "lockstep/listener_limits.hpp"

struct MHD_Daemon;
struct MHD_Connection;

namespace lockstep::op {

struct HttpAnswer {
  HttpAnswer() = default;
  HttpAnswer(int status, std::string body, std::string content_type = "text/plain; charset=utf-8")
      : status(status), body(std::move(body)), content_type(std::move(content_type)) {}
  int status = 200;
  std::string body;
  std::string content_type = "text/plain; charset=utf-8";
  // When set, written instead of `body`: a text many answers share, never copied per answer
  // (Note [Metrics page] in metrics.hpp).
  std::shared_ptr<const std::string> shared_body;
  // Held until the answer is written or given up, then let go (a reader's slot: Note [Metrics page]).
  std::shared_ptr<void> hold;
};
using HttpHandler = std::function<HttpAnswer()>;

class HttpServer {
 public:
  // Serves GET (and HEAD) of each of `routes`' exact paths on address:port (port 0: one the
  // kernel picks); every other path is 404, every other method 405. Throws std::runtime_error
  // naming the address when it cannot listen. A handler runs on one of the listener's loops
  // (`limits.threads`): it must answer at once.
  HttpServer(const std::string& address, int port, std::map<std::string, HttpHandler> routes,
             const EventListenerLimits& limits = kOperatorListener);
  ~HttpServer();  // stops: closes every connection, answered or not
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }  // the port it listens on
  std::string url() const { return url_; }
  // Connections whose request head was cut at limits.head_timeout_ms so far.
  long long heads_cut() const;

 private:
  struct Hooks;  // libmicrohttpd's callbacks (http_server.cpp)
  friend struct Hooks;
  void sweep();

  std::map<std::string, HttpHandler> routes_;
  EventListenerLimits limits_;
  // See Note [Listener limits]: the connections whose request head is not complete yet, with when
  // they started; the sweeper cuts those past limits_.head_timeout_ms.
  struct Head {
    int fd;
    std::chrono::steady_clock::time_point started;
  };
  mutable std::mutex heads_mu_;
  std::condition_variable heads_cv_;
  std::unordered_map<MHD_Connection*, Head> heads_;
  long long heads_cut_ = 0;
  bool stopping_ = false;
  std::thread sweeper_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
  std::string url_;
};

}  // namespace lockstep::op
