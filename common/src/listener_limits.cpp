#include "lockstep/listener_limits.hpp"

namespace lockstep {

std::vector<std::string> civetweb_options(const std::string& listening_ports, const ListenerLimits& limits) {
  return {
      "listening_ports", listening_ports,
      "num_threads", std::to_string(limits.threads),
      "request_timeout_ms", std::to_string(limits.request_timeout_ms),
      "max_request_size", std::to_string(limits.max_head_bytes),
      "connection_queue", std::to_string(limits.queue),
      "listen_backlog", std::to_string(limits.backlog),
      // One request per connection (Note [Listener limits]); also civetweb's default.
      "enable_keep_alive", "no",
      // No files served: only the handlers registered.
      "enable_directory_listing", "no",
  };
}

}  // namespace lockstep
