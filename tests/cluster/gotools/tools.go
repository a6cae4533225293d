//go:build tools

// Package gotools pins the node-side Kubernetes binaries the real-node cluster runs
// (scripts/cluster.sh); see go.mod.
package gotools

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
