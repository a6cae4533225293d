// The operator's own HTTP listener (--http-port, 8080): /healthz, /readyz and /metrics, for the
// kubelet's probes and Prometheus. civetweb under the limits of Note [Listener limits]
// (lockstep/listener_limits.hpp): any pod can reach this port, so what one peer may hold is
// bounded in bytes, time and threads.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "lockstep/listener_limits.hpp"

struct mg_context;
struct mg_connection;

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
  // Held until the answer is written, then let go (a reader's slot: Note [Metrics page]).
  std::shared_ptr<void> hold;
};
using HttpHandler = std::function<HttpAnswer()>;

class HttpServer {
 public:
  // Serves GET (and HEAD) of each of `routes`' exact paths on address:port (port 0: one the
  // kernel picks); every other path is 404, every other method 405. Throws std::runtime_error
  // naming the address when it cannot listen.
  HttpServer(const std::string& address, int port, std::map<std::string, HttpHandler> routes,
             const ListenerLimits& limits = kOperatorListener);
  ~HttpServer();  // stops: waits for the answers in progress (each bounded by the limits)
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }  // the port it listens on
  std::string url() const { return url_; }

 private:
  static int handle(::mg_connection* conn, void* self);
  std::map<std::string, HttpHandler> routes_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
  std::string url_;
};

}  // namespace lockstep::op
