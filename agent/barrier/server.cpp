#include "barrier/server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

#include "barrier/server_loop.hpp"
#include "lockstep/log.hpp"

namespace lockstep::agent {

BarrierServer::BarrierServer(const Config& cfg, const std::string& address, int port)
    : cfg_(cfg), figures_(cfg.nnodes, cfg.nproc_per_node) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 1024) != 0) {
    int err = errno;
    ::close(listen_fd_);
    throw std::runtime_error("cannot serve the restart barrier on " + address + ":" + std::to_string(port) + " (" +
                             std::strerror(err) + "); choose another port with LOCKSTEP_AGENT_PORT or --agent-port");
  }
  socklen_t len = sizeof a;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  if (cfg_.barrier_secret.empty())
    LOCKSTEP_LOG(Warn, "barrier", "LOCKSTEP_BARRIER_SECRET is not set: the restart barrier on " << address << ":" << port_
                                  << " admits any peer that names this job's run id and gang attempt (the operator and "
                                     "`lockstep run` set it; agents started by hand need one random value on every node)");
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("pipe failed");
  thread_ = std::thread([this] { loop(); });
}

std::string BarrierServer::fenced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fenced_;
}

BarrierServer::~BarrierServer() {
  if (wake_[1] >= 0) {
    char c = 'x';
    (void)!::write(wake_[1], &c, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, wake_[0], wake_[1]})
    if (fd >= 0) ::close(fd);
}

void BarrierServer::loop() { run_barrier_server(cfg_, listen_fd_, wake_, mu_, fenced_, figures_); }

}  // namespace lockstep::agent
