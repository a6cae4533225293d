// The restart barrier's wire format (Note [Restart barrier] in `agent/barrier/state.hpp`): lines
// of `VERB key=value ...`, values percent-encoded, and the failure report they carry.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace lockstep::agent {

// One agent's first failure in a generation.
struct Failure {
  int node = -1;
  int rank = -1;
  int code = 0;               // the worker's shell code (128+N for signal N), or 75 for a stall
  std::string reason;         // "WorkerFailed" | "Stall"
  long long at_ms = 0;        // unix time it was seen, milliseconds
  std::string what;           // e.g. "rank 3 (pid 812) was killed by SIGKILL"
  std::string tail;           // the failing rank's last output lines ('\n'-separated, at most
                              // kFailureTailBytes): every node's agent can quote the cause's own words
};
inline constexpr size_t kFailureTailBytes = 2048;
inline constexpr size_t kFailureWhatBytes = 512;
inline constexpr size_t kVerdictWhyBytes = 1024;

// The barrier's wire format.
struct Message {
  std::string verb;
  std::map<std::string, std::string> fields;
  std::string get(const std::string& k, const std::string& fallback = "") const;
  int get_int(const std::string& k, int fallback = -1) const;
};
std::string encode(const Message& m);                   // one line, no newline
std::optional<Message> decode(const std::string& line);  // nullopt if malformed
Message failure_message(const std::string& verb, int generation, const std::optional<Failure>& f);
std::optional<Failure> failure_of(const Message& m);

// Now, in unix milliseconds (a Failure's at_ms).
long long unix_ms();

}  // namespace lockstep::agent
