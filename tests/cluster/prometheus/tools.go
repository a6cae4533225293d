//go:build tools

// Package prometheus pins the Prometheus server the cluster tier's metrics test runs: Debian's
// prometheus package is built without Kubernetes service discovery, and what a Prometheus
// Operator user gets is kubernetes_sd_configs. scripts/setup.sh builds cmd/prometheus with
// only the discovery that test uses (plugins.go here, in place of Prometheus's own). Test
// tooling only; see go.mod.
package prometheus

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
)
