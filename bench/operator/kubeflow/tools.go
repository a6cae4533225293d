//go:build tools

// The one package this module exists to build: Kubeflow training-operator's manager,
// `go build github.com/kubeflow/training-operator/cmd/training-operator.v1`. The blank import
// keeps it (and its dependencies) in go.mod and go.sum.
package tools

import _ "github.com/kubeflow/training-operator/cmd/training-operator.v1"
