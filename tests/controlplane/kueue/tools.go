//go:build tools

// Test tooling only: Kueue's manager (cmd/kueue), built from the Go module proxy by
// scripts/setup.sh, which the Kueue suites run beside the test control plane and the
// real-node cluster (tests/controlplane/kueue.hpp). The product itself is C++.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
