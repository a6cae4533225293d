#include "http_server.hpp"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <stdexcept>

namespace lockstep::op {
namespace {

// What an answer's body is read from until libmicrohttpd is done with it (written, or the
// connection gone): its own text, or a shared one, and what it holds meanwhile.
struct Body {
  std::string own;
  std::shared_ptr<const std::string> shared;
  std::shared_ptr<void> hold;
  const std::string& text() const { return shared ? *shared : own; }
};

// The connections the listener holds need as many descriptors, with the operator's own beside
// them (its API connections, files): raise the soft limit toward the hard one where it is lower.
void allow_descriptors(int connections) {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  const rlim_t want = static_cast<rlim_t>(connections) + 256;
  if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur < want) {
    r.rlim_cur = r.rlim_max == RLIM_INFINITY ? want : std::min(want, r.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}

}  // namespace

struct HttpServer::Hooks {
  static MHD_Result handle(void* cls, MHD_Connection* conn, const char* url, const char* method, const char*,
                           const char*, size_t*, void**) {
    auto* server = static_cast<HttpServer*>(cls);
    {  // The head is complete: the sweeper's deadline is over (Note [Listener limits]).
      std::lock_guard<std::mutex> lock(server->heads_mu_);
      server->heads_.erase(conn);
    }
    const std::string m = method ? method : "";
    HttpAnswer a;
    if (m != "GET" && m != "HEAD") {
      a = {405, "GET only\n"};
    } else if (auto it = server->routes_.find(url ? url : ""); it == server->routes_.end()) {
      a = {404, "not found\n"};
    } else {
      try {
        a = it->second();
      } catch (const std::exception& e) {
        a = {500, std::string(e.what()) + "\n"};
      }
    }
    // Answered at once, body read or not: a request body is never read, and the connection is
    // closed after the answer (Connection: close), so an unread body costs nothing.
    auto* body = new Body{std::move(a.body), std::move(a.shared_body), std::move(a.hold)};
    const std::string& text = body->text();
    MHD_Response* r = MHD_create_response_from_buffer_with_free_callback_cls(
        text.size(), const_cast<char*>(text.data()), [](void* b) { delete static_cast<Body*>(b); }, body);
    if (!r) {
      delete body;
      return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, a.content_type.c_str());
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    MHD_Result queued = MHD_queue_response(conn, static_cast<unsigned>(a.status), r);
    MHD_destroy_response(r);  // the connection holds its own reference until it is done
    return queued;
  }

  static void on_connection(void* cls, MHD_Connection* conn, void**, MHD_ConnectionNotificationCode code) {
    auto* server = static_cast<HttpServer*>(cls);
    std::lock_guard<std::mutex> lock(server->heads_mu_);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      const MHD_ConnectionInfo* info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
      if (!info) return;
      const bool first = server->heads_.empty();
      server->heads_[conn] = Head{info->connect_fd, std::chrono::steady_clock::now()};
      if (first) server->heads_cv_.notify_one();
    } else {
      // Called before libmicrohttpd closes the socket: once it is out of heads_, the sweeper
      // never touches that descriptor number again.
      server->heads_.erase(conn);
    }
  }
};

HttpServer::HttpServer(const std::string& address, int port, std::map<std::string, HttpHandler> routes,
                       const EventListenerLimits& limits)
    : routes_(std::move(routes)), limits_(limits) {
  const bool v6 = address.find(':') != std::string::npos;
  const std::string listen = (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
  if (port < 0 || port > 65535) throw std::runtime_error("cannot listen on " + listen + ": the port is not 0-65535");
  sockaddr_in a4{};
  sockaddr_in6 a6{};
  if (v6) {
    a6.sin6_family = AF_INET6;
    a6.sin6_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET6, address.c_str(), &a6.sin6_addr) != 1)
      throw std::runtime_error("cannot listen on " + listen + ": not an IPv6 address (see --http-address)");
  } else {
    a4.sin_family = AF_INET;
    a4.sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, address.c_str(), &a4.sin_addr) != 1)
      throw std::runtime_error("cannot listen on " + listen + ": not an IPv4 address (see --http-address)");
  }
  allow_descriptors(limits_.connections);
  // No MHD_USE_ERROR_LOG: libmicrohttpd's complaints (a peer's malformed request, a timeout)
  // are the peers' doing, and no peer may fill the operator's log. An IPv6 address listens for
  // IPv4 too ("::", as a civetweb "[::]" port did).
  unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC;
  if (v6) flags |= MHD_USE_DUAL_STACK;
  const sockaddr* sa = v6 ? reinterpret_cast<const sockaddr*>(&a6) : reinterpret_cast<const sockaddr*>(&a4);
  daemon_ = MHD_start_daemon(
      flags, static_cast<uint16_t>(port), nullptr, nullptr, &Hooks::handle, this,
      MHD_OPTION_SOCK_ADDR, sa,
      MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned>(limits_.threads),
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(limits_.connections),
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<size_t>(limits_.memory_per_connection),
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(limits_.idle_timeout_s),
      MHD_OPTION_LISTEN_BACKLOG_SIZE, static_cast<unsigned>(limits_.backlog),
      MHD_OPTION_NOTIFY_CONNECTION, &Hooks::on_connection, this,
      MHD_OPTION_STRICT_FOR_CLIENT, 1,
      MHD_OPTION_END);
  if (!daemon_)
    throw std::runtime_error("cannot listen on " + listen + " (is the port in use? see --http-port and --http-address)");
  const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
  port_ = info && info->port ? info->port : port;
  url_ = "http://" + (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port_);
  sweeper_ = std::thread([this] { sweep(); });
}

HttpServer::~HttpServer() {
  {
    std::lock_guard<std::mutex> lock(heads_mu_);
    stopping_ = true;
  }
  heads_cv_.notify_one();
  sweeper_.join();
  MHD_stop_daemon(daemon_);
}

long long HttpServer::heads_cut() const {
  std::lock_guard<std::mutex> lock(heads_mu_);
  return heads_cut_;
}

// See Note [Listener limits]: libmicrohttpd closes a connection that has been silent for
// idle_timeout_s, but one that trickles a byte now and then never is; so a head not complete
// head_timeout_ms after the connection started is cut here: its socket is shut down, which the
// connection's loop then sees as the peer's end and closes. Sleeps while no head is pending.
void HttpServer::sweep() {
  const auto deadline = std::chrono::milliseconds(limits_.head_timeout_ms);
  std::unique_lock<std::mutex> lock(heads_mu_);
  while (!stopping_) {
    if (heads_.empty()) {
      heads_cv_.wait(lock, [&] { return stopping_ || !heads_.empty(); });
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    auto earliest = now + deadline;
    for (auto it = heads_.begin(); it != heads_.end();) {
      if (now - it->second.started >= deadline) {
        ::shutdown(it->second.fd, SHUT_RDWR);
        ++heads_cut_;
        it = heads_.erase(it);
      } else {
        earliest = std::min(earliest, it->second.started + deadline);
        ++it;
      }
    }
    heads_cv_.wait_until(lock, earliest, [&] { return stopping_; });
  }
}

}  // namespace lockstep::op
