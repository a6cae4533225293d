// operator_test, leadership: one leader of two operators, a lease released on shutdown.
#include <memory>

#include "operator_fixture.hpp"

// Short leases, so a takeover happens within the test's time.
const std::vector<std::string> kFastLease = {"--lease-duration=3s", "--renew-deadline=2s", "--retry-period=250ms"};

TEST_F(OperatorTest, TwoOperatorsLeaveExactlyOneLeader) {
  std::vector<std::string> args = {"--namespace", ns_, "--leader-election-namespace", ns_};
  args.insert(args.end(), kFastLease.begin(), kFastLease.end());
  operator_->process().signal(SIGSTOP);  // this test is about the two below
  auto a = std::make_unique<OperatorProcess>(control_plane()->kubeconfig(), args);
  auto b = std::make_unique<OperatorProcess>(control_plane()->kubeconfig(), args);
  auto leaders = [&] {
    return static_cast<int>(a->log().find("became leader") != std::string::npos) +
           static_cast<int>(b->log().find("became leader") != std::string::npos);
  };
  ASSERT_TRUE(eventually([&] { return leaders() == 1; })) << a->log() << b->log();
  std::this_thread::sleep_for(4s);  // longer than the lease: the standby must still be waiting
  EXPECT_EQ(leaders(), 1);
  OperatorProcess* leader = a->log().find("became leader") != std::string::npos ? a.get() : b.get();
  OperatorProcess* standby = leader == a.get() ? b.get() : a.get();
  EXPECT_NE(leader->http("/metrics").find("lockstep_operator_leader 1"), std::string::npos);
  EXPECT_NE(standby->http("/metrics").find("lockstep_operator_leader 0"), std::string::npos);
  auto lease = client_->get(res::kLeases.path(ns_, "lockstep-operator"));
  ASSERT_TRUE(lease.ok()) << lease.message();
  // The leader dies without releasing the lease; the standby takes over after it expires.
  leader->process().signal(SIGKILL);
  leader->process().wait();
  ASSERT_TRUE(standby->wait_log("became leader", 15s)) << standby->log();
  create_job("ha", 1);
  EXPECT_TRUE(wait_pods("ha", 1)) << standby->log();
  a.reset();
  b.reset();
  operator_->process().signal(SIGCONT);
}

TEST_F(OperatorTest, GracefulShutdownReleasesTheLease) {
  std::vector<std::string> args = {"--namespace", ns_, "--leader-election-namespace", ns_};
  args.insert(args.end(), kFastLease.begin(), kFastLease.end());
  auto a = std::make_unique<OperatorProcess>(control_plane()->kubeconfig(), args);
  ASSERT_TRUE(a->wait_log("became leader"));
  a->process().signal(SIGTERM);
  auto st = a->process().wait_for(10s);
  ASSERT_TRUE(st.has_value()) << "no exit within 10 s of SIGTERM";
  EXPECT_EQ(st->shell_code(), 0) << a->log();
  auto lease = client_->get(res::kLeases.path(ns_, "lockstep-operator"));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease.body["spec"].value("holderIdentity", "x"), "");
}
