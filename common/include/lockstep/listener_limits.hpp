// The limits of the HTTP listeners any pod can reach: the operator's :8080 (/healthz, /readyz,
// /metrics; operator/http_server.hpp) and each agent's /metrics (agent/metrics.cpp). Both are
// civetweb (the agent's through prometheus-cpp's Exposer); these are its options.
//
// Note [Listener limits]
// Any pod in the cluster can connect to these ports, and civetweb gives each connection a
// worker thread for as long as it lasts. So what one unauthenticated peer may hold is bounded:
//   - a request head of at most `max_head_bytes` (longer: the connection is closed), read in
//     at most `request_timeout_ms` from the connection's start, however it trickles (civetweb
//     counts from the request's start, not from the last byte);
//   - no body is ever read (every handler is a GET that ignores it), and a connection whose
//     body is unread is closed after the answer, never kept alive: keep-alive is off, so a
//     connection lasts one request;
//   - an answer the peer does not read is given up after `request_timeout_ms` per write;
//   - at most `threads` connections are served at once; more wait in civetweb's queue
//     (`queue`) and the kernel's backlog (`backlog`), costing us no thread and no buffer.
// So the memory a peer can make us hold is threads x max_head_bytes (plus each thread's stack,
// allocated at the start), whatever it sends, and a connection holds a thread for at most
// about 2 x request_timeout_ms. Fewer than `threads` slow peers leave a thread free for the
// kubelet's probe and Prometheus's scrape, which are answered at once; more slow peers than
// threads make those wait up to about request_timeout_ms per `threads` of them queued ahead.
// Past that, the bound is the cluster's: a NetworkPolicy admitting only Prometheus (docs/
// operator.md, "The HTTP listener").
//   The operator's figures allow 256 slow connections (the kubelet's probe timeout is 1 s, so
// they must not be able to take every thread); the agent, which shares the training pod, keeps
// 32 threads: its legitimate readers are one or two Prometheus replicas and the operator.
#pragma once

#include <string>
#include <vector>

namespace lockstep {

struct ListenerLimits {
  int threads;             // connections served at once (each holds a thread)
  int request_timeout_ms;  // the whole request head, and each write of the answer
  int max_head_bytes;      // the request line and headers
  int queue;               // accepted connections waiting for a thread
  int backlog;             // the kernel's listen backlog
};

inline constexpr ListenerLimits kOperatorListener{256, 2000, 8192, 256, 1024};
inline constexpr ListenerLimits kAgentListener{32, 2000, 8192, 64, 256};

// civetweb's options for `listening_ports` (e.g. "0.0.0.0:8080", "[::]:9400") under `limits`,
// as mg_start and prometheus::Exposer take them: name, value, name, value...
std::vector<std::string> civetweb_options(const std::string& listening_ports, const ListenerLimits& limits);

}  // namespace lockstep
