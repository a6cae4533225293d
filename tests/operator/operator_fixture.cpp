// operator_test's shared operator and main: the control plane is started once for the binary
// (tests/controlplane/controlplane_main.cpp), and the suite's operator once for OperatorTest.
#include "operator_fixture.hpp"

Client* OperatorTest::client_ = nullptr;
OperatorProcess* OperatorTest::operator_ = nullptr;

int main(int argc, char** argv) { return lockstep::test::run_tests_with_control_plane(argc, argv); }
