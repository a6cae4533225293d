//go:build tools

// Test tooling only: pins KWOK (sigs.k8s.io/kwok, scripts/versions.env KWOK_VERSION), which
// bench/operator/bench_scale.cpp and scale_test run to play the kubelet of many fake nodes.
// scripts/setup.sh builds its cmd/kwok into $CACHE/kwok-$KWOK_VERSION/bin. The product is C++.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
