// A kube::Client of a scripted server on loopback (plain HTTP), for the client's own tests
// (tests/operator/kube/client_test.cpp, list_stream_test.cpp).
#pragma once

#include <string>

#include "kube/client.hpp"
#include "kube/rest_config.hpp"

namespace lockstep::test {

inline lockstep::kube::Client loopback_client(int port) {
  lockstep::kube::RestConfig config;
  config.server = "http://127.0.0.1:" + std::to_string(port);
  return lockstep::kube::Client(config);
}

}  // namespace lockstep::test
