//go:build tools

// Package gotools pins the upstream binaries the tests build; see go.mod.
package gotools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
