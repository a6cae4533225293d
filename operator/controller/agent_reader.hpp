// Reads rank 0's agents' /metrics for the progress reading (reconcile/progress.hpp, Note
// [Progress]): GET http://<pod IP>:<port>/metrics of many pods at once, from one thread.
//
// Note [Reading agents]
// A pod's metrics port answers with whatever its container serves: any tenant's program may
// listen there. So every read is bounded in what it may cost the operator: an IP literal only
// (no name to resolve), one plain HTTP/1.0 GET, no redirect followed (anything but 200 is no
// answer), at most `max_bytes` of answer kept (head and body; a longer one is dropped whole),
// and a total deadline from the connect to the last byte (a peer that trickles bytes is cut off
// like one that sends none). Reads run concurrently, at most `max_in_flight` at once, so pods
// that never answer (a NetworkPolicy dropping the operator's packets) cost the round one
// deadline per `max_in_flight` of them, not one each; and the memory they may hold is at most
// max_in_flight x max_bytes (16 MiB at the defaults), whatever they send.
//   A round ends within kStopLatency of `stop` being set, whatever the agents do: the progress
// thread (progress_poller.hpp) passes its stopping flag, set as the controller stops, so a
// replica that loses its lease or is asked to stop joins that thread at once, not after a
// deadline (http_hostile_test checks both).
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::controller {

// How often a round looks at `stop` (read_agents): its longest wait in poll().
inline constexpr std::chrono::milliseconds kStopLatency{100};

struct AgentTarget {
  std::string ip;  // an IPv4 or IPv6 literal (a pod's status.podIP)
  int port = 0;
};

struct AgentLimits {
  std::chrono::milliseconds deadline{2000};  // connect, request and whole answer, per read
  size_t max_bytes = 1 << 20;                // the whole answer, head and body
  size_t max_in_flight = 16;
};

struct AgentAnswer {
  std::optional<std::string> body;  // the 200 answer's body; nullopt when there is none
  std::string error;                // why not, e.g. "connect: Connection refused"
};

// One answer per target, in order. `stop` (may be null) ends the round early: reads not done
// then have no body.
std::vector<AgentAnswer> read_agents(const std::vector<AgentTarget>& targets, const AgentLimits& limits = {},
                                     const std::atomic<bool>* stop = nullptr);

}  // namespace lockstep::controller
