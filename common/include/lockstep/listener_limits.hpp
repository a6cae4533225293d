// The limits of the HTTP listeners any pod can reach: the operator's :8080 (/healthz, /readyz,
// /metrics; operator/http_server.hpp), libmicrohttpd's epoll loops, and each agent's /metrics
// (agent/metrics.cpp), civetweb through prometheus-cpp's Exposer.
//
// Note [Listener limits]
// Any pod in the cluster can connect to these ports. So what one unauthenticated peer may hold or
// cost is bounded, in two ways, as the two listeners hold a connection in two ways.
//
// The operator's (EventListenerLimits): a few epoll loops (`threads`) serve every connection,
// and a connection holds no thread: only its socket and a memory pool of at most
// `memory_per_connection` bytes (libmicrohttpd's), which holds its request head and the answer's
// header lines; the answer's body is the handler's, shared (Note [Metrics page]). So:
//   - a request head that does not fit the pool is answered 431 and the connection closed;
//   - a head not complete `head_timeout_ms` after the connection started is cut, however it
//     trickles (HttpServer's sweeper shuts its socket down: libmicrohttpd itself only closes a
//     connection that is silent);
//   - no body is ever read: every handler answers once the head is in, with Connection: close,
//     and the connection is closed after the answer, so a connection lasts one request;
//   - a connection that moves no byte for `idle_timeout_s` (a peer that reads no more of its
//     answer) is closed;
//   - at most `connections` are held at once, all loops together (each loop `connections` /
//     `threads`); more wait in the kernel's backlog (`backlog`) or, past it, are refused.
// So peers can make it hold at most connections x memory_per_connection (16 MiB) whatever they
// send, and a connection for at most head_timeout_ms plus the time its answer is read. The
// kubelet's probe and Prometheus's scrape are answered at once unless `connections` peers hold
// their slots together; a loop waits only while a /metrics handler makes the page (at most once
// a second). Past that, the bound is the cluster's: a NetworkPolicy admitting only Prometheus
// (docs/operator.md, "The HTTP listener").
//   Until 2026-11-30 the operator's listener was civetweb as the agent's still is, with 256
// threads so that 256 slow peers could not take the probe's: 257 threads and their stacks, about
// 7 MB of the operator's memory at 10,000 pods whether anyone connected or not (#44). The loops
// hold 1,024 connections in nothing until they come.
//
// The agent's (ListenerLimits): civetweb gives each connection a worker thread for as long as
// it lasts. So:
//   - a request head of at most `max_head_bytes` (longer: the connection is closed), read in
//     at most `request_timeout_ms` from the connection's start, however it trickles (civetweb
//     counts from the request's start, not from the last byte);
//   - no body is ever read (every handler is a GET that ignores it), and a connection whose
//     body is unread is closed after the answer, never kept alive: keep-alive is off, so a
//     connection lasts one request;
//   - an answer the peer does not read is given up after `request_timeout_ms` per write;
//   - at most `threads` connections are served at once; more wait in civetweb's queue
//     (`queue`) and the kernel's backlog (`backlog`), costing us no thread and no buffer.
// So the memory a peer can make it hold is threads x max_head_bytes (plus each thread's stack,
// allocated at the start), whatever it sends, and a connection holds a thread for at most
// about 2 x request_timeout_ms. Fewer than `threads` slow peers leave a thread free for
// Prometheus's scrape, which is answered at once. The agent, which shares the training pod,
// keeps 32 threads: its legitimate readers are one or two Prometheus replicas and the operator.
#pragma once

#include <string>
#include <vector>

namespace lockstep {

struct EventListenerLimits {
  int threads;                // epoll loops
  int connections;            // connections held at once, all loops together
  int head_timeout_ms;        // the whole request head, from the connection's start
  int idle_timeout_s;         // a connection silent this long is closed (libmicrohttpd counts seconds)
  int memory_per_connection;  // the head and the answer's header lines
  int backlog;                // the kernel's listen backlog
};

inline constexpr EventListenerLimits kOperatorListener{4, 1024, 2000, 2, 16384, 1024};

struct ListenerLimits {
  int threads;             // connections served at once (each holds a thread)
  int request_timeout_ms;  // the whole request head, and each write of the answer
  int max_head_bytes;      // the request line and headers
  int queue;               // accepted connections waiting for a thread
  int backlog;             // the kernel's listen backlog
};

inline constexpr ListenerLimits kAgentListener{32, 2000, 8192, 64, 256};

// civetweb's options for `listening_ports` (e.g. "0.0.0.0:8080", "[::]:9400") under `limits`,
// as mg_start and prometheus::Exposer take them: name, value, name, value...
std::vector<std::string> civetweb_options(const std::string& listening_ports, const ListenerLimits& limits);

}  // namespace lockstep
