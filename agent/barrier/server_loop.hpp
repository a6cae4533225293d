// BarrierServer's thread (server_loop.cpp), for server.cpp alone: the I/O of the restart
// barrier (accepting, reading every peer within Note [Barrier trust]'s bounds, writing without
// blocking, heartbeats, freezes), with the protocol's decisions left to BarrierState.
#pragma once

#include <mutex>
#include <string>

#include "barrier/figures.hpp"
#include "config.hpp"

namespace lockstep::agent {

// Serves on `listen_fd` until a byte comes on `wake[0]` (BarrierServer's destructor) and every
// member has had the verdict, or until a freeze fences it (Note [Heartbeats]: `fenced`, under
// `mu`, says why; `listen_fd` is closed and set to -1). Members' FIGURES go to `figures`, whose
// reference goes out with every ALIVE (Note [Barrier trust], Note [Heartbeats]).
void run_barrier_server(const Config& cfg, int& listen_fd, const int* wake, std::mutex& mu, std::string& fenced,
                        GangFigures& figures);

}  // namespace lockstep::agent
