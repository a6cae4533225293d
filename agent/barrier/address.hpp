// A peer's address for logs and messages, ip:port (the server's and the client's).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

namespace lockstep::agent {

inline std::string peer_name(const sockaddr_in& a) {
  char ip[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

}  // namespace lockstep::agent
