//go:build ignore

// Not built here: scripts/setup.sh copies this file over plugins/plugins.go in its copy of the
// pinned Prometheus module, so the cluster tier's Prometheus compiles in Kubernetes service
// discovery (and file and HTTP discovery, which plugins/minimum.go always adds) and none of
// the others. Prometheus generates that file from plugins.yml ("make plugins"); this is the
// same file for a plugins.yml that lists only discovery/kubernetes.

package plugins

import (
	// Register kubernetes plugin.
	_ "github.com/prometheus/prometheus/discovery/kubernetes"
)
