// Every agent's side of the restart barrier (Note [Restart barrier] in `agent/barrier/state.hpp`),
// node 0's included; its heartbeats are Note [Heartbeats] in `agent/barrier/server.hpp`.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "barrier/codec.hpp"
#include "barrier/figures.hpp"

namespace lockstep::agent {

// An agent's side of the barrier: a line-oriented connection, read and written without
// blocking.
class BarrierClient {
 public:
  using Clock = std::chrono::steady_clock;
  BarrierClient() = default;
  ~BarrierClient();
  BarrierClient(const BarrierClient&) = delete;
  BarrierClient& operator=(const BarrierClient&) = delete;
  // See Note [Heartbeats]: how often this agent says ALIVE once it has said HELLO.
  void set_heartbeat_interval(std::chrono::milliseconds interval) { interval_ = interval; }
  // One attempt to connect; false (and `error` says why) if it failed.
  bool connect(const std::string& host, int port, std::string& error);
  // Queues `m` and writes what the socket takes now; the rest goes with the next tick. A
  // server that leaves kMaxQueuedBytes unread is lost. Saying HELLO makes this agent a member:
  // from then on it says ALIVE and its silence is measured.
  void send(const Message& m);
  // The next message, waiting at most `timeout`; nullopt if none. lost() once the server's
  // side is closed. Ticks (below).
  std::optional<Message> poll(std::chrono::milliseconds timeout);
  // See Note [Heartbeats]: sends this agent's ALIVE when due, writes what is queued and reads what
  // the server sent (kept for poll), never blocking. Call at least every 100 ms once HELLO is
  // said, whatever else the agent is doing.
  void tick();
  // Closes the connection at once (a fenced agent: Note [Heartbeats]); lost() from then on.
  void close();
  bool lost() const { return lost_; }
  // See Note [Heartbeats]: how long the server has said nothing (0 before HELLO), and the longest
  // this agent went between two ticks since it said HELLO (its own silence).
  std::chrono::milliseconds server_silence() const;
  std::chrono::milliseconds own_silence() const { return own_silence_; }
  // See Note [Heartbeats]: node 0's straggler reference (the gang's typical rank's work, seconds)
  // from its latest ALIVE that carried one, checked; nullopt when none came within
  // kFiguresMaxAgeS.
  std::optional<double> reference() const;
  // The server's address as connected, ip:port.
  const std::string& peer() const { return peer_; }
  int fd() const { return fd_; }

 private:
  void read_available();
  void flush();
  int fd_ = -1;
  bool lost_ = false;     // the connection ended, broke, or was closed here
  bool eof_ = false;      // nothing more to read
  bool member_ = false;   // said HELLO on this connection
  std::string buffer_, out_, peer_;
  std::chrono::milliseconds interval_{1000};
  Clock::time_point last_heard_{}, last_tick_{}, next_beat_{};
  std::chrono::milliseconds own_silence_{0};
  std::optional<double> reference_;
  double reference_at_ = 0;  // steady_seconds
};

}  // namespace lockstep::agent
