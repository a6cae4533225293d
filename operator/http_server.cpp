#include "http_server.hpp"

#include <civetweb.h>

#include <stdexcept>
#include <vector>

namespace lockstep::op {
namespace {

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "";
  }
}

void answer(mg_connection* conn, const HttpAnswer& a, bool head_only) {
  const std::string& body = a.shared_body ? *a.shared_body : a.body;
  mg_printf(conn, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", a.status,
            reason(a.status), a.content_type.c_str(), body.size());
  if (!head_only) mg_write(conn, body.data(), body.size());
}

}  // namespace

HttpServer::HttpServer(const std::string& address, int port, std::map<std::string, HttpHandler> routes,
                       const ListenerLimits& limits)
    : routes_(std::move(routes)) {
  const bool v6 = address.find(':') != std::string::npos;
  const std::string listen = (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
  std::vector<std::string> options = civetweb_options(listen, limits);
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  argv.push_back(nullptr);
  mg_init_library(0);
  mg_callbacks callbacks{};
  // civetweb's own complaints (a peer's malformed request, a timeout) are the peers' doing:
  // not logged, so no peer can fill the operator's log.
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
  ctx_ = mg_start(&callbacks, this, argv.data());
  if (!ctx_) {
    mg_exit_library();
    throw std::runtime_error("cannot listen on " + listen + " (is the port in use? see --http-port and --http-address)");
  }
  mg_server_port ports[4]{};
  int n = mg_get_server_ports(ctx_, 4, ports);
  port_ = n > 0 ? ports[0].port : port;
  url_ = "http://" + (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port_);
  mg_set_request_handler(ctx_, "/", &HttpServer::handle, this);
}

HttpServer::~HttpServer() {
  if (ctx_) {
    mg_stop(ctx_);
    mg_exit_library();
  }
}

int HttpServer::handle(mg_connection* conn, void* self) {
  auto* server = static_cast<HttpServer*>(self);
  const mg_request_info* info = mg_get_request_info(conn);
  const std::string method = info && info->request_method ? info->request_method : "";
  const std::string path = info && info->local_uri ? info->local_uri : "";
  HttpAnswer a;
  if (method != "GET" && method != "HEAD") {
    a = {405, "GET only\n"};
  } else if (auto it = server->routes_.find(path); it == server->routes_.end()) {
    a = {404, "not found\n"};
  } else {
    try {
      a = it->second();
    } catch (const std::exception& e) {
      a = {500, std::string(e.what()) + "\n"};
    }
  }
  answer(conn, a, method == "HEAD");
  return a.status;
}

}  // namespace lockstep::op
